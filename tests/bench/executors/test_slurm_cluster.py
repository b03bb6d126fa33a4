"""Tests against the real one-node SLURM cluster of scripts/slurm-local-up.sh.

Bring it up first (root, Debian): ``bash scripts/slurm-local-up.sh`` (add ``--gpus 2``
for the fake-GPU test). Every test is marked ``slurm`` and the module skips itself when
``sinfo`` is missing or the cluster does not answer. Every wait has a deadline: a job
that vanished or never starts fails the test instead of hanging it.

These tests pin down the cluster behaviour the sweep engine relies on: sacct states,
array throttling, afterok dependencies, requeue, pre-timeout signals, preemption and
submitit round trips.
"""

from __future__ import annotations

import os
import sys
import time

import pytest
from helpers import run, wait_until

pytestmark = pytest.mark.slurm

TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}


@pytest.fixture(scope="module", autouse=True)
def cluster(slurm_cluster):
    """The local cluster (tests/conftest.py::slurm_cluster skips when it is down)."""
    yield


@pytest.fixture
def jobs():
    """Collects submitted job ids; whatever still runs at teardown is cancelled."""
    ids: list[str] = []
    yield ids
    if ids:
        run("scancel", *ids)


def sbatch(jobs: list[str], *args: str) -> str:
    r = run("sbatch", "--parsable", *args)
    assert r.returncode == 0, f"sbatch {args} failed: {r.stderr}"
    jid = r.stdout.strip().split(";")[0]
    jobs.append(jid)
    return jid


def sacct(jid: str, *, duplicates: bool = False) -> list[dict[str, str]]:
    """Allocation rows (-X) of a job or array: JobID, State (first word), ExitCode."""
    cmd = ["sacct", "-n", "-X", "-P", "-j", jid, "-o", "JobID,State,ExitCode"]
    if duplicates:
        cmd.insert(1, "-D")
    r = run(*cmd)
    assert r.returncode == 0, f"sacct failed: {r.stderr}"
    rows = []
    for line in r.stdout.splitlines():
        job_id, state, exit_code = line.split("|")
        rows.append({"JobID": job_id, "State": state.split()[0], "ExitCode": exit_code})
    return rows


def wait_final(jid: str, timeout: float, n_tasks: int = 1) -> list[dict[str, str]]:
    """Wait until sacct lists n_tasks allocations of jid, all in a terminal state."""

    def done():
        rows = sacct(jid)
        if len(rows) == n_tasks and all(r["State"] in TERMINAL for r in rows):
            return rows
        return None

    return wait_until(done, timeout, f"job {jid} to finish ({n_tasks} allocation(s))")


def wait_state(jid: str, want: str, timeout: float) -> None:
    """Wait for sacct's latest record of jid to be `want`; fail fast on a fatal state.

    Unlike wait_final this rides through PREEMPTED/REQUEUED records of a requeued job."""
    fatal = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"} - {want}

    def reached():
        state = job_state(jid)
        assert state not in fatal, f"job {jid} ended {state}, wanted {want}"
        return state == want

    wait_until(reached, timeout, f"job {jid} to be {want}")


def squeue_field(jid: str, fmt: str) -> str:
    return run("squeue", "-h", "-j", jid, "-o", fmt).stdout.strip()


def job_state(jid: str) -> str:
    rows = sacct(jid)
    return rows[0]["State"] if rows else ""


def test_sbatch_job_completes_and_failure_is_recorded(tmp_path, jobs):
    ok = sbatch(
        jobs,
        "-t",
        "1",
        "-o",
        str(tmp_path / "ok-%j.out"),
        "--wrap",
        'echo "hello from $SLURM_JOB_ID on $SLURMD_NODENAME"',
    )
    bad = sbatch(jobs, "-t", "1", "-o", str(tmp_path / "bad-%j.out"), "--wrap", "exit 3")
    [row] = wait_final(ok, 60)
    assert (row["State"], row["ExitCode"]) == ("COMPLETED", "0:0")
    node = run("sinfo", "-h", "-N", "-o", "%N").stdout.split()[0]
    assert (tmp_path / f"ok-{ok}.out").read_text().strip() == f"hello from {ok} on {node}"
    [row] = wait_final(bad, 60)
    assert (row["State"], row["ExitCode"]) == ("FAILED", "3:0")


def test_array_with_throttle_runs_one_task_at_a_time(tmp_path, jobs):
    # With 2 CPUs two 1-CPU tasks would overlap; %1 must serialise them.
    d = tmp_path
    jid = sbatch(
        jobs,
        "--array=0-2%1",
        "-t",
        "1",
        "-o",
        str(d / "a-%A_%a.out"),
        "--wrap",
        f"date +%s.%N > {d}/start_$SLURM_ARRAY_TASK_ID; sleep 2; "
        f"date +%s.%N > {d}/end_$SLURM_ARRAY_TASK_ID",
    )
    rows = wait_final(jid, 90, n_tasks=3)
    assert sorted(r["JobID"] for r in rows) == [f"{jid}_{i}" for i in range(3)]
    assert {r["State"] for r in rows} == {"COMPLETED"}
    spans = sorted(
        (float((d / f"start_{i}").read_text()), float((d / f"end_{i}").read_text()))
        for i in range(3)
    )
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end, f"array tasks overlapped despite %1: {spans}"


