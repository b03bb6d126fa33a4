"""``--executor slurm`` where SLURM cannot be used (bench/executors/slurm.py ``_preflight``).

No cluster needed: fake ``sbatch`` / ``srun`` / ``squeue`` / ``sacct`` / ``scancel`` scripts first
on PATH say what a client without a reachable controller says (the lines of Debian's SLURM 22.05
client on a machine without slurm.conf), or answer as a healthy controller would while sbatch
refuses the job. The driver must stop with one line (cause, plan size and cost bound, ways forward),
exit 2 and write nothing; ``--dry-run`` / ``--status`` keep working.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench import sweep
from bench.executors import slurm_cluster

ROOT = Path(__file__).resolve().parents[3]
TOOLS = ("sbatch", "srun", "squeue", "sacct", "scancel", "sinfo", "scontrol")
#: every client program of a SLURM installation (none may come from the machine's own install)
SLURM_CLIENT = {*TOOLS, "salloc", "sattach", "sbcast", "scrontab", "sdiag", "sprio", "sreport",
                "sshare", "sstat", "strigger", "sview", "sacctmgr", "sh5util"}  # fmt: skip

NO_CONFIG = """\
echo "$0 $*" >> {calls}
n=$(basename "$0")
echo "$n: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host" >&2
echo "$n: error: fetch_config: DNS SRV lookup failed" >&2
echo "$n: error: _establish_config_source: failed to fetch config" >&2
echo "$n: fatal: Could not establish a configuration source" >&2
exit 1
"""
ANSWERS = 'echo "$0 $*" >> {calls}\nexit 0\n'  # squeue / sacct: no jobs
REFUSES = """\
echo "$0 $*" >> {calls}
echo "sbatch: error: invalid partition specified: nope" >&2
echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2
exit 1
"""
HANGS = """\
echo "squeue: error: s_p_parse_file: cannot stat file /etc/slurm/slurm.conf, retrying" >&2
exec sleep 10
"""


def fake_slurm(tmp_path: Path, monkeypatch, **scripts: str) -> Path:
    """Put fake SLURM clients first on PATH (default: the unconfigured client); returns the
    file each call is appended to."""
    bin_dir, calls = tmp_path / "fakebin", tmp_path / "calls.txt"
    bin_dir.mkdir()
    calls.touch()
    for tool in TOOLS:
        f = bin_dir / tool
        f.write_text("#!/bin/sh\n" + scripts.get(tool, NO_CONFIG).format(calls=calls))
        f.chmod(0o755)
    # the fakes, python, and the system's programs without any SLURM client: a machine where
    # SLURM is installed must not lend a binary the fakes forgot
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:{_system_bin(tmp_path)}")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    return calls


def _system_bin(tmp_path: Path) -> Path:
    """A folder of links to the programs of /usr/bin and /bin, SLURM's clients left out."""
    out = tmp_path / "sysbin"
    out.mkdir(exist_ok=True)
    for d in (Path("/usr/bin"), Path("/bin")):
        for prog in sorted(d.iterdir()) if d.is_dir() else []:
            slurm = prog.name in SLURM_CLIENT or prog.name.startswith("slurm")
            if not slurm and not (out / prog.name).exists():
                (out / prog.name).symlink_to(prog)
    return out


@pytest.fixture
def results(tmp_path):
    return tmp_path / "results"  # never created unless something is written


@pytest.fixture
def sweep_file(tmp_path, results):
    cfg = {
        "name": "t",
        "results_dir": str(results),
        "task": {"name": "sort", "n_train": 64, "n_valid": 8},
        "backbone": {"size": "cpu-mini"},
        "train": {"steps": 2, "batch_size": 8, "warmup_steps": 1, "ema": 0.5},
        "sample": {"nfe": [4, 8], "temperature": [1.0], "n_samples": 8, "batch_size": 4},
        "executor": {"kind": "slurm", "time_min": 60, "gpus_per_node": 1, "array_parallelism": 2},
        "methods": [{"method": "mdlm"}, {"method": "ar", "decoding": ["greedy"]}],
    }
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_no_controller_exits_2_with_one_line_and_writes_nothing(
    tmp_path, monkeypatch, results, sweep_file
):
    calls = fake_slurm(tmp_path, monkeypatch)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.sweep", str(sweep_file), "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {sweep_file}: executor.kind: slurm: no SLURM controller")
    assert "(squeue: Could not establish a configuration source)" in line  # the cause, once
    assert "res_nsearch" not in line and "Traceback" not in proc.stderr
    for way in ("--executor local", "--dry-run", "SLURM_CONF"):
        assert way in line, line
    # each model's short cells packed into one array task (slurm_cluster.chunk_cells)
    assert "2 train jobs and 2 sampling tasks for 3 sample cells" in line, line
    assert re.search(r"cost upper bound: [\d.]+ GPU-hours, [\d.]+ CPU-hours", line), line
    # the cost model's prediction there, and the local executor's here
    assert re.search(r", predicted [\d.]+ GPU-hours on h100;", line), line
    assert re.search(r"--executor local \(predicted [\d.]+ (s|min|h) here\)", line), line
    assert not results.exists()  # no state, logs, runs, store
    assert "sbatch" not in calls.read_text()  # only asked, never submitted


