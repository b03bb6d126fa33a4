"""``blockcache`` (opt-in): semi-autoregressive sampling with a block KV cache (Fast-dLLM's
prefix and dual caches) against none, the same weights, prompts and seeds.

For every method whose class declares block caches (``block_caches``,
:mod:`bench.perf.capabilities`: it takes the sampling options ``block_length``, ``block_cache``
and ``cache_refresh``), on a program task's held-out prompts (``--bc-task``, default the
CPU-sized GSM8K stand-in; ``none``: random prompts of the suite's ``--vocab`` / ``--seq-len``,
their lengths spread around ``--prompt-frac``), at a block length of ``--bc-block-frac`` of the
generated length G (the most generated positions of a row) and ``--bc-nfe`` calls (0: G, one
token per call as Fast-dLLM's ``steps = gen_length``), per decoding and setting (none, then
every cache at every ``--bc-refresh``): seconds per sample, the measured forward-equivalents per
sample (as the sample rows compute them: :func:`bench.measure.item_forward_equivalents`),
calls (full and partial), a partial call's seconds over a full one's, and the token agreement
with no cache (the fraction of generated positions equal). The weights: a trained run folder
(``--bc-run``), else random (seed 0; the zero-initialised adaLN and head drawn as PyTorch's
default ``nn.Linear`` init, else every block is the identity and the logits are constant).
"""

from __future__ import annotations

import math
import time

import torch

from bench import registry
from bench.config import ConfigError, TaskConfig, build
from bench.measure import CallTimer, item_forward_equivalents
from bench.perf import capabilities, common

HELP = "semi-AR sampling with a block KV cache (prefix / dual) vs none (opt-in)"


def add_arguments(group) -> None:
    group.add_argument(
        "--bc-task", default="arith_standin", help="blockcache: program task (none: random)"
    )
    group.add_argument("--bc-items", type=int, default=128, help="blockcache: prompts sampled")
    group.add_argument(
        "--bc-block-frac", type=float, default=0.25, help="blockcache: block length / G"
    )
    group.add_argument("--bc-nfe", type=int, default=0, help="blockcache: calls (0: G)")
    group.add_argument(
        "--bc-decodings", nargs="+", default=["ancestral", "confidence"], help="blockcache"
    )
    group.add_argument("--bc-refresh", type=int, nargs="+", default=[0], help="blockcache")
    group.add_argument("--bc-temperature", type=float, default=1.0, help="blockcache")
    group.add_argument("--bc-reps", type=int, default=2, help="blockcache: timed runs (best)")
    group.add_argument("--bc-run", default="", help="blockcache: a trained run folder")


def cached_methods(model_list) -> list[tuple]:
    """The models of ``model_list`` whose method declares block caches."""
    return [m for m in model_list if capabilities.block_caches(registry.METHODS[m[1]])]


def run(model_list, args, device) -> list[dict]:
    if args.bc_run:
        models = [_trained(args.bc_run, device)]
    else:
        task = _task(args.bc_task)
        models = [_random(m, task, args, device) for m in cached_methods(model_list)]
        if not models:
            raise ConfigError("blockcache: no registered method has a block cache")
    return [row for model in models for row in _model_rows(*model, args, device)]


def _task(name: str):
    if name == "none":
        return None
    if name not in registry.TASKS:
        raise ConfigError(
            f"--bc-task: unknown task {name!r} (known: none, {', '.join(registry.TASKS)})"
        )
    return registry.make_task(build(TaskConfig, {"name": name}, where="--bc-task"))


def _random(model, task, args, device):
    """(label, method, backbone, task, modes) with random weights (module docstring)."""
    label, name, opts = model
    vocab = task.vocab_size if task else args.vocab
    L = task.seq_len if task else args.seq_len
    method, backbone = common.make_model(name, opts, vocab, L, args.size, device)
    torch.manual_seed(0)
    for mod in backbone.modules():
        if isinstance(mod, torch.nn.Linear) and not mod.weight.any():
            mod.reset_parameters()  # adaLN-Zero and the zero head: PyTorch's default init
    return label, method, backbone.eval(), task, capabilities.block_caches(method)


def _trained(run_dir: str, device):
    """(label, method, backbone, task, modes) of a trained run folder (its EMA weights)."""
    from bench.cell_model import cell_task, method_backbone
    from bench.source_model import resolve_source, trained_cell
    from bench.weights import load_weights

    source = resolve_source(run_dir)
    if source.kind != "run":
        raise ConfigError(f"--bc-run: {run_dir} is not a run folder (cell.json + weights.pt)")
    tc = trained_cell(source)
    task = cell_task(tc)
    method, backbone = method_backbone(tc, task)
    load_weights(method, backbone, source.run_dir / "weights.pt")
    modes = capabilities.block_caches(method)
    if not modes:
        raise ConfigError(f"--bc-run: {tc.method} has no block cache")
    return tc.label(), method.to(device), backbone.to(device).eval(), task, modes


