"""The OWT frontier's numbers from store rows (:mod:`bench.report.frontier.section` writes the
report): one row per cell (:func:`frontier_cells`), the visible window, Pareto points and the scalar
"Gen. PPL at the data's entropy" with its interval (:func:`curve_scalar`).

Degenerate cells (:mod:`bench.evaluate.degenerate`: half or more of the samples empty after the
first end-of-text, one repeated token or of unigram entropy below ln 2) are kept in the cell
list, flagged, and left out of Pareto sets and scalars: a collapsed generator's repeated token is
easy for the reference LM (low Gen. PPL) and would otherwise look best.

The scalar's interval: the store holds each cell's 95 % interval, not its samples, so it is a
parametric bootstrap (:func:`scalar_ci`): each cell's entropy and log Gen. PPL and the data's
entropy are drawn from normals whose central 95 % matches the stored percentile intervals
(sd = width / (2 z_0.975)), the interpolation is redone per draw, and the 2.5th / 97.5th
percentiles of the draws bound it (seeded, :data:`SCALAR_DRAWS` draws).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.evaluate import degenerate as dg
from bench.report.common import flag, rows
from bench.report.cost import DEVICE, SPS, with_cost

KIND = "frontier"
DATA_METHOD = "data"
REFERENCE = "reference"  # the store rows' kind of the held-out data point (bench/results/rows.py)
PPL, POOLED, ENTROPY = "gen_ppl", "gen_ppl_pooled", "entropy"
EMPTY, DEGENERATE = "gen_ppl_empty_frac", dg.METRIC
MAUVE, MAUVE_SD = "mauve", "mauve_seed_sd"  # bench.evaluate.mauve_score (task.options.mauve)
METRICS = (PPL, POOLED, ENTROPY, EMPTY, DEGENERATE, MAUVE, MAUVE_SD)
#: draws of the scalar's parametric bootstrap (the paper's B for its bootstrap intervals)
SCALAR_DRAWS = 1000
Z975 = 1.959963984540054  # standard normal 97.5th percentile: a 95 % interval is +- 1.96 sd
SCALAR_CI_METHOD = (
    "parametric bootstrap from the cells' intervals (normal in H and in log Gen. PPL, "
    f"B = {SCALAR_DRAWS}, seeded), 95 % percentile"
)


@dataclass(frozen=True)
class Window:
    """The visible window (paper appendix "Visible window")."""

    h_min: float = 4.5
    h_max: float = 6.0
    ppl_max: float = 500.0

    def contains(self, h, ppl) -> np.ndarray:
        h, ppl = np.asarray(h, float), np.asarray(ppl, float)
        return (h >= self.h_min) & (h <= self.h_max) & (ppl <= self.ppl_max) & np.isfinite(ppl)


def pareto_mask(h, ppl) -> np.ndarray:
    """True where no other point has entropy >= and Gen. PPL <= with one of them strict
    (higher entropy and lower Gen. PPL are both better)."""
    h, ppl = np.asarray(h, float), np.asarray(ppl, float)
    out = np.ones(len(h), bool)
    for i in range(len(h)):
        dominated = (h >= h[i]) & (ppl <= ppl[i]) & ((h > h[i]) | (ppl < ppl[i]))
        out[i] = not dominated.any()
    return out


def ppl_at_entropy(h, ppl, target: float) -> float | None:
    """Gen. PPL at entropy ``target`` along a curve of points (any order): linear in log PPL
    between the two points with the nearest entropies below and above; an exact hit is returned
    as is; None when no point lies on one side of ``target``. Points are sorted by entropy;
    a non-monotone curve uses the closest bracketing pair."""
    h, ppl = np.asarray(h, float), np.asarray(ppl, float)
    ok = np.isfinite(h) & np.isfinite(ppl) & (ppl > 0)
    h, ppl = h[ok], ppl[ok]
    if not len(h):
        return None
    hit = np.isclose(h, target, rtol=0, atol=1e-12)
    if hit.any():
        return float(ppl[hit][0])
    lo, hi = h < target, h > target
    if not lo.any() or not hi.any():
        return None
    i = np.where(lo)[0][np.argmax(h[lo])]
    j = np.where(hi)[0][np.argmin(h[hi])]
    w = (target - h[i]) / (h[j] - h[i])
    return float(math.exp((1 - w) * math.log(ppl[i]) + w * math.log(ppl[j])))


def _interp_draws(h: np.ndarray, log_ppl: np.ndarray, target: np.ndarray) -> np.ndarray:
    """:func:`ppl_at_entropy` for every row of (draws, points) ``h`` / ``log_ppl`` at that row's
    ``target``; NaN where no point lies on one side of it."""
    t = target[:, None]
    below, above = h <= t, h > t
    i = np.where(below, h, -np.inf).argmax(1)
    j = np.where(above, h, np.inf).argmin(1)
    r = np.arange(len(target))
    ok = below.any(1) & above.any(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = (target - h[r, i]) / (h[r, j] - h[r, i])
        out = np.exp((1 - w) * log_ppl[r, i] + w * log_ppl[r, j])
    return np.where(ok, out, np.nan)


def _sd(lo, hi, log: bool = False) -> np.ndarray:
    """sd of a normal whose central 95 % is [lo, hi] (in log space for ``log``)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    if log:
        with np.errstate(invalid="ignore", divide="ignore"):
            lo, hi = np.log(lo), np.log(hi)
    return (hi - lo) / (2 * Z975)