def test_afterok_dependency_waits_for_success(tmp_path, jobs):
    """An afterok job starts only after its dependency completed; the dependent of a failed job
    never starts and stays pending (DependencyNeverSatisfied) until cancelled."""
    d = tmp_path
    first = sbatch(
        jobs, "-t", "1", "-o", "/dev/null", "--wrap", f"sleep 4; date +%s.%N > {d}/first_end"
    )
    second = sbatch(
        jobs,
        "-t",
        "1",
        "-o",
        "/dev/null",
        f"--dependency=afterok:{first}",
        "--wrap",
        f"date +%s.%N > {d}/second_start",
    )
    failing = sbatch(jobs, "-t", "1", "-o", "/dev/null", "--wrap", "exit 1")
    after_failing = sbatch(
        jobs,
        "-t",
        "1",
        "-o",
        "/dev/null",
        f"--dependency=afterok:{failing}",
        "--wrap",
        f"touch {d}/must_not_run",
    )
    # While `first` runs, `second` is held back with reason Dependency.
    wait_until(lambda: squeue_field(second, "%r") == "Dependency", 20, "reason Dependency")
    assert not (d / "first_end").exists()
    [row] = wait_final(second, 60)
    assert row["State"] == "COMPLETED"
    assert job_state(first) == "COMPLETED"
    assert float((d / "second_start").read_text()) >= float((d / "first_end").read_text())
    # The dependent of a failed job never starts; it stays pending (Slurm's default,
    # no kill_invalid_depend) until someone cancels it.
    wait_until(
        lambda: squeue_field(after_failing, "%r") == "DependencyNeverSatisfied",
        30,
        "DependencyNeverSatisfied",
    )
    assert not (d / "must_not_run").exists()
    run("scancel", after_failing)
    [row] = wait_final(after_failing, 30)
    assert row["State"] == "CANCELLED"


REQUEUE_SCRIPT = """#!/bin/bash
echo "start restart=${{SLURM_RESTART_COUNT:-0}} $(date +%s.%N)" >> {log}
if [ "${{SLURM_RESTART_COUNT:-0}}" -ge 1 ]; then exit 0; fi
for i in $(seq 300); do sleep 0.2; done   # killed by the requeue long before this ends
exit 7
"""


def test_scontrol_requeue_of_running_job_restarts_it(tmp_path, jobs):
    log = tmp_path / "starts.log"
    script = tmp_path / "job.sh"
    script.write_text(REQUEUE_SCRIPT.format(log=log))
    # No --requeue flag: the cluster default (JobRequeue=1) must allow it.
    jid = sbatch(
        jobs, "-t", "2", "-o", str(tmp_path / "out-%j.txt"), "--open-mode=append", str(script)
    )
    wait_until(lambda: log.exists() and "restart=0" in log.read_text(), 60, "first start")
    r = run("scontrol", "requeue", jid)
    assert r.returncode == 0, r.stderr
    t_requeue = time.time()
    wait_state(jid, "COMPLETED", 120)
    lines = log.read_text().splitlines()
    assert [line.split()[1] for line in lines] == ["restart=0", "restart=1"]
    restart_delay = float(lines[1].split()[2]) - t_requeue
    print(f"requeue -> restart took {restart_delay:.1f} s")
    # Slurm holds a requeued job for cred_expire+1 s (default 120 s); the local
    # cluster sets cred_expire=5 and 2 s scheduler passes.
    assert restart_delay < 60
    history = [r["State"] for r in sacct(jid, duplicates=True)]
    assert history == ["REQUEUED", "COMPLETED"]


SIGNAL_BATCH_SCRIPT = """#!/bin/bash
trap 'echo "USR1 $SECONDS" > {marker}; exit 0' USR1
for i in $(seq 600); do sleep 0.2; done   # 120 s > the 60 s time limit
exit 3
"""

SIGNAL_STEP_SCRIPT = """#!/bin/bash
srun {python} -c '
import signal, sys, time
t0 = time.monotonic()
def on_usr1(signum, frame):
    open("{marker}", "w").write(f"USR1 {{time.monotonic() - t0:.1f}}")
    sys.exit(0)
signal.signal(signal.SIGUSR1, on_usr1)
while time.monotonic() - t0 < 120:
    time.sleep(0.2)
sys.exit(3)
'
"""


