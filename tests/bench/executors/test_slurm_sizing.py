"""SLURM jobs sized from the cost model (bench/cost/forecast.py ``slurm_sizing``;
bench/executors/slurm_cluster.py:
``limit_min``, ``chunk_cells``, ``memory_problem``): time limits = predicted x ``time_safety``
within [``time_floor_min``, ``time_min``], short sample cells packed into one array task, a
predicted peak above the device's memory stops the plan. The last test submits to the local
cluster (``bash scripts/slurm-local-up.sh``) and reads the limits SLURM was given."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from helpers import run

from bench.config import ExecutorConfig, load_sweep
from bench.cost.forecast import slurm_sizing as sizing
from bench.executors.slurm_cluster import Sizing, chunk_cells, limit_min, memory_problem
from bench.plan import plan
from bench.results import Store

ROOT = Path(__file__).resolve().parents[3]


def test_limit_is_prediction_times_safety_between_floor_and_cap():
    ex = ExecutorConfig(kind="slurm", time_min=120, time_safety=3.0, time_floor_min=10)
    assert limit_min(60.0, ex) == 10  # 3 min predicted x 3 -> the floor
    assert limit_min(20 * 60.0, ex) == 60  # 20 min x 3
    assert limit_min(20 * 60.0 + 1, ex) == 61  # rounded up, never below the prediction x safety
    assert limit_min(3600.0, ex) == 120  # 180 min -> the user's cap
    assert limit_min(None, ex) == 120  # nothing predicted: time_min
    off = ExecutorConfig(kind="slurm", time_min=120, time_safety=0.0)
    assert limit_min(60.0, off) == 120  # time_safety 0: every job asks time_min


def _cells(n: int):
    return [SimpleNamespace(id=f"c{i}") for i in range(n)]


def test_short_cells_are_packed_up_to_the_target_and_long_cells_stand_alone():
    cells = _cells(7)
    secs = {"c0": 600, "c1": 600, "c2": 600, "c3": 4000, "c4": 60, "c5": 60, "c6": 60}
    sizes = Sizing("cpu", secs, {})
    ex = ExecutorConfig(kind="slurm", task_target_min=30, array_parallelism=16)
    chunks = chunk_cells(cells, ex, sizes)
    assert [[c.id for c in ch] for ch in chunks] == [
        ["c0", "c1", "c2"],  # 30 min: fits the target exactly
        ["c3"],  # over the target alone
        ["c4", "c5", "c6"],
    ]
    assert sum(len(ch) for ch in chunks) == len(cells)
    # without a prediction (or with cells_per_task) the old split: min(cells, parallelism) tasks
    assert len(chunk_cells(cells, ex)) == 7
    per = ExecutorConfig(kind="slurm", task_target_min=30, cells_per_task=2)
    assert sorted(len(ch) for ch in chunk_cells(cells, per, sizes)) == [1, 2, 2, 2]


def test_sized_limits_follow_the_prediction(tmp_path):
    """gsm8k_nfe on h100: a sampling array's limit covers its longest task's prediction x
    time_safety (more cells in the task: a longer limit); training's covers its prediction up to
    the cap (then it requeues)."""
    from bench.executors.slurm_cluster import array_limit_min

    cfg = load_sweep(
        str(ROOT / "sweeps" / "gsm8k_nfe.yaml"),
        [f"results_dir={tmp_path / 'res'}", "executor.device=h100", "executor.time_floor_min=1",
         "executor.time_min=100000", "executor.task_target_min=100000"],
    )  # fmt: skip
    p = plan(cfg, "sweeps/gsm8k_nfe.yaml")
    ex = p.cfg.executor
    sizes = sizing(p, ex, Store(cfg.results_dir))
    assert sizes is not None and sizes.kind == "h100"
    tc = next(t for t in p.train_cells if t.method == "mdlm")
    cells = p.samples_of(tc)
    chunks = chunk_cells(cells, ex, sizes)
    assert len(chunks) == 1  # a huge target: one task
    small = array_limit_min(tc, [cells[:1]], ex, sizes)
    whole = array_limit_min(tc, chunks, ex, sizes)
    assert whole > small  # the limit covers every cell of the task
    assert whole == math.ceil(sizes.task_s(tc, cells) * ex.time_safety / 60)
    assert limit_min(sizes.train_s(tc), ex) == math.ceil(sizes.train_s(tc) * ex.time_safety / 60)
    assert memory_problem(p, sizes) is None


def test_memory_above_the_device_stops_the_plan_with_one_line(tmp_path, capsys):
    """gsm8k_nfe at a sampling batch of 1024 (float64 (B, L, |V|) buffers of hundreds of GB): the
    SLURM driver stops before anything is written, naming the model and cell, exit 2; the dry
    run prints the same line."""
    from bench.sweep import main

    res = tmp_path / "res"
    args = [str(ROOT / "sweeps" / "gsm8k_nfe.yaml"), "--set", f"results_dir={res}",
            "--set", "sample.batch_size=1024", "--set", "executor.device=h100"]  # fmt: skip
    assert main(args + ["--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert re.search(r"sample cell \w+: predicted peak memory [\d.]+ GiB is above the h100's "
                     r"80\.0 GiB; lower sample\.batch_size", err[0]), err[0]  # fmt: skip
    assert not res.exists()
    assert main(args + ["--dry-run"]) == 0
    assert "error: " in capsys.readouterr().out
    # at the file's own batch it fits
    assert main(args[:3] + args[5:] + ["--dry-run"]) == 0
    assert "predicted peak memory" not in capsys.readouterr().out


@pytest.mark.slurm
def test_submitted_jobs_carry_the_sized_limits(tmp_path, slurm_cluster):
    """Against the local cluster: a tiny sweep with time_min 600 gets train and sampling limits
    sized from its prediction (the floor here, 7 min), not 600 min; its three sample cells share
    one array task; the submission scripts and SLURM's own TimeLimit say so."""
    from bench.sweep import main

    res = tmp_path / "results"
    sweep = {
        "name": "sized",
        "results_dir": str(res),
        "task": {"name": "sort", "n_train": 256, "n_valid": 32},
        "backbone": {"size": "cpu-mini"},
        "train": {"steps": 5, "batch_size": 16, "warmup_steps": 1, "checkpoint_every": 5},
        "sample": {"nfe": [2, 4, 8], "temperature": [1.0], "n_samples": 16, "batch_size": 16},
        "executor": {
            "kind": "slurm",
            "time_min": 600,
            "time_floor_min": 7,
            "cpus_per_task": 1,
            "mem_gb": 1,
            "array_parallelism": 4,
        },  # fmt: skip
        "methods": [{"method": "mdlm"}],
    }
    path = tmp_path / "sized.yaml"
    path.write_text(yaml.safe_dump(sweep))
    try:
        assert main([str(path), "--no-wait", "--no-progress"]) == 0
        state = json.loads((res / "sweeps" / "sized" / "state.json").read_text())
        jobs = state["jobs"]
        [train] = [j for j, v in jobs.items() if v["kind"] == "train"]
        [array] = [j for j, v in jobs.items() if v["kind"] == "samples"]
        assert jobs[train]["time_min"] == 7 and jobs[array]["time_min"] == 7
        assert len(jobs[array]["tasks"]) == 1  # three short cells packed into one task
        for jid in (train, array):
            scripts = list((res / "logs").glob(f"{jid}*/*_submission.sh"))
            assert scripts, f"no submission script for {jid}"
            assert "#SBATCH --time=7\n" in scripts[0].read_text()
            r = run("scontrol", "show", "job", jid)
            if r.returncode == 0:  # still known to the controller
                assert "TimeLimit=00:07:00" in r.stdout
    finally:
        if (res / "sweeps" / "sized" / "state.json").exists():
            ids = json.loads((res / "sweeps" / "sized" / "state.json").read_text())["jobs"]
            run("scancel", *ids)
