"""Polling with a deadline, shared by the tests that wait on a real SLURM cluster."""

from __future__ import annotations

import time


def wait_until(pred, timeout: float, what: str, interval: float = 0.5):
    """Return ``pred()``'s first truthy value; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(interval)
