"""One trainer for every method, on Lightning.

What it does for every method alike (the recipe of the reference harness, FrankCCCCC/s-flm @
18d586f: `configs/config.yaml`, `configs/lr_scheduler/constant_warmup.yaml`, `models/ema.py`):
AdamW (weight decay 0, betas 0.9/0.999), linear warm-up then constant LR, gradient clip
1.0, EMA of the backbone with warm-up decay min(ema, (1 + n) / (10 + n)) (reference
`models/ema.py`; the EMA weights are what sampling and evaluation use), bf16 mixed precision
on GPU and fp32 on CPU, antithetic time draws for diffusion methods, token-mean loss
(inside each method via :func:`bench.method.token_mean`).

Resumable exactly: checkpoints carry the step, optimiser, EMA, the method's own state
(adaptive schedule) and the torch / numpy / python RNG states, and the batch sequence is a
pure function of (seed, step), so a run stopped at step k and resumed reaches the same
weights as an uninterrupted run.

Training curves: every run logs its loss every ``train.log_every`` steps, and (``train.val_every``)
a validation loss on fixed held-out examples, through Lightning's loggers: a CSV file
``<run_dir>/logs/metrics.csv`` (:data:`LOG_DIR` / :data:`LOG_FILE`; continued, not restarted, when
the run resumes; written by rank 0 only), plus TensorBoard or W&B (``train.logger``). The report
draws them (:mod:`bench.report.curves`). Validation does not change training
(:class:`_Validation`: forked RNG, no grad, eval mode): a run with and one without it end with the
same weights, so these options are not part of a train cell's identity.

Divergence: a non-finite loss stops the run with :class:`TrainingDiverged` (one line naming the
run folder and step) and ``<run_dir>/failed.json`` (:func:`write_failure`). The check costs no
host sync per step: each step folds ``isfinite(loss)`` into a flag on the device, which is read
every :data:`NONFINITE_CHECK_EVERY` steps and before every checkpoint save (which also checks
that the trained and EMA weights are finite). A save that finds a non-finite state is refused,
so ``ckpt/last.ckpt`` stays the last good checkpoint (from a step at or before the bad one);
the run may compute up to NONFINITE_CHECK_EVERY - 1 steps past the bad one before it stops.
"""

from __future__ import annotations

import csv
import json
import os
import random
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.optim.swa_utils import AveragedModel
from torch.utils.data import DataLoader, IterableDataset

from bench import atomic
from bench.config import ConfigError, TrainConfig, logger_missing_package
from bench.data.base import TaskData
from bench.method import Batch, Method, antithetic_times


def make_adamw(params, *, device, **kw) -> torch.optim.AdamW:
    """AdamW, fused (one kernel for all parameters) on CUDA; on CPU the default implementation,
    so CPU runs stay bitwise reproducible across versions of this harness."""
    fused = torch.device(device).type == "cuda"
    return torch.optim.AdamW(params, fused=fused or None, **kw)


# --------------------------------------------------------------------------- data


class StepBatches(IterableDataset):
    """Infinite stream of (x, clean_mask, loss_mask) batches whose content depends only on
    (seed, step): epoch e uses permutation rng(seed, e) of the examples. Under DDP every rank
    takes its slice of the global batch. ``start_step`` is set by the trainer on resume."""

    def __init__(self, data: TaskData, batch_size: int, seed: int):
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.start_step = 0
        self.rank, self.world = 0, 1
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            self._perms = {
                epoch: np.random.default_rng([self.seed, epoch]).permutation(len(self.data))
            }
        return self._perms[epoch]

    def indices(self, step: int) -> np.ndarray:
        n = len(self.data)
        pos = step * self.batch_size + np.arange(self.batch_size)
        epochs, offs = pos // n, pos % n
        return np.array([self._perm(e)[o] for e, o in zip(epochs, offs)])

    def __iter__(self):
        step = self.start_step
        while True:
            idx = torch.as_tensor(self.indices(step)[self.rank :: self.world])
            yield self.data.x[idx], self.data.clean_mask[idx], self.data.loss_mask[idx]
            step += 1


