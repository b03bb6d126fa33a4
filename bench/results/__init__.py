"""The results store: one tidy row per (cell, metric), with provenance.

Layout: ``<results_dir>/store/<cell_id>.json`` holds every row of one cell. A cell's file is
written once, atomically (temp file + ``os.replace``), so a killed run leaves either the whole
cell or nothing, concurrent writers on a shared filesystem never interleave, and re-running
a cell replaces its rows instead of duplicating them (deduplicated by cell hash).
:func:`read` concatenates everything into one pandas DataFrame with the :data:`COLUMNS`.

The row schema (:data:`COLUMNS`, :func:`check_rows`) is :mod:`bench.results.schema`'s, and every
kind of row (train, import, sample, reference, likelihood) is built beside it in
:mod:`bench.results.rows`. Rows also carry what the report needs to know about their task and method
(:data:`REPORT_COLUMNS`, written by :func:`task_columns` / :func:`sample_columns`), so the report
reads only this table. Stores written before those columns existed are completed by
:func:`with_report_columns`, the one place that knows the old defaults.

Integrity: a file is ``{"format": "sflm-bench-results", "version": 2, "cell_id": ..., "sha256":
..., "rows": [...]}``, ``sha256`` being the digest of the rows' canonical JSON
(:func:`rows_checksum`). Every read validates the file (JSON, schema, checksum); a bad one is
reported on stderr by name and moved aside to ``store/corrupt/`` (never deleted), and its cell
then counts as not done (:meth:`Store.has` is False), so the next sweep computes it again and
the report goes on without it. Files written before checksums existed (version 1: a bare JSON
list of rows) are still read, and trusted when they parse and pass the schema check.
A version-2 file whose checksum holds but whose rows carry columns this code does not know was
written by a newer version of sflm-bench: it is valid, read with the columns this code knows
(the others are dropped from what it returns), left in place, and named once on stderr.
``python -m bench.results verify [--results-dir DIR] [--move]`` checks a whole store, and the
per-item records files its rows name (:mod:`bench.records`: each row carries the sha256 of its
cell's records, so a records file changed or cut after it was written is a bad cell).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from bench import atomic
from bench.results.legacy import with_report_columns
from bench.results.schema import (
    COLUMNS,
    REPORT_COLUMNS,
    BadStoreFile,
    check_rows,
    sample_columns,
    task_columns,
)
from bench.usage import add_results_dir

if TYPE_CHECKING:  # pandas is imported where it is used: the sweep CLI reads no DataFrame
    import pandas as pd


@lru_cache(maxsize=1)
def git_provenance() -> tuple[str, bool]:
    """(sha, dirty) of the checkout the code runs from; env SFLM_BENCH_GIT_SHA overrides
    (jobs on nodes without the .git folder)."""
    env = os.environ.get("SFLM_BENCH_GIT_SHA")
    if env:
        return env.rstrip("+"), env.endswith("+")
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown", False
    return sha or "unknown", dirty


def provenance_sha() -> str:
    sha, dirty = git_provenance()
    return sha + ("+dirty" if dirty else "")


# --------------------------------------------------------------------------- file format

FORMAT, VERSION = "sflm-bench-results", 2


def canonical_rows(rows) -> str:
    """The text the checksum covers: the rows as JSON with sorted keys and no whitespace."""
    return json.dumps(rows, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def rows_checksum(rows) -> str:
    return hashlib.sha256(canonical_rows(rows).encode()).hexdigest()


def parse_store_file(raw: bytes, cell_id: str) -> tuple[list[dict], bool, list[str]]:
    """Validate the bytes of ``<cell_id>.json``: (rows, has_checksum, newer_columns). Raises
    :class:`BadStoreFile` (truncated or invalid JSON, wrong schema, checksum mismatch).

    ``newer_columns``: the columns, unknown to this code, that a newer version wrote into a
    checksummed file; ``rows`` then hold only the known columns. A file without a checksum
    (version 1, written only by older code) with unknown columns is bad."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadStoreFile("not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise BadStoreFile(
            f"invalid or truncated JSON ({e.msg} at line {e.lineno} column {e.colno})"
        ) from None
    if isinstance(data, list):  # version 1: written before checksums, trusted if the schema holds
        check_rows(data, cell_id)
        return data, False, []
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BadStoreFile(f"wrong schema: not a {FORMAT} file")
    if data.get("version") != VERSION:
        raise BadStoreFile(f"wrong schema: unknown format version {data.get('version')!r}")
    missing = sorted({"cell_id", "sha256", "rows"} - set(data))
    if missing:
        raise BadStoreFile(f"wrong schema: missing {missing}")
    if data["cell_id"] != cell_id:
        raise BadStoreFile(
            f"wrong schema: file of cell {data['cell_id']!r} under the name of {cell_id!r}"
        )
    if rows_checksum(data["rows"]) != data["sha256"]:
        raise BadStoreFile("checksum mismatch (the rows changed after they were written)")
    newer = check_rows(data["rows"], cell_id, newer_ok=True)
    if newer:
        known = set(COLUMNS)
        return [{k: v for k, v in r.items() if k in known} for r in data["rows"]], True, newer
    return data["rows"], True, []


