"""The cost model's variable-call and block-cache predictions (bench.kinds.sample_cost): a
decoding that may make fewer calls than its budget (MDLM's threshold; sample.eos_stop) is
predicted at the budget and says so (--dry-run, python -m bench.cost); a block cache prices its
block-only calls at their positions and its refreshes as full calls; sample.latency_items adds
batch-1 samples; python -m bench.cost sets a done variable-call cell's calls beside its budget."""

from __future__ import annotations

import dataclasses

import pytest

from bench import registry
from bench.config import SweepConfig, build
from bench.cost import check, table
from bench.cost.defaults import DEFAULTS
from bench.cost.model import Costs, _Model, predict_plan
from bench.cost.notes import caveat_lines
from bench.plan import plan


@pytest.fixture(autouse=True)
def _no_user_tables(tmp_path, monkeypatch):
    monkeypatch.setenv(table.ENV_DIR, str(tmp_path / "calibration"))


def _cfg(tmp_path, methods, **sample):
    return {
        "name": "t",
        "results_dir": str(tmp_path / "r"),
        "task": {"name": "sudoku", "grid": 4, "difficulties": ["easy"], "n_valid": 64},
        "backbone": {"size": "cpu-mini"},
        "train": {"steps": 10, "batch_size": 8, "checkpoint_every": 10_000},
        "sample": {"nfe": [8], "temperature": [1.0], "n_samples": 64, "batch_size": 32, **sample},
        "executor": {"kind": "local", "max_parallel": 1},
        "methods": methods,
    }


def _plan(tmp_path, methods, **sample):
    return plan(build(SweepConfig, _cfg(tmp_path, methods, **sample)), "t.yaml")


def _by_decoding(p, pred):
    return {c.decoding: pred.cells[c.id] for c in p.samples_of(p.train_cells[0])}


def test_a_call_skipping_decoding_is_predicted_at_its_budget_and_says_so(tmp_path, capsys):
    from bench import sweep
    from bench.cost.__main__ import main as cost_main

    methods = [{"method": "mdlm", "decoding": ["ancestral", "threshold"]}]
    p = _plan(tmp_path, methods)
    cells = _by_decoding(p, predict_plan(p, "cpu", entry=DEFAULTS["cpu"]))
    anc, thr = cells["ancestral"], cells["threshold"]
    assert thr.calls == anc.calls == 8 * 2 and thr.item_calls == anc.item_calls == 8
    assert not anc.caveats and not anc.variable_calls
    assert thr.variable_calls == "threshold may make fewer calls"
    assert "at its budget of 8 calls per item (threshold may make fewer calls)" in thr.note
    lines = caveat_lines(predict_plan(p, "cpu", entry=DEFAULTS["cpu"]))
    assert len(lines) == 2 and lines[1].endswith(
        ": 1 cell(s) predicted at the call budget (threshold may make fewer calls)"
    )
    path = tmp_path / "t.yaml"
    import yaml

    path.write_text(yaml.safe_dump(_cfg(tmp_path, methods)))
    capsys.readouterr()
    assert sweep.main([str(path), "--dry-run"]) == 0
    assert lines[1] in capsys.readouterr().out
    assert cost_main([str(path)]) == 0
    assert lines[1].strip() in capsys.readouterr().out


def test_an_eos_stop_cell_is_predicted_at_its_budget_and_says_so(tmp_path):
    p = _plan(tmp_path, [{"method": "mdlm"}], eos_stop=True)
    (c,) = _by_decoding(p, predict_plan(p, "cpu", entry=DEFAULTS["cpu"])).values()
    assert c.calls == 16 and "sample.eos_stop: a row may stop at its EOS" in c.variable_calls
    assert c.caveats == [f"predicted at the call budget ({c.variable_calls})"]


def _cost_and_cell(tmp_path, block_length, **sampling):
    """The cost view of an MDLM model with ``block_length`` and its first sample cell, sampled
    with the options ``sampling`` (a block cache: the option's name as the cell reads it)."""
    p = _plan(tmp_path, [{"method": "mdlm", "options": {"block_length": block_length}}])
    tc = p.train_cells[0]
    cost = Costs(DEFAULTS["cpu"], _Model(tc))
    return cost, _with(p.samples_of(tc)[0], **sampling)


def _with(cell, **sampling):
    """``cell`` sampled with the options ``sampling`` besides its own."""
    return dataclasses.replace(cell, sampling={**cell.sampling, **sampling})


