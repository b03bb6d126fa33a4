"""The results store: one tidy row per (cell, metric), with provenance. (One job, over 500 lines:
the row schema, writing, checksummed reading, quarantine of damaged files and the defaults of
older stores belong together.)

Layout: ``<results_dir>/store/<cell_id>.json`` holds every row of one cell. A cell's file is
written once, atomically (temp file + ``os.replace``), so a killed run leaves either the whole
cell or nothing, concurrent writers on a shared filesystem never interleave, and re-running
a cell replaces its rows instead of duplicating them (deduplicated by cell hash).
:func:`read` concatenates everything into one pandas DataFrame with the :data:`COLUMNS`.

Rows also carry what the report needs to know about their task and method
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

if TYPE_CHECKING:  # pandas is imported where it is used: the sweep CLI reads no DataFrame
    import pandas as pd

#: the results-table columns (docs/report.md), then extensions (flat, never nested).
COLUMNS = [
    "cell_id",
    "sweep",
    "task",
    "method",
    "variant",
    "backbone",
    "train_steps",
    "nfe",
    "temperature",
    "decoding",
    "seed",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "git_sha",
    "config_hash",
    "created_at",
    # extensions
    "subset",
    "kind",
    "train_cell",
    "wall_s",
    # what the report reads about the row's task and method (REPORT_COLUMNS)
    "task_kind",
    "task_title",
    "stand_in_for",
    "subset_rank",
    "metric_rank",
    "nfe_is_length",
    "temperature_free",
    "default_decoding",
    "task_protocol",
    "train_log",
    # train rows: where the run trained ("cuda:<GPU name>" / "cpu") and on how many processes
    "device",
    "devices",
    # every row of an imported model: ``<source>@<sha256[:12]>`` of its checkpoint
    "checkpoint",
    # uncertainty: how ci_low / ci_high were computed; per-item 0/1 outcomes and their items
    "ci_method",
    "item_outcomes",
    "items_key",
    # the model's training recipe: its train cell's identity without the seed (canonical JSON)
    "recipe",
    # train rows: what the logged loss / val_loss is (the method's loss_kind: NLL, NELBO, ...)
    "loss_kind",
    # sample rows: the cell's per-item records (bench.records) and the sha256 of their text
    "records",
    "records_sha256",
    # sample rows: the first K items only (bench.eval --limit K); empty for every item asked
    "item_limit",
    # sample rows: seconds spent sampling (loading the items included; batches resumed from
    # disk cost nothing) and scoring (the evaluator and the records), parts of wall_s
    "sample_s",
    "score_s",
    # likelihood rows: what the value is (Method.bound_kind: exact, an upper bound, "" none)
    "bound_kind",
    # re-scored rows (bench.rescore): the scorer settings that differ from the sampled cell's
    # (canonical JSON of task.options overrides) and the cell whose saved samples they score
    "scorer",
    "rescored_from",
    # what a cell cost (bench.measure: SAMPLE_ / TRAIN_ / LIKELIHOOD_COST_COLUMNS)
    "network_s",
    "network_calls",
    "forward_equivalents",
    "tokens_per_s",
    "seconds_per_sample",
    "peak_mem_mb",
    "eval_s",
    "s_per_step",
    # the machine a cell ran on (bench.measure.environment)
    "device_name",
    "torch_version",
    "cuda_version",
    "threads",
    # sample rows: the entry's sampling-only options that differ from their defaults (canonical
    # JSON; "" for none): with the decoding, the sampler (bench.report.samplers)
    "sampling",
    # sample and likelihood rows a ``bench.eval`` of a sweep's model computed: the evaluation
    # (its flags, e.g. "bench.eval --nfe 40 --limit 32"); empty for a sweep's own cells
    "evaluation",
    # the two seeds by name: the model's training seed (``seed``, the results-table column, is
    # it too) and a sample or likelihood cell's sampling seed (``sample.seed`` / likelihood.seed)
    "train_seed",
    "sample_seed",
]
#: Columns added after the first stores were written: :meth:`Store.read` lists one only when a
#: row has it, so an older store reads (and exports to results.csv) exactly as before.
#:
#: - ``task_kind``: the task's report kind (``generic``; ``program`` adds the bootstrap-CI table
#:   and figure), ``task_title``: its display name, ``stand_in_for``: the benchmark a CPU
#:   stand-in replaces ("" otherwise); every row;
#: - ``subset_rank``: the subset's position in the task's ``subset_order`` (empty: unranked, after
#:   the ranked ones by name), ``metric_rank``: 0 for the task's headline metric, k for its k-th
#:   secondary metric, empty otherwise; sample rows;
#: - ``nfe_is_length`` (NFE is the generated length, AR), ``temperature_free`` (the decoding
#:   ignores the temperature; the planner samples it at T = 1 only), ``default_decoding`` (the
#:   decoding is the method's default, what the paper ran when it names none); sample rows;
#: - ``task_protocol``: the task options that decide which items and which grader a number comes
#:   from (Sudoku ``generator=fast|reference``; GSM8K ``grader=...; separator=...``); every row;
#: - ``train_log``: the run's training log (``runs/<run>/logs/metrics.csv``, relative to the
#:   results folder; :mod:`bench.report.curves` draws it), empty when none was written; train rows.
#: - ``device`` / ``devices``: where the run trained (``cuda:<GPU name>`` or ``cpu``) and its
#:   process count (devices x nodes), for :mod:`bench.report.training_cost`; train rows.
#: - ``checkpoint``: the file an imported model came from (``bench.checkpoints``: source name and
#:   the first 12 hex digits of its sha256); empty for models trained here; every row.
#: - ``ci_method``: how ``ci_low`` / ``ci_high`` were computed (e.g. "Wilson score interval",
#:   "percentile bootstrap over problems, B = 1000"); sample rows with a CI.
#: - ``item_outcomes``: the per-item 0/1 outcomes whose mean ``value`` is, one character per
#:   item in the task's item order (``bench.evaluate.paired.encode_outcomes``), and
#:   ``items_key``: 16 hex digits identifying those items (two rows pair item by item only when
#:   their keys are equal); sample rows of metrics that are means of 0/1 outcomes.
#: - ``recipe``: the model's training recipe, canonical JSON of its train cell's identity without
#:   the training seed (task, backbone, train settings, method options; the file for an import):
#:   the report's model is (recipe, variant, decoding), so two recipes of one method are two
#:   models and seeds pool within one recipe only (:mod:`bench.report.models`); every model row.
#: - ``loss_kind``: what the run's logged ``loss`` / ``val_loss`` is, in the method's words
#:   (:meth:`bench.method.Method.loss_kind_for` its options: exact NLL, NELBO, or an objective
#:   that bounds nothing); :mod:`bench.report.curves` draws a row of panels per value; train rows.
#: - ``records`` / ``records_sha256``: the cell's per-item records file, relative to the results
#:   folder (``records/<cell_id>.jsonl.gz``, :mod:`bench.records`), and the sha256 of its
#:   uncompressed text, which this row's checksum covers; sample rows.
#: - ``item_limit``: K when the cell scored only the first K items of the task's order
#:   (``python -m bench.eval --limit K``): its items key differs from a full run's, so it never
#:   pairs with one; empty otherwise; sample rows.
#: - ``sample_s`` / ``score_s``: the seconds a sample cell spent sampling and scoring (the task's
#:   evaluator and the per-item records); ``wall_s`` is this process's whole work on the cell.
#:   ``sample_s`` sums the seconds of every batch (the prompts to the device, the sampler, the
#:   ids back), a batch resumed from an earlier run's file with the seconds that file records
#:   (empty when a file older than these columns does not); loading the items is not in it (in
#:   rows written before the cost columns below it was, and resumed batches counted nothing).
#:   A re-scored row's ``score_s`` is its own scoring. Sample rows.
#: - ``bound_kind``: a likelihood row's kind of number (``kind = "likelihood"``,
#:   :mod:`bench.likelihood`): ``exact`` (AR), ``upper bound (NELBO)``, or "" for a model whose
#:   method has no bound (its row has no value; the table prints "no bound").
#: - ``scorer``: the scorer settings a re-scored row used where they differ from the sampled
#:   cell's (canonical JSON of ``task.options`` keys, ``python -m bench.rescore``), and
#:   ``rescored_from``: the cell whose saved samples it scored; empty on rows scored as sampled.
#: - what a cell cost (:mod:`bench.measure`), empty where it cannot be known (a batch
#:   resumed from a file that does not record it):
#:
#:   - sample rows: ``network_s`` (of ``sample_s``, the seconds inside the backbone calls the
#:     sampler counts as NFE; CUDA events on a GPU), ``network_calls`` (those calls, all
#:     batches), ``forward_equivalents`` (``sample_s / network_s``: the sampler's own work per
#:     call in bare forwards, 1.0 for none), ``tokens_per_s`` (generated positions, those the
#:     prompt mask does not give, summed over the items, per sampling second),
#:     ``seconds_per_sample`` (``sample_s`` / items), ``peak_mem_mb`` (the peak while sampling:
#:     CUDA max allocated, or the CPU process's resident peak, reset when a process begins the
#:     cell; across a resume the most any batch's process saw);
#:   - likelihood rows: ``eval_s`` (the seconds evaluating the bound over every block; loading the
#:     model and corpus not included), ``network_s`` / ``network_calls`` (of them, inside the
#:     backbone's calls), ``tokens_per_s`` (scored positions per ``eval_s``), ``peak_mem_mb``;
#:   - train rows: ``s_per_step``, ``tokens_per_s`` (batch size x sequence length x steps per
#:     second: the global batch over every device) and ``peak_mem_mb`` (rank 0's, since training
#:     started), of the process that finished the run (a resumed run's last);
#:   - the machine: ``device_name`` (``cpu: <CPU model>`` or ``cuda: <GPU name>``),
#:     ``torch_version``, ``cuda_version`` (empty on a CPU build), ``threads`` (torch intra-op
#:     threads); sample, likelihood and train rows, and an imported model's (where it was
#:     converted).
#: - ``evaluation``: the ``python -m bench.eval`` call (its flags) that computed a sample or
#:   likelihood cell of a sweep's model, a protocol of its own (other items, NFE, draws, ...);
#:   empty for the cells a sweep computed. The report keeps such cells out of the sweep's tables
#:   and reports each evaluation apart (:mod:`bench.report.evaluations`).
#: - ``train_seed`` / ``sample_seed``: the two seeds by name. ``seed`` (the results table's
#:   column since the first store) is the training seed, ``train_seed`` the same number;
#:   ``sample_seed`` is the sampling seed of a sample or likelihood cell (the per-item records'
#:   ``sample_seed``). Every model row / sample and likelihood rows.
REPORT_COLUMNS = COLUMNS[COLUMNS.index("task_kind") :]


@lru_cache(maxsize=1)
def git_provenance() -> tuple[str, bool]:
    """(sha, dirty) of the checkout the code runs from; env SFLM_BENCH_GIT_SHA overrides
    (jobs on nodes without the .git folder)."""
    env = os.environ.get("SFLM_BENCH_GIT_SHA")
    if env:
        return env.rstrip("+"), env.endswith("+")
    root = Path(__file__).resolve().parent.parent
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
_SCALARS = (str, int, float, bool, type(None))


class BadStoreFile(ValueError):
    """A store file that fails validation; the message is the reason (one line)."""


def canonical_rows(rows) -> str:
    """The text the checksum covers: the rows as JSON with sorted keys and no whitespace."""
    return json.dumps(rows, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def rows_checksum(rows) -> str:
    return hashlib.sha256(canonical_rows(rows).encode()).hexdigest()


def check_rows(rows, cell_id: str, *, newer_ok: bool = False) -> list[str]:
    """The row schema: a list of flat dicts with known columns, this cell's id, a metric name,
    a numeric (or empty) value, each metric once. Raises :class:`BadStoreFile`. With
    ``newer_ok`` (a checksummed file: its rows are what a writer wrote) columns this code does
    not know are allowed, as a newer version's, and returned (sorted); they are not checked."""
    if not isinstance(rows, list):
        raise BadStoreFile(f"wrong schema: rows is a {type(rows).__name__}, not a list")
    metrics, known, newer = [], set(COLUMNS), set()
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise BadStoreFile(f"wrong schema: row {i} is a {type(r).__name__}, not an object")
        unknown = set(r) - known
        if unknown and not newer_ok:
            raise BadStoreFile(f"wrong schema: row {i} has unknown columns {sorted(unknown)}")
        newer |= unknown
        nested = sorted(k for k, v in r.items() if k in known and not isinstance(v, _SCALARS))
        if nested:
            raise BadStoreFile(f"wrong schema: row {i} has non-scalar values in {nested}")
        if r.get("cell_id") != cell_id:
            raise BadStoreFile(
                f"wrong schema: row {i} has cell_id {r.get('cell_id')!r}, not {cell_id!r}"
            )
        if not isinstance(r.get("metric"), str) or not r["metric"]:
            raise BadStoreFile(f"wrong schema: row {i} has no metric name")
        v = r.get("value")
        if isinstance(v, bool) or not isinstance(v, (int, float, type(None))):
            raise BadStoreFile(
                f"wrong schema: row {i} ({r['metric']}) has a non-numeric value {v!r}"
            )
        metrics.append(r["metric"])
    if len(set(metrics)) != len(metrics):
        raise BadStoreFile(f"wrong schema: duplicate metrics {metrics}")
    return sorted(newer)


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


