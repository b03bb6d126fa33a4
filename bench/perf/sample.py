"""``sample``: sequences/s of each model's default sampler at a fixed NFE (AR spends one call
per generated position whatever the NFE; its row says how many it made)."""

from __future__ import annotations

import functools

import torch

from bench.cost import catalogue as models
from bench.method import Batch
from bench.perf import common

HELP = "sequences/s per model's default sampler at --nfe"


def add_arguments(group) -> None:
    group.add_argument("--sample-reps", type=int, default=2)


def sample_once(method, backbone, batch: Batch, args, device: torch.device) -> None:
    method.nfe_counter = 0
    with common.autocast(device, args.precision):
        method.sample(
            backbone,
            batch.x,
            batch.clean_mask,
            nfe=args.nfe,
            generator=torch.Generator(device=device).manual_seed(0),
        )


def run(model_list, args, device) -> list[dict]:
    rows = []
    for label, name, opts in model_list:
        method, backbone = common.make_model(
            name, opts, args.vocab, args.seq_len, args.size, device
        )
        models.fast_path(label, method, backbone)
        backbone.eval()
        batch = common.sudoku_batch(
            args.sample_batch, args.vocab, args.seq_len, device, prompt_frac=args.prompt_frac
        )

        once = functools.partial(sample_once, method, backbone, batch, args, device)
        dt = common.seconds_per_call(once, 1, max(1, args.sample_reps), device)
        generated = int((~batch.clean_mask).sum())
        rows.append(
            {
                "bench": "sample",
                "model": label,
                "nfe": method.nfe_counter,
                "seqs_per_s": args.sample_batch / dt,
                "tokens_per_s": generated / dt,
                "s_per_call": dt / max(1, method.nfe_counter),
            }
        )
        common.progress(
            f"sample {label}: {args.sample_batch / dt:.1f} seqs/s at {method.nfe_counter} calls"
        )
    models.relative(rows, "seqs_per_s")
    return rows
