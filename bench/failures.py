"""Why a training run failed: ``<run folder>/failed.json``.

The trainer (:mod:`bench.train`) writes it when a run stops for good (diverged training) and
removes it when a new attempt starts; the cell-status model (:mod:`bench.executors.cell_status`)
reads it to show the cell failed with that reason. Kept apart from both so that reading a
status does not import the trainer.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from bench import atomic

#: the file a failed training run leaves in its run folder (:func:`write_failure`)
FAILED_FILE = "failed.json"


def failure_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / FAILED_FILE


def write_failure(run_dir: str | Path, reason: str, step: int, **extra) -> Path:
    """Record why a run failed: ``<run_dir>/failed.json`` = {"reason": one line, "step": int,
    "time": ISO-8601 UTC, ...extra}, written atomically. :func:`bench.train.fit` removes it when
    it starts."""
    info = {
        "reason": reason,
        "step": step,
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }
    path = failure_path(run_dir)
    atomic.write_text(path, json.dumps(info, indent=2, sort_keys=True))
    return path


def read_failure(run_dir: str | Path) -> dict | None:
    """What ``failed.json`` says (``{}`` when it is unreadable), None when there is none."""
    path = failure_path(run_dir)
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return info if isinstance(info, dict) else {}