# --------------------------------------------------------------------------- report columns


def task_columns(task) -> dict:
    """The :data:`REPORT_COLUMNS` every row of ``task`` carries (a :class:`bench.data.base.Task`;
    a task class, as synthetic stores pass, has no options and so no protocol)."""
    return {
        "task_kind": task.report_kind,
        "task_title": task.title or task.name,
        "stand_in_for": task.stand_in_for,
        "task_protocol": "" if isinstance(task, type) else task.protocol(),
    }


def sample_columns(task, method, decoding: str, subset: str, metric: str) -> dict:
    """The :data:`REPORT_COLUMNS` of one sample row: ``method`` is the instance that sampled (its
    decodings and temperature-free set can depend on its options, e.g. CANDI pure Gaussian)."""
    metrics = (task.headline_metric, *task.secondary_metrics)
    return {
        **task_columns(task),
        "subset_rank": task.subset_order.index(subset) if subset in task.subset_order else None,
        "metric_rank": metrics.index(metric) if metric in metrics else None,
        "nfe_is_length": bool(method.nfe_is_length),
        "temperature_free": decoding in tuple(method.temperature_free),
        "default_decoding": decoding == method.decodings[0],
    }


# What the code before REPORT_COLUMNS existed decided from task and method names (bench/report.py
# and bench/registry.py at that time). Only rows without ``task_kind`` are completed from it.
_LEGACY_HEADLINE = ("exact_match", "accuracy")  # the first one a task's sample rows have
_LEGACY_SECONDARY = ("cell_accuracy", "blank_accuracy", "valid_grid")
_LEGACY_SUBSET_ORDER = ("easy", "medium", "hard")
_LEGACY_PROGRAM_TASKS = ("gsm8k", "arith_standin")
_LEGACY_TITLE = {"gsm8k": "GSM8K"}
_LEGACY_STAND_IN = {"arith_standin": "GSM8K"}
_LEGACY_NFE_IS_LENGTH = ("ar",)
# before the protocol options existed there was one generator and one grader
_LEGACY_PROTOCOL = {
    "sudoku": "generator=fast",
    "gsm8k": "grader=standard; separator=newline",
    "arith_standin": "grader=standard; separator=newline",
}
_LEGACY_TEMPERATURE_FREE = {("ar", "greedy"), ("sflm", "top1")}
_LEGACY_DEFAULT_DECODING = {
    "ar": "sample",
    "mdlm": "ancestral",
    "candi": "cached",
    "duo": "ancestral",
    "flm": "euler",
    "sflm": "exact",
}


