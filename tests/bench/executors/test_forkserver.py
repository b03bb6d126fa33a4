"""The local executor's fork server (bench.executors.forkserver): a sweep whose jobs it forks
writes the results of one whose jobs are processes of their own (bit for bit: weights, samples,
every value), each forked job runs in its own session with its own logs, the server ends with
its driver, and a server that cannot start leaves the driver starting jobs itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.executors import forkserver

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
TIMING = {"train_steps_per_s"}  # metrics that measure time: never equal between runs
#: what a row says about the model and its samples (its other columns are times, costs, dates)
RESULT = ("value", "ci_low", "ci_high", "n", "item_outcomes", "items_key", "train_steps", "nfe")

SWEEP = """
name: fork
results_dir: {rd}
task: {{name: sort, difficulties: [sort8], n_train: 256, n_valid: 16}}
backbone: {{size: cpu-mini}}
train: {{steps: 12, batch_size: 16, warmup_steps: 2, checkpoint_every: 4, ema: 0.9}}
sample: {{nfe: [4], temperature: [1.0], n_samples: 16, batch_size: 16}}
executor: {{kind: local, max_parallel: 1}}
methods:
  - {{method: mdlm}}
  - {{method: ar}}
"""


def _sweep(tmp_path: Path, name: str, fork: bool) -> Path:
    rd = tmp_path / name
    path = tmp_path / f"{name}.yaml"
    path.write_text(SWEEP.format(rd=rd))
    env = {**ENV, forkserver.ENV_SWITCH: "1" if fork else "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.sweep", str(path), "--no-progress"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return rd


def _rows(rd: Path) -> dict:
    out = {}
    for f in sorted((rd / "store").glob("*.json")):
        for r in json.loads(f.read_text())["rows"]:
            if r["metric"] in TIMING:
                continue
            out[(r["cell_id"], r["metric"])] = {k: r.get(k) for k in RESULT}
    return out


def _tensors(rd: Path) -> dict:
    import torch

    out = {}
    for f in sorted([*(rd / "runs").glob("*/weights.pt"), *(rd / "runs").glob("*/samples/*.pt")]):
        obj = torch.load(f, map_location="cpu", weights_only=False)
        stack = [(f.relative_to(rd).as_posix(), obj)]
        while stack:
            key, v = stack.pop()
            if torch.is_tensor(v):
                out[key] = v
            elif isinstance(v, dict):
                stack += [(f"{key}/{k}", x) for k, x in v.items()]
    return out


@pytest.mark.skipif(not forkserver.enabled(), reason="no fork server here (not Linux, a GPU)")
def test_forked_jobs_give_the_results_of_jobs_started_as_processes(tmp_path):
    import torch

    forked, started = _sweep(tmp_path, "forked", True), _sweep(tmp_path, "started", False)
    log = forked / "logs" / "local-forkserver.log"
    assert log.is_file() and not (started / "logs" / "local-forkserver.log").exists()
    a, b = _rows(forked), _rows(started)
    assert a.keys() == b.keys() and len(a) > 4
    assert {k for k in a if a[k] != b[k]} == set()
    ta, tb = _tensors(forked), _tensors(started)
    assert ta.keys() == tb.keys()
    assert any(k.endswith("weights.pt/backbone/embed.weight") for k in ta)
    assert [k for k in ta if not torch.equal(ta[k], tb[k])] == []
    # every forked job wrote the logs and result of a job process: Lightning's lines, ok
    jobs = sorted((forked / "logs" / "local").iterdir())
    assert len(jobs) == 2
    for job in jobs:
        assert json.loads((job / "result.json").read_text())["ok"] is True
        assert "GPU available:" in (job / "log.err").read_text()


@pytest.mark.skipif(not forkserver.enabled(), reason="no fork server here (not Linux, a GPU)")
def test_a_forked_job_has_its_own_session_and_the_server_ends_with_its_driver(tmp_path):
    """A job folder whose job.pkl cannot be read: the forked job reports it the way a job
    process does (result.json, log.err) from a session of its own; the server answers the next
    request, and exits when the driver closes it."""
    server = forkserver.ForkServer(tmp_path / "server.log", ENV, ROOT)
    folders = []
    for i in range(2):
        folder = tmp_path / f"job{i}"
        folder.mkdir()
        (folder / "job.pkl").write_bytes(b"not a pickle")
        folders.append(folder)
    try:
        jobs = [server.spawn(f) for f in folders]
        assert all(isinstance(j, forkserver.Forked) for j in jobs)
        assert jobs[0].pid != jobs[1].pid != server.proc.pid
        for job in jobs:
            try:
                assert os.getsid(job.pid) == job.pid  # its own session (when still running)
            except ProcessLookupError:
                pass
            assert job.wait(timeout=120) == 0
    finally:
        proc = server.proc
        server.close()
    assert proc.poll() is not None  # the server is gone, its jobs ended on their own
    for folder in folders:
        assert (folder / "log.err").read_text().strip()  # the traceback of the bad job file
        assert not (folder / "result.json").exists()  # main() failed before it could write one


def test_a_server_that_cannot_start_leaves_the_driver_starting_jobs(tmp_path, capsys):
    (tmp_path / "bench").mkdir()  # what the server imports first fails to import
    (tmp_path / "bench" / "__init__.py").write_text("raise ImportError('a broken install')\n")
    server = forkserver.ForkServer(tmp_path / "server.log", ENV, tmp_path)
    if not forkserver.enabled():
        assert server.spawn(tmp_path) is None
        return
    assert server.spawn(tmp_path) is None
    assert server.broken and server.proc is None
    assert "starting each job as a process of its own" in capsys.readouterr().err
    assert "a broken install" in (tmp_path / "server.log").read_text()  # why, in its log
    assert server.spawn(tmp_path) is None  # and it is not tried again
