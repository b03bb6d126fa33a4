"""``genppl`` (opt-in): tokens/s of the Gen. PPL scorer.

The scorer is :func:`bench.evaluate.genppl.score.score_prepared` (what
``python -m bench.evaluate genppl`` runs) with ``--genppl-ref`` (default the offline
``smollm2-135m``) on ``--genppl-n`` synthetic samples of ``--genppl-len`` uniform random ids of
the reference LM's own vocabulary (no retokenisation: the model's time only), after one untimed
short batch.
"""

from __future__ import annotations

import math
import time

import torch

from bench.config import ConfigError
from bench.perf import common

HELP = "tokens/s of the Gen. PPL scorer (opt-in)"


def add_arguments(group) -> None:
    group.add_argument(
        "--genppl-ref", default="smollm2-135m", help="genppl: reference LM (as genppl --ref-model)"
    )
    group.add_argument("--genppl-n", type=int, default=8, help="genppl: synthetic samples")
    group.add_argument("--genppl-len", type=int, default=1024, help="genppl: ids per sample")
    group.add_argument("--genppl-batch-tokens", type=int, default=8192, help="genppl: batch size")


def run(model_list, args, device) -> list[dict]:
    from bench.evaluate.genppl import evaluator as genppl

    try:
        ref = genppl.load_reference(args.genppl_ref, device=device)
    except genppl.ReferenceModelError as e:
        raise ConfigError(f"genppl: {e}") from None
    V = int(ref.model.get_output_embeddings().weight.shape[0])
    gen = torch.Generator().manual_seed(0)
    items = []
    for _ in range(args.genppl_n):
        ids = torch.randint(0, V, (args.genppl_len,), generator=gen)
        ids[ids == ref.eot_id] = (ref.eot_id + 1) % V  # "paper" mode cuts at end-of-text
        body = ids.tolist()
        items.append(genppl.Prepared([ref.context_id, *body], [False] + [True] * len(body), False))
    warm = [genppl.Prepared(it.ids[:33], it.scored[:33], False) for it in items[:2]]
    genppl.score_prepared(ref, warm, batch_tokens=args.genppl_batch_tokens)
    stats = genppl.ScoreStats()
    common.sync(device)
    t0 = time.perf_counter()
    nll, cnt = genppl.score_prepared(ref, items, batch_tokens=args.genppl_batch_tokens, stats=stats)
    common.sync(device)
    wall = time.perf_counter() - t0
    scored = int(cnt.sum())
    common.progress(f"genppl {ref.name}: {scored} tokens scored in {wall:.2f} s")
    return [
        {
            "bench": "genppl",
            "model": ref.name,
            "samples": args.genppl_n,
            "sample_len": args.genppl_len,
            "context": ref.context,
            "batch_tokens": args.genppl_batch_tokens,
            "tokens_scored": scored,
            "tokens_run": stats.tokens,
            "chunks": stats.chunks,
            "seconds": wall,
            "tokens_per_s": scored / wall,
            "tokens_run_per_s": stats.tokens_per_s,
            "ppl_pooled": math.exp(float(nll.sum()) / scored) if scored else None,
        }
    ]
