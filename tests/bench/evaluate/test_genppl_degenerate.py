"""Degenerate samples (bench/evaluate/degenerate.py) as the Gen. PPL scorer records them
(bench/evaluate/genppl/evaluator.py, score.py), and the scorer's bootstrap intervals: they
cover the value and shrink with more samples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from genppl_tiny import tiny_gpt2

from bench.evaluate import degenerate as dg
from bench.evaluate.genppl import evaluator as G

TEXT = (
    "The city council met on Tuesday to discuss the new budget. Several members argued that "
    "the park renovation should wait until next year."
)
EOT = 50256
PAD = 50257  # the [PAD] id the reference harness adds to GPT-2 (genppl.reference_pad_id)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    from bench.text.gpt2 import load_gpt2_tokenizer

    return load_gpt2_tokenizer("whisper", str(tmp_path_factory.mktemp("sflm-data")))


@pytest.fixture(scope="module")
def ev(gpt2):
    ref = G.wrap_model(tiny_gpt2(50257, n_positions=64, eos=EOT), gpt2, "tiny", device="cpu")
    return G.GenPPL(ref=ref, ref_model="tiny", sample_tokenizer=gpt2, progress=False)


def test_sample_reasons_by_hand():
    assert dg.sample_reason(0.0, 32) == "repeated"
    assert dg.sample_reason(0.5, 32) == "low_entropy"  # exp(0.5) = 1.6 effective tokens
    assert dg.sample_reason(math.log(2), 32) == ""  # two tokens, half each: the threshold
    assert dg.sample_reason(3.7, 0) == "empty"  # empty wins over a healthy entropy
    assert dg.sample_reason(3.7, None) == "" and dg.sample_reason(float("nan"), 5) == ""
    # a leading end-of-text is a BOS; [PAD] ids do not count as content
    assert dg.content_before_eot([EOT, 5, 6, EOT, 7], EOT) == 2
    assert dg.content_before_eot([EOT, PAD, PAD, EOT, 7, 8], EOT, PAD) == 0
    assert dg.content_before_eot([EOT, EOT, EOT], EOT) == 0
    assert dg.content_before_eot([5, 6], None) == 2


def test_scorer_flags_collapsed_and_empty_samples(gpt2, ev):
    body = gpt2.encode(TEXT)[:31]
    healthy = [EOT, *body]
    repeated = [262] * 32
    low = [EOT, *([262] * 30), 3290]
    # empty after the first end-of-text, though its ids are varied (entropy well above ln 2)
    empty = [EOT, PAD, PAD, EOT, *body[:28]]
    rows = ev.score([healthy, repeated, low, empty])
    assert [r["degenerate"] for r in rows] == ["", "repeated", "low_entropy", "empty"]
    assert rows[3]["entropy"] > 2.0 and rows[3]["n_scored"] == 0
    assert rows[1]["n_scored"] == 32 and rows[1]["entropy"] == 0.0
    s = ev.summarize(rows)
    assert s["degenerate_fraction"] == pytest.approx(0.75)
    m = {v.metric: v for v in G.metric_values(s)}
    d = m[dg.METRIC]
    assert d.value == pytest.approx(0.75) and d.n == 4
    assert d.ci_low <= 0.75 <= d.ci_high
    # a healthy cell is not flagged
    ok = ev.summarize(ev.score([healthy, [EOT, *gpt2.encode(TEXT)[20:51]]]))
    assert ok["degenerate_fraction"] == 0.0
    assert not dg.cell_is_degenerate(ok["degenerate_fraction"])
    assert dg.cell_is_degenerate(s["degenerate_fraction"])


def test_rows_without_a_reason_are_judged_from_entropy_and_empty_scoring(ev):
    """Per-sample rows written before ``degenerate`` existed (a resumed CLI output)."""
    base = {"nll_sum": 30.0, "n_scored": 10, "mode": "paper"}
    rows = [
        {**base, "entropy": 3.0},
        {**base, "entropy": 0.0},
        {**base, "entropy": 0.4},
        {**base, "entropy": 3.0, "nll_sum": 0.0, "n_scored": 0},
    ]
    assert ev.summarize(rows)["degenerate_fraction"] == pytest.approx(0.75)
    # reference-mode rows: nothing scored does not mean empty there
    ref = [dict(r, mode="reference") for r in rows]
    assert ev.summarize(ref)["degenerate_fraction"] == pytest.approx(0.5)
    # the plain summarize without flags judges the same way
    s = G.summarize([r["nll_sum"] for r in rows], [r["n_scored"] for r in rows], [3, 0, 0.4, 3])
    assert s["degenerate_fraction"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="2 flags for 4 samples"):
        G.summarize([1.0] * 4, [1] * 4, [1.0] * 4, degenerate=["", ""])


def _cell(n: int, seed: int) -> dict:
    """A cell of ``n`` samples from one fixed distribution (30 % degenerate)."""
    rng = np.random.default_rng(seed)
    k = rng.integers(40, 64, n)
    nll = k * rng.uniform(3.0, 6.0, n)
    ent = rng.uniform(3.0, 4.0, n)
    deg = rng.random(n) < 0.3
    return G.summarize(nll, k, ent, degenerate=deg, n_resamples=400, seed=1)


def test_intervals_cover_the_value_and_shrink_with_more_samples():
    small, large = _cell(16, 0), _cell(400, 0)
    for key in ("gen_ppl", "gen_ppl_pooled", "entropy", "degenerate_fraction"):
        for s in (small, large):
            lo, hi = s[f"{key}_ci"]
            assert lo <= s[key] <= hi, (key, s[key], lo, hi)
        w_small = small[f"{key}_ci"][1] - small[f"{key}_ci"][0]
        w_large = large[f"{key}_ci"][1] - large[f"{key}_ci"][0]
        # 25 x the samples: about 1/5 of the width; at most half of it, with room for noise
        assert 0 < w_large < 0.5 * w_small, (key, w_small, w_large)
