"""``arcache`` (opt-in): generation with the KV cache vs re-reading the prefix every call.

For every registered method whose class has a KV cache (``kv_cache`` not None,
:mod:`bench.perf.capabilities`: AR): ``kv_cache = True`` vs ``False`` at ``--ar-len`` (default
512, ``--prompt-frac`` given), same weights and prompts, greedy by default: seconds, tokens/s,
speed-up, NFE of both, and whether the tokens match.
"""

from __future__ import annotations

import time

import torch

from bench import registry
from bench.config import ConfigError
from bench.perf import capabilities, common

HELP = "generation with the KV cache vs re-reading the prefix (opt-in)"


def add_arguments(group) -> None:
    group.add_argument("--ar-len", type=int, default=512, help="arcache: sequence length L")
    group.add_argument(
        "--ar-batches", type=int, nargs="+", default=[1], help="arcache: batch sizes to time"
    )
    group.add_argument(
        "--ar-new",
        type=int,
        default=0,
        help="arcache: time only the first N generated positions (0: all L - prompt)",
    )
    group.add_argument("--ar-decoding", default="greedy", choices=("greedy", "sample"))


def cached_methods() -> list[str]:
    """The registered methods whose sampler has a KV cache to switch off."""
    return [n for n, cls in registry.METHODS.items() if capabilities.kv_cache(cls) is not None]


def run(model_list, args, device) -> list[dict]:
    names = cached_methods()
    if not names:
        raise ConfigError("arcache: no registered method has a KV cache")
    return [row for name in names for row in _method_rows(name, args, device)]


def _method_rows(name: str, args, device) -> list[dict]:
    """One run each with and without the cache per batch size in ``--ar-batches``; greedy, so
    the two token tensors must be identical."""
    L = args.ar_len
    start = max(int(L * args.prompt_frac), 1)  # as common.sudoku_batch, AR.generation_start
    stop = L if not args.ar_new else min(L, start + args.ar_new)
    method, backbone = common.make_model(name, {}, args.vocab, stop, args.size, device)
    backbone.eval()
    rows = []
    for B in args.ar_batches:
        # the first ``stop`` positions of a length-L row: the model is causal, so these are
        # exactly the first ``stop - start`` generated tokens of the full-length run
        full = common.sudoku_batch(B, args.vocab, L, device, prompt_frac=args.prompt_frac)
        x, pmask = full.x[:, :stop], full.clean_mask[:, :stop]
        out, secs, nfe = {}, {}, {}
        for cached in (True, False):
            method.kv_cache = cached
            warm = min(stop, int(pmask[0].sum()) + 2)  # a short untimed run (allocations)
            method.sample(backbone, x[:, :warm], pmask[:, :warm], decoding=args.ar_decoding)
            method.nfe_counter = 0
            common.sync(device)
            t0 = time.perf_counter()
            with common.autocast(device, args.precision):
                out[cached] = method.sample(
                    backbone,
                    x,
                    pmask,
                    decoding=args.ar_decoding,
                    generator=torch.Generator(device=device).manual_seed(0),
                )
            common.sync(device)
            secs[cached], nfe[cached] = time.perf_counter() - t0, method.nfe_counter
            common.progress(
                f"arcache {name} B={B} kv_cache={cached}: {secs[cached]:.2f} s, {nfe[cached]} calls"
            )
        method.kv_cache = True
        generated = int((~pmask).sum())
        rows.append(
            {
                "bench": "arcache",
                "model": name,
                "batch": B,
                "seq_len": L,
                "prompt_len": start,
                "timed_positions": stop - start,
                "decoding": args.ar_decoding,
                "nfe_cache": nfe[True],
                "nfe_recompute": nfe[False],
                "s_cache": secs[True],
                "s_recompute": secs[False],
                "tokens_per_s_cache": generated / secs[True],
                "tokens_per_s_recompute": generated / secs[False],
                "speedup": secs[False] / secs[True],
                "identical_tokens": bool(torch.equal(out[True], out[False])),
            }
        )
    return rows