def _prompts(task, method, args, device):
    """(prompt, prompt mask) of ``--bc-items`` rows: the task's held-out prompts, or random ids
    with prompt lengths spread over 0.75-1.25 x ``--prompt-frac`` of L."""
    n = args.bc_items
    if task is not None:
        data = task.eval_data(task.groups()[0], n)
        return data.x.to(device), data.clean_mask.to(device)
    g = torch.Generator().manual_seed(0)
    L = method.seq_len
    frac = args.prompt_frac * (0.75 + 0.5 * torch.rand(n, generator=g))
    pmask = torch.arange(L)[None] < (frac * L).long().clamp(1, L - 1)[:, None]
    x = torch.randint(0, method.vocab_size, (n, L), generator=g)
    return x.to(device), pmask.to(device)


def _model_rows(label, method, backbone, task, modes, args, device) -> list[dict]:
    prompt, pmask = _prompts(task, method, args, device)
    G = int((~pmask).sum(-1).max())
    bl = max(1, math.ceil(G * args.bc_block_frac))
    nfe = args.bc_nfe or G
    settings = [("none", 0)] + [(mode, r) for mode in modes for r in args.bc_refresh]
    base = {
        "bench": "blockcache",
        "model": label,
        "task": task.name if task is not None else "none",
        "size": args.size if not args.bc_run else "run",
        "vocab": method.vocab_size,
        "seq_len": method.seq_len,
        "items": len(prompt),
        "batch": args.sample_batch,
        "gen_len": G,
        "block_length": bl,
        "nfe": nfe,
    }
    rows = []
    for decoding in args.bc_decodings:
        ref = ref_fe = None
        for mode, refresh in settings:
            opts = {"block_length": bl, "block_cache": mode, "cache_refresh": refresh}
            sampler = _sampler(method, opts, device)
            ids, m = _best_run(sampler, backbone, prompt, pmask, nfe, decoding, args, device)
            ref = ids if ref is None else ref
            ref_fe = m["fe_per_sample"] if ref_fe is None else ref_fe
            gen = ~pmask
            agree = float(((ids == ref) & gen).sum()) / max(1, int(gen.sum()))
            rows.append(
                {
                    **base,
                    "decoding": decoding,
                    "block_cache": mode,
                    "cache_refresh": refresh,
                    **m,
                    "fe_vs_none": m["fe_per_sample"] / ref_fe,
                    "agreement": agree,
                }
            )
            common.progress(
                f"blockcache {label} {decoding} {mode} r={refresh}: {m['s_per_sample']:.4f} "
                f"s/sample, {m['fe_per_sample']:.2f} fe, agreement {agree:.3f}"
            )
    return rows


def _sampler(method, opts: dict, device):
    """``method`` with the block options (its state: the trained model's)."""
    cls = type(method)
    fields = {**{k: getattr(method.opts, k) for k in method.opts.__dataclass_fields__}, **opts}
    sampler = cls(build(cls.Options, fields, where="blockcache"), method.vocab_size, method.seq_len)
    sampler.load_state_dict(method.state_dict())
    return sampler.to(device)


def _best_run(sampler, backbone, prompt, pmask, nfe, decoding, args, device):
    """One untimed run, then ``--bc-reps`` timed ones; the ids and the measures of the fastest."""
    best = None
    for rep in range(1 + max(1, args.bc_reps)):
        ids, m = _timed(sampler, backbone, prompt, pmask, nfe, decoding, args, device)
        if rep and (best is None or m["s_per_sample"] < best[1]["s_per_sample"]):
            best = (ids, m)
    return best


def _timed(sampler, backbone, prompt, pmask, nfe, decoding, args, device):
    """The samples of every batch of ``--sample-batch`` rows (seed = the batch's first row) and
    the measures over them, the sample kind's way (bench/kinds/sample.py)."""
    outs, fe, costs = [], [], []
    for start in range(0, len(prompt), args.sample_batch):
        sl = slice(start, start + args.sample_batch)
        timer = sampler.call_timer = CallTimer(device)
        gen = torch.Generator(device=device).manual_seed(start)
        common.sync(device)
        t0 = time.perf_counter()
        with common.autocast(device, args.precision):
            ids = sampler.sample(
                backbone,
                prompt[sl],
                pmask[sl],
                nfe=nfe,
                temperature=args.bc_temperature,
                decoding=decoding,
                generator=gen,
            )
        outs.append(ids.cpu())  # on the CPU: the work is done
        cost = {
            "sample_s": time.perf_counter() - t0,
            "network_s": timer.seconds(),
            "calls": timer.calls,
            "part_calls": timer.part_calls,
            "part_s": timer.part_seconds(),
        }
        del sampler.call_timer
        fe += item_forward_equivalents(cost, sampler.row_calls.tolist())
        costs.append(cost)
    total = {k: sum(c[k] for c in costs) for k in costs[0]}
    full_n = total["calls"] - total["part_calls"]
    full_s = (total["network_s"] - total["part_s"]) / full_n
    part = total["part_s"] / total["part_calls"] if total["part_calls"] else None
    return torch.cat(outs).to(prompt.device), {
        "s_per_sample": total["sample_s"] / len(prompt),
        "fe_per_sample": sum(fe) / len(fe),
        "calls": total["calls"],
        "partial_calls": total["part_calls"],
        "partial_over_full": part / full_s if part is not None else None,
    }
