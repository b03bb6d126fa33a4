"""bench.sweep's SLURM executor (bench/executors/slurm.py) against the real local cluster.

Bring the cluster up first (root, Debian): ``bash scripts/slurm-local-up.sh``. The module
skips itself when ``sinfo`` is missing or the cluster / accounting does not answer. Every
wait has a deadline; whatever a test submitted is cancelled at teardown.

Tiny configs (sort task, cpu-mini backbone, tens to hundreds of steps) so that the cost is
dominated by job start-up (python + torch + lightning imports, several seconds each).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from helpers import run, train_sort_mdlm, wait_until

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    """The local cluster (tests/conftest.py::slurm_cluster skips when it is down)."""
    yield


@pytest.fixture
def results(cluster, tmp_path):
    """A results dir; at teardown every job recorded in its sweep state is cancelled."""
    res = tmp_path / "results"
    yield res
    ids = set()
    for f in res.glob("sweeps/*/state.json"):
        ids |= set(json.loads(f.read_text())["jobs"])
    if ids:
        run("scancel", *sorted(ids))


def write_sweep(
    tmp_path: Path, results: Path, name: str, train: dict | None = None, nfe: tuple = (4, 8)
) -> Path:
    sweep = {
        "name": name,
        "results_dir": str(results),
        "task": {"name": "sort", "n_train": 512, "n_valid": 64},
        "backbone": {"size": "cpu-mini"},
        "train": {
            "steps": 30,
            "batch_size": 32,
            "lr": 1e-3,
            "warmup_steps": 5,
            "ema": 0.9,
            "checkpoint_every": 10,
            **(train or {}),
        },
        "sample": {"nfe": list(nfe), "temperature": [1.0], "n_samples": 32, "batch_size": 16},
        "executor": {
            "kind": "slurm",
            "time_min": 10,
            "cpus_per_task": 1,
            "mem_gb": 1,
            "array_parallelism": 2,
            "task_target_min": 0,  # the split by array_parallelism: these tests are about arrays
        },
        "methods": [{"method": "mdlm"}],
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def driver(sweep: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess (so the wait has a deadline)."""
    return subprocess.run(
        [sys.executable, "-m", "bench.sweep", str(sweep), "--no-progress", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def state_of(results: Path, name: str) -> dict:
    return json.loads((results / "sweeps" / name / "state.json").read_text())


def train_job(state: dict) -> str:
    [jid] = [j for j, info in state["jobs"].items() if info["kind"] == "train"]
    return jid


def sacct(*ids: str, duplicates: bool = False) -> list[dict[str, str]]:
    cmd = ["sacct", "-n", "-X", "-P", "-j", ",".join(ids), "-o", "JobID,JobName,State,Start,End"]
    if duplicates:
        cmd.insert(1, "-D")
    r = run(*cmd)
    assert r.returncode == 0, r.stderr
    rows = []
    for line in r.stdout.splitlines():
        job_id, name, state, start, end = line.split("|")
        rows.append(
            {
                "JobID": job_id,
                "JobName": name,
                "State": state.split()[0],
                "Start": start,
                "End": end,
            }
        )
    return rows


def store_rows(results: Path) -> list[dict]:
    from bench.results import parse_store_file

    rows = []
    for f in sorted((results / "store").glob("*.json")):
        rows += parse_store_file(f.read_bytes(), f.stem)[0]  # raises on a bad file
    return rows


def assert_one_row_per_cell_metric(results: Path, n_cells: int) -> list[dict]:
    rows = store_rows(results)
    keys = [(r["cell_id"], r["metric"]) for r in rows]
    assert len(keys) == len(set(keys)), f"duplicate (cell, metric) rows: {sorted(keys)}"
    assert len({r["cell_id"] for r in rows}) == n_cells
    return rows


def sweep_cells(path: Path):
    from bench.config import load_sweep
    from bench.plan import plan

    return plan(load_sweep(path))


# --------------------------------------------------------------------------- trainer (no cluster)


def test_stop_request_and_crash_both_resume_to_identical_weights(tmp_path):
    """What the SLURM jobs rely on, without SLURM: request_stop() (the USR2 handler) makes fit()
    save at the next step boundary and raise TrainingInterrupted; a crash between checkpoints
    resumes from the last periodic one. Both end bitwise equal to an uninterrupted run (EMA,
    RNG incl. dropout, data position, optimiser)."""
    from lightning.pytorch.callbacks import Callback

    from bench.config import TrainConfig, build
    from bench.train import TrainingInterrupted, request_stop

    cfg = build(
        TrainConfig,
        {
            "steps": 12,
            "batch_size": 16,
            "lr": 1e-3,
            "warmup_steps": 8,
            "ema": 0.9,
            "checkpoint_every": 5,
            "threads": 1,
            "seed": 3,
        },
    )

    class At(Callback):
        def __init__(self, step, action):
            self.step, self.action = step, action

        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == self.step:
                self.action()

    def crash():
        raise KeyError("crash")

    def train(run_dir, *callbacks):
        train_sort_mdlm(run_dir, cfg, callbacks=callbacks)
        return torch.load(run_dir / "weights.pt", weights_only=False)

    want = train(tmp_path / "a")
    with pytest.raises(TrainingInterrupted) as info:
        train(tmp_path / "b", At(7, request_stop))
    assert info.value.step == 7
    assert torch.load(info.value.ckpt, weights_only=False)["global_step"] == 7
    with pytest.raises(KeyError):
        train(tmp_path / "c", At(8, crash))  # last periodic checkpoint: step 5
    for d in ("b", "c"):
        got = train(tmp_path / d)
        assert got["steps"] == want["steps"] == 12
        for k, v in want["backbone"].items():
            assert torch.equal(got["backbone"][k], v), (
                f"run {d}: {k} differs from the uninterrupted run"
            )


# --------------------------------------------------------------------------- SLURM


@pytest.mark.slurm
def test_sweep_end_to_end_ddp_survives_driver_sigkill(tmp_path, results):
    """Dry run submits nothing; a tiny sweep runs as 1 train job (2-process DDP on CPU, gloo)
    + a 2-task array behind an afterok dependency; the driver SIGKILLed mid-sweep and re-run
    resubmits nothing that runs or is done; the store ends with one row per (cell, metric)
    carrying the git commit; checkpoint and weights load; a re-run of the finished sweep asks
    SLURM nothing and submits nothing."""
    from bench import registry
    from bench.config import BackboneConfig
    from bench.sweep import main
    from bench.weights import load_weights

    sweep = write_sweep(tmp_path, results, "e2e", train={"devices": 2, "steps": 20})
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 1))
    rc = main([str(sweep), "--dry-run"])
    assert rc == 0
    assert not (results / "sweeps" / "e2e" / "state.json").exists()
    assert "e2e" not in run("squeue", "-h", "-o", "%j").stdout

    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.sweep", str(sweep), "--no-progress"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        state_file = results / "sweeps" / "e2e" / "state.json"
        wait_until(
            lambda: state_file.exists() and len(json.loads(state_file.read_text())["cells"]) == 3,
            90,
            "the driver to record its submissions",
        )
        jid = train_job(state_of(results, "e2e"))
        wait_until(lambda: any(r["State"] == "RUNNING" for r in sacct(jid)), 90, "train job to run")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    before = state_of(results, "e2e")

    r = driver(sweep)
    assert r.returncode == 0, r.stdout + r.stderr
    after = state_of(results, "e2e")
    assert after["cells"] == before["cells"], "re-run resubmitted a cell that was queued or running"
    assert set(after["jobs"]) == set(before["jobs"])

    rows = assert_one_row_per_cell_metric(results, 3)
    assert {r["metric"] for r in rows if r["kind"] == "train"} == {
        "train_steps_per_s",
        "train_final_loss",
        "n_params",
    }
    assert sorted(r["nfe"] for r in rows if r["kind"] == "sample") == [4, 8]
    # the driver's commit, handed to the jobs in their environment (nodes need no .git)
    exported = re.search(
        r"export SFLM_BENCH_GIT_SHA=(\S+)",
        (results / "logs" / jid / f"{jid}_submission.sh").read_text(),
    ).group(1)
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", exported)
    assert {r["git_sha"] for r in rows} == {exported}

    # one train job, one array of two tasks, started only after training ended
    [samples] = [j for j, info in after["jobs"].items() if info["kind"] == "samples"]
    acct = wait_until(
        lambda: (
            (rs := sacct(jid, samples))
            and all(x["State"] == "COMPLETED" for x in rs)
            and len(rs) == 3
            and rs
        ),
        60,
        "sacct to show all three jobs COMPLETED",
    )
    by_id = {x["JobID"]: x for x in acct}
    assert sorted(by_id) == sorted([jid, f"{samples}_0", f"{samples}_1"])
    assert all(by_id[f"{samples}_{i}"]["Start"] >= by_id[jid]["End"] for i in (0, 1))
    submission = (results / "logs" / samples / f"{samples}_submission.sh").read_text()
    assert f"--dependency=afterok:{jid}" in submission
    assert "--array=0-1%2" in submission
    names = run("sacct", "-n", "-X", "-P", "-S", since, "-o", "JobName").stdout.split()
    assert names.count(after["jobs"][jid]["name"]) == 1, "train job submitted twice"

    # DDP: one step with two tasks, one log per rank; rank 0 alone wrote rows and weights
    steps = run("sacct", "-n", "-P", "-j", jid, "-o", "JobID,NTasks,State").stdout.split()
    assert f"{jid}.0|2|COMPLETED" in steps, steps
    for rank in (0, 1):
        text = (results / "logs" / jid / f"{jid}_{rank}_log.err").read_text()
        assert f"GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/2" in text
    p = sweep_cells(sweep)
    [tc] = p.train_cells
    ckpt = torch.load(tc.run_dir / "ckpt" / "last.ckpt", weights_only=False, map_location="cpu")
    assert ckpt["global_step"] == 20
    method = registry.make_method("mdlm", {}, registry.make_task(p.cfg.task))
    backbone = method.build_backbone(BackboneConfig(size="cpu-mini"))
    assert load_weights(method, backbone, tc.weights)["steps"] == 20

    # finished: no SLURM calls, no submissions, one line of status per cell
    t0 = time.perf_counter()
    assert main([str(sweep), "--no-progress"]) == 0
    assert time.perf_counter() - t0 < 10
    assert state_of(results, "e2e") == after
    from bench import status

    table = status.status_table(sweep_cells(sweep))
    assert table.splitlines()[-1].startswith("3 done, 0 running, 0 pending, 0 failed")


