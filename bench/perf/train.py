"""``train``: optimizer steps/s of every model relative to the bare backbone, AR and MDLM.

Every paper model (each method's base variant, CANDI pure Gaussian, S-FLM on the S-arch) on one
backbone size and a Sudoku-shaped batch (vocab 12, first half given, second half scored). Each
step is the recipe's (:func:`bench.train.step.train_step`: loss, backward, gradient clipping,
AdamW, the method's post-step hook, the EMA, the warm-up schedule; the trainer's defaults,
:class:`bench.config.TrainConfig`) without Lightning's loop around it, so the ratios measure the
methods, not the trainer.
"""

from __future__ import annotations

import functools
import statistics
import types

import torch

from bench.config import BackboneConfig, TrainConfig
from bench.cost import catalogue as models
from bench.method import Batch
from bench.perf import common

HELP = "optimizer steps/s per model vs the bare backbone"


def add_arguments(group) -> None:
    group.add_argument(
        "--steps", type=int, default=20, help="timed train steps per model and round"
    )
    group.add_argument(
        "--rounds", type=int, default=1, help="round-robin timing rounds (ratios: median)"
    )
    group.add_argument("--warmup", type=int, default=3)


class Bare:
    """The bare backbone: the same DiT (ids in, time input) trained with plain cross-entropy on
    the same batch, the reference every method's training cost is divided by."""

    uses_time = True

    def __init__(self, vocab: int, size: str, device: torch.device):
        from bench.backbones.dit import build_dit

        torch.manual_seed(0)
        self.backbone = build_dit(BackboneConfig(size=size), vocab, vocab).to(device)

    def loss(self, backbone, batch: Batch, t):
        logits = backbone(batch.x, t)
        ce = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), batch.x.flatten(), reduction="none"
        )
        m = batch.loss_mask.flatten().float()
        return types.SimpleNamespace(loss=(ce * m).sum() / m.sum().clamp_min(1.0), per_sample=None)

    def on_after_optimizer_step(self, backbone) -> None:
        pass

    def record_losses(self, t, per_sample, step) -> None:
        pass


def train_step(method, backbone, opt, batch: Batch, args, device: torch.device) -> None:
    """One step of the recipe without the trainer (:func:`bench.train.step.train_step`) on
    ``opt``, what :func:`optimizer` builds; a bare torch optimizer (bench.perf.calibrate's plain
    step) takes it without clipping, schedule or EMA."""
    from bench.train.step import Recipe

    recipe = opt if isinstance(opt, Recipe) else Recipe(opt)
    recipe.step(method, backbone, batch, autocast=lambda: common.autocast(device, args.precision))


def optimizer(
    backbone, device: torch.device, precision: str = "32", cfg: TrainConfig | None = None
):
    """The recipe's state as the trainer builds it (:class:`bench.train.step.Recipe`: AdamW,
    warm-up schedule, clipping, EMA) from ``cfg`` (default: the trainer's defaults); ``precision``
    bf16-mixed on CUDA: the for-each AdamW the trainer takes there."""
    from bench.train.step import Recipe

    mixed = device.type == "cuda" and precision == "bf16-mixed"
    return Recipe.build(backbone, cfg or TrainConfig(), device, mixed=mixed)


def run(model_list, args, device) -> list[dict]:
    """Steps/s of every model and of the bare backbone, timed round-robin: each round runs
    ``--steps`` steps of the bare backbone then of every model, and a model's ``vs_bare`` is the
    median over rounds of (its steps/s) / (the bare backbone's steps/s in the same round), so
    that machine load common to a round cancels."""
    entries = [(models.BARE, Bare(args.vocab, args.size, device), None)]
    for label, name, opts in model_list:
        method, backbone = common.make_model(
            name, opts, args.vocab, args.seq_len, args.size, device
        )
        models.fast_path(label, method, backbone)
        entries.append((label, method, backbone))
    batch = common.sudoku_batch(
        args.batch, args.vocab, args.seq_len, device, prompt_frac=args.prompt_frac
    )
    steps, peaks, times = {}, {}, {}
    for label, method, backbone in entries:
        backbone = backbone if backbone is not None else method.backbone
        backbone.train()
        opt = optimizer(backbone, device, args.precision)
        steps[label] = functools.partial(train_step, method, backbone, opt, batch, args, device)
        for _ in range(args.warmup):
            steps[label]()
        base = common.reset_peak(device, trim=False)
        steps[label]()
        peaks[label] = None if base is None else common.peak(device) - base
        times[label] = []
        common.progress(f"train {label}: warm")
    for r in range(args.rounds):
        for label, _, _ in entries:
            times[label].append(common.seconds_per_call(steps[label], 0, args.steps, device))
        common.progress(
            f"train round {r + 1}/{args.rounds}: "
            + ", ".join(f"{k} {1 / v[-1]:.2f}" for k, v in times.items())
        )
    rows = []
    for label, method, backbone in entries:
        backbone = backbone if backbone is not None else method.backbone
        ratio = [b / m for m, b in zip(times[label], times[models.BARE])]
        rows.append(
            {
                "bench": "train",
                "model": label,
                "steps_per_s": 1.0 / statistics.median(times[label]),
                "vs_bare": statistics.median(ratio),
                "overhead_x": statistics.median(
                    m / b for m, b in zip(times[label], times[models.BARE])
                ),
                "peak_step_MiB": None if peaks[label] is None else peaks[label] / 2**20,
                "n_params": sum(p.numel() for p in backbone.parameters()),
            }
        )
    models.relative(rows, "steps_per_s")
    return rows
