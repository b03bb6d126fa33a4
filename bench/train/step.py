"""One training step of the recipe: the one definition that the trainer's Lightning module
(:class:`bench.train.loop.TrainModule`), ``python -m bench.perf train``
(:mod:`bench.perf.train`) and the full-size rehearsal (:func:`bench.rehearse.training.train_phase`)
all take.

:func:`train_step`, in this order: the time draws (:func:`bench.method.antithetic_times`), the
method's loss under the caller's autocast, the loss noted for the divergence check
(:class:`LossWatch`), the per-time losses handed to the method (adaptive schedules), zero_grad,
backward, gradient clipping (L2 norm over the optimiser's parameters), the optimiser step, the
method's post-step hook (S-arch re-projection), the EMA update, the LR scheduler step. Backward
and everything after it run outside autocast. :func:`forward_backward` and :func:`update` are its
two halves (the rehearsal measures them apart). This is the order in which Lightning's automatic
optimisation ran the trainer's steps before (zero_grad after the forward, the clipping of
Lightning's precision plugin before the step, the scheduler after the batch), so a run's weights
are the same to the bit.

The recipe's parts: :func:`make_adamw`, :func:`warmup_schedule`, :func:`ema_avg_fn` /
:func:`make_ema`, and :class:`Recipe` (all of them for one backbone, outside Lightning).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.optim.swa_utils import AveragedModel

from bench.method import Batch, LossOutput, Method, antithetic_times

NoAutocast = contextlib.nullcontext


def make_adamw(params, *, device, clip_under_amp: bool = False, **kw) -> torch.optim.AdamW:
    """AdamW, fused (one kernel for all parameters) on CUDA; on CPU the default implementation,
    so CPU runs stay bitwise reproducible across versions of this harness. ``clip_under_amp``:
    gradients are clipped under a mixed-precision plugin (bf16-mixed, the GPU default): then the
    default (for-each) implementation, which every GPU run of the recipe has used (Lightning
    refused a fused optimizer there while it clipped, ``MixedPrecision.clip_gradients``)."""
    fused = torch.device(device).type == "cuda" and not clip_under_amp
    return torch.optim.AdamW(params, fused=fused or None, **kw)


def warmup_schedule(opt: torch.optim.Optimizer, warmup_steps: int):
    """A LambdaLR: linear warm-up over ``warmup_steps`` steps, then constant (reference
    configs/lr_scheduler/constant_warmup.yaml)."""
    warm = warmup_steps
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0
    )


def ema_avg_fn(decay: float):
    """EMA update with warm-up: d_n = min(decay, (1 + n) / (10 + n)) (reference models/ema.py)."""

    def fn(avg, cur, num_averaged):
        d = min(decay, (1.0 + float(num_averaged)) / (10.0 + float(num_averaged)))
        return d * avg + (1.0 - d) * cur

    return fn


def make_ema(backbone: torch.nn.Module, decay: float) -> AveragedModel | None:
    """The EMA copy of ``backbone`` (None when ``decay`` is 0), not trained: DDP would otherwise
    report its parameters as unused."""
    if decay <= 0:
        return None
    ema = AveragedModel(backbone, avg_fn=ema_avg_fn(decay), use_buffers=True)
    return ema.requires_grad_(False)


class LossWatch:
    """The first step whose loss was not finite, and that loss, kept on the loss's device:
    noting a loss costs no host sync; reading (:meth:`first`) is one."""

    def __init__(self):
        self._step: torch.Tensor | None = None  # -1: none yet
        self._loss: torch.Tensor | None = None

    @property
    def noted(self) -> bool:
        return self._step is not None

    def note(self, loss: torch.Tensor, step: int) -> None:
        loss = loss.detach().float()
        if self._step is None or self._step.device != loss.device:
            self._step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self._loss = torch.zeros((), device=loss.device)
        first = ~torch.isfinite(loss) & (self._step < 0)
        self._step.masked_fill_(first, step)
        self._loss = torch.where(first, loss, self._loss)

    def first(self) -> tuple[int, float] | None:
        """(step, loss) of the first non-finite loss noted, or None."""
        step = -1 if self._step is None else int(self._step)
        return (step, float(self._loss)) if step >= 0 else None


def _no_autocast(loss: torch.Tensor):
    return torch.autocast(loss.device.type, enabled=False)


def forward_backward(
    method: Method,
    backbone: torch.nn.Module,
    batch: Batch,
    optimizer,
    *,
    t: torch.Tensor | None,
    step: int,
    watch: LossWatch | None = None,
    autocast: Callable = NoAutocast,
    backward: Callable | None = None,
) -> LossOutput:
    """The first half of :func:`train_step`: loss (under ``autocast()``), noted in ``watch``, its
    per-time losses recorded by the method, zero_grad, ``backward(loss)`` (default
    ``loss.backward()``; Lightning's ``manual_backward`` under the trainer) outside autocast."""
    with autocast():
        out = method.loss(backbone, batch, t)
    if watch is not None:
        watch.note(out.loss, step)
    if t is not None:
        method.record_losses(t.detach(), out.per_sample, step)
    with _no_autocast(out.loss):
        optimizer.zero_grad(set_to_none=True)
        (backward or torch.Tensor.backward)(out.loss)
    return out


def update(
    method: Method,
    backbone: torch.nn.Module,
    optimizer,
    scheduler=None,
    *,
    clip: float | None,
    ema: AveragedModel | None = None,
) -> None:
    """The second half of :func:`train_step`: clip the gradients' L2 norm over the optimiser's
    parameters to ``clip`` (None or 0: no clipping), the optimiser step, the method's post-step
    hook, the EMA update, the scheduler step."""
    if clip:  # reference configs/config.yaml trainer.gradient_clip_val (Lightning's, L2 norm)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, clip)
    optimizer.step()
    method.on_after_optimizer_step(backbone)
    if ema is not None:
        ema.update_parameters(backbone)
    if scheduler is not None:
        scheduler.step()


def train_step(
    method: Method,
    backbone: torch.nn.Module,
    batch: Batch,
    optimizer,
    scheduler=None,
    *,
    clip: float | None,
    ema: AveragedModel | None,
    step: int,
    antithetic: bool = True,
    watch: LossWatch | None = None,
    autocast: Callable = NoAutocast,
    backward: Callable | None = None,
) -> LossOutput:
    """One optimiser step of the recipe on ``batch`` (the module docstring says what, in which
    order); ``step``: the number of steps taken before this one. Returns the method's loss."""
    t = None
    if method.uses_time:
        t = antithetic_times(len(batch), antithetic=antithetic, device=batch.x.device)
    out = forward_backward(
        method, backbone, batch, optimizer,
        t=t, step=step, watch=watch, autocast=autocast, backward=backward,
    )  # fmt: skip
    with _no_autocast(out.loss):
        update(method, backbone, optimizer, scheduler, clip=clip, ema=ema)
    return out


@dataclass
class Recipe:
    """The recipe's state for one backbone outside Lightning (``bench.perf train``, the
    rehearsal): AdamW, warm-up schedule, clipping, EMA and divergence watch, as the trainer
    builds them from a :class:`bench.config.TrainConfig` (:meth:`build`)."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    clip: float | None = None
    ema: AveragedModel | None = None
    antithetic: bool = True
    watch: LossWatch = field(default_factory=LossWatch)
    steps: int = 0  # optimiser steps taken

    @classmethod
    def build(cls, backbone, cfg, device, *, mixed: bool = False) -> Recipe:
        """``mixed``: the steps run under bf16 autocast (``precision_for(cfg) == "bf16-mixed"``
        on CUDA), where the trainer builds the for-each AdamW (:func:`make_adamw`)."""
        opt = make_adamw(
            backbone.parameters(),
            lr=cfg.lr,
            betas=tuple(cfg.betas),
            weight_decay=cfg.weight_decay,
            device=device,
            clip_under_amp=mixed and bool(cfg.grad_clip),
        )
        sched = warmup_schedule(opt, cfg.warmup_steps)
        return cls(opt, sched, cfg.grad_clip, make_ema(backbone, cfg.ema), cfg.antithetic)

    def forward_backward(self, method, backbone, batch: Batch, t, *, autocast=NoAutocast):
        """:func:`forward_backward` at this recipe's step."""
        return forward_backward(
            method, backbone, batch, self.optimizer,
            t=t, step=self.steps, watch=self.watch, autocast=autocast,
        )  # fmt: skip

    def update(self, method, backbone) -> None:
        """:func:`update` with this recipe's optimiser, schedule, clipping and EMA."""
        update(method, backbone, self.optimizer, self.scheduler, clip=self.clip, ema=self.ema)
        self.steps += 1

    def step(self, method, backbone, batch: Batch, *, autocast=NoAutocast) -> LossOutput:
        """:func:`train_step` on ``batch``."""
        out = train_step(
            method, backbone, batch, self.optimizer, self.scheduler,
            clip=self.clip, ema=self.ema, step=self.steps, antithetic=self.antithetic,
            watch=self.watch, autocast=autocast,
        )  # fmt: skip
        self.steps += 1
        return out
