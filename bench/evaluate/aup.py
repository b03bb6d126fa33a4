"""AUP, accuracy under parallelism: one speed / quality score per model over its grid of
settings, with a paired percentile-bootstrap interval over items.

d3LLM (Hao AI Lab, blog "AUP: when Accuracy Meets Parallelism in Diffusion Language Models",
section "AUP: Considering Both Accuracy and Parallelism"; reference code
``AUP_leaderboard/aup_utils.py::get_aup`` of hao-ai-lab/d3LLM) scores a model's set of
(parallelism, accuracy) pairs ``(rho_i, y_i)``, ``rho`` its tokens per forward (TPF) and ``y``
its accuracy in percent:

- the pairs are ordered by ``rho`` (ascending); ``y_1`` is the accuracy of the pair with the
  smallest ``rho`` (the least parallel setting), and only pairs with ``y_i >= y_min = y_1 - 5``
  are kept (the others are left out, their neighbours joined across them);
- ``AUP = rho_1 y_1 + 1/2 sum_{i >= 2} (rho_i - rho_{i-1}) (y_i W(y_i) + y_{i-1} W(y_{i-1}))``
  over the kept pairs, with the weight ``W(y) = min(exp(-alpha (1 - y / y_max)), 1)``,
  ``alpha = 3`` and ``y_max`` the highest accuracy any model reached on the task.

Pairs with equal ``rho`` are ordered by accuracy, highest first (the reference keeps the order it
was given; here the first of them, the one ``y_1`` is taken from, is the more accurate). Where
every accuracy is 0 (``y_max = 0``) the weight is 1 (every term is 0 anyway).

:func:`aup` is the formula on plain lists; :func:`aup_rows` the same for many resamples at once;
:func:`grid_aup` scores every model of one comparison (the same items) with two parallelisms,
the reference's tokens per call and ours, tokens per forward-equivalent (a partial call, a
KV-cached AR step or a block-only call under a cache, priced at its measured share of a full
forward instead of as one), each with a 95 % percentile bootstrap over items: one multinomial
resample of the items per replicate, shared by every cell of every model (paired: the per-item
difficulty the models share cancels in their differences), and ``y_max`` recomputed per
replicate as the highest accuracy among all of them. A cell's TPF under a resample is the ratio of
its resampled sums (tokens over calls, as the cell's own column); a cell without per-item tokens
and calls keeps its stored TPF in every replicate (:attr:`GridPoint.fixed`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: the weight's penalty factor (d3LLM: alpha = 3)
ALPHA = 3.0
#: y_min = y_1 - OFFSET, in percentage points (d3LLM: 5)
OFFSET = 5.0
RESAMPLES = 1000
CONFIDENCE = 0.95
#: the two parallelisms :func:`grid_aup` scores: tokens per call (d3LLM's TPF) and tokens per
#: forward-equivalent
TPF, TPFE = "tpf", "tpfe"
METHOD = "paired percentile bootstrap over items (one resample shared by every model), B = 1000"


def weight(y, y_max, alpha: float = ALPHA):
    """d3LLM's W(y) = min(exp(-alpha (1 - y / y_max)), 1) (1 where ``y_max`` <= 0)."""
    y, y_max = np.asarray(y, float), np.asarray(y_max, float)
    safe = np.where(y_max > 0, y_max, 1.0)
    w = np.minimum(np.exp(-alpha * (1.0 - y / safe)), 1.0)
    return np.where(y_max > 0, w, 1.0)


