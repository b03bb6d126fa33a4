"""``python -m bench.perf arcache`` / ``genppl`` end to end at tiny sizes: the rows they write,
the cached-vs-recompute token check, and the scorer's token count (no timing targets)."""

import json

import pytest
from genppl_tiny import byte_tokenizer, tiny_gpt2

from bench import perf, registry
from bench.evaluate.genppl import evaluator as G

ARCACHE = ["arcache", "--size", "cpu-mini", "--vocab", "12", "--ar-len", "16", "--device", "cpu"]


def _rows(out):
    return json.loads(out.read_text())["rows"]


def test_arcache_rows_and_identical_tokens(tmp_path):
    out = tmp_path / "perf.json"
    assert perf.main([*ARCACHE, "--ar-batches", "1", "2", "--out", str(out)]) == 0
    rows = _rows(out)
    assert [r["batch"] for r in rows] == [1, 2]
    for r in rows:
        assert r["bench"] == "arcache" and r["model"] == "ar" and r["decoding"] == "greedy"
        assert (r["seq_len"], r["prompt_len"], r["timed_positions"]) == (16, 8, 8)
        # one backbone call per generated position, cached or not
        assert r["nfe_cache"] == r["nfe_recompute"] == 8
        assert r["identical_tokens"] is True
        assert r["s_cache"] > 0 and r["s_recompute"] > 0
        assert r["speedup"] == pytest.approx(r["s_recompute"] / r["s_cache"])
        assert r["tokens_per_s_cache"] == pytest.approx(8 * r["batch"] / r["s_cache"])


def test_arcache_prefix_and_mismatch_detected(tmp_path, monkeypatch):
    out = tmp_path / "perf.json"
    assert perf.main([*ARCACHE, "--ar-new", "3", "--out", str(out)]) == 0
    (r,) = _rows(out)
    assert r["timed_positions"] == r["nfe_cache"] == r["nfe_recompute"] == 3
    # a cached path that decodes differently must be reported as such
    real = registry.METHODS["ar"].sample

    def skewed(self, backbone, prompt, prompt_mask, **kw):
        x = real(self, backbone, prompt, prompt_mask, **kw)
        if self.kv_cache:
            x[:, -1] = (x[:, -1] + 1) % 12
        return x

    monkeypatch.setattr(registry.METHODS["ar"], "sample", skewed)
    assert perf.main([*ARCACHE, "--ar-new", "3", "--out", str(out)]) == 0
    assert _rows(out)[0]["identical_tokens"] is False


def test_genppl_rows(tmp_path, monkeypatch):
    asked = []

    def fake_load(name, *, device=None, **kw):
        asked.append(name)
        return G.wrap_model(tiny_gpt2(257, n_positions=32), byte_tokenizer(), "tiny", device="cpu")

    monkeypatch.setattr(G, "load_reference", fake_load)
    out = tmp_path / "perf.json"
    argv = ["genppl", "--genppl-ref", "tiny-ref", "--genppl-n", "3", "--genppl-len", "40"]
    argv += ["--genppl-batch-tokens", "64", "--device", "cpu", "--out", str(out)]
    assert perf.main(argv) == 0
    (r,) = _rows(out)
    assert asked[-1] == "tiny-ref"
    assert r["bench"] == "genppl" and r["model"] == "tiny" and r["context"] == 32
    # 41 ids (context id + 40) in chunks [0, 32), [31, 41): every one of the 40 targets once
    assert r["tokens_scored"] == 3 * 40 and r["chunks"] == 3 * 2 and r["tokens_run"] == 3 * 42
    assert r["tokens_per_s"] == pytest.approx(r["tokens_scored"] / r["seconds"])
    assert r["ppl_pooled"] > 1.0
