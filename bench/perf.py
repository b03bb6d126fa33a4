"""Speed and memory benchmarks: ``python -m bench.perf [train|sample|velocity ...]``.

Targets and timings live here, not in tests. Three benchmarks, each on CPU or GPU
(``--device``; bf16 autocast on CUDA unless ``--precision 32``):

- ``train``: optimizer steps/s of every paper model (each method's base variant, CANDI pure
  Gaussian, S-FLM on the S-arch) on one backbone size and a Sudoku-shaped batch (vocab 12,
  first half given, second half scored), relative to AR and MDLM. A plain loop of
  ``method.loss`` + backward + AdamW + the method's post-step hook (S-arch re-projection), so
  the ratios measure the methods, not the trainer.
- ``sample``: sequences/s of each model's default sampler at a fixed NFE (AR spends one call
  per generated position whatever the NFE; its row says how many it made).
- ``velocity``: the S-FLM exact-velocity sampling step at a GPT-2-sized vocabulary (default
  |V| = 49,152, d = 768, L = 512, batch 1, the ``small`` DiT): the time of one sampler step
  outside the denoiser (softmax, ``exact_velocity``, exp map) relative to one denoiser forward,
  and the peak extra memory of the run in units of one float64 (B, L, V) buffer. Timed through
  the real sampler (``SFLM.sample``) with the backbone call wrapped, not a re-implementation.
- ``arcache`` (opt-in): AR generation with the KV cache vs re-reading the prefix every call
  (``AR.kv_cache = False``) at ``--ar-len`` (default 512, ``--prompt-frac`` given), same weights
  and prompts, greedy: seconds, tokens/s, speed-up, NFE of both, and whether the tokens match.
- ``genppl`` (opt-in): tokens/s of the Gen. PPL scorer (``bench.evaluate.genppl``) with
  ``--genppl-ref`` (default the offline ``smollm2-135m``) on ``--genppl-n`` random samples of
  ``--genppl-len`` ids of the reference's own vocabulary.

Results print as a table and are written atomically to ``--out`` (JSON) when given.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import platform
import statistics
import sys
import time
import types
from pathlib import Path

import torch

from bench import atomic, registry
from bench.config import BackboneConfig, ConfigError, build
from bench.method import Batch, antithetic_times

#: (label, method, options): the models of the paper's comparison
MODELS = [
    ("ar", "ar", {}),
    ("mdlm", "mdlm", {}),
    ("duo", "duo", {}),
    ("candi", "candi", {}),
    ("candi/pure-gaussian", "candi", {"pure_gaussian": True}),
    ("flm", "flm", {}),
    ("sflm", "sflm", {}),
    ("sflm/sarch", "sflm", {"backbone": "sarch"}),
]
#: opt-in speed paths of the same models (equal up to float rounding, so off by default: results
#: stay bit-identical); chosen with ``--models`` only: label -> (object, attribute set to True)
FAST_PATHS = {
    "duo+fused": ("duo", {}, "method", "fused_nelbo"),
    "sflm/sarch+fold": ("sflm", {"backbone": "sarch"}, "backbone", "fold_logit_scale"),
}
VARIANTS = [(label, name, opts) for label, (name, opts, _, _) in FAST_PATHS.items()]


def _fast_path(label: str, method, backbone) -> None:
    if label in FAST_PATHS:
        _, _, which, attr = FAST_PATHS[label]
        setattr(method if which == "method" else backbone, attr, True)


#: ``--scale`` presets: (DiT size, |V|, L, batch, fraction of each row given as prompt). The GPU
#: scales are the paper's (Sudoku: tiny DiT, batch 256; TinyGSM / OWT: small DiT, per-GPU batch
#: 64 / 32); the ``-cpu`` ones keep |V| and shrink the network, L and batch to fit 2 cores.
SCALES: dict[str, dict] = {
    "sudoku": {"size": "tiny", "vocab": 12, "seq_len": 180, "batch": 256, "prompt_frac": 0.5},
    "tinygsm": {"size": "small", "vocab": 49_153, "seq_len": 512, "batch": 64, "prompt_frac": 0.5},
    "owt": {"size": "small", "vocab": 50_258, "seq_len": 1024, "batch": 32, "prompt_frac": 0.0},
    "sudoku-cpu": {
        "size": "cpu-small",
        "vocab": 12,
        "seq_len": 180,
        "batch": 32,
        "prompt_frac": 0.5,
    },
    "tinygsm-cpu": {
        "size": "cpu-small",
        "vocab": 49_153,
        "seq_len": 256,
        "batch": 4,
        "prompt_frac": 0.5,
    },
    "owt-cpu": {
        "size": "cpu-small",
        "vocab": 50_258,
        "seq_len": 512,
        "batch": 2,
        "prompt_frac": 0.0,
    },
}
#: the benchmarks ``main`` knows, in run order
BENCHES = ("train", "sample", "velocity", "agreement", "arcache", "genppl")
LEGACY = {"size": "cpu-small", "vocab": 12, "seq_len": 180, "batch": 32, "prompt_frac": 0.5}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _autocast(device: torch.device, precision: str):
    if device.type == "cuda" and precision == "bf16-mixed":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _make(method: str, options: dict, vocab: int, seq_len: int, size: str, device: torch.device):
    cls = registry.METHODS[method]
    m = cls(build(cls.Options, options, where=f"{method}.options"), vocab, seq_len)
    torch.manual_seed(0)
    backbone = m.build_backbone(BackboneConfig(size=size)).to(device)
    return m.to(device), backbone


def _sudoku_batch(
    n: int, vocab: int, seq_len: int, device: torch.device, seed: int = 0, prompt_frac: float = 0.5
) -> Batch:
    """Random ids; the first ``prompt_frac`` of each row given (clean), the rest scored."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (n, seq_len), generator=g)
    clean = torch.zeros(n, seq_len, dtype=torch.bool)
    clean[:, : int(seq_len * prompt_frac)] = True
    return Batch(x.to(device), clean.to(device), (~clean).to(device))


