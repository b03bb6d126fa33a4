"""``calibrate``: measure the cost model's throughput table (:mod:`bench.cost.table`) here and store
it where the planner finds it (``--calib-dir``, default :func:`bench.cost.table.calibration_dir`:
``$SFLM_CALIBRATION_DIR`` or ``~/.cache/sflm-bench/calibration``), one entry per device kind
and CPU thread count (``--threads``: measure at the threads a job will use; the local executor
gives each of its ``max_parallel`` jobs ``cpu_count // max_parallel``).

Each timing is the median of ``--calib-reps`` runs (default 3; the bare backbone's fitted shapes
two more), and its spread, (max - min) / median of the runs, is kept; on one CPU thread it counts
the process's CPU seconds, not wall seconds, so that on a machine shared with other work the
table says what the work costs when the core is free (on several threads CPU seconds would count
the threads' spin-waits: calibrate those on an idle machine). What it measures:

- bare backbone forwards (no gradients) at six shapes and a one-position decoding step, fitted
  to ``overhead_s + FLOPs / flops_per_s`` (relative least squares);
- plain optimiser steps of the bare backbone at six shapes, fitted to ``overhead_s + 3 FLOPs /
  flops_per_s + parameters x param_s``;
- each model's sampling call (every decoding; float64, and float32 at the large vocabulary)
  and training step at a small vocabulary (two batch sizes: its own seconds per call apart) and
  a large one, as forward-equivalents of the bare forward / step timed right before it at the
  same shape (models: ``--models``, default all of :data:`bench.cost.catalogue.MODELS`);
- the trainer's own cost (``bench.train.fit`` for two step counts: per step and once), a job's
  process start (``import bench.cells`` in a fresh interpreter, its CPU seconds), the disk's
  write and read rates, the GSM8K sandbox's seconds per program over every core (when the
  sandbox runs here);
- opt-in: ``--calib-tokenizer`` (the GPT-2 tokenizer loaded as a text task's job loads it: where
  the hub is unreachable and ``HF_HUB_OFFLINE`` is unset, each load waits out its retries),
  ``--calib-genppl`` (the Gen. PPL reference LM: load and tokens/s).

``--calib-quick`` (tests): tiny shapes, one run each, no trainer, job, disk or sandbox
measurement (those sections keep the shipped entry's values).

A busy or noisy machine writes a table that predicts the wrong times (a calibration at load 4-6
on 2 cores predicted 46.5 minutes for a 6.5-minute quickstart), so :func:`verdict` judges the
1-min load average (``os.getloadavg``, before and after, against ``os.cpu_count``) and the
timings' spreads:

- **refused** (one ``error:`` line, exit 2, nothing written; checked once before measuring, so
  a busy machine is refused at once, and again after): the load besides this run leaves fewer
  free CPUs than the threads measured (:data:`BUSY_FREE`), or the median timing's spread is above
  :data:`SPREAD_REFUSE`;
- **warned** (one ``warning:`` line on stderr, the table written): the load besides this run is
  above :data:`LOAD_WARN` of the CPUs, the median spread above :data:`SPREAD_WARN` or one
  timing's above :data:`SPREAD_ONE`.

``--calib-force`` writes a refused table anyway (with the warning line). The entry records when
it was measured (``calibrated_at``), the load (``load``: 1-min averages before and after, CPUs,
the load besides this run), the repeats (``repeats``: runs per timing, median and largest spread,
the noisiest timing) and the verdict (``verdict``); ``--dry-run`` names the table it predicts
with (:func:`bench.cost.table.describe`).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from datetime import datetime, timezone
from pathlib import Path

import torch

from bench.config import ConfigError
from bench.cost import catalogue as models
from bench.perf import common

HELP = "measure the cost model's throughput table here and store it (bench.cost)"

#: (DiT size, |V|, L, batch) of the fitted shapes and the two factor shapes, per device type;
#: ``small`` / ``large``: the method factors' small- and large-vocabulary shapes (head shares at
#: the two ends of the interpolation, bench.cost.model._interp)
SHAPES = {
    "cpu": {
        "forward": [("cpu-mini", 12, 40, 8), ("cpu-mini", 12, 40, 256), ("cpu-mini", 195, 64, 128),
                    ("cpu-small", 12, 64, 64), ("cpu-mini", 8192, 32, 8),
                    ("cpu-small", 195, 64, 128)],
        "train": [("cpu-mini", 12, 40, 16), ("cpu-mini", 12, 40, 128), ("cpu-mini", 195, 64, 32),
                  ("cpu-small", 12, 64, 32), ("cpu-mini", 8192, 32, 8), ("cpu-mini", 32768, 8, 2)],
        "small": ("cpu-mini", 12, 40, 64),
        "large": ("cpu-mini", 8192, 32, 8),
    },
    "cuda": {
        "forward": [("tiny", 12, 180, 16), ("tiny", 12, 180, 128), ("small", 12, 256, 64),
                    ("small", 32768, 256, 16), ("small", 32768, 512, 32)],
        "train": [("tiny", 12, 180, 32), ("tiny", 12, 180, 128), ("small", 12, 256, 32),
                  ("small", 32768, 256, 16), ("small", 32768, 16, 2)],
        "small": ("tiny", 12, 180, 64),
        "large": ("small", 32768, 256, 16),
    },
    "quick": {
        "forward": [("cpu-mini", 12, 8, 2), ("cpu-mini", 12, 8, 8), ("cpu-mini", 256, 8, 4)],
        "train": [("cpu-mini", 12, 8, 2), ("cpu-mini", 12, 8, 8), ("cpu-mini", 256, 8, 4)],
        "small": ("cpu-mini", 12, 8, 4),
        "large": ("cpu-mini", 256, 8, 4),
    },
}  # fmt: skip
#: untimed training steps before a timed one
TRAIN_WARMUP = 6
#: sampling calls per timed run of a non-AR sampler
NFE = 4

#: refuse when the load besides this run leaves fewer free CPUs than this many per thread measured
BUSY_FREE = 1.0
#: warn when the load besides this run is above this share of the CPUs
LOAD_WARN = 0.25
#: refuse / warn when the median timing's spread ((max - min) / median of its runs) is above these
SPREAD_REFUSE = 0.15
SPREAD_WARN = 0.05
#: warn when one timing's spread is above this
SPREAD_ONE = 0.5


class CalibrationRefused(ConfigError):
    """A busy or noisy machine: the table would mislead the planner (one line)."""


#: spread of every timing of the calibration under way: what -> (max - min) / median
_SPREADS: dict[str, float] = {}


def add_arguments(group) -> None:
    group.add_argument(
        "--calib-reps", type=int, default=3, help="calibrate: runs per timing (their median)"
    )
    group.add_argument(
        "--calib-dir", help="calibrate: where to store the table (default: the calibration dir)"
    )
    group.add_argument("--calib-kind", help="calibrate: the table kind (default: from the device)")
    group.add_argument(
        "--calib-quick", action="store_true", help="calibrate: tiny and fast (tests)"
    )
    group.add_argument(
        "--calib-tokenizer", action="store_true", help="calibrate: time a GPT-2 tokenizer load"
    )
    group.add_argument(
        "--calib-genppl", action="store_true", help="calibrate: time the Gen. PPL reference LM"
    )
    group.add_argument(
        "--calib-force",
        action="store_true",
        help="calibrate: write the table even on a busy machine or with noisy timings",
    )


# --------------------------------------------------------------------------- helpers


def _clock(device) -> float:
    """Seconds of this process's work: on one CPU thread its CPU seconds, which on a machine
    shared with other work stay what the work costs when the core is free (wall seconds there
    count the waits for a core); else wall seconds (CUDA: after a synchronisation; several CPU
    threads: their CPU seconds would count the threads' spin-waits, so calibrate those on an
    idle machine)."""
    if device.type == "cuda":
        common.sync(device)
    elif torch.get_num_threads() == 1:
        return time.process_time()
    return time.perf_counter()


def _timed(fn, reps: int, device, warmup: int = 1, what: str = "") -> float:
    """The median of ``reps`` timed calls of ``fn`` (:func:`_clock`), after ``warmup`` calls; their
    spread, (max - min) / median, goes to :data:`_SPREADS` under ``what``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, reps)):
        t0 = _clock(device)
        fn()
        times.append(_clock(device) - t0)
    med = statistics.median(times)
    if what:
        _SPREADS[what] = (max(times) - min(times)) / med if med > 0 else 0.0
    return med


