"""The import kind: a model converted from a checkpoint of the reference harness (a
:class:`bench.plan.TrainCell` with a ``source``; ``checkpoint:`` in the method entry).

Planned once per entry (its id: the file's sha256 and the model's vocabulary,
:func:`bench.kinds.train.train_cells_of`); its "training" converts the file into the run folder
(``weights.pt`` + ``model.json``, as :func:`bench.checkpoints.convert` writes them, or a copy of a
folder ``convert`` wrote) and records its rows (:func:`bench.results.rows.import_rows`);
predicted as reading the file (and fetching a released one not fetched yet).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from bench.kind import CellKind
from bench.kinds.train import train_cells_of
from bench.plan import TrainCell


def convert(tc: TrainCell, store, rebuild: bool) -> None:
    """Convert ``tc``'s checkpoint into its run folder and record its rows (unless ``rebuild``).
    The file must be the one planned (same sha256) and still give the planned options."""
    from bench.cell_model import cell_task
    from bench.checkpoints import (
        CheckpointError,
        is_model_folder,
        open_source,
        resolve_options,
        write_model,
    )

    task = cell_task(tc)
    src = tc.source
    t0 = time.perf_counter()
    if is_model_folder(src["checkpoint"]):  # a model folder written by bench.checkpoints convert
        meta = _copy_folder(tc)
    else:
        op = open_source(src["checkpoint"], family=src.get("forced"))
        if src.get("sha256") and op.source.sha256 != src["sha256"]:
            raise CheckpointError(
                f"{src['checkpoint']}: sha256 {op.source.sha256[:12]} is not the planned "
                f"{src['sha256'][:12]} (the file changed since the sweep was planned; re-run it)"
            )
        if op.spec.method != tc.method:
            raise CheckpointError(
                f"{src['checkpoint']}: a {op.spec.method} checkpoint, not {tc.method}"
            )
        opts = resolve_options(op.spec, tc.options, where=f"{tc.label()} options")
        for w in op.ref.warnings:
            print(f"warning: {w}", file=sys.stderr, flush=True)
        meta = write_model(op, opts, tc.run_dir, seq_len=task.seq_len)
    if not rebuild:
        from bench.results.rows import import_rows

        store.write_cell(tc.id, import_rows(tc, task, meta, time.perf_counter() - t0))


def _copy_folder(tc: TrainCell) -> dict:
    """Copy a converted model folder into the run folder (the weights must be the planned ones);
    its ``model.json``."""
    import shutil

    from bench import atomic
    from bench.checkpoints import MODEL_JSON, CheckpointError, read_model_json
    from bench.checkpoints.source import file_sha256

    folder = Path(tc.source["checkpoint"])
    meta = read_model_json(folder)
    sha = file_sha256(folder / "weights.pt")
    if tc.source.get("sha256") and sha != tc.source["sha256"]:
        raise CheckpointError(f"{folder}: weights.pt changed since the sweep was planned")
    atomic.write_with(tc.weights, lambda tmp: shutil.copyfile(folder / "weights.pt", tmp))
    atomic.write_text(tc.run_dir / MODEL_JSON, (folder / MODEL_JSON).read_text())
    return meta


class Import(CellKind):
    name = "import"
    model = True
    batch_key = "sample.batch_size"  # nothing is batched; the model's cells sample next
    work = ("bench.checkpoints", "bench.cell_model")

    def plan_entry(self, tc, entry, sweep, first: bool) -> list[TrainCell]:
        """The entry's model when it names a ``checkpoint``."""
        return train_cells_of(sweep, entry) if entry.source else []

    def run(self, cells: list, store, progress: bool = False, threads: int = 0) -> int:
        from bench.cells import prepare_model

        for tc in cells:
            rebuild = prepare_model(tc, store)
            if rebuild is not None:
                convert(tc, store, rebuild)
        return len(cells)

    def predict(self, tc, cost):
        """Reading the file (weights + EMA) and writing the model, and fetching a released file
        not fetched yet (no sha256 planned)."""
        P = cost.net.params()
        job = cost.entry["job"]
        read = 12.0 * P / job["load_bytes_per_s"]
        fetch = 0.0 if (tc.source or {}).get("sha256") else 8.0 * P / job["download_bytes_per_s"]
        parts = {"read": read, "fetch": fetch}
        return cost.prediction(tc.id, self.name, read + fetch, int(12 * P), parts)


KIND = Import()
