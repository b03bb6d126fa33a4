"""Shared test configuration.

In CI (``.ci/run`` sets ``SFLM_REQUIRE_SLURM=1`` after bringing the local cluster up) a SLURM
test that would skip because the cluster is missing fails instead, so a broken cluster cannot
hide behind skips.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import run

SLURM_STATE_DIR = Path(os.environ.get("SFLM_SLURM_DIR", "/tmp/sflm-slurm"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (
        os.environ.get("SFLM_REQUIRE_SLURM") == "1"
        and report.skipped
        and item.get_closest_marker("slurm") is not None
        and "fake GPUs" not in str(report.longrepr)
    ):
        report.outcome = "failed"
        report.longrepr = f"SFLM_REQUIRE_SLURM=1 but the SLURM test skipped: {report.longrepr}"


@pytest.fixture(scope="module")
def slurm_cluster():
    """Skip unless the local cluster and its accounting answer; point SLURM_CONF at it if unset."""
    if shutil.which("sinfo") is None:
        pytest.skip("SLURM client 'sinfo' not on PATH: run `bash scripts/slurm-local-up.sh`")
    saved = os.environ.get("SLURM_CONF")
    conf = SLURM_STATE_DIR / "etc" / "slurm.conf"
    if not saved and conf.exists():
        os.environ["SLURM_CONF"] = str(conf)
    try:
        try:
            r = run("sinfo", "-h", "-N", "-o", "%N %T", timeout=15)
        except subprocess.TimeoutExpired:
            pytest.skip(
                "SLURM cluster not up (sinfo hung 15 s): run `bash scripts/slurm-local-up.sh`"
            )
        states = [line.split()[-1].rstrip("*~#") for line in r.stdout.splitlines() if line.strip()]
        if r.returncode != 0 or not any(
            s in {"idle", "mixed", "allocated", "completing"} for s in states
        ):
            pytest.skip(
                f"SLURM cluster not up (sinfo rc={r.returncode}, nodes={states}, "
                f"{r.stderr.strip()[:200]}): run `bash scripts/slurm-local-up.sh`"
            )
        try:
            r = run("sacct", "-n", "-X", "-S", "now-1minutes", "-o", "JobID", timeout=15)
        except subprocess.TimeoutExpired:
            pytest.skip("SLURM accounting (sacct) hung 15 s")
        if r.returncode != 0:
            pytest.skip(f"SLURM accounting (sacct) not answering: {r.stderr.strip()[:200]}")
        yield
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