@pytest.mark.slow  # slurmctld checks signal times every 30 s: up to ~35 s here
def test_signal_arrives_before_time_limit(tmp_path, jobs):
    # --time=1 with USR1@25: slurmctld sends the signal at its first 30 s check after
    # start+5 s (job_mgr.c send_job_warn_signal: warn_time + 30 + now >= end_time), so
    # between ~5 and ~35 s, well before the 60 s limit. B: signals the batch shell; without
    # it only job steps (srun) get it -- the form submitit uses (--signal=USR2@90).
    batch_marker, step_marker = tmp_path / "batch_sig", tmp_path / "step_sig"
    (tmp_path / "batch.sh").write_text(SIGNAL_BATCH_SCRIPT.format(marker=batch_marker))
    (tmp_path / "step.sh").write_text(
        SIGNAL_STEP_SCRIPT.format(python=sys.executable, marker=step_marker)
    )
    batch = sbatch(
        jobs,
        "-t",
        "1",
        "--signal=B:USR1@25",
        "-o",
        str(tmp_path / "b.out"),
        str(tmp_path / "batch.sh"),
    )
    step = sbatch(
        jobs,
        "-t",
        "1",
        "--signal=USR1@25",
        "-o",
        str(tmp_path / "s.out"),
        str(tmp_path / "step.sh"),
    )
    for jid, marker in ((batch, batch_marker), (step, step_marker)):
        [row] = wait_final(jid, 150)
        assert marker.exists(), f"job {jid} got no USR1; sacct: {row}"
        word, seconds = marker.read_text().split()
        assert word == "USR1" and float(seconds) < 60
        assert (row["State"], row["ExitCode"]) == ("COMPLETED", "0:0")


PREEMPTEE_SCRIPT = """#!/bin/bash
echo "start restart=${{SLURM_RESTART_COUNT:-0}}" >> {log}
trap 'echo USR1 >> {log}' USR1
if [ "${{SLURM_RESTART_COUNT:-0}}" -ge 1 ]; then exit 0; fi
for i in $(seq 600); do sleep 0.2; done
exit 5
"""


@pytest.mark.slow  # GraceTime (10 s) + requeue hold (~7 s)
def test_urgent_partition_preempts_and_requeues_debug_job(tmp_path, jobs):
    cpus = int(run("sinfo", "-h", "-N", "-o", "%c").stdout.split()[0])
    log = tmp_path / "low.log"
    (tmp_path / "low.sh").write_text(PREEMPTEE_SCRIPT.format(log=log))
    # The low job takes every CPU, so the urgent job can only run by preempting it.
    low = sbatch(
        jobs,
        "-c",
        str(cpus),
        "-t",
        "5",
        "--signal=B:USR1@10",
        "-o",
        str(tmp_path / "low.out"),
        str(tmp_path / "low.sh"),
    )
    wait_until(lambda: log.exists() and "restart=0" in log.read_text(), 60, "low job start")
    urgent = sbatch(
        jobs,
        "-p",
        "urgent",
        "-c",
        str(cpus),
        "-t",
        "1",
        "-o",
        str(tmp_path / "urgent.out"),
        "--wrap",
        "echo urgent ran",
    )
    wait_state(urgent, "COMPLETED", 90)
    wait_state(low, "COMPLETED", 90)
    # preempt_send_user_signal: the preemptee got its --signal at preemption time,
    # then was requeued (PREEMPTED record) and restarted.
    assert log.read_text().split("\n")[:3] == ["start restart=0", "USR1", "start restart=1"]
    assert [r["State"] for r in sacct(low, duplicates=True)] == ["PREEMPTED", "COMPLETED"]


def test_fake_gpus_are_scheduled(tmp_path, jobs):
    """A job asking one fake GPU gets a CUDA_VISIBLE_DEVICES index; asking more than the node
    has is rejected at submission."""
    gres = run("sinfo", "-h", "-N", "-o", "%G").stdout.split()[0]
    if not gres.startswith("gpu:"):
        pytest.skip("no fake GPUs configured: run `bash scripts/slurm-local-up.sh --gpus 2`")
    n_gpus = int(gres.split(":")[-1].split("(")[0])
    r = run("srun", "-t", "1", "--gpus-per-node=1", "printenv", "CUDA_VISIBLE_DEVICES", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() in {str(i) for i in range(n_gpus)}
    r = run("sbatch", "--parsable", "-t", "1", f"--gpus-per-node={n_gpus + 1}", "--wrap", "true")
    assert r.returncode != 0 and "Requested node configuration is not available" in r.stderr


# --- submitit ---------------------------------------------------------------------------


def _submitit_job(n: int) -> dict:
    return {"sum_sq": sum(i * i for i in range(n)), "job_id": os.environ.get("SLURM_JOB_ID")}


def test_submitit_autoexecutor_round_trip(tmp_path, jobs):
    submitit = pytest.importorskip("submitit")
    cloudpickle = pytest.importorskip("cloudpickle")
    # Ship this module's functions by value: the job's python cannot import a test module.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    executor = submitit.AutoExecutor(folder=tmp_path / "%j", cluster="slurm")
    executor.update_parameters(timeout_min=2, slurm_partition="debug", cpus_per_task=1, mem_gb=1)
    job = executor.submit(_submitit_job, 20)
    jobs.append(job.job_id)
    wait_until(job.done, 90, f"submitit job {job.job_id}")
    assert job.result() == {"sum_sq": sum(i * i for i in range(20)), "job_id": job.job_id}
    # sacct lags slurmctld: poll for the final state instead of asserting it at once.
    wait_until(
        lambda: job.watcher.get_state(job.job_id, mode="force") == "COMPLETED",
        30,
        "submitit to see COMPLETED",
    )
    assert job.paths.stdout.exists()