def _shape(size: str, V: int, L: int, B: int) -> str:
    return f"{size} |V| {V} L {L} batch {B}"


def others_load(start: float | None, end: float | None, threads: int) -> float | None:
    """The 1-min load besides this run: the larger of the load before it and the load after it
    less its own ``threads`` (None when neither is known)."""
    seen = [v for v in (start, None if end is None else end - threads) if v is not None]
    return max(0.0, max(seen)) if seen else None


def verdict(
    spreads: dict[str, float], others: float | None, cpus: int, threads: int
) -> tuple[str, str]:
    """(``"ok"`` / ``"warn"`` / ``"refuse"``, the reason in one line) of a calibration whose
    timings had ``spreads`` (what -> (max - min) / median; empty before measuring) while the
    1-min load besides it was ``others`` (None: unknown) on ``cpus`` CPUs, measuring with
    ``threads`` threads (module docstring)."""
    refuse, warn = [], []
    if others is not None and cpus > 0:
        what = f"1-min load {others:.1f} besides this run on {cpus} CPUs"
        if cpus - others < BUSY_FREE * max(1, threads):
            refuse.append(f"machine busy: {what} leaves no free CPU for its {threads} thread(s)")
        elif others > LOAD_WARN * cpus:
            warn.append(f"machine not idle: {what}")
    if spreads:
        med = statistics.median(spreads.values())
        worst = max(spreads, key=spreads.__getitem__)
        noisy = (
            f"the median timing varies by {med:.0%} across repeats (most: {worst}, "
            f"{spreads[worst]:.0%})"
        )
        if med > SPREAD_REFUSE:
            refuse.append(f"timings noisy: {noisy}")
        elif med > SPREAD_WARN:
            warn.append(f"timings noisy: {noisy}")
        elif spreads[worst] > SPREAD_ONE:
            warn.append(f"one timing noisy: {worst} varies by {spreads[worst]:.0%} across repeats")
    if refuse:
        return "refuse", "; ".join(refuse + warn)
    if warn:
        return "warn", "; ".join(warn)
    return "ok", ""