_warned_newer: set[Path] = set()  # stores named once (this process) as holding newer rows


def _warn_newer(store_dir: Path, p: Path, newer: list[str]) -> None:
    """Say once per store and process that it holds rows from a newer version."""
    if store_dir in _warned_newer:
        return
    _warned_newer.add(store_dir)
    print(
        f"warning: {p}: rows written by a newer version of sflm-bench (unknown columns "
        f"{newer}); reading the columns this version knows, the file stays in place "
        f"(other such files in {store_dir} are not named again)",
        file=sys.stderr,
        flush=True,
    )


def _check_records(results_dir: Path, rows: list[dict]) -> None:
    """The records files ``rows`` name (:mod:`bench.records`) read and match their sha256;
    :class:`BadStoreFile` naming the first that does not."""
    from bench import records

    for rel, sha in dict.fromkeys((r.get("records"), r.get("records_sha256")) for r in rows):
        if rel:
            why = records.check(results_dir, rel, sha)
            if why:
                raise BadStoreFile(f"its records: {why}")


class Store:
    """Append-only, atomic, deduplicated by cell id; validated on read (module docstring)."""

    def __init__(self, results_dir: str | Path):
        self.dir = Path(results_dir) / "store"
        self.corrupt_dir = self.dir / "corrupt"
        self._valid: dict[str, tuple[tuple, list[dict]]] = {}  # name -> ((ino, size, mtime), rows)

    def path(self, cell_id: str) -> Path:
        return self.dir / f"{cell_id}.json"

    def has(self, cell_id: str) -> bool:
        """True when the cell's file exists and is valid (a bad one is moved aside: False)."""
        return self.load(cell_id) is not None

    def load(self, cell_id: str) -> list[dict] | None:
        """The cell's validated rows, or None when it has no valid file."""
        return self._load(self.path(cell_id))

    def _load(self, p: Path, retry: bool = True) -> list[dict] | None:
        try:
            with open(p, "rb") as f:
                st = os.fstat(f.fileno())
                key = (st.st_ino, st.st_size, st.st_mtime_ns)
                hit = self._valid.get(p.name)
                if hit is not None and hit[0] == key:
                    return hit[1]
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            rows, _, newer = parse_store_file(raw, p.stem)
        except BadStoreFile as e:
            if not self._quarantine(p, str(e), st.st_ino) and retry:
                return self._load(
                    p, retry=False
                )  # replaced by a writer meanwhile: read the new one
            return None
        if newer:
            _warn_newer(self.dir.resolve(), p, newer)
        self._valid[p.name] = (key, rows)
        return rows

    def _quarantine(self, p: Path, reason: str, ino: int, say: bool = True) -> bool:
        """Move the bad file ``p`` (the inode that was read) to ``corrupt/`` and say so on
        stderr. False when ``p`` now is another file (a writer replaced it since)."""
        self._valid.pop(p.name, None)
        self.corrupt_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        dest = self.corrupt_dir / f"{p.stem}.{stamp}.{os.getpid()}.json"
        try:
            if os.stat(p).st_ino != ino:
                return False
            os.replace(p, dest)  # same filesystem: atomic, nothing is deleted
            where = f"moved to {dest}"
        except FileNotFoundError:  # another reader moved it first
            where = "already moved aside by another process"
        if say:
            print(
                f"warning: {p}: bad results file, {reason}; {where}; its cell counts as not done "
                "and will be computed again",
                file=sys.stderr,
                flush=True,
            )
        return True

    def verify(self, move: bool = False) -> tuple[list[tuple[Path, str]], int, int, int]:
        """Check every file, and the per-item records files its rows name: (bad files with
        reasons, files checked, files without checksum, valid files from a newer version, i.e.
        with columns this code does not know).
        Read-only unless ``move`` (then bad files go to ``corrupt/`` as on any read)."""
        bad, n, legacy, newer = [], 0, 0, 0
        for p in sorted(self.dir.glob("*.json")):
            n += 1
            try:
                with open(p, "rb") as f:
                    ino, raw = os.fstat(f.fileno()).st_ino, f.read()
                rows, checked, extra = parse_store_file(raw, p.stem)
                legacy += not checked
                newer += bool(extra)
                _check_records(self.dir.parent, rows)
            except FileNotFoundError:
                n -= 1
            except BadStoreFile as e:
                bad.append((p, str(e)))
                if move:
                    self._quarantine(p, str(e), ino, say=False)
        return bad, n, legacy, newer

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
        full = json.loads(
            json.dumps(full, default=float)
        )  # what a reader will see (numpy -> float)
        try:
            check_rows(full, cell_id)  # never write what a read would reject
        except BadStoreFile as e:
            raise ValueError(f"cell {cell_id}: {e}") from None
        payload = {
            "format": FORMAT,
            "version": VERSION,
            "cell_id": cell_id,
            "sha256": rows_checksum(full),
            "rows": full,
        }
        return atomic.write_text(self.path(cell_id), json.dumps(payload, indent=1))

    def adopt(self, cell_ids) -> int:
        """Make the done cells ``cell_ids`` a sweep's own: rows a ``bench.eval`` computed first
        (``evaluation`` set) are rewritten without it, so the sweep that plans the same cell
        reports it. Returns the cells rewritten; values, records and times are unchanged."""
        n = 0
        for cid in cell_ids:
            rows = self.load(cid)
            if rows and any(r.get("evaluation") for r in rows):
                self.write_cell(cid, [{**r, "evaluation": None} for r in rows])
                n += 1
        return n

    def rows(self, cell_id: str) -> list[dict]:
        rows = self.load(cell_id)
        if rows is None:
            raise FileNotFoundError(f"{self.path(cell_id)}: no valid results for cell {cell_id}")
        return rows

    def read(self) -> pd.DataFrame:
        """Every row of every cell (one DataFrame with :data:`COLUMNS`)."""
        import pandas as pd

        rows = []
        if self.dir.is_dir():
            for p in sorted(self.dir.glob("*.json")):
                rows.extend(self._load(p) or [])  # a bad file: warned about, moved aside, skipped
        present = {c for r in rows for c in REPORT_COLUMNS if c in r}
        return pd.DataFrame(
            rows, columns=[c for c in COLUMNS if c not in REPORT_COLUMNS or c in present]
        )


