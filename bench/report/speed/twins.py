"""Each speed-up against the same model without it (:mod:`bench.report.speed.section`): which
speed-up is free. A setting's *twin* is the setting of the same trained model, subset, items,
device, NFE and temperature that differs only by not having it:

- a block KV cache (``block_cache`` prefix / dual, with its ``cache_refresh``) against the same
  decoding and options without a cache;
- a parallel decoding (``threshold``, ``factor``) against LLaDA's ``confidence`` order with the
  same options but its rule's own (``tau``, ``factor``), the budget split evenly over the steps.

Per pair: the accuracy difference with its paired interval
(:func:`bench.report.uncertainty.paired_difference`: the same items, seeds per model), the ratio
of forward-equivalents per sample, the batch-1 and batched speed-ups, and whether no accuracy
loss is shown (the interval reaches 0 or above).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from bench.report.common import pct
from bench.report.document import Table, ids
from bench.report.uncertainty import paired_difference

#: option -> what makes it a speed-up, and the options its twin drops
CACHE_OPTIONS = ("block_cache", "cache_refresh")
#: a parallel decoding -> its twin decoding and the options only it reads
PARALLEL = {"threshold": ("confidence", ("tau",)), "factor": ("confidence", ("factor",))}
SAME = ["method", "recipe", "subset", "items_key", "device", "nfe", "temperature"]


def _sampling(r) -> dict:
    raw = r["rows"]["sampling"].iloc[0] if "sampling" in r["rows"] else ""
    try:
        d = json.loads(raw) if isinstance(raw, str) and raw else {}
    except ValueError:
        d = {}
    return d if isinstance(d, dict) else {}


def _key(decoding: str, opts: dict, drop=()) -> tuple:
    return (decoding, tuple(sorted((k, str(v)) for k, v in opts.items() if k not in drop)))


def twin_of(r) -> tuple[str, tuple] | None:
    """(what the speed-up is, the key of the twin setting) for setting ``r``; None when it has
    neither a cache nor a parallel rule."""
    opts = _sampling(r)
    if opts.get("block_cache", "none") != "none":
        return f"block_cache={opts['block_cache']}", _key(r["decoding"], opts, CACHE_OPTIONS)
    if r["decoding"] in PARALLEL:
        twin, drop = PARALLEL[r["decoding"]]
        return r["decoding"], _key(twin, opts, drop)
    return None


def twins(st: pd.DataFrame) -> pd.DataFrame:
    """Every setting with a speed-up against its twin (module docstring); empty when none."""
    out = []
    for _, g in st.groupby(SAME, sort=True, dropna=False):
        by_key = {_key(r["decoding"], _sampling(r)): r for _, r in g.iterrows()}
        for _, r in g.iterrows():
            t = twin_of(r)
            if t is None or t[1] not in by_key:
                continue
            base = by_key[t[1]]
            d = paired_difference(r["rows"], base["rows"])
            if d is None:
                continue
            line = {"setting": r, "twin": base, "what": t[0]}
            line |= {k: d[k] for k in ("diff", "low", "high")}
            ok = lambda a, b: np.isfinite(a) and np.isfinite(b) and a > 0  # noqa: E731
            line["fe_ratio"] = r["fe"] / base["fe"] if ok(r["fe"], base["fe"]) else np.nan
            for col in ("latency", "batched"):
                line[col] = base[col] / r[col] if ok(r[col], base[col]) else np.nan
            line["free"] = d["high"] >= 0
            out.append(line)
    return pd.DataFrame(out)


def _f(v, fmt: str) -> str:
    return "" if not np.isfinite(v) else format(v, fmt)


def twins_table(tw: pd.DataFrame, name) -> Table:
    """The pairs of :func:`twins`; ``name(r)`` writes a setting (NFE and options)."""
    t = pd.DataFrame(
        {
            "subset": [r["subset"] for r in tw["setting"]],
            "model": [r["model"] for r in tw["setting"]],
            "setting": [name(r) for r in tw["setting"]],
            "against": [f"{b['model']} ({name(b)})" for b in tw["twin"]],
            "speed-up": tw["what"],
            "accuracy (%)": [pct(r["value"]) for r in tw["setting"]],
            "minus twin (pp) [95 % CI]": [
                f"{pct(d)} [{pct(lo)}, {pct(hi)}]"
                for d, lo, hi in zip(tw["diff"], tw["low"], tw["high"])
            ],
            "FE / twin's": tw["fe_ratio"].map(lambda v: _f(v, ".2f")),
            "batch-1 speed-up": tw["latency"].map(
                lambda v: _f(v, ".2f") + "x" if _f(v, "") else ""
            ),
            "batched speed-up": tw["batched"].map(
                lambda v: _f(v, ".2f") + "x" if _f(v, "") else ""
            ),
            "no accuracy loss shown": tw["free"].map(lambda m: "yes" if m else "no"),
        }
    )
    sources = [ids([*a["cells"], *b["cells"]]) for a, b in zip(tw["setting"], tw["twin"])]
    keys = {"subset", "model", "setting", "against"}
    return Table(t, sources, keys=keys, ci_method="paired two-level percentile bootstrap")