def _judge(spreads, others, cpus: int, threads: int, force: bool, when: str) -> str:
    """Act on :func:`verdict`: raise :class:`CalibrationRefused` (unless ``force``), print one
    warning line; returns what the entry records (``ok``, ``warn: ...``, ``forced: ...``)."""
    v, why = verdict(spreads, others, cpus, threads)
    if v == "refuse" and not force:
        raise CalibrationRefused(
            f"calibrate: {why}; no table written {when} (--calib-force writes one anyway)"
        )
    if v == "refuse":
        common.progress(f"warning: calibrate: {why}; table written anyway (--calib-force)")
        return f"forced: {why}"
    if v == "warn":
        common.progress(f"warning: calibrate: {why}; its predictions may be off")
        return f"warn: {why}"
    return "ok"


def _net(size: str, vocab: int, *, arch: str = "dit", causal: bool = False):
    from bench.cost.model import net_of

    return net_of({"size": size}, vocab, arch=arch, causal=causal)


def fit(rows: list[list[float]], y: list[float]) -> list[float]:
    """Non-negative coefficients b minimising sum(((X b - y) / y)^2) (relative errors): a
    coefficient that comes out negative is fixed at 0 and the rest fitted again."""
    import numpy as np

    X, t = np.asarray(rows, dtype=float), np.asarray(y, dtype=float)
    active = list(range(X.shape[1]))
    while active:
        A = X[:, active] / t[:, None]
        b, *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
        if (b >= 0).all():
            out = [0.0] * X.shape[1]
            for i, v in zip(active, b):
                out[i] = float(v)
            return out
        active.pop(int(np.argmin(b)))
    return [0.0] * X.shape[1]


def _adamw(backbone, device):
    """AdamW as the trainer builds it (fused on CUDA), without importing the trainer."""
    return torch.optim.AdamW(backbone.parameters(), lr=1e-4, fused=(device.type == "cuda") or None)


def _decodings(name: str, opts: dict, vocab: int, seq_len: int) -> list[tuple[str, str]]:
    """(table decoding key, decoding passed to the sampler) of a model: each of its decodings,
    S-FLM's ``topk`` as top 5."""
    from bench import registry

    cls = registry.METHODS[name]
    m = cls(cls.Options(**opts), vocab, seq_len)
    out = []
    for d in m.decodings:
        out.append((d, "top5" if d == "topk" else d))
    return out


# --------------------------------------------------------------------------- measurements


def _bare_forward(size: str, V: int, L: int, B: int, args, device):
    """One bare forward (the DiT, ids in, time input, no gradients) as a callable."""
    from bench.backbones.dit import build_dit
    from bench.config import BackboneConfig

    torch.manual_seed(0)
    bb = build_dit(BackboneConfig(size=size), V, V).to(device).eval()
    x = torch.randint(0, V, (B, L), device=device)
    t = torch.rand(B, device=device)

    def fwd():
        with torch.no_grad(), common.autocast(device, args.precision):
            bb(x, t)

    return fwd


