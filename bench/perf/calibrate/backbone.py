"""The bare backbone's part of the table: forwards (:func:`_forward_fit`) and plain optimiser
steps (:func:`_train_fit`) timed at the shapes of :data:`SHAPES` and fitted to overhead plus
FLOPs over a rate (:func:`fit`, relative least squares)."""

from __future__ import annotations

import types

import torch

from bench.perf import common
from bench.perf.calibrate.timing import _timed

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


def _shape(size: str, V: int, L: int, B: int) -> str:
    return f"{size} |V| {V} L {L} batch {B}"


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
