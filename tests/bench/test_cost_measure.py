"""What a cell cost (bench.measure, bench.kinds.sample, bench.likelihood.cells, the train
rows): on a sort-4 MDLM trained 4 steps (cpu-mini), sampled 8 items in two batches of 4 at NFE 2.

A backbone that sleeps a fixed time per call bounds the network seconds from below; an
interrupted cell resumed from its batch files sums every batch's seconds (a batch file written
before the cost columns makes them unknown, not wrong); the records' seconds sum to the row's."""

from __future__ import annotations

import dataclasses
import shutil
import time

import pytest
import torch

from bench import cell_model, cells, records
from bench.config import load_sweep
from bench.kinds import sample as sample_kind
from bench.measure import (
    LIKELIHOOD_COST_COLUMNS,
    SAMPLE_COST_COLUMNS,
    TRAIN_COST_COLUMNS,
    CallTimer,
    PeakMemory,
    sample_cost,
    timing_calls,
)
from bench.plan import plan
from bench.results import COLUMNS, Store
from bench.results import main as results_main

SWEEP = """
name: cost
results_dir: {rd}
task: {{name: sort, n_train: 64, options: {{n_digits: 4}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 4, batch_size: 8, warmup_steps: 1, ema: 0.5, val_every: 0, checkpoint_every: 4}}
sample: {{nfe: [2], temperature: [1.0], n_samples: 8, batch_size: 4}}
executor: {{kind: debug}}
methods:
  - {{method: mdlm}}
"""
SLEEP = 0.02  # seconds per backbone call of the sleepy backbone