def test_a_block_cache_prices_block_only_calls_at_their_positions(tmp_path):
    """4x4 Sudoku: L 40, 21 positions given, 19 generated; blocks of 5 -> 4 blocks (5, 5, 5, 4)
    and 8 calls, 2 a block. dual: each block's first call full, the second its block's
    positions; prefix: the block and the suffix after it; attention over all 40 keys;
    cache_refresh 1: every call full (the cache-free cost)."""
    kind = registry.KINDS["sample"]
    cost, plain = _cost_and_cell(tmp_path, 5)
    L, B, given = cost.L, plain.batch_size, cost.calls(8)[2]
    assert (L, given) == (40, 21)
    dtype = cost.dtype(plain.float64)
    fe, call_s, _ = cost.sample_factor(plain.decoding, dtype, cost.net.head_share(L))
    own = 2 * 8 * call_s  # the sampler's own seconds: 8 calls in each of 2 batches
    none = kind.predict(plain, cost)
    full = cost.forward_s(B, L, L)
    assert none.parts["network"] == pytest.approx(fe * 2 * 8 * full + own, rel=1e-9)
    block_part = {"dual": [5, 5, 5, 4], "prefix": [19, 14, 9, 4]}
    for mode, part in block_part.items():
        c = _with(plain, block_cache=mode)
        pred = kind.predict(c, cost)
        per_batch = 4 * full + sum(cost.forward_s(B, n, L) for n in part)
        assert pred.parts["network"] == pytest.approx(fe * 2 * per_batch + own, rel=1e-9), mode
        assert pred.item_calls == 8 and pred.calls == 16
        assert pred.item_fe == pytest.approx(fe * per_batch / full, rel=1e-9)
        assert f"block cache {mode}: 4 refresh call(s) per item as full calls, 4 block-only" in (
            pred.note
        )
        assert pred.caveats == [
            f"predicted with block cache {mode}: refreshes full, the rest block-only"
        ]
        assert pred.parts["network"] < none.parts["network"]
        assert pred.peak_bytes > none.peak_bytes  # the cache's keys and values
    dual, prefix = (kind.predict(_with(plain, block_cache=m), cost)
                    for m in ("dual", "prefix"))  # fmt: skip
    assert dual.seconds < prefix.seconds
    every = _with(plain, block_cache="dual", cache_refresh=1)
    assert kind.predict(every, cost).parts["network"] == pytest.approx(
        none.parts["network"], rel=1e-9
    )
    # no blocks: one block of every generated position, one refresh, 7 calls of the 19
    cost0, plain0 = _cost_and_cell(tmp_path / "b0", 0)
    c0 = _with(plain0, block_cache="dual")
    per0 = cost0.forward_s(B, L, L) + 7 * cost0.forward_s(B, 19, L)
    assert kind.predict(c0, cost0).parts["network"] == pytest.approx(fe * 2 * per0 + own, rel=1e-9)
    for odd in ("block", True, None):  # not a period: each block's first call only
        c = _with(plain, block_cache="dual", cache_refresh=odd)
        assert kind.predict(c, cost).parts == dual.parts
    unknown = _with(plain, block_cache="none")
    assert kind.predict(unknown, cost).parts == none.parts


def test_latency_items_add_batch_one_samples(tmp_path):
    kind = registry.KINDS["sample"]
    cost, plain = _cost_and_cell(tmp_path, 0)
    base = kind.predict(plain, cost)
    timed = kind.predict(dataclasses.replace(plain, latency_items=3), cost)
    fe, call_s, _ = cost.sample_factor(plain.decoding, "float64", cost.net.head_share(cost.L))
    one = 8 * (fe * cost.forward_s(1, cost.L, cost.L) + call_s)
    assert timed.parts["latency"] == pytest.approx(3 * one, rel=1e-9)
    assert timed.seconds == pytest.approx(base.seconds + 3 * one, rel=1e-9)
    assert timed.calls == base.calls + 3 * 8 and "+ 3 batch-1 latency sample(s)" in timed.note


def test_bench_cost_sets_a_variable_call_cells_calls_beside_its_budget(tmp_path):
    """A done threshold cell's rows (calls_mean 3 of a budget of 8, fe_mean, sample_s) are
    compared per model and decoding; a fixed-call cell whose speed columns are empty or NaN
    (fe_mean etc.) does not break the comparison and is not listed."""
    from bench.results import Store

    p = _plan(tmp_path, [{"method": "mdlm", "decoding": ["ancestral", "threshold"]}])
    store = Store(p.cfg.results_dir)
    tc = p.train_cells[0]
    store.write_cell(tc.id, [{"metric": "n_params", "value": 1.0, "kind": "train",
                              "wall_s": 10.0}])  # fmt: skip
    pred = predict_plan(p, store=None)
    thr = next(c for c in p.samples_of(tc) if c.decoding == "threshold")
    anc = next(c for c in p.samples_of(tc) if c.decoding == "ancestral")
    cost = {"wall_s": 2.0, "kind": "sample", "calls_mean": 3.0, "fe_mean": 3.3,
            "sample_s": 0.25, "network_s": 0.2, "tokens_per_fe": 5.0}  # fmt: skip
    store.write_cell(thr.id, [{"metric": "acc", "value": 0.5, **cost},
                              {"metric": "cells_acc", "value": 0.7, **cost}])  # fmt: skip
    store.write_cell(anc.id, [{"metric": "acc", "value": 0.5, "kind": "sample", "wall_s": 2.0,
                               "calls_mean": 8.0, "fe_mean": float("nan"),
                               "tokens_per_fe": None, "latency_s": None}])  # fmt: skip
    out = check.comparison(p, store, pred)
    assert "/      4 s" in next(ln for ln in out.splitlines() if ln.strip().startswith("mdlm"))
    (line,) = [ln for ln in out.splitlines() if "calls per item" in ln]
    cp = pred.cells[thr.id]
    assert "threshold" in line and "1 cell(s): calls per item 3.0 of a budget of 8.0 (38%)" in line
    assert f"fe per item 3.3 / {cp.item_fe:.1f} predicted" in line
    scaled = cp.parts["network"] * 3 / 8
    assert f"{check.fmt_s(scaled)} at the calls made, 0 s measured" in line
    assert check.variable_call_lines(p, Store(tmp_path / "empty"), pred) == []
