"""Cell intervals over seeds x items, and paired differences between models, from the rows'
per-item outcomes (``item_outcomes``, ``items_key``; :mod:`bench.evaluate.paired`).

A *cell* here is one model (method, variant, decoding) at one (task, subset, NFE, temperature):
one row per training seed. Its interval pools the seeds with the two-level bootstrap when every
seed's row carries its outcomes over the same items; a row without outcomes (an older store, a
metric that is not a mean of 0/1 outcomes) keeps its evaluator's interval for one seed and
mean +- sd (labelled as such, not a CI) for several.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.evaluate.paired import (
    Interval,
    decode_outcomes,
    mcnemar_exact,
    two_level_bootstrap,
    two_level_difference,
)

SD_OVER_SEEDS = "mean +- sd over seeds (no per-item outcomes: not a CI)"


def outcome_matrix(g: pd.DataFrame) -> tuple[np.ndarray, str] | None:
    """(seeds x items) outcomes of the rows ``g`` (one per seed) and their items key, or None
    when a row has none or the rows scored different items."""
    if "item_outcomes" not in g or not len(g):
        return None
    vals, keys = g["item_outcomes"], g["items_key"]
    if vals.isna().any() or keys.isna().any() or keys.nunique() != 1:
        return None
    rows = [decode_outcomes(v) for v in vals]
    if "draw_outcomes" in g:  # a k-draw cell's draws 1..k-1: more rows, as seeds are
        more = [v for v in g["draw_outcomes"] if isinstance(v, str) and v]
        rows += [decode_outcomes(x) for v in more for x in v.split(",")]
    if len({len(r) for r in rows}) != 1:
        return None
    return np.stack(rows), str(keys.iloc[0])


def _seed_of(g: pd.DataFrame) -> pd.Series:
    return g["seed"].fillna(0).astype(int) if "seed" in g else pd.Series(0, index=g.index)


def one_per_seed(g: pd.DataFrame) -> pd.DataFrame:
    """One row per training seed (the first; a store never holds two for one cell and seed)."""
    return g[~_seed_of(g).duplicated().to_numpy()]


def cell_interval(g: pd.DataFrame, seed: int = 0) -> Interval | None:
    """The interval of one cell (rows: its seeds), or None when it has none: the two-level
    bootstrap over the outcomes; else one seed's evaluator interval; else (several seeds, no
    outcomes) None: :func:`cell_summary` then gives mean +- sd."""
    g = one_per_seed(g)
    m = outcome_matrix(g)
    if m is not None and len(g) > 1:
        return two_level_bootstrap(m[0], seed=seed)
    if len(g) == 1:
        r = g.iloc[0]
        if pd.notna(r.get("ci_low")) and pd.notna(r.get("ci_high")):
            method = r.get("ci_method")
            n = int(r["n"]) if pd.notna(r.get("n")) else 0
            name = str(method) if isinstance(method, str) and method else "evaluator's 95 % CI"
            return Interval(float(r["value"]), float(r["ci_low"]), float(r["ci_high"]), 1, n, name)
        if m is not None:
            return two_level_bootstrap(m[0], seed=seed)
    return None


def seeds_and_items(g: pd.DataFrame) -> tuple[int, int]:
    """(training seeds, items) behind one cell (rows: its seeds)."""
    g = one_per_seed(g)
    n = pd.to_numeric(g["n"], errors="coerce").max() if "n" in g else np.nan
    return len(g), int(n) if pd.notna(n) else 0


def cell_summary(g: pd.DataFrame) -> dict:
    """value, low, high (None when no interval), seeds, items, method of one cell."""
    g = one_per_seed(g)
    iv = cell_interval(g)
    _, items = seeds_and_items(g)
    vals = g["value"].astype(float)
    if iv is not None:
        v = iv.value if len(g) > 1 else float(vals.iloc[0])
        return dict(value=v, low=iv.low, high=iv.high, seeds=len(g), items=items, method=iv.method)
    sd = float(vals.std(ddof=1)) if len(g) > 1 else np.nan
    method = SD_OVER_SEEDS if len(g) > 1 else ""
    return dict(
        value=float(vals.mean()),
        low=None,
        high=None,
        sd=sd,
        seeds=len(g),
        items=items,
        method=method,
    )


def paired_difference(ga: pd.DataFrame, gb: pd.DataFrame, seed: int = 0) -> dict | None:
    """mean(A) - mean(B) of two cells scored on the same items, with the paired two-level CI
    and (one seed each) the exact McNemar p-value; None when they cannot be paired."""
    ma, mb = outcome_matrix(one_per_seed(ga)), outcome_matrix(one_per_seed(gb))
    if ma is None or mb is None or ma[1] != mb[1] or ma[0].shape[1] != mb[0].shape[1]:
        return None
    iv = two_level_difference(ma[0], mb[0], seed=seed)
    one = ma[0].shape[0] == 1 and mb[0].shape[0] == 1
    return dict(
        diff=iv.value,
        low=iv.low,
        high=iv.high,
        covers_zero=iv.covers_zero,
        seeds_a=ma[0].shape[0],
        seeds_b=mb[0].shape[0],
        items=ma[0].shape[1],
        p_mcnemar=mcnemar_exact(ma[0][0], mb[0][0]) if one else np.nan,
        method=iv.method,
    )


def pool_seeds(s: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per ``keys`` group (a cell over its training seeds): the first row's columns with
    ``value`` / ``ci_low`` / ``ci_high`` from :func:`cell_summary` (the mean and the two-level
    interval; empty bounds when the seeds carry no outcomes) and ``seeds``, ``items``,
    ``ci_method``, ``cells`` (the store cells pooled)."""
    out = []
    for _, g in s.groupby(keys, sort=False, dropna=False):
        c = cell_summary(g)
        r = g.iloc[0].copy()
        r["value"], r["ci_low"], r["ci_high"] = c["value"], c["low"], c["high"]
        r["seeds"], r["items"], r["ci_method"] = c["seeds"], c["items"], c["method"]
        r["cells"] = tuple(dict.fromkeys(g["cell_id"])) if "cell_id" in g else ()
        out.append(r)
    return pd.DataFrame(out) if out else s.assign(seeds=[], items=[], ci_method=[], cells=[])