@pytest.mark.slurm
def test_training_requeued_on_signal_resumes_to_identical_weights(tmp_path, results):
    """USR2 (SLURM's pre-timeout / preemption signal) -> the train job saves at a step
    boundary and requeues itself; the requeued job resumes and ends at the same step with
    the same weights as an uninterrupted run of the same cell."""
    import dataclasses

    from bench.cells import run_train
    from bench.sweep import main

    sweep = write_sweep(
        tmp_path, results, "requeue", train={"steps": 200, "checkpoint_every": 20}, nfe=(4,)
    )
    assert main([str(sweep), "--no-wait", "--no-progress"]) == 0  # submits and returns
    jid = train_job(state_of(results, "requeue"))
    [tc] = sweep_cells(sweep).train_cells
    wait_until(lambda: (tc.run_dir / "ckpt" / "last.ckpt").exists(), 120, "the first checkpoint")
    assert run("scancel", "--signal=USR2", jid).returncode == 0

    # meanwhile: the same cell, uninterrupted, in this process
    ref = dataclasses.replace(tc, results_dir=str(tmp_path / "ref"))
    run_train(ref, threads=1, progress=False)

    def finished():
        history = [x["State"] for x in sacct(jid, duplicates=True)]
        assert not set(history) & {"FAILED", "CANCELLED", "TIMEOUT"}, history
        return history if history[-1:] == ["COMPLETED"] else None

    history = wait_until(finished, 180, "the requeued train job to complete")
    assert history == ["REQUEUED", "COMPLETED"]
    log = (results / "logs" / jid / f"{jid}_0_log.err").read_text()
    [step] = [int(s) for s in re.findall(r"training interrupted at step (\d+)", log)]
    assert 20 <= step < 200
    assert "Restored all states from the checkpoint" in log
    got = torch.load(tc.weights, weights_only=False)
    want = torch.load(ref.weights, weights_only=False)
    assert got["steps"] == want["steps"] == 200
    for k, v in want["backbone"].items():
        assert torch.equal(got["backbone"][k], v), f"{k} differs from the uninterrupted run"
    recs = sacct(jid, duplicates=True)
    print(
        f"requeue -> resume latency: {recs[0]['End']} -> {recs[1]['Start']} "
        f"(interrupted at step {step})"
    )


