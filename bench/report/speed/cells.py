"""The speed section's settings from the store rows (:mod:`bench.report.speed.section`).

A *setting* is one model's cell on one subset (an NFE, a temperature, sampling-only options, an
EOS stop), its training seeds pooled: the headline metric with its 95 % interval
(:func:`bench.report.uncertainty.cell_summary`), and the cost columns pooled over the seeds:

- ``calls`` / ``fe``: backbone calls and forward-equivalents per sample (``calls_mean``,
  ``fe_mean``, weighted by items);
- ``tpf`` / ``tpfe``: tokens per call (d3LLM's TPF) and tokens per forward-equivalent, total
  generated tokens over total calls (forward-equivalents) of the seeds' cells;
- ``latency``: seconds per sample at batch 1 (``latency_s``, weighted by ``latency_items``);
- ``batched``: seconds per sample at the cell's batch (:func:`bench.report.cost.with_cost`);
- ``device``: where the seconds were measured (:func:`bench.report.cost.device_of`).

Per model and subset only the cells at the temperature closest to 1 are settings (every NFE and
sampling option there): the temperature is a quality knob, not a parallelism one. ``is_ar``: the
rows of method ``ar``, whose sampler keeps its KV cache (``AR.kv_cache``, no sweep option turns
it off). :func:`grid_point` reads a setting's per-item tokens, calls and forward-equivalents from
its records (:mod:`bench.records`) for :func:`bench.evaluate.aup.grid_aup`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench import records
from bench.evaluate.aup import GridPoint
from bench.report.common import at_headline, flag, metric_with_rank, rows
from bench.report.cost import SPS, device_of, weighted_seconds, with_cost
from bench.report.uncertainty import cell_summary, one_per_seed, outcome_matrix

#: the method whose cells are the speed-ups' reference (autoregressive, KV cache on)
AR = "ar"
#: what makes one setting of a model (its seeds pooled)
KEYS = ["model", "subset", "items_key", "nfe", "temperature", "options"]
COST = ("calls_mean", "fe_mean", "tokens_mean", "tokens_per_call", "tokens_per_fe", "latency_s")


def _num(s: pd.DataFrame, col: str) -> pd.Series:
    if col not in s:
        return pd.Series(np.nan, index=s.index, dtype=float)
    return pd.to_numeric(s[col], errors="coerce").astype(float)


def options_text(sampling, eos_stop) -> str:
    """A setting's sampling-only options (``k=v, ...``) and ``EOS stop``; "" for none."""
    out = []
    if isinstance(sampling, str) and sampling:
        try:
            d = json.loads(sampling)
        except ValueError:
            d = sampling
        out.append(", ".join(f"{k}={d[k]}" for k in sorted(d)) if isinstance(d, dict) else str(d))
    if eos_stop:
        out.append("EOS stop")
    return "; ".join(out)


def speed_rows(task: str, df: pd.DataFrame) -> pd.DataFrame:
    """The task's headline-metric sample rows of the speed protocol (those with ``latency_s``:
    another sweep's cells of the same models, the quickstart's, are left out, so that a setting
    never pools two protocols' cells of one seed) with their cost columns as numbers,
    ``options``, the seconds per sample at batch (:data:`bench.report.cost.SPS`) and the
    device, at each model's temperature closest to 1."""
    s = rows(df, task)
    metric = metric_with_rank(s, 0)
    if metric is None:
        return s.iloc[0:0]
    s = with_cost(s[s["metric"] == metric], df)
    for c in COST:
        s[c] = _num(s, c)
    s = s[s["latency_s"].notna()].copy()
    s["latency_items"] = _num(s, "latency_items")
    eos = flag(s["eos_stop"]) if "eos_stop" in s else pd.Series(False, index=s.index)
    sampling = s["sampling"] if "sampling" in s else pd.Series("", index=s.index)
    s["options"] = [options_text(a, b) for a, b in zip(sampling, eos)]
    s["items_key"] = s["items_key"].fillna("").astype(str)
    s["temperature"] = pd.to_numeric(s["temperature"], errors="coerce").astype(float)
    s["nfe"] = pd.to_numeric(s["nfe"], errors="coerce")
    names, threads = s["device_name"], s["threads"]
    s["device"] = [device_of(a, b) or "unrecorded" for a, b in zip(names, threads)]
    return at_headline(s, ["model", "subset"], nfe=False)


def has_latency(task: str, df: pd.DataFrame) -> bool:
    """Whether the task's headline rows carry ``latency_s`` (the speed protocol ran)."""
    s = rows(df, task)
    return bool(len(s)) and bool(_num(s, "latency_s").notna().any())


def _ratio(num: pd.Series, den: pd.Series) -> float:
    ok = num.notna() & den.notna()
    return float(num[ok].sum() / den[ok].sum()) if ok.all() and den[ok].sum() > 0 else np.nan