def aup(
    rho: Sequence[float],
    y: Sequence[float],
    y_max: float | None = None,
    *,
    alpha: float = ALPHA,
    offset: float = OFFSET,
) -> float:
    """AUP of the pairs ``(rho_i, y_i)`` (``y`` in percent; ``y_max`` default: max of ``y``):
    the module docstring's formula. ValueError on no pairs or pairs of unequal length."""
    if len(rho) != len(y) or not len(rho):
        raise ValueError(f"AUP: {len(rho)} parallelisms for {len(y)} accuracies (need >= 1 each)")
    top = max(y) if y_max is None else float(y_max)
    pts = sorted(zip(map(float, rho), map(float, y)), key=lambda p: (p[0], -p[1]))
    y_min = pts[0][1] - offset  # y_min = y_1 - 5: pairs below it are left out
    pts = [p for p in pts if p[1] >= y_min]

    def yw(v: float) -> float:
        return v * (min(math.exp(-alpha * (1 - v / top)), 1.0) if top > 0 else 1.0)

    # AUP = rho_1 y_1 + 1/2 sum_i (rho_i - rho_{i-1}) (y_i W(y_i) + y_{i-1} W(y_{i-1})) (d3LLM)
    total = pts[0][0] * pts[0][1]
    for (r0, y0), (r1, y1) in zip(pts, pts[1:]):
        total += 0.5 * (r1 - r0) * (yw(y1) + yw(y0))
    return total


def aup_rows(rho, y, y_max, *, alpha: float = ALPHA, offset: float = OFFSET) -> np.ndarray:
    """:func:`aup` of every row of (R, m) ``rho`` and ``y`` (percent) with that row's ``y_max``
    (R,): each row one replicate of a model's m pairs. Returns (R,)."""
    rho, y = np.atleast_2d(np.asarray(rho, float)), np.atleast_2d(np.asarray(y, float))
    y_max = np.broadcast_to(np.asarray(y_max, float), rho.shape[:1])
    order = np.lexsort((-y, rho), axis=-1)  # by rho, ties by accuracy (highest first)
    rho, y = np.take_along_axis(rho, order, 1), np.take_along_axis(y, order, 1)
    keep = y >= y[:, :1] - offset  # y_min = y_1 - 5
    yw = y * weight(y, y_max[:, None], alpha)
    m = rho.shape[1]
    kept_at = np.where(keep, np.arange(m), -1)
    prev = np.concatenate([np.full((len(y), 1), -1), np.maximum.accumulate(kept_at, 1)[:, :-1]], 1)
    ok = keep & (prev >= 0)  # a kept pair after the first: joined to the kept pair before it
    p = np.clip(prev, 0, None)
    r0, w0 = np.take_along_axis(rho, p, 1), np.take_along_axis(yw, p, 1)
    terms = np.where(ok, 0.5 * (rho - r0) * (yw + w0), 0.0)
    return rho[:, 0] * y[:, 0] + terms.sum(1)


@dataclass(frozen=True)
class GridPoint:
    """One setting of a model (a cell, its training seeds pooled) on the comparison's N items:
    ``outcomes`` (N,) the per-item 0/1 outcome (its mean over seeds), ``tokens`` / ``calls`` /
    ``fe`` (N,) per item summed over seeds (None where the records do not give them), and the
    cell's stored ``tpf`` (tokens per call) and ``tpfe`` (tokens per forward-equivalent), used
    where the per-item values are missing (NaN: the cell has none)."""

    outcomes: np.ndarray
    tokens: np.ndarray | None = None
    calls: np.ndarray | None = None
    fe: np.ndarray | None = None
    tpf: float = float("nan")
    tpfe: float = float("nan")

    def per_item(self, kind: str) -> tuple[np.ndarray, np.ndarray] | None:
        den = self.calls if kind == TPF else self.fe
        if self.tokens is None or den is None:
            return None
        return np.asarray(self.tokens, float), np.asarray(den, float)

    def fixed(self, kind: str) -> bool:
        """Whether this point's parallelism is held at the cell's stored value (no per-item)."""
        return self.per_item(kind) is None


@dataclass(frozen=True)
class Score:
    """One model's AUP: ``value`` (the plain estimate), its interval, the pairs scored and kept
    (``y >= y_1 - 5`` at the plain estimate), and how many of them had a fixed parallelism."""

    value: float
    low: float
    high: float
    points: int
    kept: int
    fixed: int


