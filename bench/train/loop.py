"""The training loop: the Lightning module every method trains in, and :func:`fit`.

The data stream (:class:`StepBatches`: batch k is a pure function of (seed, k)), the module
whose training step is the recipe's (:func:`bench.train.step.train_step`: AdamW, warm-up then
constant LR, clipping, EMA), the divergence check, the stop-on-request of a SLURM pre-timeout
signal (:func:`request_stop`), and :func:`fit`, which assembles the Lightning trainer with the
loggers of :mod:`bench.train.logs` and the checkpointing of :mod:`bench.train.resume`.
"""

from __future__ import annotations

import copy
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, IterableDataset

from bench.atomic import atomic_torch_save
from bench.config import TrainConfig
from bench.data.base import TaskData
from bench.failures import FAILED_FILE, write_failure
from bench.method import Batch, Method
from bench.train.logs import (
    Validation,
    log_interval,
    log_path,
    make_loggers,
    trim_log,
    val_interval,
)
from bench.train.resume import (
    AtomicCheckpointIO,
    SaveOnSigterm,
    checkpoint_step,
    restore_rng,
    resume_from,
    rng_states,
)
from bench.train.step import LossWatch, make_adamw, make_ema, train_step, warmup_schedule
from bench.weights import weights_payload

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


# --------------------------------------------------------------------------- stop, divergence

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


class TrainingDiverged(RuntimeError):
    """fit() stopped because the loss (or the weights) stopped being finite."""

    def __init__(self, step: int, reason: str, at_step: int, message: str | None = None):
        super().__init__(message or f"{reason} at step {step} (stopped at step {at_step})")
        self.step, self.reason, self.at_step = step, reason, at_step


# --------------------------------------------------------------------------- module


class TrainModule(L.LightningModule):
    """Wraps any registered method + its backbone. Manual optimisation: its training step is
    :func:`bench.train.step.train_step` (clipping included) with Lightning's optimiser, scheduler
    and backward (``manual_backward``: DDP's gradient sync); Lightning counts the step when the
    optimiser steps, runs the forward under its precision plugin's autocast, and saves."""

    def __init__(self, method: Method, backbone: torch.nn.Module, cfg: TrainConfig):
        super().__init__()
        self.automatic_optimization = False
        self.method, self.backbone, self.cfg = method, backbone, cfg
        self.ema = make_ema(backbone, cfg.ema)
        self.stream: StepBatches | None = None
        self.watch = LossWatch()  # the first non-finite loss of this fit, on device

    def check_finite(self, weights: bool = False) -> None:
        """Raise :class:`TrainingDiverged` if a loss of this fit was non-finite, or (``weights``)
        a trained or EMA parameter is. One host sync; collective under DDP (all ranks call it
        at the same point and raise together)."""
        first = self.watch.first()
        step, reason = (first[0], f"non-finite loss ({first[1]})") if first else (-1, "")
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
        # The whole step, EMA and method state included, before any callback's
        # on_train_batch_end: ModelCheckpoint saves there, so a checkpoint taken at step k
        # must already hold the EMA, method state and LR schedule of step k (exact resume).
        b = Batch(*batch)
        out = train_step(
            self.method, self.backbone, b, self.optimizers(), self.lr_schedulers(),
            clip=self.cfg.grad_clip, ema=self.ema, step=self.global_step,
            antithetic=self.cfg.antithetic, watch=self.watch, backward=self.manual_backward,
        )  # fmt: skip
        self.log("loss", out.loss, prog_bar=True, on_step=True, batch_size=len(b))
        return out.loss.detach()

    def configure_optimizers(self):
        opt = make_adamw(
            self.backbone.parameters(),
            lr=self.cfg.lr,
            betas=tuple(self.cfg.betas),
            weight_decay=self.cfg.weight_decay,
            device=next(self.backbone.parameters()).device,
            clip_under_amp=_clips_under_amp(self),
        )
        return {"optimizer": opt, "lr_scheduler": warmup_schedule(opt, self.cfg.warmup_steps)}

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
        checkpoint["rng"] = rng_states()

    def on_load_checkpoint(self, checkpoint):
        # Applied at the first training batch, not here: between restoring and the first
        # step Lightning creates the DataLoader iterator, which draws a seed from torch's RNG.
        self._pending_rng = checkpoint.get("rng")
        _count_automatic_steps(checkpoint)

    def apply_pending_rng(self):
        rng, self._pending_rng = getattr(self, "_pending_rng", None), None
        restore_rng(rng)

    def on_train_batch_start(self, batch, batch_idx):
        self.apply_pending_rng()
        if self.global_step % NONFINITE_CHECK_EVERY == 0 and self.watch.noted:
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


def _count_automatic_steps(checkpoint: dict) -> None:
    """A checkpoint saved under automatic optimisation (before the module's step was
    :func:`bench.train.step.train_step`) counts its steps in the automatic loop's progress;
    manual optimisation reads the manual one: copy the count over, so the run resumes at its
    step (Lightning restores the loops after this hook, from the same dict)."""
    loop = checkpoint.get("loops", {}).get("fit_loop", {})
    auto = loop.get("epoch_loop.automatic_optimization.optim_progress", {})
    steps = auto.get("optimizer", {}).get("step")
    manual = loop.get("epoch_loop.manual_optimization.optim_step_progress")
    if (
        steps
        and steps["total"]["completed"]
        and not (manual or {}).get("total", {}).get("completed")
    ):
        loop["epoch_loop.manual_optimization.optim_step_progress"] = copy.deepcopy(steps)


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
    # what this process's steps cost (bench.measure.TRAIN_COST_COLUMNS); None: no step ran
    s_per_step: float | None = None  # seconds / steps
    tokens_per_s: float | None = None  # batch_size x seq_len x steps/s (global batch: all ranks)
    peak_mem_mb: float | None = None  # this rank's peak since training started (PeakMemory)