def _plan(rd):
    path = rd.parent / "cost.yaml"
    path.write_text(SWEEP.format(rd=rd))
    p = plan(load_sweep(path), str(path))
    (tc,) = p.train_cells
    return tc, p.samples_of(tc)[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The results folder with the trained model and its train rows (never written to after)."""
    rd = tmp_path_factory.mktemp("cost") / "results"
    tc, _ = _plan(rd)
    cells.run_train(tc, progress=False)
    return rd


@pytest.fixture
def fresh(trained, tmp_path):
    """A copy of the trained results folder: (train cell, its first sample cell, results dir)."""
    rd = tmp_path / "results"
    shutil.copytree(trained, rd)
    tc, c = _plan(rd)
    return tc, c, rd


@pytest.fixture
def backbone_hook(monkeypatch):
    """Patches the model a sample cell builds: ``state["sleep"]`` seconds slept per backbone call,
    ``state["alloc_mb"]`` MB allocated (and touched) by the next call; ``state["method"]``: the
    method."""
    state = {"sleep": 0.0, "alloc_mb": 0, "method": None}
    real = cell_model.method_backbone

    def patched(tc, task):
        method, backbone = real(tc, task)
        forward = backbone.forward

        def slow_forward(*a, **k):
            if state["alloc_mb"]:
                buf = torch.ones(state["alloc_mb"] * 2**18)  # float32: 4 bytes each
                del buf
                state["alloc_mb"] = 0
            time.sleep(state["sleep"])
            return forward(*a, **k)

        backbone.forward = slow_forward
        state["method"] = method
        return method, backbone

    monkeypatch.setattr(cell_model, "method_backbone", patched)
    return state


def _row(rd, c) -> dict:
    rows = Store(rd).load(c.id)
    assert rows, f"cell {c.id} has no rows"
    assert len({tuple(r.get(k) for k in SAMPLE_COST_COLUMNS) for r in rows}) == 1
    return rows[0]


def _records(rd, row) -> list[dict]:
    return records.read(rd, row["records"], row["records_sha256"])


def _batches(tc, c) -> list[dict]:
    folder = tc.run_dir / "samples" / c.id
    return [torch.load(p, weights_only=False) for p in sorted(folder.glob("batch_*.pt"))]


def test_every_cost_column_is_a_store_column():
    for col in (*SAMPLE_COST_COLUMNS, *TRAIN_COST_COLUMNS, *LIKELIHOOD_COST_COLUMNS):
        assert col in COLUMNS, col


def test_sample_cost_derives_from_known_totals_only():
    got = sample_cost(2.0, 0.5, 10, items=4, generated=40)
    assert got == {"sample_s": 2.0, "network_s": 0.5, "network_calls": 10,
                   "forward_equivalents": 4.0, "tokens_per_s": 20.0,
                   "seconds_per_sample": 0.5}  # fmt: skip
    unknown = sample_cost(None, None, None, items=4, generated=40)
    assert set(unknown.values()) == {None}
    assert sample_cost(1.0, 0.0, 0, items=4, generated=4)["forward_equivalents"] is None


def test_call_timer_through_hooks_times_every_call():
    class Sleepy(torch.nn.Module):
        def forward(self, x):
            time.sleep(SLEEP)
            return x

    m, timer = Sleepy(), CallTimer("cpu")
    with timing_calls(m, timer):
        for _ in range(3):
            m(torch.zeros(1))
    m(torch.zeros(1))  # hooks removed: not counted
    assert timer.calls == 3 and timer.seconds() >= 3 * SLEEP


def test_sleepy_backbone_bounds_network_seconds(fresh, backbone_hook):
    tc, c, rd = fresh
    backbone_hook["sleep"] = SLEEP
    assert cells.run_samples([c], progress=False) == 1
    row = _row(rd, c)
    calls = row["network_calls"]
    assert calls >= 2 and calls == sum(b["calls"] for b in _batches(tc, c))
    assert row["network_s"] >= calls * SLEEP
    assert row["network_s"] <= row["sample_s"]
    assert row["forward_equivalents"] == pytest.approx(row["sample_s"] / row["network_s"])
    assert row["forward_equivalents"] >= 1.0
    assert row["seconds_per_sample"] == pytest.approx(row["sample_s"] / 8)
    generated = int((~cell_model.cell_task(tc).eval_data(c.subset, 8).clean_mask).sum())
    assert generated > 0
    assert row["tokens_per_s"] == pytest.approx(generated / row["sample_s"])
    assert row["peak_mem_mb"] > 0
    assert row["device_name"].startswith("cpu: ") and row["threads"] == torch.get_num_threads()
    assert row["torch_version"] == torch.__version__
    assert row["sample_s"] + row["score_s"] <= row["wall_s"]
    # the records: each item's share of its batch's seconds, summing to the row's
    recs = _records(rd, row)
    assert sum(r["sample_s"] for r in recs) == pytest.approx(row["sample_s"], rel=1e-9)
    assert {r["device_name"] for r in recs} == {row["device_name"]}
    assert "call_timer" not in vars(backbone_hook["method"])  # removed after the cell
    assert results_main(["verify", "--results-dir", str(rd)]) == 0


def _interrupt(c, monkeypatch):
    """Run the cell until its second batch raises (the first batch's file is written)."""
    real, seen = sample_kind.sample_batch, []

    def failing(*a, **k):
        seen.append(1)
        if len(seen) == 2:
            raise RuntimeError("killed")
        return real(*a, **k)

    monkeypatch.setattr(sample_kind, "sample_batch", failing)
    with pytest.raises(RuntimeError, match="killed"):
        cells.run_samples([c], progress=False)
    monkeypatch.setattr(sample_kind, "sample_batch", real)


def test_a_resumed_cell_sums_the_seconds_of_every_batch(fresh, backbone_hook, monkeypatch):
    tc, c, rd = fresh
    backbone_hook["sleep"] = 5 * SLEEP  # the interrupted run's batch is the slow one
    _interrupt(c, monkeypatch)
    assert "call_timer" not in vars(backbone_hook["method"])  # removed on the exception too
    (first,) = _batches(tc, c)
    assert first["network_s"] >= first["calls"] * 5 * SLEEP and first["sample_s"] > 0
    backbone_hook["sleep"] = 0.0
    assert cells.run_samples([c], progress=False) == 1
    row = _row(rd, c)
    both = _batches(tc, c)
    assert len(both) == 2 and both[0]["sample_s"] == first["sample_s"]
    assert row["sample_s"] == pytest.approx(both[0]["sample_s"] + both[1]["sample_s"])
    assert row["network_s"] == pytest.approx(both[0]["network_s"] + both[1]["network_s"])
    assert row["network_calls"] == both[0]["calls"] + both[1]["calls"]
    assert row["sample_s"] >= first["calls"] * 5 * SLEEP  # the old batch's seconds are in it
    assert row["peak_mem_mb"] == max(b["peak_mem_mb"] for b in both)
    recs = _records(rd, row)
    assert [r["sample_s"] for r in recs[:4]] == pytest.approx([first["sample_s"] / 4] * 4)
    assert sum(r["sample_s"] for r in recs) == pytest.approx(row["sample_s"], rel=1e-9)


def test_a_batch_file_without_costs_makes_them_unknown(fresh, backbone_hook, monkeypatch):
    tc, c, rd = fresh
    _interrupt(c, monkeypatch)
    (path,) = sorted((tc.run_dir / "samples" / c.id).glob("batch_*.pt"))
    old = torch.load(path, weights_only=False)
    torch.save({"ids": old["ids"], "nfe": old["nfe"]}, path)  # as written before the costs
    assert cells.run_samples([c], progress=False) == 1
    row = _row(rd, c)
    for col in ("sample_s", "network_s", "network_calls", "forward_equivalents",
                "tokens_per_s", "seconds_per_sample"):  # fmt: skip
        assert row[col] is None, col
    assert row["peak_mem_mb"] > 0 and row["score_s"] > 0  # measured by this process
    recs = _records(rd, row)
    assert [r["sample_s"] for r in recs[:4]] == [None] * 4
    assert all(r["sample_s"] > 0 for r in recs[4:])
    assert results_main(["verify", "--results-dir", str(rd)]) == 0


def test_peak_memory_grows_when_a_cell_allocates(fresh, backbone_hook):
    if PeakMemory("cpu").reset().since_start:
        pytest.skip("the resident peak cannot be reset here")
    tc, c, rd = fresh
    other = dataclasses.replace(c, id=c.id + "x")  # a second cell of the same model
    assert cells.run_samples([c], progress=False) == 1
    backbone_hook["alloc_mb"] = 300
    assert cells.run_samples([other], progress=False) == 1
    small, big = _row(rd, c)["peak_mem_mb"], _row(rd, other)["peak_mem_mb"]
    assert big - small > 200, (small, big)


def test_train_rows_carry_what_training_cost(trained):
    tc, _ = _plan(trained)
    rows = {r["metric"]: r for r in Store(trained).load(tc.id)}
    sps = rows["train_steps_per_s"]["value"]
    for r in rows.values():
        assert r["s_per_step"] == pytest.approx(1 / sps)
        seq_len = cell_model.cell_task(tc).train_data(tc.groups).x.shape[1]
        assert r["tokens_per_s"] == pytest.approx(8 * seq_len * sps)  # batch 8
        assert r["peak_mem_mb"] > 0
        assert r["device_name"].startswith("cpu: ") and r["torch_version"] == torch.__version__


def test_likelihood_rows_carry_what_the_bound_cost(fresh):
    from bench.likelihood.cells import Settings, run_likelihood

    tc, _, rd = fresh
    store = Store(rd)
    cid = run_likelihood(tc, "heldout", Settings(n_sequences=8, batch_size=4), store)
    rows = store.load(cid)
    assert rows
    r = rows[0]
    assert r["network_calls"] == 2  # MDLM: one backbone call per batch and draw
    assert 0 < r["network_s"] <= r["eval_s"] <= r["wall_s"]
    tokens = next(x["value"] for x in rows if x["metric"] == "tokens")
    assert r["tokens_per_s"] == pytest.approx(tokens / r["eval_s"])
    assert r["peak_mem_mb"] > 0 and r["device_name"].startswith("cpu: ")
    assert results_main(["verify", "--results-dir", str(rd)]) == 0


def test_a_threshold_cell_records_the_calls_each_item_needed(fresh):
    """MDLM's ``threshold`` at tau 0.05 on a barely trained model (every p_theta near 1/10)
    reveals each row's block in one call: each record's ``calls`` is 1, the rows' ``calls_mean``
    / ``calls_max`` 1, ``network_calls`` one per batch, ``nfe`` the budget; ``confidence`` on the
    same model spends its budget on every item."""
    tc, _, rd = fresh
    path = rd.parent / "threshold.yaml"
    text = SWEEP.format(rd=rd).replace("temperature: [1.0]", "temperature: [1.0], decoding: "
                                       "[threshold, confidence]")  # fmt: skip
    path.write_text(text.replace("{method: mdlm}", "{method: mdlm, options: {tau: 0.05}}"))
    p = plan(load_sweep(path), str(path))
    (tc2,) = p.train_cells
    assert tc2.id == tc.id  # tau is a sampling option: the same trained model
    got = {}
    for c in p.samples_of(tc2):
        assert cells.run_samples([c], progress=False) == 1
        row = _row(rd, c)
        got[c.decoding] = row, [r["calls"] for r in _records(rd, row)]
    row, calls = got["threshold"]
    assert calls == [1] * 8 and row["calls_mean"] == 1 and row["calls_max"] == 1
    assert row["network_calls"] == 2 and row["nfe"] == 2
    row, calls = got["confidence"]
    assert calls == [2] * 8 and row["calls_mean"] == 2 and row["network_calls"] == 4
