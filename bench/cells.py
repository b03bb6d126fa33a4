"""The job: what one job does for planned cells (:mod:`bench.plan`), each cell by its kind
(:mod:`bench.kind`; ``registry.KINDS[cell.kind]``): make the model (train it, or import it),
then run the model's cells of every other kind (its samples, its likelihood, a plug-in's).

Every executor (:mod:`bench.executors`) runs these functions, in-process or pickled into a
job. A cell already in the results store is skipped, so a job can be re-run (or requeued)
at any time: training resumes from its last checkpoint, sampling at batch granularity.
Each finished cell becomes one store file with one row per metric.

One owner per cell (:mod:`bench.locks`): a model's work holds its train cell's lock (``owner.lock``
in its run folder; DDP rank 0 only), each cell of a model its own lock, and a local job
(:func:`run_train_then_samples`) holds the train cell's lock for its whole life. A cell whose
lock another process holds is not computed here: training raises :class:`bench.locks.CellBusy`,
a model's other cells are skipped (the holder computes them).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import torch

from bench import locks, registry
from bench.atomic import write_json_atomic
from bench.plan import TrainCell
from bench.results import Store


def owner_lock(tc: TrainCell):
    """The train cell's lock (:mod:`bench.locks`); a no-op on DDP ranks other than 0, which run
    the same job alongside rank 0 (SLURM_PROCID / RANK / LOCAL_RANK say which rank this is)."""
    rank = next(
        (int(os.environ[k]) for k in ("SLURM_PROCID", "RANK", "LOCAL_RANK") if os.environ.get(k)), 0
    )
    return locks.CellLock(locks.train_lock_path(tc.run_dir)) if rank == 0 else locks.NoLock()


def run_train(tc: TrainCell, threads: int = 0, progress: bool = True) -> str:
    """Make model ``tc`` by its kind (train it, or import its checkpoint) unless its weights
    exist; record its rows. Returns the weights path. Holds the cell's lock meanwhile (raises
    :class:`bench.locks.CellBusy` if another process does)."""
    with owner_lock(tc):
        if threads:
            torch.set_num_threads(threads)
        registry.KINDS[tc.kind].run([tc], Store(tc.results_dir), progress, threads=threads)
        return str(tc.weights)


def _weights_readable(path) -> bool:
    """True if ``path`` loads as what :func:`bench.train.fit` writes (a truncated or damaged
    file is not)."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception:  # any unpickling / zip error means the file is damaged
        return False
    return isinstance(payload, dict) and {"backbone", "steps"} <= set(payload)


def prepare_model(tc: TrainCell, store: Store) -> bool | None:
    """Before a model kind makes model ``tc``: None when it is made (its weights readable and its
    rows in ``store``); else whether it is a rebuild (its weights damaged after its rows were
    written: they are moved aside, rebuilt, and the rows kept). Writes the run folder's
    ``cell.json``."""
    rebuild = False
    if tc.weights.is_file() and store.has(tc.id):
        if _weights_readable(tc.weights):
            return None
        moved = tc.weights.with_name(f"{tc.weights.name}.corrupt-{os.getpid()}-{int(time.time())}")
        os.replace(tc.weights, moved)
        print(
            f"warning: {tc.weights}: unreadable, moved to {moved.name}; rebuilding it from the "
            "run's checkpoints",
            file=sys.stderr,
        )
        rebuild = True
    tc.run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(dataclasses.asdict(tc), tc.run_dir / "cell.json")
    return rebuild


def run_samples(cells: list, threads: int = 0, progress: bool = True) -> int:
    """Run cells of ONE model, kind by kind in the order they come (each kind skips those in the
    store and those whose lock another process holds). Returns #done."""
    if not cells:
        return 0
    if threads:
        torch.set_num_threads(threads)
    store = Store(cells[0].train.results_dir)
    by_kind: dict[str, list] = {}  # kind -> its cells, in the plan's order
    for c in cells:
        by_kind.setdefault(c.kind, []).append(c)
    return sum(registry.KINDS[kind].run(mine, store, progress) for kind, mine in by_kind.items())


def run_train_then_samples(
    tc: TrainCell, cells: list, threads: int = 0, progress: bool = True
) -> int:
    """One local job: make the model (if needed), then run every cell of it, holding the train
    cell's lock throughout (raises :class:`bench.locks.CellBusy` if another process holds it)."""
    with owner_lock(tc):
        run_train(tc, threads, progress)
        return run_samples(cells, threads, progress)