@pytest.mark.slurm
def test_cancelled_training_is_failed_and_rerun_resumes_it(tmp_path, results):
    """scancel of a running train job: the trainer saves on SIGTERM, the job and its
    dependent array show as failed (with log and last error line), and a re-run submits a
    new train job that resumes from the saved step and completes the sweep."""
    from bench.sweep import main

    sweep = write_sweep(
        tmp_path, results, "cancel", train={"steps": 300, "checkpoint_every": 1000}, nfe=(4,)
    )
    assert main([str(sweep), "--no-wait", "--no-progress"]) == 0  # submits and returns
    state = state_of(results, "cancel")
    jid = train_job(state)
    [tc] = sweep_cells(sweep).train_cells
    log = results / "logs" / jid / f"{jid}_0_log.err"
    wait_until(
        lambda: log.exists() and "SLURM auto-requeueing enabled" in log.read_text(),
        120,
        "training start",
    )
    time.sleep(2)
    assert run("scancel", jid).returncode == 0
    wait_until(lambda: [x["State"] for x in sacct(jid)] == ["CANCELLED"], 60, "CANCELLED in sacct")
    # sacct says CANCELLED at once; the job saves during SLURM's KillWait (SIGTERM -> SIGKILL)
    last = tc.run_dir / "ckpt" / "last.ckpt"
    wait_until(last.exists, 20, "a checkpoint saved on SIGTERM")
    time.sleep(1)  # the rename is atomic; let the process exit
    saved = torch.load(last, weights_only=False, map_location="cpu")["global_step"]
    assert 0 < saved < 300, "no checkpoint saved on SIGTERM"

    from bench import status
    from bench.executors.cell_status import statuses

    p = sweep_cells(sweep)
    # the array waiting on the cancelled job is cancelled by SLURM (kill-on-invalid-dep)
    wait_until(lambda: all(s.state == "failed" for s in statuses(p)), 60, "both cells failed")
    table = status.status_table(p)
    lines = table.splitlines()
    train_line = next(i for i, ln in enumerate(lines) if ln.startswith("failed   train"))
    assert "CANCELLED" in lines[train_line]
    assert lines[train_line + 1].split("log:", 1)[1].strip() == str(log)
    assert "CANCELLED" in lines[train_line + 2].split("error:", 1)[1]
    assert main([str(sweep), "--status"]) == 0

    r = driver(sweep)
    assert r.returncode == 0, r.stdout + r.stderr
    jid2 = train_job(
        {"jobs": {k: v for k, v in state_of(results, "cancel")["jobs"].items() if k != jid}}
    )
    log2 = (results / "logs" / jid2 / f"{jid2}_0_log.err").read_text()
    assert "Restored all states from the checkpoint" in log2
    rows = assert_one_row_per_cell_metric(results, 2)
    assert {r["train_steps"] for r in rows} == {300}