# --------------------------------------------------------------------------- module


def ema_avg_fn(decay: float):
    """EMA update with warm-up: d_n = min(decay, (1 + n) / (10 + n)) (reference models/ema.py)."""

    def fn(avg, cur, num_averaged):
        d = min(decay, (1.0 + float(num_averaged)) / (10.0 + float(num_averaged)))
        return d * avg + (1.0 - d) * cur

    return fn


class TrainModule(L.LightningModule):
    """Wraps any registered method + its backbone."""

    def __init__(self, method: Method, backbone: torch.nn.Module, cfg: TrainConfig):
        super().__init__()
        self.method, self.backbone, self.cfg = method, backbone, cfg
        self.ema = (
            AveragedModel(backbone, avg_fn=ema_avg_fn(cfg.ema), use_buffers=True)
            if cfg.ema > 0
            else None
        )
        if (
            self.ema is not None
        ):  # not trained: DDP would otherwise report them as unused parameters
            self.ema.requires_grad_(False)
        self.stream: StepBatches | None = None
        self._first_bad: torch.Tensor | None = (
            None  # step of the first non-finite loss (-1: none), on device
        )
        self._bad_loss: torch.Tensor | None = None  # that loss value

    def _note_nonfinite(self, loss: torch.Tensor) -> None:
        """Remember the first step whose loss is not finite, without a host sync."""
        loss = loss.detach().float()
        if self._first_bad is None or self._first_bad.device != loss.device:
            self._first_bad = torch.full((), -1, dtype=torch.long, device=loss.device)
            self._bad_loss = torch.zeros((), device=loss.device)
        first = ~torch.isfinite(loss) & (self._first_bad < 0)
        self._first_bad.masked_fill_(first, self.global_step)
        self._bad_loss = torch.where(first, loss, self._bad_loss)

    def check_finite(self, weights: bool = False) -> None:
        """Raise :class:`TrainingDiverged` if a loss of this fit was non-finite, or (``weights``)
        a trained or EMA parameter is. One host sync; collective under DDP (all ranks call it
        at the same point and raise together)."""
        step = -1 if self._first_bad is None else int(self._first_bad)
        reason = f"non-finite loss ({float(self._bad_loss)})" if step >= 0 else ""
        if weights and not reason:
            params = [
                *self.backbone.parameters(),
                *(self.ema.parameters() if self.ema is not None else ()),
            ]
            if params and not bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):
                step, reason = self.global_step, "non-finite weights"
        bad = bool(reason)
        if self.trainer.world_size > 1:
            bad = self.trainer.strategy.reduce_boolean_decision(bad, all=False)
            if bad and not reason:
                step, reason = self.global_step, "diverged on another rank"
        if bad:
            raise TrainingDiverged(step, reason, self.global_step)

    def forward_backbone(self) -> torch.nn.Module:
        """The weights sampling uses: EMA when enabled."""
        return self.ema.module if self.ema is not None else self.backbone

    def training_step(self, batch, batch_idx):
        x, clean, lmask = batch
        b = Batch(x, clean, lmask)
        t = None
        if self.method.uses_time:
            t = antithetic_times(len(b), antithetic=self.cfg.antithetic, device=x.device)
        out = self.method.loss(self.backbone, b, t)
        self._note_nonfinite(out.loss)
        if t is not None:
            self.method.record_losses(t.detach(), out.per_sample, self.global_step)
        self.log("loss", out.loss, prog_bar=True, on_step=True, batch_size=len(b))
        return out.loss

    def optimizer_step(self, *args, **kwargs):
        # Update EMA / method state inside the optimiser step, i.e. before any callback's
        # on_train_batch_end: ModelCheckpoint saves there, so a checkpoint taken at step k
        # must already hold the EMA and method state of step k (exact resume).
        super().optimizer_step(*args, **kwargs)
        self.method.on_after_optimizer_step(self.backbone)
        if self.ema is not None:
            self.ema.update_parameters(self.backbone)

    def configure_optimizers(self):
        opt = make_adamw(
            self.backbone.parameters(),
            lr=self.cfg.lr,
            betas=tuple(self.cfg.betas),
            weight_decay=self.cfg.weight_decay,
            device=next(self.backbone.parameters()).device,
        )
        warm = self.cfg.warmup_steps
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_train_start(self):
        # fit() positions the stream before trainer.fit: Lightning creates the loader
        # iterator and prefetches the first batch before this hook runs.
        if self.stream is not None and self.stream.start_step != self.global_step:
            raise RuntimeError(
                f"data stream starts at step {self.stream.start_step}, "
                f"trainer at {self.global_step}"
            )

    # RNG states travel with the checkpoint so that a resumed run draws the same noise.
    def on_save_checkpoint(self, checkpoint):
        # Every save (periodic, last, on stop / SIGTERM, final) passes here before anything is
        # written: a non-finite state is refused, so the last good checkpoint stays.
        self.check_finite(weights=True)
        for lg in self.trainer.loggers:  # the log on disk covers every checkpointed step
            lg.save()
        checkpoint["rng"] = {
            "torch": torch.get_rng_state(),
            "numpy": np.random.get_state(),
            "python": random.getstate(),
        }
        if torch.cuda.is_available():
            checkpoint["rng"]["cuda"] = torch.cuda.get_rng_state_all()

    def on_load_checkpoint(self, checkpoint):
        # Applied at the first training batch, not here: between restoring and the first
        # step Lightning creates the DataLoader iterator, which draws a seed from torch's RNG.
        self._pending_rng = checkpoint.get("rng")

    def apply_pending_rng(self):
        rng, self._pending_rng = getattr(self, "_pending_rng", None), None
        if rng:
            torch.set_rng_state(rng["torch"])
            np.random.set_state(rng["numpy"])
            random.setstate(rng["python"])
            if "cuda" in rng and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(rng["cuda"])

    def on_train_batch_start(self, batch, batch_idx):
        self.apply_pending_rng()
        if self.global_step % NONFINITE_CHECK_EVERY == 0 and self._first_bad is not None:
            self.check_finite()
        # A step boundary: the previous step (EMA, method state, LR schedule) is complete.
        # Stop here if asked to (pre-timeout / preemption signal, see request_stop); under
        # DDP every rank must agree, since saving is collective.
        stop = _STOP.is_set()
        if self.trainer.world_size > 1:
            stop = self.trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop:
            last = Path(self.trainer.default_root_dir) / "ckpt" / "last.ckpt"
            self.trainer.save_checkpoint(last)
            _STOP.clear()  # consumed: a later fit() in this process runs normally
            raise TrainingInterrupted(self.global_step, last)


