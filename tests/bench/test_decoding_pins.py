"""Pinned samples: every decoding of every built-in method (plus the option variants that take
other code paths) on a tiny random-weight model at a fixed seed gives the token ids recorded in
tests/fixtures/decoding_pins.json. A refactor of a sampler must keep them bit for bit; a change
of what a sampler draws fails here and, when intended, is re-recorded with
``python tests/bench/test_decoding_pins.py --record`` (say why in the commit).

The ids were recorded with the samplers before they became table entries (bench.decoding) and
checked equal after. They depend on float rounding of a float32 network, so they are checked
only with the torch version that recorded them (skipped, saying so, with another)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "decoding_pins.json"
V, L, N, NFE, T = 7, 8, 2, 4, 0.8

#: (method, options, decoding): each table entry at the defaults, and the variants that run
#: other code (blocks, filters, a time-conditioned cache, Psi schedules, pure Gaussian, caps)
CASES = [
    *[("mdlm", {}, d) for d in ("ancestral", "greedy", "cached", "confidence", "margin")],
    *[("mdlm", {}, d) for d in ("entropy", "remdm-cap", "remdm-rescale", "remdm-conf")],
    ("mdlm", {}, "remdm-loop"),
    ("mdlm", {"block_length": 3}, "ancestral"),
    ("mdlm", {"block_length": 3, "top_k": 3}, "confidence"),
    ("mdlm", {"time_conditioning": True}, "cached"),
    ("mdlm", {"top_p": 0.8, "remdm_eta": 0.01}, "remdm-cap"),
    ("mdlm", {"tau": 0.3}, "threshold"),
    ("mdlm", {"block_length": 3, "factor": 2.0}, "factor"),
    *[("duo", {}, d) for d in ("ancestral", "greedy", "psi", "psi-greedy")],
    (
        "duo",
        {"psi_high_mode": "max-capped-0.5", "psi_high_frac": 0.6, "psi_middle_frac": 0.2},
        "psi",
    ),
    ("duo", {"psi_middle_mode": "max-rescale-0.9", "psi_low_mode": "pure-pc"}, "psi-greedy"),
    ("duo", {"psi_time_profile": "linear-constant-linear-0.5", "top_k": 3}, "psi"),
    ("candi", {}, "cached"),
    ("candi", {}, "nocache"),
    ("candi", {"top_k": 3, "use_percentile_scheduling": False}, "nocache"),
    ("candi", {"pure_gaussian": True}, "continuous"),
    ("flm", {}, "euler"),
    ("flm", {"output_cap": 3.0, "cap_order": "temperature_then_cap"}, "euler"),
    *[("sflm", {}, d) for d in ("exact", "stochastic", "top1", "topk", "top3")],
    ("sflm", {"final_decode": "sample"}, "top1"),
    ("ar", {}, "sample"),
    ("ar", {"top_k": 2}, "greedy"),
]


def _key(case) -> str:
    return json.dumps(case, sort_keys=True)


def sample(method: str, options: dict, decoding: str) -> list[list[int]]:
    """The case's ids: the cpu-mini DiT at seed 0 with every weight moved by 0.08 N(0, 1)
    (seed 123; its zero-initialised head would make every logit equal), a scattered prompt."""
    from helpers import make_model

    m, net = make_model(method, options, vocab=V, seq_len=L, seed=0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(123)
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.08)
    net.eval()
    g = torch.Generator().manual_seed(7)
    pmask = torch.rand(N, L, generator=g) < 0.3
    pmask[:, 0] = True  # AR: position 0 is given
    prompt = torch.randint(0, V, (N, L), generator=g)
    out = m.sample(
        net, prompt, pmask, nfe=NFE, temperature=T, decoding=decoding,
        generator=torch.Generator().manual_seed(11),
    )  # fmt: skip
    return out.tolist()


def _recorded() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"{c[0]}-{c[2]}-{'-'.join(c[1]) or 'defaults'}"
)
def test_samples_are_the_pinned_ones(case):
    pins = _recorded()
    if pins["torch"] != torch.__version__.split("+")[0]:
        pytest.skip(f"pins recorded with torch {pins['torch']}, this is {torch.__version__}")
    torch.set_num_threads(1)
    assert sample(*case) == pins["samples"][_key(case)]


def test_every_decoding_is_pinned():
    """Each decoding of each built-in method's table has a case (a new one needs its pin)."""
    from bench.decoding import table_methods

    pinned = {(m, d) for m, _, d in CASES}
    for cls in table_methods():
        for name in cls.DECODINGS:
            assert (cls.name, name) in pinned, f"{cls.name}/{name}: add a case and --record"


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    torch.set_num_threads(1)
    pins = {"torch": torch.__version__.split("+")[0], "samples": {}}
    for case in CASES:
        pins["samples"][_key(case)] = sample(*case)
    rows = [f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in pins["samples"].items()]
    body = ",\n".join(rows)
    FIXTURE.write_text(f'{{\n  "torch": "{pins["torch"]}",\n  "samples": {{\n{body}\n  }}\n}}\n')
    print(f"{FIXTURE}: {len(CASES)} cases")
