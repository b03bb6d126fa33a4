"""``train``: optimizer steps/s of every model relative to the bare backbone, AR and MDLM.

Every paper model (each method's base variant, CANDI pure Gaussian, S-FLM on the S-arch) on one
backbone size and a Sudoku-shaped batch (vocab 12, first half given, second half scored). A
plain loop of ``method.loss`` + backward + AdamW + the method's post-step hook (S-arch
re-projection), so the ratios measure the methods, not the trainer.
"""

from __future__ import annotations

import functools
import statistics
import types

import torch

from bench.config import BackboneConfig
from bench.cost import catalogue as models
from bench.method import Batch, antithetic_times
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
        return types.SimpleNamespace(loss=(ce * m).sum() / m.sum().clamp_min(1.0))

    def on_after_optimizer_step(self, backbone) -> None:
        pass


def train_step(method, backbone, opt, batch: Batch, args, device: torch.device) -> None:
    """One step as the trainer takes it, without the trainer: loss, backward, AdamW, post-step."""
    t = antithetic_times(args.batch, device=device) if method.uses_time else None
    with common.autocast(device, args.precision):
        loss = method.loss(backbone, batch, t).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    method.on_after_optimizer_step(backbone)


def optimizer(backbone, device: torch.device):
    """AdamW as the trainer builds it (fused on CUDA)."""
    from bench.train import make_adamw

    return make_adamw(backbone.parameters(), lr=1e-4, device=device)


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
        opt = optimizer(backbone, device)
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
