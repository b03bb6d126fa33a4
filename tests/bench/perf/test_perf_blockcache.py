"""``python -m bench.perf blockcache`` end to end at tiny sizes: its rows (settings, calls by
class, forward-equivalents, agreement with no cache; no timing targets)."""

import json

import pytest

from bench import perf

TINY = ["blockcache", "--size", "cpu-mini", "--device", "cpu", "--threads", "1"]
TINY += ["--bc-items", "4", "--sample-batch", "2", "--bc-reps", "1"]


def test_blockcache_rows(tmp_path):
    out = tmp_path / "perf.json"
    args = ["--bc-task", "none", "--vocab", "12", "--seq-len", "24", "--prompt-frac", "0.25"]
    args += ["--bc-decodings", "confidence", "--bc-refresh", "0", "1", "--out", str(out)]
    assert perf.main([*TINY, *args]) == 0
    rows = json.loads(out.read_text())["rows"]
    settings = [(r["block_cache"], r["cache_refresh"]) for r in rows]
    assert settings == [("none", 0), ("prefix", 0), ("prefix", 1), ("dual", 0), ("dual", 1)]
    G = rows[0]["gen_len"]
    assert 18 <= G <= 20 and rows[0]["block_length"] == -(-G // 4) and rows[0]["nfe"] == G
    n_blocks = -(-G // rows[0]["block_length"])
    for r in rows:
        assert r["bench"] == "blockcache" and r["model"] == "mdlm" and r["items"] == 4
        assert r["calls"] == 2 * G  # two batches of a fixed-call decoding: nfe calls each
        full_only = r["block_cache"] == "none" or r["cache_refresh"] == 1
        assert r["partial_calls"] == (0 if full_only else 2 * (G - n_blocks))
        assert r["s_per_sample"] > 0 and r["fe_per_sample"] > 0
        if full_only:  # no partial call: the samples of no cache, bit for bit
            assert r["agreement"] == 1.0 and r["partial_over_full"] is None
        else:
            assert 0 < r["partial_over_full"] and 0 <= r["agreement"] <= 1
        assert r["fe_vs_none"] == pytest.approx(r["fe_per_sample"] / rows[0]["fe_per_sample"])


def test_blockcache_on_the_program_task(tmp_path):
    """The default task: the arith stand-in's held-out prompts (64 positions, 46 generated at
    most among the first 4)."""
    out = tmp_path / "perf.json"
    args = ["--bc-decodings", "ancestral", "--bc-nfe", "8", "--out", str(out)]
    assert perf.main([*TINY, *args]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["block_cache"] for r in rows] == ["none", "prefix", "dual"]
    assert {r["task"] for r in rows} == {"arith_standin"} and rows[0]["nfe"] == 8
    assert rows[0]["block_length"] == -(-rows[0]["gen_len"] // 4)