def _bare_step(size: str, V: int, L: int, B: int, args, device):
    """One plain optimiser step of the bare backbone (:class:`bench.perf.train.Bare`)."""
    from bench.perf.train import Bare

    bare = Bare(V, size, device)
    bb = bare.backbone.train()
    batch = common.sudoku_batch(B, V, L, device)
    a = types.SimpleNamespace(batch=B, precision=args.precision)
    return _train_step_fn(bare, bb, _adamw(bb, device), batch, a, device)


def _with_factor_shapes(fitted: list, shapes: dict) -> list:
    """The fitted shapes and the factor shapes (each once)."""
    extra = [_lo(shapes["small"]), shapes["small"], shapes["large"]]
    return list(dict.fromkeys([*fitted, *extra]))


def _forward_fit(shapes, args, device, rows, bare: dict) -> dict:
    """Bare forwards at the fitted shapes, the factor shapes and one position (a KV-cached
    decoding step's shape), fitted to overhead + FLOPs / rate; ``bare`` receives each shape's
    seconds."""
    X, y = [], []
    pts = _with_factor_shapes(shapes["forward"], shapes)
    size1, _, _, b1 = shapes["small"]
    for size, V, L, B in [*pts, (size1, 12, 1, b1)]:
        s = _timed(_bare_forward(size, V, L, B, args, device), args.calib_reps + 2, device,
                   what=f"forward {_shape(size, V, L, B)}")  # fmt: skip
        bare[("forward", size, V, L, B)] = s
        flops = B * L * _net(size, V).token_flops(L)
        X.append([1.0, flops])
        y.append(s)
        rows.append({"bench": "calibrate", "what": "forward", "size": size, "vocab": V,
                     "seq_len": L, "batch": B, "seconds": s, "gflops": flops / 1e9})  # fmt: skip
    c0, k = fit(X, y)
    out = {"overhead_s": c0, "flops_per_s": 1.0 / k if k > 0 else 1e18}
    common.progress(f"calibrate forward: {c0 * 1e3:.2f} ms + FLOPs / {out['flops_per_s']:.3g}/s")
    return out


def _train_fit(shapes, args, device, rows, bare: dict) -> dict:
    """Plain optimiser steps of the bare backbone at the fitted shapes and the factor shapes,
    fitted to overhead + 3 FLOPs / rate + parameters x param_s; ``bare`` receives each shape's
    seconds."""
    X, y = [], []
    for size, V, L, B in _with_factor_shapes(shapes["train"], shapes):
        step = _bare_step(size, V, L, B, args, device)
        s = _timed(step, args.calib_reps + 2, device, warmup=TRAIN_WARMUP,
                   what=f"train step {_shape(size, V, L, B)}")  # fmt: skip
        bare[("train", size, V, L, B)] = s
        net = _net(size, V)
        flops = 3.0 * B * L * net.token_flops(L)
        X.append([1.0, flops, float(net.params())])
        y.append(s)
        rows.append({"bench": "calibrate", "what": "train step", "size": size, "vocab": V,
                     "seq_len": L, "batch": B, "seconds": s, "gflops": flops / 1e9})  # fmt: skip
    t0, k, p = fit(X, y)
    out = {"overhead_s": t0, "flops_per_s": 1.0 / k if k > 0 else 1e18, "param_s": p}
    common.progress(
        f"calibrate train: {t0 * 1e3:.2f} ms + 3 FLOPs / {out['flops_per_s']:.3g}/s "
        f"+ {p * 1e9:.3g} ns/parameter"
    )
    return out


def _train_step_fn(method, backbone, opt, batch, args, device):
    """A no-argument callable taking one step as :func:`bench.perf.train.train_step` does."""
    from bench.perf.train import train_step

    return lambda: train_step(method, backbone, opt, batch, args, device)


