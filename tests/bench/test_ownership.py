"""One owner per cell and interrupts that behave.

The reproductions: Ctrl-C on a local sweep printed a traceback and left its job running
unannounced; ``--status`` then showed the cell as ``pending [not submitted]``; a re-run started
a second training process in the same run folder. Now the job keeps running by design (its own
session), the driver says so in one line and exits 130 (SIGTERM: 143), ``--status`` shows the
job running, a re-run attaches to it instead of starting another, and ``--cancel`` stops it.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from helpers import wait_until

from bench import locks

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}

HOLD = textwrap.dedent("""
    import sys, time
    from bench.locks import CellLock
    CellLock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(120)
""")


def _hold(path: Path) -> subprocess.Popen:
    """Another process that holds the lock at ``path`` until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_cell_lock_has_one_owner_and_the_kernel_releases_it(tmp_path):
    path = tmp_path / "run" / "owner.lock"
    other = _hold(path)
    try:
        owner = locks.holder(path)
        assert owner["pid"] == other.pid and locks.alive(owner["pid"], owner["start"])
        with pytest.raises(locks.CellBusy, match=f"pid {other.pid} on "):
            locks.CellLock(path, patience_s=0.2).acquire()
    finally:
        other.kill()  # SIGKILL: no clean-up code runs, the kernel drops the lock
        other.wait()
    assert locks.holder(path) is None
    with locks.CellLock(path):
        with locks.CellLock(path):  # re-entrant within a process
            assert locks.holder(path)["pid"] == os.getpid()
        assert locks.holder(path) is not None
    assert locks.holder(path) is None and path.read_text() == ""


SWEEP = """
name: own
results_dir: {rd}
task: {{name: sudoku, grid: 4, difficulties: [easy], train_mix: true, n_train: 64, \
n_valid: 8, data_dir: {dd}}}
backbone: {{size: cpu-mini}}
train: {{steps: {steps}, batch_size: 8, warmup_steps: 1, checkpoint_every: 20, ema: 0.5}}
sample: {{nfe: [2], temperature: [1.0], n_samples: 8, batch_size: 8}}
executor: {{kind: {kind}, max_parallel: 1}}
methods:
  - {{method: mdlm}}
"""


def _sweep(tmp_path, steps=2, kind="debug"):
    from bench.config import load_sweep
    from bench.plan import plan

    path = tmp_path / "s.yaml"
    path.write_text(
        SWEEP.format(rd=tmp_path / "results", dd=tmp_path / "data", steps=steps, kind=kind)
    )
    p = plan(load_sweep(path), path)
    [tc] = p.train_cells
    return path, p, tc


def test_a_cell_another_process_owns_is_not_computed_here(tmp_path, capsys):
    from bench import cells, status

    _, p, tc = _sweep(tmp_path)
    [sc] = p.samples_of(tc)
    other = _hold(locks.train_lock_path(tc.run_dir))
    try:
        with pytest.raises(locks.CellBusy, match=f"pid {other.pid}"):
            cells.run_train(tc)
        assert not (tc.run_dir / "ckpt").exists() and not (tc.run_dir / "cell.json").exists()
        table = status.status_table(p).splitlines()
        assert table[1].startswith("running  train") and f"pid {other.pid}" in table[1]
        assert table[2].startswith("pending  sample") and "model busy" in table[2]
    finally:
        other.kill()
        other.wait()
    other = _hold(locks.sample_lock_path(tc.run_dir, sc.id))
    try:
        assert cells.run_samples([sc]) == 0  # skipped before it needs any weights
        assert f"skipping sample cell {sc.label()}" in capsys.readouterr().err
        assert status.status_table(p).splitlines()[2].startswith("running  sample")
    finally:
        other.kill()
        other.wait()


def _driver(path, *args, stderr: Path | None = None) -> subprocess.Popen:
    """``python -m bench.sweep`` as a user starts it from a shell (its own process group, so
    that a terminal's Ctrl-C can be imitated by signalling the group); ``stderr``: a file to
    write its stderr to (readable while it runs) instead of a pipe."""
    if stderr is not None:
        with open(stderr, "w") as err:
            return _driver_with(path, args, err)
    return _driver_with(path, args, subprocess.PIPE)


def _driver_with(path, args, stderr) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.sweep", str(path), "--no-progress", *args],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )


def _sweep_cli(path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.sweep", str(path), *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _job_started(tc) -> dict:
    """The lock holder once the job trains (its first checkpoint is written)."""
    return wait_until(
        lambda: (
            (tc.run_dir / "ckpt" / "last.ckpt").exists()
            and locks.holder(locks.train_lock_path(tc.run_dir))
        ),
        240,
        "the local job's first checkpoint",
    )


@pytest.mark.slow
def test_ctrl_c_leaves_the_job_running_status_shows_it_rerun_attaches_cancel_stops(tmp_path):
    path, p, tc = _sweep(tmp_path, steps=100_000, kind="local")
    first = _driver(path)
    owner = _job_started(tc)
    os.killpg(first.pid, signal.SIGINT)  # a terminal's Ctrl-C: the driver's whole process group
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert (
        f"1 local job(s) keep running (pids {owner['pid']})" in lines[0] and "--cancel" in lines[0]
    )
    assert locks.holder(locks.train_lock_path(tc.run_dir))["pid"] == owner["pid"], (
        "the job must keep running"
    )

    st = _sweep_cli(path, "--status")
    assert st.returncode == 0 and st.stdout.splitlines()[1].startswith("running  train"), st.stdout
    assert f"pid {owner['pid']}" in st.stdout

    # the re-run attaches: no second process, no second job folder. It says so once it has
    # planned and found the lock held; then it polls the job every 0.2 s. Waiting for that line
    # (not a fixed 15 s, which mostly covered its start) and watching it for 2 s more (about ten
    # of its polls) checks the same: it is still there, waiting, and started nothing.
    second_err = tmp_path / "second.err"
    second = _driver(path, stderr=second_err)
    attached = wait_until(
        lambda: "is already running" in second_err.read_text() and second_err.read_text(),
        120,
        "the re-run to attach to the running job",
    )
    assert f"(pid {owner['pid']} on " in attached and "waiting for it" in attached, attached
    time.sleep(2)
    assert second.poll() is None
    assert len(list((tmp_path / "results" / "logs" / "local").iterdir())) == 1
    assert locks.holder(locks.train_lock_path(tc.run_dir))["pid"] == owner["pid"]

    c = _sweep_cli(path, "--cancel")
    assert c.returncode == 0 and f"stopped (pid {owner['pid']}" in c.stdout, c.stdout + c.stderr
    second.communicate(timeout=120)
    err2 = second_err.read_text()
    assert (
        second.returncode == 1
        and f"the job it attached to (pid {owner['pid']}) was stopped" in err2
    ), err2
    assert locks.holder(locks.train_lock_path(tc.run_dir)) is None
    ckpt = torch.load(tc.run_dir / "ckpt" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] > 0  # SIGTERM saved at a step boundary: a re-run resumes there
    st = _sweep_cli(path, "--status")
    assert st.stdout.splitlines()[1].startswith("failed   train") and "stopped" in st.stdout, (
        st.stdout
    )
    assert _sweep_cli(path, "--cancel").stdout.strip() == "sweep own: nothing is running"


@pytest.mark.slow
def test_sigterm_with_stop_on_interrupt_stops_the_jobs_it_started(tmp_path):
    path, p, tc = _sweep(tmp_path, steps=100_000, kind="local")
    driver = _driver(path, "--stop-on-interrupt")
    owner = _job_started(tc)
    driver.send_signal(signal.SIGTERM)
    _, err = driver.communicate(timeout=180)
    assert driver.returncode == 143, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"stopped the 1 local job(s) it started (pids {owner['pid']})" in lines[0]
    assert locks.holder(locks.train_lock_path(tc.run_dir)) is None
    assert not locks.alive(owner["pid"], owner["start"])
    [folder] = (tmp_path / "results" / "logs" / "local").iterdir()
    assert json.loads((folder / "result.json").read_text())["stopped"] is True


@pytest.mark.slow
def test_cancel_while_the_driver_runs_stops_it_from_starting_queued_jobs(tmp_path):
    """``--cancel`` from another shell stops the running job; the driver, which did not stop it
    itself, starts none of the jobs still queued (one job folder) and says so."""
    path, _, _ = _sweep(tmp_path, steps=100_000, kind="local")
    path.write_text(path.read_text() + "  - {method: ar}\n")  # a second model, queued behind
    from bench.config import load_sweep
    from bench.plan import plan

    first, second = plan(load_sweep(path), path).train_cells
    driver = _driver(path)
    owner = _job_started(first)
    c = _sweep_cli(path, "--cancel")
    assert c.returncode == 0 and f"stopped (pid {owner['pid']}" in c.stdout, c.stdout + c.stderr
    _, err = driver.communicate(timeout=180)
    assert driver.returncode == 1, err
    assert "not starting the 1 queued job(s)" in err and "Traceback" not in err, err
    assert len(list((tmp_path / "results" / "logs" / "local").iterdir())) == 1
    assert not (second.run_dir / "ckpt").exists()