def _weighted(v: pd.Series, w: pd.Series) -> float:
    ok = v.notna() & (w > 0)
    return float((v[ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else np.nan


def _setting(g: pd.DataFrame) -> dict:
    """One setting's row (module docstring) from its rows ``g`` (one per seed)."""
    g = one_per_seed(g)
    r = g.iloc[0]
    n = _num(g, "n").fillna(0)
    c = cell_summary(g)
    tokens = g["tokens_mean"] * n
    devs = sorted(set(g["device"]))
    return {
        **{k: r[k] for k in KEYS},
        "method": r["method"],
        "recipe": str(r.get("recipe", "") or ""),
        "decoding": str(r.get("decoding", "") or ""),
        "variant": str(r.get("variant", "") or ""),
        "is_ar": r["method"] == AR,
        "length_bound": bool(flag(g["nfe_is_length"]).all()),
        "default_decoding": bool(flag(g["default_decoding"]).all()),
        "value": c["value"],
        "low": c["low"],
        "high": c["high"],
        "ci_method": c["method"],
        "seeds": len(g),
        "items": c["items"],
        "calls": _weighted(g["calls_mean"], n),
        "fe": _weighted(g["fe_mean"], n),
        "tpf": _ratio(tokens, g["calls_mean"] * n),
        "tpfe": _ratio(tokens, g["fe_mean"] * n),
        "latency": _weighted(g["latency_s"], g["latency_items"].fillna(0)),
        "batched": weighted_seconds(g, SPS),
        "device": devs[0] if len(devs) == 1 else "mixed: " + "; ".join(devs),
        "cells": tuple(dict.fromkeys(g["cell_id"])),
        "rows": g,
    }


def settings(s: pd.DataFrame) -> pd.DataFrame:
    """One row per setting of :func:`speed_rows`' rows (module docstring), sorted by model,
    subset and NFE; ``rows``: the setting's store rows (one per seed), for paired differences."""
    out = [_setting(g) for _, g in s.groupby(KEYS, sort=True, dropna=False)]
    if not out:
        return pd.DataFrame(columns=[*KEYS, "aup_model", "value", "cells", "rows"])
    st = pd.DataFrame(out).sort_values(["subset", "model", "nfe", "options"], kind="stable")
    st["aup_model"] = aup_models(st)
    return st


def aup_models(st: pd.DataFrame) -> list[str]:
    """The model AUP scores each setting under: one trained model (its recipe) and decoding,
    whatever the variants that only change how it samples (their NFE, tau, blocks and caches
    are the grid the area is taken over). ``method (decoding)``, and the first variant's name
    when the method has several recipes."""
    keys = list(zip(st["method"], st["recipe"], st["decoding"]))
    first: dict = {}
    for k, v in zip(keys, st["variant"]):
        first.setdefault(k, v)
    recipes: dict = {}
    for m, rec, _ in keys:
        recipes.setdefault(m, set()).add(rec)
    return [
        f"{m}/{first[(m, rec, d)] or 'base'} ({d})" if len(recipes[m]) > 1 else f"{m} ({d})"
        for m, rec, d in keys
    ]


def _record_arrays(results_dir: Path, g: pd.DataFrame, n: int) -> dict:
    """Per item (index 0..n-1) ``tokens``, ``calls`` and ``fe`` summed over the records of the
    rows ``g`` (seeds, and draws of a cell with several); a key is None where a file is missing
    or damaged or a record lacks it (every key None without records)."""
    out: dict = {k: np.zeros(n) for k in ("tokens", "calls", "fe")}
    for _, r in g.iterrows():
        rel, sha = r.get("records"), r.get("records_sha256")
        try:
            if not isinstance(rel, str) or not rel:
                raise records.RecordsError("no records")
            recs = records.read(results_dir, rel, sha if isinstance(sha, str) else None)
        except records.RecordsError:
            return dict.fromkeys(out)
        for rec in recs:
            i = rec.get("index")
            if not isinstance(i, int) or not 0 <= i < n:
                return dict.fromkeys(out)
            for k, arr in out.items():
                v = rec.get(k)
                if arr is not None and isinstance(v, int | float) and not isinstance(v, bool):
                    arr[i] += float(v)
                else:
                    out[k] = None
    return out


def grid_point(setting, results_dir: Path) -> GridPoint | None:
    """The setting's :class:`~bench.evaluate.aup.GridPoint`: its per-item outcomes (the mean
    over seeds and draws) and, from its records, per-item tokens, calls and forward-equivalents
    (None where they do not give them: its stored TPF and tokens per forward-equivalent are used
    there). None when its rows carry no per-item outcomes."""
    m = outcome_matrix(setting["rows"])
    if m is None:
        return None
    outcomes = m[0].mean(axis=0)
    per = _record_arrays(results_dir, setting["rows"], len(outcomes))
    return GridPoint(outcomes, per["tokens"], per["calls"], per["fe"], setting["tpf"],
                     setting["tpfe"])  # fmt: skip


def pareto(cost, acc) -> np.ndarray:
    """True where no other point costs no more and scores no less, one of them strictly (lower
    cost and higher accuracy are better); NaN points are never on the front."""
    cost, acc = np.asarray(cost, float), np.asarray(acc, float)
    ok = np.isfinite(cost) & np.isfinite(acc)
    out = ok.copy()
    for i in np.flatnonzero(ok):
        dom = ok & (cost <= cost[i]) & (acc >= acc[i]) & ((cost < cost[i]) | (acc > acc[i]))
        out[i] = not dom.any()
    return out