def test_message_names_the_dry_run_numbers(tmp_path, monkeypatch, capsys, results, sweep_file):
    """The size and the bound in the error are the ones ``--dry-run`` prints."""
    fake_slurm(tmp_path, monkeypatch)
    assert sweep.main([str(sweep_file), "--dry-run"]) == 0
    plan_text = capsys.readouterr().out
    jobs = re.search(r"jobs: (\d+) train job\(s\), .* with (\d+) task\(s\) for (\d+)", plan_text)
    bound = re.search(
        r"cost upper bound \([^)]*\): ([\d.]+) GPU-hours, ([\d.]+) CPU-hours", plan_text
    )
    assert jobs and bound, plan_text
    assert sweep.main([str(sweep_file), "--no-progress", "--executor", "slurm"]) == 2
    err = capsys.readouterr().err
    assert f"{sweep_file}: --executor slurm: " in err
    n_train, n_tasks, n_cells = jobs.groups()
    assert f"{n_train} train jobs and {n_tasks} sampling tasks for {n_cells} sample cells" in err
    assert f"cost upper bound: {bound[1]} GPU-hours, {bound[2]} CPU-hours" in err
    assert bound[1] != "0.0"
    assert not results.exists()


def test_dry_run_and_status_work_without_controller(
    tmp_path, monkeypatch, capsys, results, sweep_file
):
    fake_slurm(tmp_path, monkeypatch)
    assert sweep.main([str(sweep_file), "--dry-run"]) == 0
    assert "nothing submitted (--dry-run)" in capsys.readouterr().out
    assert sweep.main([str(sweep_file), "--status"]) == 0
    out = capsys.readouterr().out
    assert "0 done, 0 running, 5 pending, 0 failed (of 5 cells)" in out, out
    assert not results.exists()


def test_no_client_on_path(tmp_path, monkeypatch, capsys, results, sweep_file):
    monkeypatch.setenv("PATH", str(tmp_path))  # no SLURM client at all (a laptop)
    assert sweep.main([str(sweep_file), "--no-progress"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "'sbatch' is not on PATH (no SLURM client here)" in line
    assert "--executor local" in line and "--dry-run" in line and "login node" in line
    assert not results.exists()


def test_client_without_srun(tmp_path, monkeypatch, capsys, results, sweep_file):
    """submitit cannot submit without ``srun`` (its job scripts run it): the preflight names it
    instead of letting submitit fail after the driver has started writing state."""
    calls = fake_slurm(tmp_path, monkeypatch, squeue=ANSWERS, sacct=ANSWERS)
    (tmp_path / "fakebin" / "srun").unlink()
    monkeypatch.setenv("PATH", str(tmp_path / "fakebin"))  # no real srun behind the fakes either
    assert sweep.main([str(sweep_file), "--no-progress"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "'srun' is not on PATH (no SLURM client here)" in line, line
    assert "--executor local" in line and "--dry-run" in line
    assert not results.exists()
    assert calls.read_text() == ""  # nothing asked, nothing submitted


def test_controller_that_never_answers_times_out(
    tmp_path, monkeypatch, capsys, results, sweep_file
):
    fake_slurm(tmp_path, monkeypatch, squeue=HANGS)
    monkeypatch.setattr(slurm_cluster, "PREFLIGHT_TIMEOUT_S", 0.5)
    assert sweep.main([str(sweep_file), "--no-progress"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "no SLURM controller answers (squeue had no answer within 0.5 s: squeue: " in line
    assert "cannot stat file /etc/slurm/slurm.conf" in line
    assert not results.exists()


def test_answering_controller_passes_the_preflight(
    tmp_path, monkeypatch, capfd, results, sweep_file
):
    """squeue answers, so the driver goes on to submit; sbatch refuses the job, which is
    reported once, as one line, and is not taken for an unreachable controller."""
    calls = fake_slurm(tmp_path, monkeypatch, squeue=ANSWERS, sacct=ANSWERS, sbatch=REFUSES)
    assert sweep.main([str(sweep_file), "--no-progress"]) == 1
    err = capfd.readouterr().err
    assert "no SLURM controller" not in err
    assert err.count("Invalid partition name specified") == 1, err
    assert (
        "failed: slurm: submission failed: sbatch: Batch job submission failed: "
        "Invalid partition name specified" in err
    )
    assert "squeue -h -u" in calls.read_text() and "sbatch" in calls.read_text()


def test_slurm_error_line():
    dns = (
        "squeue: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
        "squeue: error: fetch_config: DNS SRV lookup failed\n"
        "squeue: fatal: Could not establish a configuration source\n"
    )
    line = slurm_cluster.slurm_error_line
    assert line(dns, "squeue") == "squeue: Could not establish a configuration source"
    down = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
    assert line(down.encode(), "squeue") == f"squeue: {down.strip()}"
    assert line("", "sbatch") == "sbatch: no error message"
