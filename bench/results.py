"""The results store: one tidy row per (cell, metric), with provenance.

Layout: ``<results_dir>/store/<cell_id>.json`` holds every row of one cell. A cell's file is
written once, atomically (temp file + ``os.replace``), so a killed run leaves either the whole
cell or nothing, concurrent writers on a shared filesystem never interleave, and re-running
a cell replaces its rows instead of duplicating them (deduplicated by cell hash).
:func:`read` concatenates everything into one pandas DataFrame with the DESIGN.md columns.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import pandas as pd

from bench import atomic

#: DESIGN.md columns, then extensions (flat, never nested).
COLUMNS = [
    "cell_id", "sweep", "task", "method", "variant", "backbone", "train_steps",
    "nfe", "temperature", "decoding", "seed", "metric", "value", "ci_low", "ci_high", "n",
    "git_sha", "config_hash", "created_at",
    # extensions
    "subset", "kind", "train_cell", "wall_s",
]


@lru_cache(maxsize=1)
def git_provenance() -> tuple[str, bool]:
    """(sha, dirty) of the checkout the code runs from; env SFLM_BENCH_GIT_SHA overrides
    (jobs on nodes without the .git folder)."""
    env = os.environ.get("SFLM_BENCH_GIT_SHA")
    if env:
        return env.rstrip("+"), env.endswith("+")
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return "unknown", False
    return sha or "unknown", dirty


def provenance_sha() -> str:
    sha, dirty = git_provenance()
    return sha + ("+dirty" if dirty else "")


class Store:
    """Append-only, atomic, deduplicated by cell id."""

    def __init__(self, results_dir: str | Path):
        self.dir = Path(results_dir) / "store"

    def path(self, cell_id: str) -> Path:
        return self.dir / f"{cell_id}.json"

    def has(self, cell_id: str) -> bool:
        return self.path(cell_id).is_file()

    def write_cell(self, cell_id: str, rows: list[dict]) -> Path:
        """Write all rows of one cell at once (replacing an earlier write of the same cell)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        metrics = [r["metric"] for r in rows]
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"cell {cell_id}: duplicate metrics {metrics}")
        full = []
        for r in rows:
            row = {c: None for c in COLUMNS}
            row.update(r)
            row["cell_id"] = cell_id
            row.setdefault("created_at", now)
            row["created_at"] = row["created_at"] or now
            row["git_sha"] = row["git_sha"] or provenance_sha()
            unknown = set(row) - set(COLUMNS)
            if unknown:
                raise ValueError(f"cell {cell_id}: unknown result columns {sorted(unknown)}")
            full.append(row)
        return atomic.write_text(self.path(cell_id), json.dumps(full, indent=1, default=float))

    def rows(self, cell_id: str) -> list[dict]:
        return json.loads(self.path(cell_id).read_text())

    def read(self) -> pd.DataFrame:
        """Every row of every cell (one DataFrame with :data:`COLUMNS`)."""
        rows = []
        if self.dir.is_dir():
            for p in sorted(self.dir.glob("*.json")):
                try:
                    rows.extend(json.loads(p.read_text()))
                except (json.JSONDecodeError, OSError) as e:  # cannot happen with atomic writes
                    raise RuntimeError(f"{p}: unreadable results file ({e})") from None
        return pd.DataFrame(rows, columns=COLUMNS)


def read(results_dir: str | Path) -> pd.DataFrame:
    return Store(results_dir).read()
