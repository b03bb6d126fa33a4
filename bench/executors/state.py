"""What a sweep's driver remembers between runs: ``<results>/sweeps/<name>/state.json``.

The state file maps cell ids to the jobs that were submitted for them (and job ids to what
they were: kind, name, log folder, task count), written atomically after every submission.
One driver at a time per sweep holds :class:`DriverLock` (an ``flock``, released by the
kernel even when the driver is SIGKILLed).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path

from bench import atomic
from bench.config import ConfigError


def state_dir(cfg) -> Path:
    return Path(cfg.results_dir).absolute() / "sweeps" / re.sub(r"[^A-Za-z0-9_.-]", "_", cfg.name)


def load_state(cfg) -> dict:
    path = state_dir(cfg) / "state.json"
    if not path.is_file():
        return {"sweep": cfg.name, "jobs": {}, "cells": {}}
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: unreadable sweep state ({e})") from None
    state.setdefault("jobs", {})
    state.setdefault("cells", {})
    return state


def save_state(cfg, state: dict) -> None:
    d = state_dir(cfg)
    d.mkdir(parents=True, exist_ok=True)
    state["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    atomic.write_text(d / "state.json", json.dumps(state, indent=1, sort_keys=True))


class DriverLock:
    """One driver per sweep: an flock on <state dir>/driver.lock (released by the kernel even
    when the driver is SIGKILLed)."""

    def __init__(self, cfg):
        self.path = state_dir(cfg) / "driver.lock"

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "a+")
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.f.seek(0)
            other = self.f.read().strip() or "?"
            self.f.close()
            raise RuntimeError(
                f"another driver (pid {other}) is running this sweep ({self.path})"
            ) from None
        self.f.seek(0)
        self.f.truncate()
        self.f.write(str(os.getpid()))
        self.f.flush()
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()