class _Bare:
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


def _train_step(method, backbone, opt, batch: Batch, args, device: torch.device) -> None:
    t = antithetic_times(args.batch, device=device) if method.uses_time else None
    with _autocast(device, args.precision):
        loss = method.loss(backbone, batch, t).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    method.on_after_optimizer_step(backbone)


def _sample_once(method, backbone, batch: Batch, args, device: torch.device) -> None:
    method.nfe_counter = 0
    with _autocast(device, args.precision):
        method.sample(
            backbone,
            batch.x,
            batch.clean_mask,
            nfe=args.nfe,
            generator=torch.Generator(device=device).manual_seed(0),
        )


def _seconds_per_call(fn, warmup: int, reps: int, device: torch.device) -> float:
    """Wall seconds per call of ``fn`` over ``reps`` timed calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / reps


def _optimizer(backbone, device: torch.device):
    """AdamW as the trainer builds it (fused on CUDA)."""
    from bench.train import make_adamw

    return make_adamw(backbone.parameters(), lr=1e-4, device=device)


def bench_train(models, args, device) -> list[dict]:
    """Steps/s of every model and of the bare backbone, timed round-robin: each round runs
    ``--steps`` steps of the bare backbone then of every model, and a model's ``vs_bare`` is the
    median over rounds of (its steps/s) / (the bare backbone's steps/s in the same round), so
    that machine load common to a round cancels."""
    entries = [("bare", _Bare(args.vocab, args.size, device), None)]
    for label, name, opts in models:
        method, backbone = _make(name, opts, args.vocab, args.seq_len, args.size, device)
        _fast_path(label, method, backbone)
        entries.append((label, method, backbone))
    batch = _sudoku_batch(
        args.batch, args.vocab, args.seq_len, device, prompt_frac=args.prompt_frac
    )
    steps, peaks, times = {}, {}, {}
    for label, method, backbone in entries:
        backbone = backbone if backbone is not None else method.backbone
        backbone.train()
        opt = _optimizer(backbone, device)
        steps[label] = functools.partial(_train_step, method, backbone, opt, batch, args, device)
        for _ in range(args.warmup):
            steps[label]()
        base = _reset_peak(device, trim=False)
        steps[label]()
        peaks[label] = None if base is None else _peak(device) - base
        times[label] = []
        _progress(f"train {label}: warm")
    for r in range(args.rounds):
        for label, _, _ in entries:
            times[label].append(_seconds_per_call(steps[label], 0, args.steps, device))
        _progress(
            f"train round {r + 1}/{args.rounds}: "
            + ", ".join(f"{k} {1 / v[-1]:.2f}" for k, v in times.items())
        )
    rows = []
    for label, method, backbone in entries:
        backbone = backbone if backbone is not None else method.backbone
        ratio = [b / m for m, b in zip(times[label], times["bare"])]
        rows.append(
            {
                "bench": "train",
                "model": label,
                "steps_per_s": 1.0 / statistics.median(times[label]),
                "vs_bare": statistics.median(ratio),
                "overhead_x": statistics.median(m / b for m, b in zip(times[label], times["bare"])),
                "peak_step_MiB": None if peaks[label] is None else peaks[label] / 2**20,
                "n_params": sum(p.numel() for p in backbone.parameters()),
            }
        )
    _relative(rows, "steps_per_s")
    return rows


def bench_sample(models, args, device) -> list[dict]:
    rows = []
    for label, name, opts in models:
        method, backbone = _make(name, opts, args.vocab, args.seq_len, args.size, device)
        _fast_path(label, method, backbone)
        backbone.eval()
        batch = _sudoku_batch(
            args.sample_batch, args.vocab, args.seq_len, device, prompt_frac=args.prompt_frac
        )

        run = functools.partial(_sample_once, method, backbone, batch, args, device)
        dt = _seconds_per_call(run, 1, max(1, args.sample_reps), device)
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
        _progress(
            f"sample {label}: {args.sample_batch / dt:.1f} seqs/s at {method.nfe_counter} calls"
        )
    _relative(rows, "seqs_per_s")
    return rows


def bench_velocity(args, device) -> list[dict]:
    """One exact-velocity sampler step vs one denoiser forward, through SFLM.sample."""
    V, d, L, B = args.vel_vocab, args.vel_dim, args.vel_len, args.vel_batch
    method, backbone = _make("sflm", {}, V, L, args.vel_size, device)
    if backbone.embed.weight.shape[-1] != d:
        raise ConfigError(
            f"--vel-dim {d}: the {args.vel_size!r} DiT has width "
            f"{backbone.embed.weight.shape[-1]} (pick --vel-size to match)"
        )
    backbone.eval()
    forward_s: list[float] = []
    real_call = method.call

    def timed_call(bb, *a, **k):
        _sync(device)
        t0 = time.perf_counter()
        out = real_call(bb, *a, **k)
        _sync(device)
        forward_s.append(time.perf_counter() - t0)
        return out

    method.call = timed_call
    prompt = torch.zeros(B, L, dtype=torch.long, device=device)
    pmask = torch.zeros(B, L, dtype=torch.bool, device=device)

    def run(nfe):
        forward_s.clear()
        _sync(device)
        t0 = time.perf_counter()
        with _autocast(device, args.precision):
            method.sample(
                backbone,
                prompt,
                pmask,
                nfe=nfe,
                float64=not args.vel_float32,
                generator=torch.Generator(device=device).manual_seed(0),
            )
        _sync(device)
        return time.perf_counter() - t0

    run(2)  # warm-up
    peaks = {}
    for label, n in (("forward_only", 1), ("sampler", args.vel_steps + 1)):
        base = _reset_peak(device)
        total = run(n)  # n = 1: one decode-only call; else vel_steps velocity steps + a decode call
        peaks[label] = None if base is None else _peak(device) - base
    fwd = sum(forward_s) / len(forward_s)
    step = (total - sum(forward_s)) / args.vel_steps
    buf = B * L * V * (4 if args.vel_float32 else 8)
    extra = None if None in peaks.values() else max(0, peaks["sampler"] - peaks["forward_only"])
    row = {
        "bench": "velocity",
        "vocab": V,
        "dim": d,
        "seq_len": L,
        "batch": B,
        "size": args.vel_size,
        "dtype": "float32" if args.vel_float32 else "float64",
        "forward_s": fwd,
        "step_s": step,
        "step_over_forward": step / fwd,
        "peak_forward_only_bytes": peaks["forward_only"],
        "peak_sampler_bytes": peaks["sampler"],
        "velocity_extra_blv_buffers": None if extra is None else extra / buf,
        "note": (
            "peaks are above the memory in use before the run (CUDA: allocator; CPU: resident "
            "set, VmHWM reset through /proc/self/clear_refs); the velocity's extra is the "
            "sampler's peak minus the decode-only run's, in float (B, L, V) buffers of the "
            "sampling dtype"
        ),
    }
    _progress(
        f"velocity: step {step * 1e3:.1f} ms vs forward {fwd * 1e3:.1f} ms ({step / fwd:.2f}x)"
    )
    return [row]


def agreement_cells(run_dir: Path, decoding: str = "exact", max_cells: int = 0):
    """(train cell, [sample cells]) of a trained run folder: the sweep's own sample cells
    (``samples/<id>.pt``) with the given decoding, sorted by id; ``max_cells`` > 0 keeps the
    first ones. Raises ConfigError naming the folder when it holds no such model or cell."""
    from bench.plan import SampleCell, TrainCell

    path = Path(run_dir) / "cell.json"
    if not path.is_file() or not (Path(run_dir) / "weights.pt").is_file():
        raise ConfigError(f"--runs {run_dir}: no cell.json / weights.pt (not a trained run)")
    tc = TrainCell(**json.loads(path.read_text()))
    tc = dataclasses.replace(tc, results_dir=str(Path(run_dir).parent.parent))
    if tc.method != "sflm":
        raise ConfigError(f"--runs {run_dir}: method {tc.method!r}, not sflm")
    cells = []
    for f in sorted((Path(run_dir) / "samples").glob("*.pt")):
        c = torch.load(f, map_location="cpu", weights_only=False)["cell"]
        if c["decoding"] == decoding:
            c.pop("train", None)
            cells.append(SampleCell(train=tc, **c))
    if not cells:
        raise ConfigError(f"--runs {run_dir}: no sampled cell with decoding {decoding!r}")
    return tc, cells[:max_cells] if max_cells > 0 else cells


def token_agreement(sample, prompt, pmask, seed: int) -> dict:
    """Sample the same batch in float64 and float32 from one seed (``sample(prompt, pmask,
    float64, generator)`` -> ids) and count the positions whose final tokens agree."""

    def run(f64):
        g = torch.Generator(device=prompt.device).manual_seed(seed)
        return sample(prompt, pmask, f64, g)

    a, b = run(True), run(False)
    same = a == b
    return {
        "positions": same.numel(),
        "agree": int(same.sum()),
        "generated": int((~pmask).sum()),
        "generated_agree": int((same & ~pmask).sum()),
        "float64_ids": a,
    }


def bench_agreement(args, device) -> list[dict]:
    """Float32 vs float64 S-FLM sampling on trained models: each sweep sample cell of every
    ``--runs`` folder re-run in both dtypes with the sweep's seeds (``bench.cells._sample``),
    and the fraction of final tokens that agree; ``float64_matches_store`` compares the
    float64 run with the ids the sweep stored."""
    runs = [
        (run_dir, *agreement_cells(Path(run_dir), args.agree_decoding, args.agree_max_cells))
        for run_dir in args.runs
    ]  # every folder checked before the (slow) imports below
    from bench.cells import _method_backbone, _task, batch_seed, cell_sampler, sample_batch
    from bench.train import load_weights

    rows = []
    for run_dir, tc, cells in runs:
        task = _task(tc)
        method, backbone = _method_backbone(tc, task)
        load_weights(method, backbone, tc.weights)
        backbone.to(device).eval()
        method.to(device)
        samplers: dict = {}
        for c in cells:
            sampler = cell_sampler(method, c, task, device, samplers)
            data = task.eval_data(c.subset, c.n_samples)
            stored = torch.load(tc.run_dir / "samples" / f"{c.id}.pt", weights_only=False)["ids"]
            tot = {"positions": 0, "agree": 0, "generated": 0, "generated_agree": 0}
            f64 = []
            t0 = time.perf_counter()
            for bi in range(0, len(data), c.batch_size):
                sl = slice(bi, bi + c.batch_size)

                def sample(prompt, pmask, f64_, gen, c=c, sampler=sampler, bb=backbone):
                    return sample_batch(sampler, bb, c, prompt, pmask, gen, float64=f64_)

                res = token_agreement(
                    sample,
                    data.x[sl].to(device),
                    data.clean_mask[sl].to(device),
                    batch_seed(c, bi),  # the sweep's per-batch seed
                )
                f64.append(res.pop("float64_ids"))
                for k in tot:
                    tot[k] += res[k]
            rows.append(
                {
                    "bench": "agreement",
                    "run": Path(run_dir).name,
                    "task": tc.task["name"],
                    "vocab": method.vocab_size,
                    "cell": c.id,
                    "subset": c.subset,
                    "nfe": c.nfe,
                    "temperature": c.temperature,
                    "decoding": c.decoding,
                    "samples": len(data),
                    **tot,
                    "agreement": tot["agree"] / tot["positions"],
                    "generated_agreement": tot["generated_agree"] / max(1, tot["generated"]),
                    "float64_matches_store": bool(torch.equal(torch.cat(f64), stored)),
                    "wall_s": time.perf_counter() - t0,
                }
            )
            _progress(
                f"agreement {rows[-1]['run']} {c.label()}: "
                f"{rows[-1]['generated_agreement']:.5f} of generated positions"
            )
    if rows:
        pos = sum(r["generated"] for r in rows)
        rows.append(
            {
                "bench": "agreement",
                "run": "all",
                "cell": f"{len(rows)} cells",
                "positions": sum(r["positions"] for r in rows),
                "agree": sum(r["agree"] for r in rows),
                "generated": pos,
                "generated_agree": sum(r["generated_agree"] for r in rows),
                "agreement": sum(r["agree"] for r in rows) / sum(r["positions"] for r in rows),
                "generated_agreement": sum(r["generated_agree"] for r in rows) / max(1, pos),
                "float64_matches_store": all(r["float64_matches_store"] for r in rows),
            }
        )
    return rows


def bench_arcache(args, device) -> list[dict]:
    """AR decoding with the KV cache (``AR.kv_cache``, the default) vs re-reading the prefix
    every call (``kv_cache = False``), on the same weights and prompts, one run each per batch
    size in ``--ar-batches``; greedy, so the two token tensors must be identical."""
    L = args.ar_len
    start = max(int(L * args.prompt_frac), 1)  # as _sudoku_batch, AR.generation_start
    stop = L if not args.ar_new else min(L, start + args.ar_new)
    method, backbone = _make("ar", {}, args.vocab, stop, args.size, device)
    backbone.eval()
    rows = []
    for B in args.ar_batches:
        # the first ``stop`` positions of a length-L row: AR is causal, so these are exactly the
        # first ``stop - start`` generated tokens of the full-length run
        full = _sudoku_batch(B, args.vocab, L, device, prompt_frac=args.prompt_frac)
        x, pmask = full.x[:, :stop], full.clean_mask[:, :stop]
        out, secs, nfe = {}, {}, {}
        for cached in (True, False):
            method.kv_cache = cached
            warm = min(stop, int(pmask[0].sum()) + 2)  # a short untimed run (allocations)
            method.sample(backbone, x[:, :warm], pmask[:, :warm], decoding=args.ar_decoding)
            method.nfe_counter = 0
            _sync(device)
            t0 = time.perf_counter()
            with _autocast(device, args.precision):
                out[cached] = method.sample(
                    backbone,
                    x,
                    pmask,
                    decoding=args.ar_decoding,
                    generator=torch.Generator(device=device).manual_seed(0),
                )
            _sync(device)
            secs[cached], nfe[cached] = time.perf_counter() - t0, method.nfe_counter
            _progress(f"arcache B={B} kv_cache={cached}: {secs[cached]:.2f} s, {nfe[cached]} calls")
        method.kv_cache = True
        generated = int((~pmask).sum())
        rows.append(
            {
                "bench": "arcache",
                "model": "ar",
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


def bench_genppl(args, device) -> list[dict]:
    """Tokens/s of the Gen. PPL scorer (``bench.evaluate.genppl.score_prepared``, what
    ``python -m bench.evaluate genppl`` runs) on ``--genppl-n`` synthetic samples of
    ``--genppl-len`` uniform random ids of the reference LM's own vocabulary (no
    retokenisation: the model's time only), after one untimed short batch."""
    from bench.evaluate import genppl

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
    _sync(device)
    t0 = time.perf_counter()
    nll, cnt = genppl.score_prepared(ref, items, batch_tokens=args.genppl_batch_tokens, stats=stats)
    _sync(device)
    wall = time.perf_counter() - t0
    scored = int(cnt.sum())
    _progress(f"genppl {ref.name}: {scored} tokens scored in {wall:.2f} s")
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


def _reset_peak(device: torch.device, trim: bool = True) -> int | None:
    """Reset the peak-memory counter; return the memory in use now (None: cannot reset).
    ``trim=False`` leaves malloc's settings alone (the train bench: a fixed mmap threshold would
    slow every later step; glibc serves the large (B, L, V) buffers by mmap anyway)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    if trim:
        _trim_heap()
    try:  # writing 5 resets the process's peak resident set size (VmHWM), Linux >= 4.0
        Path("/proc/self/clear_refs").write_text("5")
        return _proc_status("VmRSS")
    except OSError:
        return None


def _trim_heap() -> None:
    """CPU: make freed large buffers leave the resident set (fixed mmap threshold + malloc_trim),
    so that a peak measured after a warm-up counts them again."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD: no dynamic growth after frees
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _peak(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return _proc_status("VmHWM")


def _proc_status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {key}")


def _relative(rows: list[dict], key: str) -> None:
    by = {r["model"]: r[key] for r in rows}
    for r in rows:
        for ref in ("ar", "mdlm"):
            if ref in by:
                r[f"vs_{ref}"] = r[key] / by[ref]


def _loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _table(rows: list[dict]) -> str:
    cols = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in ("bench", "note")]
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.perf", description=__doc__.split("\n")[0])
    ap.add_argument(
        "benches",
        nargs="*",
        default=["train", "sample", "velocity"],
        help="any of train, sample, velocity, agreement, arcache, genppl (default: the first "
        "three)",
    )
    ap.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda")
    ap.add_argument(
        "--precision",
        default="auto",
        choices=("auto", "32", "bf16-mixed"),
        help="auto: bf16-mixed autocast on CUDA, fp32 on CPU (as the trainer)",
    )
    ap.add_argument(
        "--models",
        default="",
        help="comma-separated labels (default: all of "
        + ", ".join(m[0] for m in MODELS)
        + "; opt-in fast paths: "
        + ", ".join(FAST_PATHS)
        + ")",
    )
    ap.add_argument(
        "--scale",
        choices=tuple(SCALES),
        help="preset size / |V| / L / batch: "
        + "; ".join(
            f"{k} = {v['size']}, |V| {v['vocab']}, L {v['seq_len']}, batch {v['batch']}"
            for k, v in SCALES.items()
        )
        + " (explicit flags override it)",
    )
    ap.add_argument(
        "--size", help="DiT size for train/sample (default cpu-small; tiny = paper Sudoku)"
    )
    ap.add_argument("--vocab", type=int, help="train/sample vocabulary (default Sudoku: 12)")
    ap.add_argument("--seq-len", type=int, help="train/sample length (default 9x9 Sudoku: 180)")
    ap.add_argument("--batch", type=int, help="train batch (default 32)")
    ap.add_argument("--sample-batch", type=int, help="sampling batch (default: --batch)")
    ap.add_argument(
        "--prompt-frac", type=float, help="fraction of each row given as prompt (default 0.5)"
    )
    ap.add_argument("--steps", type=int, default=20, help="timed train steps per model and round")
    ap.add_argument(
        "--rounds", type=int, default=1, help="round-robin timing rounds (ratios: median)"
    )
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--nfe", type=int, default=16, help="sampling NFE")
    ap.add_argument("--sample-reps", type=int, default=2)
    ap.add_argument("--vel-vocab", type=int, default=49_152)
    ap.add_argument("--vel-dim", type=int, default=768)
    ap.add_argument("--vel-len", type=int, default=512)
    ap.add_argument("--vel-batch", type=int, default=1)
    ap.add_argument(
        "--vel-size", default="small", help="DiT size of the velocity benchmark's denoiser"
    )
    ap.add_argument("--vel-steps", type=int, default=3, help="timed velocity steps")
    ap.add_argument(
        "--vel-float32", action="store_true", help="sample in float32 (default float64)"
    )
    ap.add_argument("--ar-len", type=int, default=512, help="arcache: sequence length L")
    ap.add_argument(
        "--ar-batches", type=int, nargs="+", default=[1], help="arcache: batch sizes to time"
    )
    ap.add_argument(
        "--ar-new",
        type=int,
        default=0,
        help="arcache: time only the first N generated positions (0: all L - prompt)",
    )
    ap.add_argument("--ar-decoding", default="greedy", choices=("greedy", "sample"))
    ap.add_argument(
        "--genppl-ref", default="smollm2-135m", help="genppl: reference LM (as genppl --ref-model)"
    )
    ap.add_argument("--genppl-n", type=int, default=8, help="genppl: synthetic samples")
    ap.add_argument("--genppl-len", type=int, default=1024, help="genppl: ids per sample")
    ap.add_argument("--genppl-batch-tokens", type=int, default=8192, help="genppl: batch size")
    ap.add_argument("--runs", nargs="+", default=[], help="agreement: trained S-FLM run folders")
    ap.add_argument("--agree-decoding", default="exact", help="agreement: decoding to compare")
    ap.add_argument(
        "--agree-max-cells", type=int, default=0, help="agreement: first N cells per run (0: all)"
    )
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--out", help="write results JSON here (atomically)")
    ap.add_argument("--md", help="also write the tables as Markdown here (atomically)")
    args = ap.parse_args(argv)
    for key, val in {**LEGACY, **(SCALES[args.scale] if args.scale else {})}.items():
        if getattr(args, key) is None:
            setattr(args, key, val)
    if args.sample_batch is None:
        args.sample_batch = args.batch

    unknown = [b for b in args.benches if b not in BENCHES]
    if unknown:
        print(
            f"error: unknown benchmark {unknown[0]!r} (known: {', '.join(BENCHES)})",
            file=sys.stderr,
        )
        return 2
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device not in ("cpu", "cuda") or (
        args.device == "cuda" and not torch.cuda.is_available()
    ):
        print(f"error: --device {args.device!r} is not available here", file=sys.stderr)
        return 2
    if args.precision == "auto":
        args.precision = "bf16-mixed" if args.device == "cuda" else "32"
    labels = [s for s in args.models.split(",") if s] or [m[0] for m in MODELS]
    bad = [s for s in labels if s not in {m[0] for m in MODELS + VARIANTS}]
    if bad:
        known = ", ".join(m[0] for m in MODELS + VARIANTS)
        print(
            f"error: --models: unknown model {bad[0]!r} (known: {known})",
            file=sys.stderr,
        )
        return 2
    models = [m for m in MODELS + VARIANTS if m[0] in labels]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows: list[dict] = []
    try:
        if "train" in args.benches:
            rows += bench_train(models, args, device)
        if "sample" in args.benches:
            rows += bench_sample(models, args, device)
        if "velocity" in args.benches:
            rows += bench_velocity(args, device)
        if "agreement" in args.benches:
            if not args.runs:
                raise ConfigError("agreement: give the trained S-FLM run folders with --runs")
            rows += bench_agreement(args, device)
        if "arcache" in args.benches:
            rows += bench_arcache(args, device)
        if "genppl" in args.benches:
            rows += bench_genppl(args, device)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "precision": args.precision,
        "argv": sys.argv[1:] if argv is None else argv,
    }
    env["scale"] = {
        k: getattr(args, k)
        for k in (
            "scale",
            "size",
            "vocab",
            "seq_len",
            "batch",
            "sample_batch",
            "prompt_frac",
            "nfe",
        )
    }
    env["loadavg_1min"] = _loadavg()
    md = [
        f"`python -m bench.perf {' '.join(env['argv'])}`",
        "",
        "Scale: "
        + ", ".join(f"{k} {v}" for k, v in env["scale"].items())
        + f"; 1-min load average at the end: {env['loadavg_1min']}",
    ]
    for bench in BENCHES:
        sel = [r for r in rows if r["bench"] == bench]
        if sel:
            md += [
                "",
                f"## {bench} ({env['device']}, {args.precision}, {env['threads']} threads)",
                "",
                _table(sel),
            ]
    print("\n".join(md))
    if args.md:
        atomic.write_text(Path(args.md), "\n".join(md) + "\n")
    if args.out:
        atomic.write_text(Path(args.out), json.dumps({"env": env, "rows": rows}, indent=2))
        print(f"\n-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