def scalar_ci(
    g: pd.DataFrame, target: float, target_sd: float, *, draws: int = SCALAR_DRAWS, seed: int = 0
) -> tuple[float, float] | None:
    """95 % interval of :func:`ppl_at_entropy` over the cells ``g`` (columns H, H_lo, H_hi,
    PPL, PPL_lo, PPL_hi) at ``target`` (the data's entropy, sd ``target_sd``): module docstring.
    None when a cell or the target has no interval, or when fewer than 95 % of the draws
    bracket the target (it sits at the end of the curve)."""
    sd_h = _sd(g["H_lo"], g["H_hi"])
    sd_p = _sd(g["PPL_lo"], g["PPL_hi"], log=True)
    if not (np.isfinite(sd_h).all() and np.isfinite(sd_p).all() and math.isfinite(target_sd)):
        return None
    rng = np.random.default_rng(seed)
    k = len(g)
    h = g["H"].to_numpy(float) + rng.standard_normal((draws, k)) * np.maximum(sd_h, 0)
    lp = np.log(g["PPL"].to_numpy(float)) + rng.standard_normal((draws, k)) * np.maximum(sd_p, 0)
    t = target + rng.standard_normal(draws) * max(target_sd, 0.0)
    v = _interp_draws(h, lp, t)
    v = v[np.isfinite(v)]
    if len(v) < 0.95 * draws:
        return None
    lo, hi = np.percentile(v, [2.5, 97.5])
    return float(lo), float(hi)


# --------------------------------------------------------------------------- cells


def _curve_label(r) -> str:
    """``method[/variant] [recipe] decoding``: one curve per model (bench.report.models)."""
    label = r["model_base"]
    return f"{label} {r['decoding']}" if r.get("decoding") else label


def _num(m: dict, metric: str, col: str = "value") -> float:
    v = m[metric][col] if metric in m else None
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _source(deg: bool | None, frac: float, h: float) -> str:
    """What the degenerate flag rests on: "measured" (the fraction), else the stored values
    (:func:`bench.evaluate.degenerate.cell_is_degenerate`): "stored mean H" / "stored empty
    fraction" when they flag the cell, "stored" when they do not; "" when nothing is known."""
    if deg is None:
        return ""
    if math.isfinite(frac):
        return "measured"
    if not deg:
        return "stored"
    return "stored mean H" if h < dg.LEGACY_MEAN_ENTROPY_MAX else "stored empty fraction"


