"""One trainer for every method, on Lightning.

What it does for every method alike (the recipe of the reference harness, FrankCCCCC/s-flm @
18d586f: `configs/config.yaml`, `configs/lr_scheduler/constant_warmup.yaml`, `models/ema.py`):
AdamW (weight decay 0, betas 0.9/0.999), linear warm-up then constant LR, gradient clip
1.0, EMA of the backbone with warm-up decay min(ema, (1 + n) / (10 + n)) (reference
`models/ema.py`; the EMA weights are what sampling and evaluation use), bf16 mixed precision
on GPU and fp32 on CPU, antithetic time draws for diffusion methods, token-mean loss
(inside each method via :func:`bench.method.token_mean`).

Its parts, by job:

- :mod:`bench.train.step`: one training step of the recipe (:func:`bench.train.step.train_step`),
  the one the trainer, ``python -m bench.perf train`` and the rehearsal take, and its parts (the
  optimiser, the warm-up schedule, the EMA, the divergence watch);
- :mod:`bench.train.loop`: the Lightning module, the data stream, the divergence check, stop on
  request, and :func:`fit`;
- :mod:`bench.train.logs`: training curves (the loggers, ``<run_dir>/logs/metrics.csv``, the
  validation loss);
- :mod:`bench.train.resume`: resumable checkpoints and RNG states; ``weights.pt`` is
  :mod:`bench.weights`' (:func:`bench.weights.load_weights`; reading it imports no Lightning).

Atomic writes are :mod:`bench.atomic`'s; the failure record ``failed.json`` is
:mod:`bench.failures`'s.

Resumable exactly: checkpoints carry the step, optimiser, EMA, the method's own state
(adaptive schedule) and the torch / numpy / python RNG states, and the batch sequence is a
pure function of (seed, step), so a run stopped at step k and resumed reaches the same
weights as an uninterrupted run.

Divergence: a non-finite loss stops the run with :class:`TrainingDiverged` (one line naming the
run folder and step) and ``<run_dir>/failed.json`` (:func:`bench.failures.write_failure`). The
check costs no host sync per step: each step folds ``isfinite(loss)`` into a flag on the device,
which is read every :data:`NONFINITE_CHECK_EVERY` steps and before every checkpoint save (which
also checks that the trained and EMA weights are finite). A save that finds a non-finite state
is refused, so ``ckpt/last.ckpt`` stays the last good checkpoint (from a step at or before the
bad one); the run may compute up to NONFINITE_CHECK_EVERY - 1 steps past the bad one before it
stops.
"""

from __future__ import annotations

from bench.train.logs import (
    LOG_DIR,
    LOG_FILE,
    ContinuingCSVLogger,
    heldout_for,
    log_interval,
    log_path,
    make_loggers,
    trim_log,
    val_interval,
)
from bench.train.loop import (
    NONFINITE_CHECK_EVERY,
    StepBatches,
    TrainingDiverged,
    TrainingInterrupted,
    TrainModule,
    TrainResult,
    fit,
    precision_for,
    request_stop,
)
from bench.train.resume import resume_from
from bench.train.step import ema_avg_fn, make_adamw

__all__ = [
    "LOG_DIR",
    "LOG_FILE",
    "NONFINITE_CHECK_EVERY",
    "ContinuingCSVLogger",
    "StepBatches",
    "TrainModule",
    "TrainResult",
    "TrainingDiverged",
    "TrainingInterrupted",
    "ema_avg_fn",
    "fit",
    "heldout_for",
    "log_interval",
    "log_path",
    "make_adamw",
    "make_loggers",
    "precision_for",
    "request_stop",
    "resume_from",
    "trim_log",
    "val_interval",
]