class _Timer(Callback):
    def __init__(self):
        self.t0 = None
        self.steps0 = 0
        self.last_loss: torch.Tensor | float = float("nan")  # a tensor: read once, at the end
        self.peak = None  # bench.measure.PeakMemory, reset when training starts

    def on_train_start(self, trainer, pl_module):
        from bench.measure import PeakMemory  # on the module's device, set up by now

        self.peak = PeakMemory(pl_module.device).reset()
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


def _clips_under_amp(module) -> bool:
    """Whether the module clips gradients under its trainer's mixed-precision plugin."""
    trainer = getattr(module, "_trainer", None)
    if trainer is None:
        return False
    return bool(module.cfg.grad_clip) and "mixed" in str(trainer.precision)


def precision_for(cfg: TrainConfig) -> str:
    if cfg.precision != "auto":
        return cfg.precision
    return "bf16-mixed" if torch.cuda.is_available() else "32"


def _make_trainer(
    cfg: TrainConfig, run_dir: Path, val_data, last: Path, gpu: bool, progress, callbacks
):
    """The Lightning trainer of a run and its step timer and loggers: checkpoints every
    ``cfg.checkpoint_every`` steps and at SIGTERM (``last``), validation when the loggers and
    ``val_data`` allow it, DDP over ``devices x num_nodes``."""
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
        [Validation(val_data, every, cfg.val_batches, cfg.batch_size, cfg.seed)]
        if every and val_data is not None and len(val_data) and loggers
        else []
    )
    accelerator = "gpu" if gpu else "cpu"
    strategy = "ddp" if cfg.devices * cfg.num_nodes > 1 else "auto"  # gloo on CPU, nccl on GPU
    trainer = L.Trainer(
        max_steps=cfg.steps,
        accelerator=accelerator,
        devices=cfg.devices,
        num_nodes=cfg.num_nodes,
        strategy=strategy,
        precision=precision_for(cfg),  # clipping: the module's step (bench.train.step)
        # validation first: a checkpoint saved at its step then flushes its row (on_save_checkpoint)
        callbacks=[*validation, ckpt_cb, timer, SaveOnSigterm(last), *(callbacks or [])],
        logger=loggers or False,
        enable_progress_bar=progress,
        enable_model_summary=False,
        plugins=[AtomicCheckpointIO()],
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=run_dir,
        log_every_n_steps=log_interval(cfg),
    )
    return trainer, timer, loggers


def _diverged(e: TrainingDiverged, run_dir: Path, last: Path, global_zero: bool):
    """The run's divergence, said in one message naming the checkpoint kept, and written to
    ``run_dir/failed.json`` (rank 0): the exception :func:`fit` raises."""
    good = checkpoint_step(last) if last.exists() else None
    kept = f"kept {last} (step {good})" if good is not None else "no checkpoint was written"
    msg = (
        f"{run_dir.name}: training diverged: {e.reason} at step {e.step}; "
        f"stopped at step {e.at_step}, {kept}"
    )
    if global_zero:
        write_failure(
            run_dir,
            f"{e.reason} at step {e.step}",
            e.step,
            kind="diverged",
            stopped_at=e.at_step,
            checkpoint=str(last) if good is not None else None,
            checkpoint_step=good,
        )
    return TrainingDiverged(e.step, e.reason, e.at_step, msg)


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
    writing ``run_dir/failed.json`` (:mod:`bench.train`); a stale one is removed at the start.
    Logs go to ``run_dir/logs`` (:func:`bench.train.logs.make_loggers`); ``val_data``: held-out
    examples for the validation loss every :func:`bench.train.logs.val_interval` steps (None or
    empty: no validation).
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
    gpu = torch.cuda.is_available()
    last = run_dir / "ckpt" / "last.ckpt"
    trainer, timer, loggers = _make_trainer(cfg, run_dir, val_data, last, gpu, progress, callbacks)
    # The loader iterator is created (and its first batch prefetched) before any training
    # hook runs, so the stream must know its rank and resume step now.
    stream.rank, stream.world = trainer.global_rank, trainer.world_size
    resume = resume_from(run_dir / "ckpt")
    if resume is not None:
        stream.start_step = resume[1]
    if trainer.is_global_zero and loggers:  # continue the log where the checkpoint is
        trim_log(log_path(run_dir), resume[1] if resume is not None else -1)
    try:
        with warnings.catch_warnings():
            # ModelCheckpoint warns that a manually optimised module's checkpoint holds the
            # weights after the step: what resuming at that step needs
            warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optim")
            trainer.fit(
                module,
                train_dataloaders=loader,
                ckpt_path=str(resume[0]) if resume else None,
                weights_only=False,
            )  # our own checkpoint (RNG states are numpy objects)
        module.check_finite(weights=True)  # before weights.pt (the periodic check may not have run)
    except TrainingDiverged as e:
        raise _diverged(e, run_dir, last, trainer.is_global_zero) from None
    seconds = time.perf_counter() - (timer.t0 or time.perf_counter())
    done = trainer.global_step - timer.steps0
    weights = run_dir / "weights.pt"
    if trainer.is_global_zero:
        payload = weights_payload(module.forward_backbone(), method, trainer.global_step, extra)
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
        f"cuda:{torch.cuda.get_device_name(0)}" if gpu else "cpu",
        cfg.devices * cfg.num_nodes,
        s_per_step=seconds / done if done > 0 and seconds > 0 else None,
        tokens_per_s=cfg.batch_size * data.x.shape[1] * done / seconds if seconds > 0 else None,
        peak_mem_mb=timer.peak.peak_mb() if timer.peak is not None else None,
    )
