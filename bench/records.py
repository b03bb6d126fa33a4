"""Per-item records: what a model wrote behind every number of the results store.

Every scored sample cell writes one record per evaluated item to
``<results_dir>/records/<cell_id>.jsonl.gz`` (gzip'd JSON lines, items in the task's order),
atomically, before its store rows; the rows name the file (column ``records``, relative to the
results folder) and carry the sha256 of its uncompressed text (``records_sha256``), which the
rows' own checksum covers, so ``python -m bench.results verify`` checks both and a records file
changed or cut after it was written is found.

A record is a flat JSON object. Common fields (every task; :func:`item_records`):

- ``cell_id``, ``method``, ``variant``, ``subset``, ``sample_seed`` (the sampling seed; ``seed`` in
  records written before the two seeds had a name each), ``train_seed`` (the model's),
  ``nfe`` (the network calls the sampler made), ``temperature``, ``decoding``;
- ``index`` (position in the task's item order) and ``item`` (the task's id of the item,
  ``data.meta["id"]``, else the index);
- ``prompt`` / ``output``: the prompt and what the model wrote as text
  (:meth:`bench.data.base.Task.decode_text`), ``prompt_ids`` / ``output_ids`` the raw ids
  (split at :meth:`~bench.data.base.Task.prompt_length`), ``target``: the reference text, when
  the task has one;
- ``draw``: in a cell of k > 1 draws per item only (``sample.n_per_item``), which draw
  (0..k-1); the file holds every item of draw 0, then of draw 1, ...
  (:mod:`bench.evaluate.draws`);
- ``correct``: the item's 0/1 outcome of the task's headline metric (None when it has none);
- ``sample_s``: the seconds spent sampling the item, its batch's sampling seconds over the
  batch's items (the records of a cell sum to its rows' ``sample_s``; None for a batch resumed
  from a file written before batches recorded their seconds), and ``device_name``, the machine
  that sampled (:func:`bench.measure.environment`); records written as a cell is sampled
  (not those :mod:`bench.rescore` writes); ``calls``: the backbone calls the item needed (the
  budget ``nfe`` for a fixed-call decoding; fewer for one that stops a row early, MDLM's
  ``threshold`` / ``factor``, or an EOS stop), where the batch file knows them;
  ``partial_calls``: of them, the partial ones (block-only calls under a block cache, KV-cached
  AR steps); ``fe``: the item's forward-equivalents (its calls priced as full forwards at the
  batch's measured seconds, times the sampler's own work per call:
  :func:`bench.measure.item_forward_equivalents`); ``tokens``: its generated tokens, up to and
  with the EOS where the task has one (:meth:`bench.data.base.Task.generated_tokens`).

A task adds its own fields, or replaces a common one, through one hook,
:meth:`bench.data.base.Task.record_fields` (Sudoku: givens, solution, the model's grid, the wrong
cells; program tasks: the extracted program, executed answer, sandbox status and output
excerpts, the grader's verdict; OWT: length, entropy, per-sample Gen. PPL, degenerate reason).
``python -m bench.samples`` prints records; ``python -m bench.rescore`` scores the saved ids again.

A records file changed, cut or deleted after its rows were written is found by
:func:`damaged_files` (one check, :func:`check`, per file the rows name): ``python -m bench.results
verify`` and ``bench.samples`` refuse it, ``bench.rescore`` skips its cell with one line naming it,
and ``bench.report`` prints one line per such file on stderr (:func:`warn_damaged`; its tables
come from the rows, which keep their own checksum).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import sys
import zlib
from pathlib import Path

from bench import atomic

RECORDS_DIR = "records"
SUFFIX = ".jsonl.gz"


class RecordsError(ValueError):
    """A records file that is missing, damaged or not the one its rows name (one line)."""


def relpath(cell_id: str) -> str:
    """The records file of a cell, relative to the results folder (the ``records`` column)."""
    return f"{RECORDS_DIR}/{cell_id}{SUFFIX}"


def _plain(v):
    """A JSON-able value: numpy / torch scalars and arrays as Python numbers and lists; a NaN or
    an infinity as None (JSON has neither)."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def headline_outcomes(task, metrics) -> list | None:
    """The per-item 0/1 outcomes of the task's headline metric (the first metric with outcomes
    when the headline has none), or None."""
    with_outcomes = [m for m in metrics if getattr(m, "outcomes", None) is not None]
    for m in with_outcomes:
        if m.metric == task.headline_metric:
            return [int(bool(o)) for o in _plain(m.outcomes)]
    return [int(bool(o)) for o in _plain(with_outcomes[0].outcomes)] if with_outcomes else None