def _lo(shape: tuple) -> tuple:
    """The small-vocabulary shape at a quarter of its batch (per-call costs against per-row)."""
    size, V, L, B = shape
    return (size, V, L, max(1, B // 4))


def _split(t_lo: float, ref_lo: float, t_hi: float, ref_hi: float) -> tuple[float, float]:
    """(factor, seconds per call) with ``t = factor x ref + seconds``, from two batch sizes (the
    seconds are the sampler's or the loss's own per-call work that no batch row pays for)."""
    fe = (t_hi - t_lo) / (ref_hi - ref_lo) if ref_hi > ref_lo else t_hi / ref_hi
    oh = t_lo - fe * ref_lo
    if oh < 0 or fe <= 0:
        return t_hi / ref_hi, 0.0
    return fe, oh


def _method_factors(model_list, shapes, entry, args, device, rows) -> dict:
    """Each model's forward-equivalents per sampling call (each decoding; float64 at the small
    shape, both dtypes at the large one) and per training step, and its own seconds per call /
    step (from the small shape at two batch sizes): its times over the bare forward's and step's
    of the same shape, timed right before it (so that a change of the machine's load since the
    fit does not count, and the factor is the model's work over the bare backbone's, whatever
    the fit says of that shape)."""
    from bench.cost.model import forward_s, train_step_s

    sample, train, shares = {}, {}, []
    for which in ("small", "large"):
        size, V, L, B = shapes[which]
        shares.append(_net(size, V).head_share(L))
    settings = (("lo", _lo(shapes["small"])), ("small", shapes["small"]),
                ("large", shapes["large"]))  # fmt: skip
    for label, name, opts in model_list:
        tt: dict[str, tuple[float, float]] = {}  # setting -> (seconds, reference) per step
        ts: dict[tuple, tuple[float, float]] = {}  # (decoding, dtype, setting) -> per call
        for which, (size, V, L, B) in settings:
            at = _shape(size, V, L, B)
            now_f = _timed(_bare_forward(size, V, L, B, args, device), args.calib_reps, device,
                           what=f"forward {at} (before {label})")  # fmt: skip
            now_t = _timed(_bare_step(size, V, L, B, args, device), args.calib_reps, device,
                           what=f"train step {at} (before {label})")  # fmt: skip
            method, bb = common.make_model(name, opts, V, L, size, device)
            models.fast_path(label, method, bb)
            common.as_asked(method)
            arch = "sarch" if opts.get("backbone") == "sarch" else "dit"
            net = _net(size, V, arch=arch, causal=not method.uses_time)
            batch = common.sudoku_batch(B, V, L, device, prompt_frac=0.5)
            # training step
            bb.train()
            opt = _adamw(bb, device)
            a = types.SimpleNamespace(batch=B, precision=args.precision)
            T = L - 1 if net.causal else L
            ctx = T / 2 if net.causal else T
            step = _train_step_fn(method, bb, opt, batch, a, device)
            # some models settle only after a few steps (FLM: 2.5x its steady time for the first
            # five at batch 16), which a min over three calls after two would keep
            s = _timed(step, args.calib_reps, device, warmup=TRAIN_WARMUP,
                       what=f"train {label} {at}")  # fmt: skip
            tt[which] = (
                s,
                now_t
                * train_step_s(entry, net, B, T, ctx)
                / train_step_s(entry, _net(size, V), B, L, L),
            )
            rows.append({"bench": "calibrate", "what": f"train {label}", "vocab": V, "batch": B,
                         "seconds": s, "bare_s": now_t})  # fmt: skip
            # sampling calls
            bb.eval()
            dtypes = ("float64",) if which != "large" else ("float64", "float32")
            for key, dec in _decodings(name, opts, V, L):
                for dtype in dtypes:
                    s, calls = _sample_time(method, bb, batch, dec, dtype, args, device,
                                            what=f"sample {label} {key} {dtype} {at}")  # fmt: skip
                    cached = bool(getattr(method, "kv_cache", None)) and method.nfe_is_length
                    if cached:
                        given = L - calls
                        ref = forward_s(entry, net, B, given, given) + (calls - 1) * forward_s(
                            entry, net, B, 1, (given + L) / 2
                        )
                    else:
                        ref = calls * forward_s(entry, net, B, L, L)
                    # the bare forward as timed just now, scaled to this model's calls
                    ref *= now_f / forward_s(entry, _net(size, V), B, L, L)
                    ts[(key, dtype, which)] = (s / calls, ref / calls)
                    what = f"sample {label} {key} {dtype}"
                    rows.append({"bench": "calibrate", "what": what, "vocab": V, "batch": B,
                                 "calls": calls, "seconds": s, "bare_s": now_f})  # fmt: skip
        fe, oh = _split(*tt["lo"], *tt["small"])
        fe_lv = max(0.0, (tt["large"][0] - oh) / tt["large"][1])
        train[label] = {"factor": [fe, fe_lv], "step_s": oh}
        for key in dict.fromkeys(k for k, _, _ in ts):
            fe, oh = _split(*ts[(key, "float64", "lo")], *ts[(key, "float64", "small")])
            lv = {dt: max(0.0, (ts[(key, dt, "large")][0] - oh) / ts[(key, dt, "large")][1])
                  for dt in ("float64", "float32")}  # fmt: skip
            sample[f"{label}|{key}"] = {
                "float64": [fe, lv["float64"]],
                "float32": [fe, lv["float32"]],
                "call_s": oh,
            }
        tf = train[label]
        common.progress(
            f"calibrate {label}: train x{tf['factor'][0]:.2f}/{tf['factor'][1]:.2f} "
            f"+{tf['step_s'] * 1e3:.1f} ms; sample "
            + ", ".join(
                f"{k.split('|')[1]} x{v['float64'][0]:.2f}/{v['float64'][1]:.2f}"
                f" +{v['call_s'] * 1e3:.1f} ms"
                for k, v in sample.items()
                if k.startswith(label + "|")
            )  # fmt: skip
        )
    return {"head_share": shares, "sample": sample, "train": train}


def _sample_time(
    method, backbone, batch, decoding, dtype, args, device, what: str = ""
) -> tuple[float, int]:
    def once():
        method.nfe_counter = 0
        with common.autocast(device, args.precision):
            method.sample(backbone, batch.x, batch.clean_mask, nfe=NFE, decoding=decoding,
                          float64=dtype == "float64",
                          generator=torch.Generator(device=device).manual_seed(0))  # fmt: skip

    s = _timed(once, args.calib_reps, device, what=what)
    return s, method.nfe_counter


def _trainer(shape, entry, args, device, rows) -> dict:
    """What ``bench.train.fit`` adds to plain steps: per step (hooks, EMA, clipping, logging) and
    once (trainer set-up, the weights file), from runs of two lengths of the catalogue's
    diffusion reference model without validation or periodic checkpoints (the cost model prices
    those apart)."""
    from bench.config import TrainConfig
    from bench.cost.model import train_factor, train_step_s
    from bench.data.base import TaskData
    from bench.train import fit as train_fit

    size, V, L, B = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, V, (512, L), generator=g)
    clean = torch.zeros_like(x, dtype=torch.bool)
    clean[:, : L // 2] = True
    data = TaskData(x, clean, ~clean)
    # the diffusion reference model of the catalogue (bench.cost.catalogue.REFERENCES)
    label = models.REFERENCES[-1]
    _, name, opts = next(m for m in models.MODELS if m[0] == label)
    runs = {}
    for steps in (10, 40):
        method, bb = common.make_model(name, opts, V, L, size, device)
        cfg = TrainConfig(steps=steps, batch_size=B, lr=1e-3, warmup_steps=2, ema=0.99,
                          checkpoint_every=10_000, logger="csv", val_every=0,
                          threads=torch.get_num_threads())  # fmt: skip
        with tempfile.TemporaryDirectory() as d:
            t0 = _clock(device)
            train_fit(method, bb, data, cfg, d, progress=False)
            runs[steps] = _clock(device) - t0
    per = (runs[40] - runs[10]) / 30
    net = _net(size, V)
    ft, loss_s = train_factor(entry, label, net.head_share(L))
    plain = ft * train_step_s(entry, net, B, L, L) + loss_s
    step_s = max(0.0, per - plain)
    start_s = max(0.0, runs[10] - 10 * per)
    rows.append({"bench": "calibrate", "what": "trainer", "seconds": per, "plain_s": plain,
                 "start_s": start_s})  # fmt: skip
    common.progress(f"calibrate trainer: +{step_s * 1e3:.1f} ms per step, {start_s:.2f} s once")
    return {"step_s": step_s, "start_s": start_s}


def _job(rows) -> dict:
    """A job's process start: ``import bench.cells`` (the trainer, the methods) in a fresh
    interpreter; the disk's write and read rates (a 64 MiB torch file, atomically)."""
    from bench.atomic import atomic_torch_save

    root = Path(__file__).resolve().parents[2]
    times = []
    for _ in range(2):
        t0 = _children_cpu()
        subprocess.run([sys.executable, "-c", "import bench.cells, bench.registry"], cwd=root,
                       check=True, capture_output=True)  # fmt: skip
        times.append(_children_cpu() - t0)
    start = min(times)
    buf = torch.zeros(16 * 2**20)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "w.pt"
        t0 = time.perf_counter()
        atomic_torch_save({"w": buf}, p)
        w = time.perf_counter() - t0
        t0 = time.perf_counter()
        torch.load(p, weights_only=True)
        r = time.perf_counter() - t0
    n = buf.numel() * 4
    rows.append({"bench": "calibrate", "what": "job start", "seconds": start,
                 "write_MBps": n / w / 1e6, "read_MBps": n / r / 1e6})  # fmt: skip
    common.progress(f"calibrate job: start {start:.2f} s; disk write {n / w / 1e6:.0f} MB/s")
    return {"start_s": start, "write_bytes_per_s": n / w, "load_bytes_per_s": n / r}


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _sandbox(rows) -> dict:
    """CPU seconds per program of the GSM8K sandbox (32 short programs over every core)."""
    from bench.evaluate.sandbox.runner import Sandbox, SandboxConfig

    prog = "def simple_math_problem():\n    return sum(range(10)) * 3\n"
    programs = [prog] * 32
    try:
        with Sandbox(SandboxConfig()) as sb:
            sb.run_many(programs[:2])  # probe the isolation level first
            t0 = time.perf_counter()
            sb.run_many(programs)
            s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - no sandbox here: keep the shipped value
        common.progress(f"calibrate sandbox: not measured ({type(e).__name__}: {e})")
        return {}
    # wall seconds over every core (the programs' own CPU time leaves out the interpreters'
    # start-up in their namespaces, which is most of a program's cost): on a loaded machine
    # this counts the waits for a core too
    cpu_s = s * (os.cpu_count() or 1) / len(programs)
    rows.append({"bench": "calibrate", "what": "sandbox", "seconds": s, "cpu_s": cpu_s})
    common.progress(f"calibrate sandbox: {cpu_s * 1e3:.1f} CPU-ms per program")
    return {"sandbox_cpu_s": cpu_s}


def _tokenizer(rows) -> dict:
    from bench.text.gpt2 import load_gpt2_tokenizer

    t0 = time.perf_counter()
    tok = load_gpt2_tokenizer()
    s = time.perf_counter() - t0
    rows.append({"bench": "calibrate", "what": "tokenizer", "seconds": s,
                 "source": tok.sflm_source})  # fmt: skip
    common.progress(f"calibrate tokenizer: {s:.1f} s ({tok.sflm_source})")
    return {"tokenizer_load_s": s}


def _genppl(device, rows) -> dict:
    from bench.evaluate.genppl import evaluator as genppl

    t0 = _clock(device)
    try:
        ref = genppl.load_reference("smollm2-135m", device=device)
    except genppl.ReferenceModelError as e:
        common.progress(f"calibrate genppl: not measured ({e})")
        return {}
    load = _clock(device) - t0
    V = int(ref.model.get_output_embeddings().weight.shape[0])
    g = torch.Generator().manual_seed(0)
    items = []
    for _ in range(8):
        ids = torch.randint(0, V, (64,), generator=g)
        ids[ids == ref.eot_id] = (ref.eot_id + 1) % V
        items.append(genppl.Prepared([ref.context_id, *ids.tolist()], [False] + [True] * 64, False))
    genppl.score_prepared(ref, items[:1], batch_tokens=4096)
    t0 = _clock(device)
    _, cnt = genppl.score_prepared(ref, items, batch_tokens=4096)
    s = _clock(device) - t0
    tps = float(cnt.sum()) / s
    rows.append({"bench": "calibrate", "what": "genppl", "seconds": s, "load_s": load,
                 "tokens_per_s": tps})  # fmt: skip
    common.progress(f"calibrate genppl: load {load:.1f} s, {tps:.0f} tokens/s")
    return {"genppl_load_s": load, "genppl_tokens_per_s": tps}


def _memory(device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


# --------------------------------------------------------------------------- the benchmark


def run(model_list, args, device) -> list[dict]:
    from bench.cell_model import keep_freed_heap
    from bench.cost import table
    from bench.cost.defaults import DEFAULTS
    from bench.measure import device_name

    t_start = time.perf_counter()
    # the heap of a job (a sampling job sets it; training raises glibc's threshold to the same):
    # without it the large shapes' calls fault their buffers in anew and vary up to 2x by run
    keep_freed_heap(device)
    name = device_name(device)
    kind = args.calib_kind or table.kind_of(name)
    threads = torch.get_num_threads() if device.type == "cpu" else 0
    shapes = SHAPES["quick" if args.calib_quick else device.type]
    if args.calib_reps < 1:
        raise ConfigError("--calib-reps: must be >= 1")
    if args.calib_quick:
        args.calib_reps = 1
    # a busy machine is refused before anything is measured (and judged again after)
    cpus, used = os.cpu_count() or 1, threads or 1
    load0 = _loadavg()
    _judge({}, others_load(load0, None, used), cpus, used, args.calib_force, "(before measuring)")
    _SPREADS.clear()
    base = DEFAULTS.get(kind) or DEFAULTS["cpu" if device.type == "cpu" else "h100"]
    rows: list[dict] = []
    entry = {"kind": kind, "threads": threads, "device_name": name}
    bare: dict = {}
    entry["forward"] = _forward_fit(shapes, args, device, rows, bare)
    entry["train"] = _train_fit(shapes, args, device, rows, bare)
    full = {**base, **entry}  # the fitted sections, the shipped ones for what is not measured
    entry["methods"] = _method_factors(model_list, shapes, full, args, device, rows)
    full["methods"] = entry["methods"]
    scorers = {}
    if not args.calib_quick:
        entry["trainer"] = _trainer(shapes["small"], full, args, device, rows)
        entry["job"] = {**base["job"], **_job(rows)}
        scorers.update(_sandbox(rows))
    if args.calib_tokenizer:
        scorers.update(_tokenizer(rows))
    if args.calib_genppl:
        scorers.update(_genppl(device, rows))
    # scorer rates measured by an earlier calibration of this kind and thread count stay (the
    # tokenizer and the reference LM are opt-in measurements)
    d = Path(args.calib_dir) if args.calib_dir else None
    earlier = table.calibrated(kind, d).get(threads, {}).get("scorers", {})
    kept = {k: v for k, v in earlier.items() if k != "source" and k not in scorers}
    if scorers or kept:
        entry["scorers"] = {**base["scorers"], **kept, **scorers}
    entry["memory_bytes"] = _memory(device)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    load = _loadavg()
    others = others_load(load0, load, used)
    spreads = dict(_SPREADS)
    entry["verdict"] = _judge(spreads, others, cpus, used, args.calib_force, "(measured)")
    entry["load"] = {"start_1min": load0, "end_1min": load, "cpus": cpus,
                     "besides_this_run": others}  # fmt: skip
    worst = max(spreads, key=spreads.__getitem__) if spreads else ""
    entry["repeats"] = {
        "runs_per_timing": args.calib_reps,
        "timings": len(spreads),
        "median_spread": statistics.median(spreads.values()) if spreads else 0.0,
        "max_spread": spreads.get(worst, 0.0),
        "noisiest": worst,
    }
    common.progress(
        f"calibrate: {len(spreads)} timings, {args.calib_reps} runs each: median spread "
        f"{entry['repeats']['median_spread']:.1%}, largest {entry['repeats']['max_spread']:.1%}"
        + (f" ({worst})" if worst else "")
    )
    for sec in ("forward", "train", "trainer", "job", "methods"):
        if sec in entry:
            entry[sec]["source"] = f"python -m bench.perf calibrate, {when}"
    if "scorers" in entry:
        entry["scorers"]["source"] = (
            f"python -m bench.perf calibrate, {when} (measured: "
            f"{', '.join(sorted(scorers)) or 'none'}; earlier: {', '.join(sorted(kept)) or 'none'}"
            f"; the rest: {base['scorers']['source']})"
        )
    entry["source"] = (
        f"python -m bench.perf calibrate on {name}, {threads or 'all'} thread(s), {when}"
        + (f", 1-min load {load}" if load is not None else "")
        + (" (--calib-quick)" if args.calib_quick else "")
    )
    entry["calibrated_at"] = when
    # a self-contained entry: what was not measured here is the shipped entry's (its source says)
    entry = {**{k: v for k, v in base.items() if k in table.SECTIONS}, **entry}
    path = table.save(entry, d)
    took = time.perf_counter() - t_start
    common.progress(f"calibrate: {kind} table ({threads or 'all'} threads) -> {path} "
                    f"in {took:.0f} s")  # fmt: skip
    rows.append({"bench": "calibrate", "what": "table", "kind": kind, "threads": threads,
                 "path": str(path), "seconds": took})  # fmt: skip
    return rows


def _loadavg() -> float | None:
    """The 1-min load average (``os.getloadavg``), None where the system has none."""
    try:
        return round(float(os.getloadavg()[0]), 2)
    except (OSError, AttributeError):
        return None
