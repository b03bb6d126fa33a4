"""Gen. PPL / unigram entropy (bench/evaluate/genppl/evaluator.py) against direct transformers
computations on tiny local models, and the ``genppl`` CLI's bad inputs and resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from genppl_tiny import byte_tokenizer, tiny_gpt2

from bench.evaluate.__main__ import main
from bench.evaluate.genppl import evaluator as G

TEXT = (
    "The city council met on Tuesday to discuss the new budget. Several members argued that "
    "the park renovation should wait until next year."
)
EOT = 50256


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("sflm-data"))


@pytest.fixture(scope="module")
def gpt2(data_dir):
    from bench.text.gpt2 import load_gpt2_tokenizer

    return load_gpt2_tokenizer("whisper", data_dir)


@pytest.fixture(scope="module")
def ref_same(gpt2):
    """A tiny GPT-2-vocabulary reference LM with the GPT-2 tokenizer (no retokenisation)."""
    return G.wrap_model(tiny_gpt2(50257, n_positions=64, eos=EOT), gpt2, "tiny-gpt2", device="cpu")


def direct_nll(model, ids: list[int], targets: list[bool] | None = None) -> tuple[float, int]:
    """Sum of -log p(ids[j] | ids[:j]) over scored targets j >= 1, straight from transformers."""
    x = torch.tensor([ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(x).logits[0, :-1].double(), -1)
    nll = -logp.gather(-1, x[0, 1:, None])[:, 0]
    m = torch.ones(len(ids) - 1, dtype=torch.bool) if targets is None else torch.tensor(targets[1:])
    return float(nll[m].sum()), int(m.sum())


def evaluator(ref, tok, mode="paper", **kw):
    return G.GenPPL(
        ref=ref, ref_model=ref.name, sample_tokenizer=tok, mode=mode, progress=False, **kw
    )


def test_ppl_equals_direct_transformers_loss(gpt2, ref_same):
    ids = gpt2.encode(TEXT)
    row = evaluator(ref_same, gpt2).score([ids])[0]
    assert not row["retokenized"] and row["n_scored"] == len(ids)
    with torch.no_grad():  # the paper's per-sample formula: exp(mean NLL), BOS as context
        loss = ref_same.model(torch.tensor([[EOT, *ids]]), labels=torch.tensor([[EOT, *ids]])).loss
    assert row["ppl"] == pytest.approx(math.exp(float(loss)), rel=1e-4)
    assert row["ref_model"] == "tiny-gpt2"


def test_tokens_at_and_after_first_eot_are_masked(gpt2, ref_same):
    body = gpt2.encode(TEXT)
    junk = gpt2.encode(" zebra zebra 12345 qqq")
    ev = evaluator(ref_same, gpt2)
    # MDLM blocks start with the BOS (= EOT): it is context, not the first end-of-text
    a, b = ev.score([[EOT, *body, EOT, *junk, EOT], body])
    assert a["n_scored"] == b["n_scored"] == len(body)
    assert a["nll_sum"] == pytest.approx(b["nll_sum"], rel=1e-6)
    changed = ev.score([[EOT, *body, EOT, *gpt2.encode(" other words here")]])[0]
    assert changed["nll_sum"] == pytest.approx(a["nll_sum"], rel=1e-6)
    # reference (mdlm/duo) mode: every non-EOT target plus the first EOT is scored
    sample = [EOT, *body, EOT, *junk, EOT]
    r = evaluator(ref_same, gpt2, mode="reference").score([sample])[0]
    first = sample.index(EOT)
    mask = [False] + [t != EOT or j == first for j, t in enumerate(sample) if j > 0]
    nll, n = direct_nll(ref_same.model, sample, mask)
    assert r["n_scored"] == n == len(body) + len(junk) and r["nll_sum"] == pytest.approx(
        nll, rel=1e-5
    )


def test_retokenisation_through_text(gpt2):
    btok = byte_tokenizer()
    model = tiny_gpt2(len(btok), n_positions=512, eos=btok.eos_token_id)
    ref = G.wrap_model(model, btok, "tiny-bytes", device="cpu")
    ids = [EOT, *gpt2.encode(TEXT), EOT, *gpt2.encode(" tail")]
    row = evaluator(ref, gpt2).score([ids])[0]
    assert row["retokenized"]
    text_bytes = btok.encode(TEXT, add_special_tokens=False)
    assert len(text_bytes) == len(TEXT.encode()) == row["n_scored"]
    nll, n = direct_nll(model, [btok.eos_token_id, *text_bytes])
    assert row["nll_sum"] == pytest.approx(nll, rel=1e-5)
    # entropy is over the generator's ids, not the reference's
    assert row["entropy"] == pytest.approx(G.unigram_entropy(ids))


def test_long_samples_are_chunked_by_reference_context(gpt2):
    model = tiny_gpt2(50257, n_positions=16, eos=EOT)
    ref = G.wrap_model(model, gpt2, "tiny-ctx16", device="cpu")
    assert ref.context == 16
    ids = gpt2.encode(TEXT + TEXT)[:49]  # 50 tokens with the BOS: windows share one token
    row = evaluator(ref, gpt2, batch_tokens=40).score([ids])[0]
    seq = [EOT, *ids]
    total, n = 0.0, 0
    for s in (0, 15, 30, 45):
        part, k = direct_nll(model, seq[s : s + 16])
        total, n = total + part, n + k
    assert n == row["n_scored"] == 49
    assert row["nll_sum"] == pytest.approx(total, rel=1e-5)


def test_batching_does_not_change_scores(gpt2, ref_same):
    samples = [gpt2.encode(TEXT)[:k] for k in (5, 17, 30, 31)]
    one = evaluator(ref_same, gpt2, batch_tokens=2).score(samples)
    many = evaluator(ref_same, gpt2, batch_tokens=10_000).score(samples)
    for a, b in zip(one, many):
        assert (
            a["nll_sum"] == pytest.approx(b["nll_sum"], rel=1e-5) and a["n_scored"] == b["n_scored"]
        )


def test_per_sample_mean_and_pooled_differ():
    # sample 1: 10 tokens at NLL 2 each; sample 2: 1 token at NLL 4
    s = G.summarize([20.0, 4.0], [10, 1], [1.0, 2.0], n_resamples=200)
    assert s["gen_ppl"] == pytest.approx((math.exp(2) + math.exp(4)) / 2)
    assert s["gen_ppl_pooled"] == pytest.approx(math.exp(24 / 11))
    assert s["gen_ppl"] > 2 * s["gen_ppl_pooled"]
    assert s["entropy"] == pytest.approx(1.5)
    # samples with nothing to score are left out of both and counted
    e = G.summarize([20.0, 0.0], [10, 0], [1.0, 0.0], n_resamples=50)
    assert e["gen_ppl"] == pytest.approx(math.exp(2)) and e["empty_frac"] == 0.5


def test_bootstrap_intervals_bracket_the_value():
    rng = np.random.default_rng(0)
    n = rng.integers(50, 100, 64)
    nll = n * rng.uniform(2.0, 4.0, 64)
    s = G.summarize(nll, n, rng.uniform(4, 6, 64), n_resamples=300, seed=1)
    for k in ("gen_ppl", "gen_ppl_pooled", "entropy"):
        lo, hi = s[f"{k}_ci"]
        assert lo < s[k] < hi
    again = G.summarize(nll, n, np.full(64, 5.0), n_resamples=300, seed=1)
    assert again["gen_ppl_ci"] == s["gen_ppl_ci"]  # seeded: reproducible intervals
    assert math.isnan(G.summarize([3.0], [2], [1.0])["gen_ppl_ci"][0])  # one sample: no interval


def test_unigram_entropy_hand_made():
    assert G.unigram_entropy([7] * 64) == 0.0
    assert G.unigram_entropy(list(range(64))) == pytest.approx(math.log(64))
    assert G.unigram_entropy([1, 1, 2, 2]) == pytest.approx(math.log(2))
    p = np.array([3, 1]) / 4
    assert G.unigram_entropy([5, 5, 5, 9]) == pytest.approx(float(-(p * np.log(p)).sum()))


# --------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def ref_folder(tmp_path_factory, gpt2):
    """A local reference-model folder (tiny GPT-2 + the GPT-2 tokenizer) for --ref-model."""
    d = tmp_path_factory.mktemp("tiny-ref")
    tiny_gpt2(50257, n_positions=64, eos=EOT).save_pretrained(str(d))
    gpt2.save_pretrained(str(d))
    return str(d)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def cli(capsys, *argv):
    rc = main(["genppl", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.fixture()
def env(monkeypatch, data_dir):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SFLM_BENCH_DATA", data_dir)


def test_cli_scores_ids_and_text_and_resumes(tmp_path, capsys, env, gpt2, ref_folder):
    ids = gpt2.encode(TEXT)
    rows = [{"ids": [EOT, *ids[: 10 + i]], "method": "m", "nfe": 8} for i in range(5)]
    rows.append({"text": TEXT, "method": "data"})
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    rc, stdout, err = cli(
        capsys,
        "--samples",
        inp,
        "--out",
        str(out),
        "--ref-model",
        ref_folder,
        "--flush-every",
        "2",
        "--no-progress",
        "--bootstrap",
        "50",
    )
    assert rc == 0, err
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in got] == list(range(6)) and got[0]["method"] == "m"
    assert got[5]["n_scored"] == len(ids) and got[0]["n_scored"] == 10
    assert all(r["ref_model"] == ref_folder for r in got)
    summary = json.loads((tmp_path / "out.summary.json").read_text())
    assert {g["method"] for g in summary["groups"]} == {"m", "data"}
    assert summary["meta"]["tokens_per_s"] > 0 and "tokens/s" in stdout
    # a killed run: the first 3 rows and a torn 4th line; a rerun keeps the 3 and redoes the rest
    kept = [dict(r, marker=True) for r in got[:3]]
    out.write_text("".join(json.dumps(r) + "\n" for r in kept) + '{"index": 3, "ref_m')
    rc, _, err = cli(
        capsys,
        "--samples",
        inp,
        "--out",
        str(out),
        "--ref-model",
        ref_folder,
        "--no-progress",
        "--bootstrap",
        "50",
    )
    assert rc == 0, err
    again = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["index"] for r in again) == list(range(6))
    assert [r.get("marker") for r in again] == [True] * 3 + [None] * 3
    assert again[4]["nll_sum"] == pytest.approx(got[4]["nll_sum"], rel=1e-6)


def test_cli_keeps_finished_batches_when_killed(
    tmp_path, capsys, env, gpt2, ref_folder, monkeypatch
):
    ids = gpt2.encode(TEXT)
    inp = write_jsonl(tmp_path / "in.jsonl", [{"ids": ids[: 8 + i]} for i in range(6)])
    out = tmp_path / "out.jsonl"
    real, calls = G.GenPPL.score, []

    def dies_on_second_batch(self, samples, desc=""):
        calls.append(len(samples))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, samples, desc)

    monkeypatch.setattr(G.GenPPL, "score", dies_on_second_batch)
    with pytest.raises(KeyboardInterrupt):
        main(
            [
                "genppl",
                "--samples",
                inp,
                "--out",
                str(out),
                "--ref-model",
                ref_folder,
                "--flush-every",
                "2",
                "--no-progress",
            ]
        )
    assert [json.loads(line)["index"] for line in out.read_text().splitlines()] == [0, 1]


@pytest.mark.parametrize("case", ["missing", "malformed", "no_ids", "outside", "unknown_ref"])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, env, gpt2, ref_folder, case):
    good = {"ids": gpt2.encode("Hello world")}
    inp = tmp_path / "in.jsonl"
    ref = ref_folder
    if case == "missing":
        path, expect = str(tmp_path / "nope.jsonl"), "nope.jsonl"
    elif case == "malformed":
        path = str(inp)
        inp.write_text(json.dumps(good) + "\n{not json\n")
        expect = "in.jsonl:2"
    elif case == "no_ids":
        path = write_jsonl(inp, [good, {"tokens": [1, 2]}])
        expect = "in.jsonl:2"
    elif case == "outside":
        # 50257 is the reference's added [PAD] (accepted); 50258 is outside
        path = write_jsonl(inp, [good, {"ids": [15496, 50257, 50258]}])
        expect = "id 50258 outside the vocabulary"
    else:
        path, ref = write_jsonl(inp, [good]), "no-such-org/no-such-model"
        expect = "no-such-org/no-such-model"
    rc, _, err = cli(
        capsys,
        "--samples",
        path,
        "--out",
        str(tmp_path / "o.jsonl"),
        "--ref-model",
        ref,
        "--no-progress",
    )
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], err
    assert not (tmp_path / "o.jsonl").exists()
