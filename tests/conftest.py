"""Shared test configuration.

In CI (``.ci/run`` sets ``SFLM_REQUIRE_SLURM=1`` after bringing the local cluster up) a SLURM
test that would skip because the cluster is missing fails instead, so a broken cluster cannot
hide behind skips.
"""

import os

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (os.environ.get("SFLM_REQUIRE_SLURM") == "1" and report.skipped
            and item.get_closest_marker("slurm") is not None
            and "fake GPUs" not in str(report.longrepr)):
        report.outcome = "failed"
        report.longrepr = f"SFLM_REQUIRE_SLURM=1 but the SLURM test skipped: {report.longrepr}"
