"""Resuming a training run: the resumable checkpoints it keeps on disk, and reads back.

- ``<run_dir>/ckpt/last.ckpt`` (and ``step*.ckpt``): Lightning checkpoints (step, optimiser, EMA,
  the method's own state) plus the torch / numpy / python (and CUDA) RNG states
  (:func:`rng_states`, :func:`restore_rng`), written atomically (:class:`AtomicCheckpointIO`),
  also on SIGTERM (:class:`SaveOnSigterm`). :func:`resume_from` picks the newest readable one and
  sets damaged ones aside.

The final ``<run_dir>/weights.pt`` (what sampling loads) is :mod:`bench.weights`' (which imports
no Lightning): the trainer writes it with :func:`bench.weights.weights_payload` when training
ends.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from bench import atomic

__all__ = [
    "AtomicCheckpointIO",
    "SaveOnSigterm",
    "checkpoint_step",
    "restore_rng",
    "resume_from",
    "rng_states",
]

# --------------------------------------------------------------------------- RNG states


def rng_states() -> dict:
    """The RNG states a checkpoint carries, so that a resumed run draws the same noise."""
    rng = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def restore_rng(rng: dict | None) -> None:
    """Set the RNG states :func:`rng_states` saved (nothing when ``rng`` is None)."""
    if rng:
        torch.set_rng_state(rng["torch"])
        np.random.set_state(rng["numpy"])
        random.setstate(rng["python"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])


# --------------------------------------------------------------------------- checkpoints


class SaveOnSigterm(Callback):
    """SIGTERM (scancel, preemption, node drain): Lightning stops at a step boundary with
    SIGTERMException (all DDP ranks alike); save last.ckpt there so nothing is lost."""

    def __init__(self, last: Path):
        self.last = last

    def on_exception(self, trainer, pl_module, exception):
        if isinstance(exception, SIGTERMException):
            pl_module.apply_pending_rng()
            trainer.save_checkpoint(self.last)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoint files are written to a temp file and renamed: a job killed mid-save
    (SIGKILL after the grace period) leaves the previous last.ckpt intact."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        atomic.write_with(
            path,
            lambda tmp: super(AtomicCheckpointIO, self).save_checkpoint(
                checkpoint, tmp, storage_options
            ),
        )


def checkpoint_step(path: Path) -> int:
    """The global step a checkpoint was saved at (memory-mapped: the tensors are not read)."""
    return int(torch.load(path, map_location="cpu", weights_only=False, mmap=True)["global_step"])


def resume_from(ckpt_dir: Path) -> tuple[Path, int] | None:
    """The newest readable checkpoint (``last.ckpt``, else the newest ``step*.ckpt``) and its
    step. An unreadable one (truncated: a torn copy, a full disk without atomic rename) is
    renamed ``*.corrupt`` with a one-line warning, and the next one is tried; None: start anew."""
    for tmp in ckpt_dir.glob(".*.tmp"):  # a killed writer's partial save (bench/atomic.py); the
        tmp.unlink(missing_ok=True)  # cell lock (bench.locks) says no other process writes here
    steps = sorted(ckpt_dir.glob("step*.ckpt"), key=lambda f: f.stat().st_mtime, reverse=True)
    for path in [ckpt_dir / "last.ckpt", *steps]:
        if not path.is_file():
            continue
        try:
            step = checkpoint_step(path)
        except Exception as e:  # noqa: BLE001 - any unreadable checkpoint is skipped the same way
            try:
                path.rename(path.with_name(path.name + ".corrupt"))
            except OSError:  # DDP: another rank moved it first
                pass
            print(
                f"sflm: warning: {path}: unreadable checkpoint ({type(e).__name__}), moved to "
                f"{path.name}.corrupt; trying an earlier one",
                file=sys.stderr,
                flush=True,
            )
            continue
        return path, step
    return None


# --------------------------------------------------------------------------- weights.pt
# ``weights.pt`` is :mod:`bench.weights`' (no Lightning there, so the importer, the exporter and
# sampling read it without the trainer); the trainer writes it with the same functions.