def read(results_dir: str | Path) -> pd.DataFrame:
    return Store(results_dir).read()


def failed_runs(results_dir: str | Path) -> list[dict]:
    """The training runs of ``results_dir`` that stopped for good, as the store sees them beside
    its cells: ``[{"run": <run folder name>, "reason": <one line>}]`` from each run folder's
    ``failed.json`` (:mod:`bench.failures`), by run folder name. The report shows them; it reads
    run folders through this function only."""
    from bench.failures import FAILED_FILE, read_failure

    runs = Path(results_dir) / "runs"
    out = []
    if runs.is_dir():
        for p in sorted(runs.glob(f"*/{FAILED_FILE}")):
            info = read_failure(p.parent) or {}
            out.append({"run": p.parent.name, "reason": str(info.get("reason", "unknown"))})
    return out


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None, commands: dict | None = None) -> int:
    """``python -m bench.results verify [--results-dir DIR] [--move]``: exit 1 if any store file
    is bad, 0 if none, 2 on usage errors or a missing store. ``commands``: more subcommands, name
    -> ``(help, add_arguments(parser), run(args) -> status)``, from a layer above the store's
    (``python -m bench.results`` adds ``export``, :mod:`bench.report.lmeval_export`)."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.results", description="Check the results store; export it."
    )
    sub = ap.add_subparsers(dest="command", required=True)
    for name, (help_, add, _) in (commands or {}).items():
        add(sub.add_parser(name, help=help_))
    v = sub.add_parser(
        "verify", help="validate every store file (JSON, schema, checksum); list the bad ones"
    )
    add_results_dir(v, "results folder holding store/ (default: results)", default="results")
    v.add_argument(
        "--move",
        action="store_true",
        help=(
            "also move bad files to store/corrupt/ "
            "(what any sweep or report does when it reads them)"
        ),
    )
    args = ap.parse_args(argv)
    if args.command in (commands or {}):
        return commands[args.command][2](args)
    store = Store(args.results_dir)
    if not store.dir.is_dir():
        print(f"error: {store.dir}: no results store", file=sys.stderr)
        return 2
    bad, n, legacy, newer = store.verify(move=args.move)
    for p, reason in bad:
        print(f"bad: {p}: {reason}" + (f" (moved to {store.corrupt_dir}/)" if args.move else ""))
    aside = len(list(store.corrupt_dir.glob("*.json"))) if store.corrupt_dir.is_dir() else 0
    print(
        f"{store.dir}: {n} files checked, {len(bad)} bad, {legacy} without checksum "
        f"(written before checksums; valid), {newer} from a newer version (unknown columns "
        f"ignored; valid), {aside} in {store.corrupt_dir.name}/"
    )
    return 1 if bad else 0


__all__ = [
    "COLUMNS",
    "REPORT_COLUMNS",
    "BadStoreFile",
    "Store",
    "check_rows",
    "failed_runs",
    "main",
    "parse_store_file",
    "provenance_sha",
    "read",
    "rows_checksum",
    "sample_columns",
    "task_columns",
    "with_report_columns",
]