# --------------------------------------------------------------------------- logs, validation

#: the run folder's log folder and the CSV log in it (what bench.report.curves reads)
LOG_DIR, LOG_FILE = "logs", "metrics.csv"


def log_path(run_dir: str | Path) -> Path:
    """``<run_dir>/logs/metrics.csv``: one row per logged step (``step``, ``loss`` and/or
    ``val_loss``, ``epoch``)."""
    return Path(run_dir) / LOG_DIR / LOG_FILE


def log_interval(cfg: TrainConfig) -> int:
    """Steps between logged training losses; ``log_every`` null = min(50, steps // 20), at least
    1 (a short run still draws a curve)."""
    if cfg.log_every is None:
        return max(1, min(50, cfg.steps // 20))
    return cfg.log_every


def val_interval(cfg: TrainConfig) -> int:
    """Steps between validation passes (0: none); ``val_every`` null = steps // 20, at least 1."""
    if cfg.val_every is None:
        return max(1, cfg.steps // 20)
    return cfg.val_every


def heldout_for(task, groups: list[str], cfg: TrainConfig) -> TaskData | None:
    """The validation examples of a run (``task.heldout_data``, :class:`bench.data.base.Task`):
    ``val_batches`` x ``batch_size`` of them; None when validation is off or the task has none.
    Validation is a side channel: data that fails to load is a one-line warning, not a failed
    run."""
    if not val_interval(cfg) or cfg.logger == "none":
        return None
    try:
        return task.heldout_data(list(groups), cfg.val_batches * cfg.batch_size)
    except Exception as e:  # noqa: BLE001 - any loading error turns validation off the same way
        print(
            f"sflm: warning: {task.name}: no held-out data for the validation loss "
            f"({type(e).__name__}: {e}); training without it",
            file=sys.stderr,
            flush=True,
        )
        return None


class _ContinuingCSVWriter(ExperimentWriter):
    """Lightning's CSV writer, continuing an existing ``metrics.csv``: Lightning's own deletes the
    file when the log folder already has files (``_check_log_dir_exists`` in
    lightning/fabric/loggers/csv_logs.py), which would lose the first part of a resumed run."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir=log_dir)
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = list(next(csv.reader(f), []))

    def _check_log_dir_exists(self) -> None:  # keep the file (see the class docstring)
        pass


class ContinuingCSVLogger(CSVLogger):
    """A :class:`CSVLogger` that appends to the run's log across resumes (rank 0 writes)."""

    @property
    @rank_zero_experiment
    def experiment(self) -> _ContinuingCSVWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuingCSVWriter(log_dir=self.log_dir)
        return self._experiment


def trim_log(path: Path, step: int) -> None:
    """Drop the rows of ``path`` that a run resumed from its step-``step`` checkpoint logs again,
    atomically (nothing to do without the file). A row's ``step`` is the number of updates of the
    weights it was computed with: ``val_loss`` at step k is logged after update k, the training
    ``loss`` at step k is that of update k + 1 (Lightning's step index), so the resumed run
    starts with the loss at ``step`` and the validation at ``step`` + 1."""
    if not path.is_file():
        return
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames or [], list(reader)

    def kept(r) -> bool:
        s = r.get("step") or ""
        if not s.isdigit():
            return False
        return int(s) < step or (int(s) == step and not r.get("loss"))

    keep = [r for r in rows if kept(r)]
    if len(keep) == len(rows):
        return

    def write(tmp):
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(keep)

    atomic.write_with(path, write)


def make_loggers(cfg: TrainConfig, run_dir: Path) -> list:
    """The Lightning loggers ``cfg.logger`` asks for: the CSV log (:func:`log_path`) unless
    "none", and TensorBoard (``<run_dir>/logs/tensorboard``) or W&B (run id = the run folder's
    name, resumed; project from $WANDB_PROJECT, default "sflm-bench") beside it. Their packages are
    imported here only: a missing one is a :class:`ConfigError` naming ``train.logger``."""
    if cfg.logger == "none":
        return []
    missing = logger_missing_package(cfg.logger)
    if missing:
        raise ConfigError(
            f"train.logger: {cfg.logger!r} needs the {missing} package (pip install {missing})"
        )
    out = [
        ContinuingCSVLogger(
            run_dir, name=LOG_DIR, version="", flush_logs_every_n_steps=log_interval(cfg)
        )
    ]
    if cfg.logger == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        out.append(TensorBoardLogger(run_dir, name=LOG_DIR, version="tensorboard"))
    elif cfg.logger == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        (run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
        out.append(
            WandbLogger(
                name=run_dir.name,
                id=run_dir.name,
                save_dir=str(run_dir / LOG_DIR),
                project=os.environ.get("WANDB_PROJECT", "sflm-bench"),
                resume="allow",
            )
        )
    return out


class _Validation(Callback):
    """``val_loss``: the method's training objective on fixed held-out examples, with the EMA
    weights (those sampling uses), logged every ``every`` steps and at the last step.

    What the number is, per method (each method's ``loss``, token mean over the loss mask): MDLM,
    Duo, FLM and CANDI: their NELBO, an upper bound on the negative log-likelihood per token
    (nats), estimated with one draw of times and noise; AR: the exact NLL per token; S-FLM: its
    training loss, which is not a likelihood bound. The draws come from a fixed seed, the same at
    every pass, so successive values differ by the weights only.

    It must not change training: it runs under ``torch.random.fork_rng`` (CPU and every CUDA
    device) with the numpy and python RNG states restored, without gradients, with the modules in
    eval mode and then back in their own mode; it reads the weights and the method's state and
    writes neither, and the data stream is a function of (seed, step) only. Under DDP every rank
    evaluates its slice of each batch and the mean is reduced over ranks (the noise draws then
    depend on the number of ranks: compare validation losses across runs of one layout).
    """

    def __init__(self, data: TaskData, every: int, batches: int, batch_size: int, seed: int):
        self.data, self.every, self.seed = data, every, seed
        n = min(len(data), batches * batch_size)
        self.slices = [slice(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step % self.every and step != trainer.max_steps:
            return
        value = self.evaluate(trainer, pl_module)
        for lg in trainer.loggers:
            lg.log_metrics({"val_loss": value}, step=step)

    @torch.no_grad()
    def evaluate(self, trainer, pl_module: TrainModule) -> float:
        method, net, cfg = pl_module.method, pl_module.forward_backbone(), pl_module.cfg
        dev = pl_module.device
        rank, world = trainer.global_rank, trainer.world_size
        modes = [(m, m.training) for m in pl_module.modules()]
        np_state, py_state = np.random.get_state(), random.getstate()
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        total = torch.zeros(2, device=dev)  # (sum of batch losses, batches)
        try:
            with torch.random.fork_rng(devices=cuda):
                torch.manual_seed(self.seed)
                pl_module.eval()
                with trainer.precision_plugin.forward_context():
                    for sl in self.slices:
                        idx = torch.arange(sl.start, sl.stop)[rank::world]
                        if not len(idx):
                            continue
                        d = self.data
                        b = Batch(d.x[idx], d.clean_mask[idx], d.loss_mask[idx]).to(dev)
                        t = None
                        if method.uses_time:
                            t = antithetic_times(len(b), antithetic=cfg.antithetic, device=dev)
                        loss = method.loss(net, b, t).loss.detach().float()
                        total += torch.stack([loss, torch.ones((), device=dev)])
        finally:
            for m, was in modes:
                m.train(was)
            np.random.set_state(np_state)
            random.setstate(py_state)
        if world > 1:
            total = trainer.strategy.reduce(total, reduce_op="sum")
        return float(total[0] / total[1]) if float(total[1]) else float("nan")


# --------------------------------------------------------------------------- stop / resume

_STOP = threading.Event()


def request_stop(signum=None, frame=None) -> None:
    """Ask a running :func:`fit` to save ``ckpt/last.ckpt`` at the next step boundary and
    raise :class:`TrainingInterrupted`. Safe to install as a signal handler (it only sets a
    flag); used by bench.executors.slurm for SLURM's pre-timeout / preemption signal."""
    _STOP.set()


class TrainingInterrupted(RuntimeError):
    """fit() stopped early on request after saving a resumable checkpoint."""

    def __init__(self, step: int, ckpt: Path):
        super().__init__(f"training stopped at step {step} on request; resumable from {ckpt}")
        self.step, self.ckpt = step, ckpt


#: steps between reads of the on-device non-finite-loss flag (besides every checkpoint save)
NONFINITE_CHECK_EVERY = 10
#: the file a failed training run leaves in its run folder (:func:`write_failure`)
FAILED_FILE = "failed.json"


class TrainingDiverged(RuntimeError):
    """fit() stopped because the loss (or the weights) stopped being finite."""

    def __init__(self, step: int, reason: str, at_step: int, message: str | None = None):
        super().__init__(message or f"{reason} at step {step} (stopped at step {at_step})")
        self.step, self.reason, self.at_step = step, reason, at_step


def write_failure(run_dir: str | Path, reason: str, step: int, **extra) -> Path:
    """Record why a run failed: ``<run_dir>/failed.json`` = {"reason": one line, "step": int,
    "time": ISO-8601 UTC, ...extra}, written atomically. :func:`fit` removes it when it starts."""
    info = {
        "reason": reason,
        "step": step,
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }
    path = Path(run_dir) / FAILED_FILE
    atomic.write_text(path, json.dumps(info, indent=2, sort_keys=True))
    return path


class _SaveOnSigterm(Callback):
    """SIGTERM (scancel, preemption, node drain): Lightning stops at a step boundary with
    SIGTERMException (all DDP ranks alike); save last.ckpt there so nothing is lost."""

    def __init__(self, last: Path):
        self.last = last

    def on_exception(self, trainer, pl_module, exception):
        if isinstance(exception, SIGTERMException):
            pl_module.apply_pending_rng()
            trainer.save_checkpoint(self.last)


class _AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoint files are written to a temp file and renamed: a job killed mid-save
    (SIGKILL after the grace period) leaves the previous last.ckpt intact."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        atomic.write_with(
            path,
            lambda tmp: super(_AtomicCheckpointIO, self).save_checkpoint(
                checkpoint, tmp, storage_options
            ),
        )


# --------------------------------------------------------------------------- fit


@dataclass
class TrainResult:
    steps: int
    seconds: float
    steps_per_s: float
    final_loss: float
    weights: Path
    is_global_zero: bool = True  # False on the other DDP ranks (they write nothing)
    device: str = "cpu"  # "cuda:<name of GPU 0>" or "cpu" (the training-cost table's kind)
    devices: int = 1  # processes of the run: devices x num_nodes


class _Timer(Callback):
    def __init__(self):
        self.t0 = None
        self.steps0 = 0
        self.last_loss: torch.Tensor | float = float("nan")  # a tensor: read once, at the end

    def on_train_start(self, trainer, pl_module):
        self.t0, self.steps0 = time.perf_counter(), trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if outputs is not None:
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            self.last_loss = loss.detach()  # float() here would sync the host every step

    # The last loss travels with the checkpoint: a run resumed at its final step (killed after
    # training, before its store row was written) reports the same final loss as the original.
    def state_dict(self):
        return {"last_loss": float(self.last_loss)}

    def load_state_dict(self, state_dict):
        self.last_loss = float(state_dict.get("last_loss", float("nan")))


def precision_for(cfg: TrainConfig) -> str:
    if cfg.precision != "auto":
        return cfg.precision
    return "bf16-mixed" if torch.cuda.is_available() else "32"


def atomic_torch_save(obj, path: Path) -> None:
    atomic.write_with(path, lambda tmp: torch.save(obj, tmp))


def fit(
    method: Method,
    backbone: torch.nn.Module,
    data: TaskData,
    cfg: TrainConfig,
    run_dir: str | Path,
    *,
    progress: bool = True,
    extra: dict | None = None,
    callbacks: list | None = None,
    val_data: TaskData | None = None,
) -> TrainResult:
    """Train ``backbone`` with ``method`` on ``data`` for ``cfg.steps`` optimiser steps.

    Resumes from ``run_dir/ckpt/last.ckpt`` when present. Writes ``run_dir/weights.pt``
    (EMA backbone weights + method state + ``extra`` metadata) atomically at the end and
    returns a :class:`TrainResult`. A non-finite loss raises :class:`TrainingDiverged` after
    writing ``run_dir/failed.json`` (module docstring); a stale one is removed at the start.
    Logs go to ``run_dir/logs`` (:func:`make_loggers`); ``val_data``: held-out examples for the
    validation loss every :func:`val_interval` steps (None or empty: no validation).
    """
    run_dir = Path(run_dir)
    (run_dir / "ckpt").mkdir(parents=True, exist_ok=True)
    (run_dir / FAILED_FILE).unlink(missing_ok=True)  # this attempt decides anew
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    module = TrainModule(method, backbone, cfg)
    stream = StepBatches(data, cfg.batch_size, cfg.seed)
    module.stream = stream
    loader = DataLoader(stream, batch_size=None, num_workers=0)
    ckpt_cb = ModelCheckpoint(
        dirpath=run_dir / "ckpt",
        filename="step{step}",
        every_n_train_steps=cfg.checkpoint_every,
        save_last=True,
        save_top_k=1,
        auto_insert_metric_name=False,
    )
    timer = _Timer()
    loggers = make_loggers(cfg, run_dir)
    every = val_interval(cfg)
    validation = (
        [_Validation(val_data, every, cfg.val_batches, cfg.batch_size, cfg.seed)]
        if every and val_data is not None and len(val_data) and loggers
        else []
    )
    accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    strategy = "ddp" if cfg.devices * cfg.num_nodes > 1 else "auto"  # gloo on CPU, nccl on GPU
    last = run_dir / "ckpt" / "last.ckpt"
    trainer = L.Trainer(
        max_steps=cfg.steps,
        accelerator=accelerator,
        devices=cfg.devices,
        num_nodes=cfg.num_nodes,
        strategy=strategy,
        precision=precision_for(cfg),
        gradient_clip_val=cfg.grad_clip,
        # validation first: a checkpoint saved at its step then flushes its row (on_save_checkpoint)
        callbacks=[*validation, ckpt_cb, timer, _SaveOnSigterm(last), *(callbacks or [])],
        logger=loggers or False,
        enable_progress_bar=progress,
        enable_model_summary=False,
        plugins=[_AtomicCheckpointIO()],
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=run_dir,
        log_every_n_steps=log_interval(cfg),
    )
    # The loader iterator is created (and its first batch prefetched) before any training
    # hook runs, so the stream must know its rank and resume step now.
    stream.rank, stream.world = trainer.global_rank, trainer.world_size
    resume = _resume_from(run_dir / "ckpt")
    if resume is not None:
        stream.start_step = resume[1]
    if trainer.is_global_zero and loggers:  # continue the log where the checkpoint is
        trim_log(log_path(run_dir), resume[1] if resume is not None else -1)
    try:
        trainer.fit(
            module,
            train_dataloaders=loader,
            ckpt_path=str(resume[0]) if resume else None,
            weights_only=False,
        )  # our own checkpoint (RNG states are numpy objects)
        module.check_finite(weights=True)  # before weights.pt (the periodic check may not have run)
    except TrainingDiverged as e:
        good = (
            int(torch.load(last, map_location="cpu", weights_only=False, mmap=True)["global_step"])
            if last.exists()
            else None
        )
        kept = f"kept {last} (step {good})" if good is not None else "no checkpoint was written"
        msg = (
            f"{run_dir.name}: training diverged: {e.reason} at step {e.step}; "
            f"stopped at step {e.at_step}, {kept}"
        )
        if trainer.is_global_zero:
            write_failure(
                run_dir,
                f"{e.reason} at step {e.step}",
                e.step,
                kind="diverged",
                stopped_at=e.at_step,
                checkpoint=str(last) if good is not None else None,
                checkpoint_step=good,
            )
        raise TrainingDiverged(e.step, e.reason, e.at_step, msg) from None
    seconds = time.perf_counter() - (timer.t0 or time.perf_counter())
    done = trainer.global_step - timer.steps0
    weights = run_dir / "weights.pt"
    if trainer.is_global_zero:
        payload = {
            "backbone": module.forward_backbone().state_dict(),
            "method_state": method.state_dict(),
            "steps": trainer.global_step,
            "extra": extra or {},
        }
        atomic_torch_save(payload, weights)
    trainer.save_checkpoint(
        last
    )  # the final step is resumable too (collective under DDP: every rank calls it)
    return TrainResult(
        trainer.global_step,
        seconds,
        done / seconds if seconds > 0 else float("nan"),
        float(timer.last_loss),
        weights,
        trainer.is_global_zero,
        f"cuda:{torch.cuda.get_device_name(0)}" if accelerator == "gpu" else "cpu",
        cfg.devices * cfg.num_nodes,
    )


def _resume_from(ckpt_dir: Path) -> tuple[Path, int] | None:
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
            step = int(
                torch.load(path, map_location="cpu", weights_only=False, mmap=True)["global_step"]
            )
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


def load_weights(method: Method, backbone: torch.nn.Module, path: str | Path) -> dict:
    """Load what :func:`fit` wrote into ``backbone`` (EMA weights) and ``method``; returns
    metadata."""
    payload = torch.load(path, map_location="cpu", weights_only=False)
    backbone.load_state_dict(payload["backbone"])
    method.load_state_dict(payload["method_state"])
    return {"steps": payload["steps"], **payload.get("extra", {})}


def write_json_atomic(obj, path: str | Path) -> None:
    atomic.write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))