@dataclass
class GridAUP:
    """:func:`grid_aup`'s answer: per parallelism (:data:`TPF`, :data:`TPFE`) and model, the
    :class:`Score` and the replicates behind it (``draws``: (B,), the same item resamples for
    every model, so :meth:`difference` is paired)."""

    scores: dict[str, dict[str, Score]] = field(default_factory=dict)
    draws: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    y_max: float = float("nan")
    confidence: float = CONFIDENCE

    def difference(self, kind: str, a: str, b: str) -> tuple[float, float, float]:
        """AUP(a) - AUP(b) over ``kind`` with its paired percentile interval."""
        d = self.scores[kind][a].value - self.scores[kind][b].value
        lo, hi = _quantiles(self.draws[kind][a] - self.draws[kind][b], self.confidence)
        return d, lo, hi


def _quantiles(v: np.ndarray, confidence: float) -> tuple[float, float]:
    q = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(v, [q, 1.0 - q])
    return float(lo), float(hi)


def _weights(n: int, b: int, seed: int) -> np.ndarray:
    """(1 + b, n): uniform weights (the plain estimate), then b multinomial item resamples
    (counts / n; the convention of :mod:`bench.evaluate.paired`)."""
    rng = np.random.default_rng(seed)
    return np.vstack([np.full(n, 1.0 / n), rng.multinomial(n, np.full(n, 1.0 / n), size=b) / n])


def _rho(p: GridPoint, kind: str, w: np.ndarray) -> np.ndarray:
    """(1 + b,) parallelism of point ``p`` under each row of weights ``w``."""
    got = p.per_item(kind)
    if got is None:
        return np.full(len(w), p.tpf if kind == TPF else p.tpfe, dtype=float)
    num, den = w @ got[0], w @ got[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / den, np.nan)


def grid_aup(
    grids: dict[str, Sequence[GridPoint]],
    *,
    n_resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    alpha: float = ALPHA,
    offset: float = OFFSET,
) -> GridAUP:
    """AUP over tokens per call and over tokens per forward-equivalent of every model of
    ``grids`` (model -> its points, all on the same N items in the same order), each with its
    paired percentile interval (module docstring). A point whose parallelism is unknown (NaN)
    is left out of that parallelism's AUP; a model with no point left has no score there."""
    points = [p for ps in grids.values() for p in ps]
    if not points:
        return GridAUP(confidence=confidence)
    sizes = {len(np.asarray(p.outcomes)) for p in points}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"AUP grid: points on {sorted(sizes)} items; one comparison has one set")
    w = _weights(sizes.pop(), int(n_resamples), seed)
    acc = {m: [100.0 * (w @ np.asarray(p.outcomes, float)) for p in ps] for m, ps in grids.items()}
    y_max = np.max(np.stack([a for accs in acc.values() for a in accs]), axis=0)  # (1 + b,)
    out = GridAUP(y_max=float(y_max[0]), confidence=confidence)
    for kind in (TPF, TPFE):
        out.scores[kind], out.draws[kind] = {}, {}
        for model, ps in grids.items():
            rho = [_rho(p, kind, w) for p in ps]
            use = [i for i, r in enumerate(rho) if np.isfinite(r).all()]
            if not use:
                continue
            r = np.stack([rho[i] for i in use], 1)
            y = np.stack([acc[model][i] for i in use], 1)
            v = aup_rows(r, y, y_max, alpha=alpha, offset=offset)
            lo, hi = _quantiles(v[1:], confidence)
            kept = _kept(r[0], y[0], offset)
            fixed = sum(ps[i].fixed(kind) for i in use)
            out.scores[kind][model] = Score(float(v[0]), lo, hi, len(use), kept, fixed)
            out.draws[kind][model] = v[1:]
    return out


def _kept(rho: np.ndarray, y: np.ndarray, offset: float) -> int:
    """How many pairs :func:`aup` keeps (``y >= y_1 - offset``, ``y_1`` at the smallest rho)."""
    first = np.lexsort((-y, rho))[0]
    return int((y >= y[first] - offset).sum())