def with_report_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every :data:`REPORT_COLUMNS` column filled: rows written before those columns
    existed (no ``task_kind``) get what the report then derived from task and method names
    (the ``_LEGACY_*`` tables above; the methods and tasks of that time are the only ones such a
    store can hold). Rows that have ``task_kind`` are left as written. Idempotent."""
    import pandas as pd

    df = df.copy()
    for c in REPORT_COLUMNS:
        if c not in df:
            df[c] = None
        df[c] = df[c].astype(object)
    old = df["task_kind"].isna()
    if not old.any():
        return df
    o = df[old]
    sample = (o["kind"] == "sample").tolist()
    headline = {
        task: next((m for m in _LEGACY_HEADLINE if m in set(g["metric"])), None)
        for task, g in o[o["kind"] == "sample"].groupby("task")
    }

    def metric_rank(task, metric):
        if metric == headline.get(task):
            return 0
        return _LEGACY_SECONDARY.index(metric) + 1 if metric in _LEGACY_SECONDARY else None

    tasks, methods, decodings = o["task"].tolist(), o["method"].tolist(), o["decoding"].tolist()
    per_row = {  # column -> value per row, sample rows only where marked
        "task_kind": (
            ["program" if t in _LEGACY_PROGRAM_TASKS else "generic" for t in tasks],
            False,
        ),
        "task_title": ([_LEGACY_TITLE.get(t, t) for t in tasks], False),
        "stand_in_for": ([_LEGACY_STAND_IN.get(t, "") for t in tasks], False),
        "metric_rank": ([metric_rank(t, m) for t, m in zip(tasks, o["metric"])], True),
        "subset_rank": (
            [
                _LEGACY_SUBSET_ORDER.index(s) if s in _LEGACY_SUBSET_ORDER else None
                for s in o["subset"]
            ],
            True,
        ),
        "nfe_is_length": ([m in _LEGACY_NFE_IS_LENGTH for m in methods], True),
        "temperature_free": (
            [(m, d) in _LEGACY_TEMPERATURE_FREE for m, d in zip(methods, decodings)],
            True,
        ),
        "default_decoding": (
            [_LEGACY_DEFAULT_DECODING.get(m) == d for m, d in zip(methods, decodings)],
            True,
        ),
        "task_protocol": ([_LEGACY_PROTOCOL.get(t, "") for t in tasks], False),
    }
    for col, (values, sample_only) in per_row.items():
        values = [v if k or not sample_only else None for v, k in zip(values, sample)]
        df.loc[old, col] = pd.Series(values, index=o.index, dtype=object)
    return df


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


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.results verify [--results-dir DIR] [--move]``: exit 1 if any store file
    is bad, 0 if none, 2 on usage errors or a missing store."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.results", description="Check the results store."
    )
    sub = ap.add_subparsers(dest="command", required=True)
    v = sub.add_parser(
        "verify", help="validate every store file (JSON, schema, checksum); list the bad ones"
    )
    v.add_argument(
        "--results-dir", default="results", help="results folder holding store/ (default: results)"
    )
    v.add_argument(
        "--move",
        action="store_true",
        help=(
            "also move bad files to store/corrupt/ "
            "(what any sweep or report does when it reads them)"
        ),
    )
    args = ap.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