def frontier_cells(task: str, df: pd.DataFrame) -> pd.DataFrame:
    """One row per sample cell of ``task`` (and per "data" reference): curve, nfe, temperature,
    H (+ CI), PPL (+ CI), pooled PPL, n, the degenerate fraction and flag (``deg_source``:
    :func:`_source`), MAUVE with its CI and its sd over k-means seeds (``MAUVE``,
    ``MAUVE_lo``, ``MAUVE_hi``, ``MAUVE_sd``; NaN where the cell has none), t_free, length_bound,
    is_data, and the sampling seconds per sample with the
    device they were measured on (``seconds``, ``device``: :func:`bench.report.cost.with_cost`;
    NaN and "" where the row has none)."""
    s = rows(df, task, kind=None)
    s = s[s["kind"].isin(["sample", REFERENCE]) & s["metric"].isin(METRICS)]
    if not len(s):
        return pd.DataFrame()
    s = with_cost(s, df)
    keys = ["recipe_id", "method", "variant", "decoding", "nfe", "temperature", "seed", "subset"]
    if "scorer" in s:  # a re-scored cell (bench.rescore) is another evaluation: its own row
        keys.append("scorer")
    out = []
    for _, g in s.groupby(keys, dropna=False, sort=False):
        m = {r["metric"]: r for _, r in g.iterrows()}
        if PPL not in m or ENTROPY not in m:
            continue
        first = g.iloc[0]
        is_data = first["method"] == DATA_METHOD
        frac = _num(m, DEGENERATE)
        deg = dg.cell_is_degenerate(frac, _num(m, ENTROPY), _num(m, EMPTY))
        out.append(
            {
                "curve": "data (held-out)" if is_data else _curve_label(first),
                "cells": tuple(dict.fromkeys(g["cell_id"])) if "cell_id" in g else (),
                "method": first["method"],
                "decoding": first["decoding"],
                "nfe": None if pd.isna(first["nfe"]) else int(first["nfe"]),
                "temperature": None
                if pd.isna(first["temperature"])
                else float(first["temperature"]),
                "seed": first["seed"],
                "subset": first["subset"],
                "H": _num(m, ENTROPY),
                "H_lo": _num(m, ENTROPY, "ci_low"),
                "H_hi": _num(m, ENTROPY, "ci_high"),
                "PPL": _num(m, PPL),
                "PPL_lo": _num(m, PPL, "ci_low"),
                "PPL_hi": _num(m, PPL, "ci_high"),
                "pooled": _num(m, POOLED),
                "MAUVE": _num(m, MAUVE),
                "MAUVE_lo": _num(m, MAUVE, "ci_low"),
                "MAUVE_hi": _num(m, MAUVE, "ci_high"),
                "MAUVE_sd": _num(m, MAUVE_SD),
                "n": int(m[PPL]["n"]) if pd.notna(m[PPL]["n"]) else None,
                "degenerate_fraction": frac,
                "degenerate": bool(deg),
                "deg_source": _source(deg, frac, _num(m, ENTROPY)),
                "t_free": bool(flag(g["temperature_free"]).any()),
                "length_bound": bool(flag(g["nfe_is_length"]).any()),
                "is_data": is_data,
                "stand_in_for": first.get("stand_in_for") or "",
                "protocol": first.get("task_protocol") or "",
                "seconds": float(m[PPL][SPS]),
                "device": m[PPL][DEVICE],
            }
        )
    return pd.DataFrame(out)


def nfe_panels(c: pd.DataFrame) -> list[int]:
    m = c[~c["is_data"] & ~c["length_bound"]]
    return sorted(int(v) for v in m["nfe"].dropna().unique())


def at_nfe(c: pd.DataFrame, nfe: int) -> pd.DataFrame:
    """Cells drawn on the NFE panel: that NFE, autoregressive (NFE = length) and data."""
    return c[(c["nfe"] == nfe) | c["length_bound"] | c["is_data"]]


def pareto_cells(c: pd.DataFrame, nfe: int, window: Window) -> pd.DataFrame:
    """The Pareto-optimal model cells of one NFE panel: inside ``window``, degenerate cells left
    out (they are neither candidates nor dominate others)."""
    at = at_nfe(c, nfe)
    cand = at[~at["is_data"] & ~at["degenerate"] & window.contains(at["H"], at["PPL"])]
    return cand[pareto_mask(cand["H"], cand["PPL"])] if len(cand) else cand


@dataclass(frozen=True)
class DataPoint:
    """The held-out data's entropy (sd from its interval) and Gen. PPL, averaged over its
    cells (sd of the mean of independent estimates)."""

    H: float
    PPL: float
    H_sd: float


def data_point(c: pd.DataFrame) -> DataPoint | None:
    d = c[c["is_data"]]
    if not len(d):
        return None
    sd = _sd(d["H_lo"], d["H_hi"])
    return DataPoint(
        float(d["H"].mean()), float(d["PPL"].mean()), float(np.sqrt((sd**2).sum()) / len(d))
    )


@dataclass(frozen=True)
class Scalar:
    """One curve's scalar at one NFE: ``status`` "ok" (``value``, ``ci`` or None), "no data",
    "outside" (no cell in the window), "degenerate" (every cell in the window is) or "short"
    (the healthy cells do not bracket H_data; ``h_range`` their entropies)."""

    status: str
    value: float | None = None
    ci: tuple[float, float] | None = None
    h_range: tuple[float, float] | None = None
    in_window: int = 0
    degenerate: int = 0
    cells: int = 0


def curve_scalar(g: pd.DataFrame, data: DataPoint | None, window: Window) -> Scalar:
    """Gen. PPL at the data's entropy along the curve ``g`` (one model and NFE), from its healthy
    cells inside ``window``, with :func:`scalar_ci`."""
    inside = g[window.contains(g["H"], g["PPL"])]
    usable = inside[~inside["degenerate"]]
    counts = dict(in_window=len(inside), degenerate=int(g["degenerate"].sum()), cells=len(g))
    if data is None:
        return Scalar("no data", **counts)
    if not len(inside):
        return Scalar("outside", **counts)
    if not len(usable):
        return Scalar("degenerate", **counts)
    v = ppl_at_entropy(usable["H"], usable["PPL"], data.H)
    if v is None:
        rng = (float(usable["H"].min()), float(usable["H"].max()))
        return Scalar("short", h_range=rng, **counts)
    return Scalar("ok", v, scalar_ci(usable, data.H, data.H_sd), **counts)