def item_records(task, cell, samples, data, metrics, *, nfe, cost=None) -> list[dict]:
    """One record per item of a scored sample cell (module docstring): the common fields, then
    the task's own (:meth:`~bench.data.base.Task.record_fields`, called right after
    ``task.evaluate`` on the same samples). ``cell``: the :class:`bench.plan.SampleCell`;
    ``samples``: (N, L) ids; ``metrics``: what ``task.evaluate`` returned; ``nfe``: the network
    calls the sampler made; ``cost``: ``{"sample_s": [N seconds], "device_name": str}`` when
    the cell was sampled here (None: the records carry neither field)."""
    n = len(data)
    if samples.shape[0] != n:
        raise ValueError(f"records: {samples.shape[0]} samples for {n} items")
    if cost is not None and len(cost["sample_s"]) != n:
        raise ValueError(f"records: {len(cost['sample_s'])} sampling times for {n} items")
    correct = headline_outcomes(task, metrics)
    extra = task.record_fields(samples, data, cell.subset) or [{}] * n
    if len(extra) != n:
        raise ValueError(f"task {task.name}: record_fields gave {len(extra)} records for {n} items")
    ids = data.meta.get("id")
    tc = cell.train
    rows = samples.tolist()
    x = data.x
    out = []
    for i in range(n):
        pl = task.prompt_length(data, i)
        prompt_ids, output_ids = rows[i][:pl], rows[i][pl:]
        target_ids = [int(t) for t in x[i, pl:].tolist()]
        rec = {
            "cell_id": cell.id,
            "method": tc.method,
            "variant": getattr(cell, "variant", "") or tc.variant,
            "subset": cell.subset,
            "index": i,
            "item": _plain(ids[i]) if ids is not None else i,
            "sample_seed": cell.seed,  # "seed" in records written before the two names
            "train_seed": tc.train.get("seed"),
            "nfe": nfe,
            "temperature": cell.temperature,
            "decoding": cell.decoding,
            "prompt": task.decode_text(prompt_ids),
            "output": task.decode_text(output_ids),
            "target": task.decode_text(target_ids) if target_ids else None,
            "correct": correct[i] if correct is not None else None,
            "prompt_ids": prompt_ids,
            "output_ids": output_ids,
        }
        if cost is not None:
            rec["sample_s"] = cost["sample_s"][i]
            rec["device_name"] = cost["device_name"]
            for key in ("calls", "partial_calls", "fe", "tokens"):  # module docstring
                if cost.get(key) is not None:
                    rec[key] = cost[key][i]
        rec.update(_plain(extra[i]))
        out.append(rec)
    return out


def encode(records: list[dict]) -> bytes:
    """The uncompressed file text: one canonical JSON object per line (what the sha256 covers)."""
    lines = (
        json.dumps(_plain(r), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        for r in records
    )
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


def write(results_dir: str | Path, cell_id: str, records: list[dict]) -> dict:
    """Write a cell's records atomically; returns the store columns naming them
    (``records``, ``records_sha256``)."""
    raw = encode(records)
    rel = relpath(cell_id)
    blob = gzip.compress(raw, compresslevel=9, mtime=0)  # mtime 0: the same records, the same bytes
    dest = Path(results_dir) / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_with(dest, lambda tmp: Path(tmp).write_bytes(blob))
    return {"records": rel, "records_sha256": hashlib.sha256(raw).hexdigest()}


def _text(p: Path, sha256: str | None) -> bytes:
    """The uncompressed text of records file ``p``, checked against ``sha256`` when given."""
    try:
        raw = gzip.decompress(p.read_bytes())
    except FileNotFoundError:
        raise RecordsError(f"{p}: records file missing") from None
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:  # zlib: a changed byte
        raise RecordsError(f"{p}: damaged records file ({e})") from None
    if sha256 and hashlib.sha256(raw).hexdigest() != sha256:
        raise RecordsError(f"{p}: records file damaged (its sha256 is not the one its rows name)")
    return raw


def read(results_dir: str | Path, rel: str, sha256: str | None = None) -> list[dict]:
    """The records of a file named by a row (``rel``: its ``records`` column), checked against
    ``sha256`` when given. :class:`RecordsError` (one line, naming the file) when it is missing,
    not gzip'd JSON lines, or not the file the row names."""
    p = Path(results_dir) / rel
    raw = _text(p, sha256)
    out = []
    for k, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordsError(f"{p}: damaged records file (line {k}: {e.msg})") from None
        if not isinstance(rec, dict):
            raise RecordsError(f"{p}: damaged records file (line {k} is not an object)")
        out.append(rec)
    return out


def check(results_dir: str | Path, rel: str, sha256: str | None) -> str | None:
    """Why the records file ``rel`` is bad, or None when it reads and matches ``sha256``. A
    matching sha256 means the very text :func:`write` wrote, so its lines are not parsed again."""
    try:
        if sha256:
            _text(Path(results_dir) / rel, sha256)
        else:
            read(results_dir, rel)
    except RecordsError as e:
        return str(e)
    return None


def _named(v) -> str | None:
    return v if isinstance(v, str) and v else None


def damaged_files(results_dir: str | Path, df) -> list[tuple[str, list[str], str]]:
    """``(records file, cell ids naming it, why)`` for every records file the rows ``df`` (a
    store frame, :func:`bench.results.read`, or any subset of its rows) name that is missing,
    cut or changed since it was written (:func:`check`), each file once."""
    if df is None or not len(df) or "records" not in df:
        return []
    shas = df["records_sha256"] if "records_sha256" in df else [None] * len(df)
    cells = df["cell_id"] if "cell_id" in df else [None] * len(df)
    named: dict[tuple[str, str | None], list[str]] = {}
    for rel, sha, cell in zip(df["records"], shas, cells):
        if _named(rel):
            ids = named.setdefault((rel, _named(sha)), [])
            if _named(cell) and cell not in ids:
                ids.append(cell)
    out = []
    for (rel, sha), ids in named.items():
        why = check(results_dir, rel, sha)
        if why is not None:
            out.append((rel, ids, why))
    return out


def damaged_lines(results_dir: str | Path, df) -> list[str]:
    """One line per damaged records file of :func:`damaged_files`: its cell(s), the file, why."""
    return [
        f"cell {', '.join(ids)}: {why}" if ids else why
        for _, ids, why in damaged_files(results_dir, df)
    ]


def warn_damaged(results_dir: str | Path, df) -> int:
    """``bench.report``: print one ``warning:`` line on stderr per damaged records file the rows
    ``df`` name (the report goes on: its numbers come from the rows); returns how many."""
    lines = damaged_lines(results_dir, df)
    for line in lines:
        print(
            f"warning: {line}; the report's numbers come from its rows (python -m bench.results "
            "verify checks the store)",
            file=sys.stderr,
        )
    return len(lines)
