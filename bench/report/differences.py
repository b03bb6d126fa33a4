"""``<task>_differences.md`` / ``.csv``: every two models scored on the same items, at the same
subset, NFE and temperature, with the difference of their headline metric and its paired CI;
``power.md``: the smallest difference each task's item count can detect.

Pairing: rows pair item by item when their ``items_key`` is equal (the same items in the same
order). A model whose NFE is its generated length (AR) or whose decoding ignores the temperature
(greedy, top-1; sampled at T = 1 only) is compared in every NFE / temperature group of its subset,
as the paper's figures draw it (a horizontal line). The Markdown shows, per subset, the group of
the headline table (largest NFE, temperature closest to 1): first every model against a reference
model (``--reference-model``; default the highest mean), the differences its CI separates from 0
first, subsets in the task's order; then every pair (folded on the page). The CSV has every group.
``python -m bench.report --power`` prints ``power.md`` as well.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench import atomic
from bench.evaluate.paired import PAIRED, WORST_CASE_SD, decode_outcomes, detectable_difference
from bench.report.common import (
    at_headline,
    flag,
    metric_with_rank,
    model_label,
    pct,
    rows,
    subsets,
)
from bench.report.document import Doc, Table, ids
from bench.report.items import Section, cli_flag
from bench.report.uncertainty import one_per_seed, paired_difference

ALPHA, POWER = 0.05, 0.8


def _outcome_rows(task: str, df: pd.DataFrame) -> pd.DataFrame:
    """The task's headline-metric sample rows that carry per-item outcomes, with a model label."""
    s = rows(df, task)
    if "item_outcomes" not in s or not len(s):
        return s.iloc[0:0]
    s = s[(s["metric"] == metric_with_rank(s, 0)) & s["item_outcomes"].notna()].copy()
    if not len(s):
        return s
    s["model"] = [model_label(r) for _, r in s.iterrows()]
    s["length_bound"] = flag(s["nfe_is_length"])
    s["t_free"] = flag(s["temperature_free"])
    s["temperature"] = s["temperature"].astype(float)
    return s


def _groups(s: pd.DataFrame):
    """(subset, nfe, T, rows of every model in that group): the models at (NFE, T) plus the
    length-bound and temperature-free ones at T (else at the temperature they were run at)."""
    for sub, g in s.groupby("subset", sort=True):
        fixed = g[~g["length_bound"]]
        temps = sorted(fixed["temperature"].unique(), reverse=True) or sorted(g["temperature"])
        for temp in temps:
            for nfe in sorted(fixed["nfe"].dropna().unique()):
                at = fixed[(fixed["nfe"] == nfe) & (fixed["temperature"] == temp)]
                extra = []
                for _model, m in g[~g["model"].isin(at["model"])].groupby("model"):
                    if not (m["length_bound"].all() or m["t_free"].all()):
                        continue
                    here = m[m["temperature"] == temp]
                    if not len(here) and m["t_free"].all():
                        here = m
                    if m["length_bound"].all():
                        pick = here
                    else:
                        pick = here[here["nfe"] == nfe]
                    if len(pick):
                        extra.append(pick)
                members = pd.concat([at, *extra]) if extra else at
                if members["model"].nunique() >= 2:
                    yield sub, int(nfe), float(temp), members


def _name(m: pd.DataFrame) -> str:
    label = str(m["model"].iloc[0])
    return f"{label}, NFE = length" if m["length_bound"].all() else label


def differences(task: str, df: pd.DataFrame) -> pd.DataFrame:
    """One row per pair of models per group (the model with the higher mean first)."""
    s = _outcome_rows(task, df)
    out = []
    for sub, nfe, temp, g in _groups(s):
        cells = {m: one_per_seed(x) for m, x in g.groupby("model", sort=True)}
        for a, b in itertools.combinations(sorted(cells), 2):
            ga, gb = cells[a], cells[b]
            if ga["value"].astype(float).mean() < gb["value"].astype(float).mean():
                (a, ga), (b, gb) = (b, gb), (a, ga)
            d = paired_difference(ga, gb)
            if d is None:
                continue
            out.append(
                dict(
                    task=task,
                    subset=sub,
                    nfe=nfe,
                    temperature=temp,
                    model_a=_name(ga),
                    model_b=_name(gb),
                    cells_a=ids(ga["cell_id"]),
                    cells_b=ids(gb["cell_id"]),
                    mean_a=float(ga["value"].astype(float).mean()),
                    mean_b=float(gb["value"].astype(float).mean()),
                    subset_rank=ga["subset_rank"].iloc[0],
                    metric=str(ga["metric"].iloc[0]),
                    **d,
                )
            )
    return pd.DataFrame(out)


def _headline_group(d: pd.DataFrame) -> pd.DataFrame:
    """Per subset, the pairs at the headline point (:func:`bench.report.common.at_headline`)."""
    return at_headline(d, ["subset"])


def reference_model(h: pd.DataFrame, asked: str | None = None) -> str:
    """The model the short table compares every other one against: ``asked`` (a label, or a
    unique part of one), else the one with the highest mean over the headline pairs."""
    names = sorted(set(h["model_a"]) | set(h["model_b"]))
    if asked:
        hit = [n for n in names if n == asked] or [n for n in names if asked in n]
        if len(hit) == 1:
            return hit[0]
        raise ValueError(
            f"--reference-model {asked!r}: matches {len(hit)} of the models ({'; '.join(names)})"
        )
    mean = {}
    for side, val in (("model_a", "mean_a"), ("model_b", "mean_b")):
        for name, v in zip(h[side], h[val]):
            mean.setdefault(name, []).append(v)
    return max(names, key=lambda n: (np.mean(mean[n]), n))


def _order(h: pd.DataFrame) -> pd.DataFrame:
    """Subsets in the task's order; within one, differences the CI separates from 0 first, the
    largest first."""
    rank = pd.to_numeric(h["subset_rank"], errors="coerce").fillna(np.inf)
    return (
        h.assign(_r=rank, _z=h["covers_zero"].astype(bool), _d=-h["diff"].abs())
        .sort_values(["_r", "subset", "_z", "_d"], kind="stable")
        .drop(columns=["_r", "_z", "_d"])
    )


def _md(h: pd.DataFrame, *, folded: bool = False) -> Table:
    table = pd.DataFrame(
        {
            "subset": h["subset"],
            "NFE": h["nfe"],
            "T": h["temperature"].map(lambda v: f"{v:g}"),
            "A": h["model_a"],
            "B": h["model_b"],
            "A - B (pp)": h["diff"].map(pct),
            "95 % CI (pp)": [f"[{pct(lo)}, {pct(hi)}]" for lo, hi in zip(h["low"], h["high"])],
            "seeds A, B x items": [
                f"{a}, {b} x {n}" for a, b, n in zip(h["seeds_a"], h["seeds_b"], h["items"])
            ],
            "McNemar p": h["p_mcnemar"].map(lambda p: "" if pd.isna(p) else f"{p:.3g}"),
            "CI covers 0": h["covers_zero"].map(lambda c: "yes: no difference shown" if c else ""),
        }
    )
    if h["p_mcnemar"].isna().all():  # several seeds: McNemar does not apply to any row
        table = table.drop(columns="McNemar p")
    sources = [ids([*a, *b]) for a, b in zip(h["cells_a"], h["cells_b"])]
    return Table(
        table,
        sources,
        keys={"subset", "NFE", "T", "A", "B"},
        ci_method=PAIRED,
        folded=folded,
        caption="every pair" if folded else "",
    )


def differences_markdown(task: str, d: pd.DataFrame, reference: str | None = None) -> Doc:
    """The headline group's pairs: those with the reference model first (significant ones
    first, subsets in the task's order), then every pair, folded on the page."""
    metric = str(d["metric"].iloc[0]).replace("_", " ")
    h = _order(_headline_group(d))
    ref = reference_model(h, reference)
    mine = h[(h["model_a"] == ref) | (h["model_b"] == ref)]
    one = bool(((h["seeds_a"] == 1) & (h["seeds_b"] == 1)).all())
    seeds = (
        "One training seed per model: the interval reflects the items only, not a retrained model."
        if one
        else "Several training seeds: the interval reflects both items and seeds (with few seeds "
        "it is somewhat narrow: a bootstrap of S seeds keeps (S - 1) / S of their variance)."
    )
    shown = int((~mine["covers_zero"].astype(bool)).sum())
    return Doc(
        [
            f"# {task}: paired differences in {metric} (percentage points)",
            "",
            f"Two models scored on the same items at the same subset, NFE and temperature; A is "
            f"the one with the higher mean. CI: {PAIRED}, 95 %, B = 1000"
            + ("; McNemar p: the exact test on the items the two models disagree on" if one else "")
            + f". A difference whose CI covers 0 is marked. {seeds} Shown: per subset, the "
            f"largest NFE at the temperature closest to 1; `{task}_differences.csv` has every NFE "
            "and temperature.",
            "",
            f"## Against {ref}",
            "",
            f"Every model against `{ref}` (the highest mean here; `--reference-model` picks "
            f"another): {shown} of {len(mine)} differences shown by their CI, listed first.",
            "",
            _md(mine),
            "",
            f"## All {len(h)} pairs",
            "",
            _md(h, folded=True),
            "",
        ]
    )


def power_rows(task: str, df: pd.DataFrame) -> pd.DataFrame:
    """Per subset: items, seeds, and the smallest detectable difference, worst case (independent
    outcomes at 50 %) and at the spread of item differences this store's pairs show."""
    s = _outcome_rows(task, df)
    out = []
    for sub in subsets(s) if len(s) else []:  # the task's order (easy, medium, hard)
        g = s[s["subset"] == sub]
        n = int(g["item_outcomes"].str.len().max())
        sds = []
        for _, _, _, members in _groups(g):
            firsts = {m: x.iloc[0] for m, x in members.groupby("model")}
            for a, b in itertools.combinations(sorted(firsts), 2):
                ra, rb = firsts[a], firsts[b]
                if ra["items_key"] != rb["items_key"]:
                    continue
                diff = decode_outcomes(ra["item_outcomes"]) - decode_outcomes(rb["item_outcomes"])
                sds.append(float(diff.std(ddof=1)) if len(diff) > 1 else np.nan)
        obs = float(np.nanmedian(sds)) if sds and not np.all(np.isnan(sds)) else np.nan
        why = _undefined_spread(sds, obs)
        out.append(
            dict(
                task=task,
                subset=sub,
                items=n,
                seeds=int(one_per_seed(g)["seed"].nunique()),
                mde_worst=detectable_difference(n, WORST_CASE_SD, alpha=ALPHA, power=POWER),
                mde_observed=(
                    np.nan if why else detectable_difference(n, obs, alpha=ALPHA, power=POWER)
                ),
                mde_observed_note=why,
                sd_observed=obs,
                pairs=len(sds),
                cells=ids(g["cell_id"]),
            )
        )
    return pd.DataFrame(out)


def _undefined_spread(sds: list[float], obs: float) -> str:
    """Why the detectable difference at this store's spread is undefined ("" when it is not):
    no pair to take a spread from, or a spread of 0 (the normal approximation would print a
    detectable difference of 0, which no test over these items has)."""
    if not sds:
        return "undefined: no two models scored the same items"
    if np.isnan(obs):
        return "undefined: one item, no spread"
    if obs > 0:
        return ""
    if np.nanmax(sds) == 0:
        return "undefined: no item differs between any pair"
    return "undefined: most pairs differ on no item (median spread 0)"


def power_markdown(p: pd.DataFrame) -> Doc:
    table = pd.DataFrame(
        {
            "task": p["task"],
            "subset": p["subset"],
            "items": p["items"],
            "seeds": p["seeds"],
            "detectable, worst case (pp)": p["mde_worst"].map(pct),
            "detectable, this store's spread (pp)": [
                why if isinstance(why, str) and why else pct(v)
                for v, why in zip(p["mde_observed"], p.get("mde_observed_note", [""] * len(p)))
            ],
            "pairs behind the spread": p["pairs"],
        }
    )
    sources = list(p["cells"]) if "cells" in p else None
    return Doc(
        [
            "# How many items are enough",
            "",
            f"The smallest true difference in the headline metric that a paired comparison over "
            f"the subset's items detects with a two-sided test at level {ALPHA:g} with power "
            f"{POWER:g} (normal approximation: (z_0.975 + z_0.8) x sd / sqrt(items)). Worst "
            "case: two uncorrelated models at 50 % (sd of an item's difference sqrt(0.5)); this "
            "store's spread: the median sd of the item differences over the pairs of models "
            "the store scored on the same items (first seed each); undefined where that spread is "
            "0 (no pair differs on an item: no spread to size a test by). Differences smaller "
            "than this are not separated by the run, whatever its table shows. Training seeds add "
            "their own variation on top (the differences tables' seed-aware intervals).",
            "",
            Table(table, sources, keys={"task", "subset"}),
            "",
        ]
    )


def _text(task: str, d: pd.DataFrame, args) -> Doc:
    try:
        return differences_markdown(task, d, getattr(args, "reference_model", None))
    except ValueError as e:  # a --reference-model that names no model: a usage error
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _render(sec: Section, df: pd.DataFrame, out: Path, args) -> list[Path]:
    written, power = [], []
    for task in sorted(df["task"].dropna().unique()):
        d = differences(task, df)
        if len(d):
            csv = d.drop(columns=["cells_a", "cells_b"])  # the page's sources, not results
            written.append(
                atomic.write_with(
                    out / f"{task}_differences.csv", lambda t, d=csv: d.to_csv(t, index=False)
                )
            )
            written.append(_text(task, d, args).write(out / f"{task}_differences.md"))
        power.append(power_rows(task, df))
    p = pd.concat(power) if power else pd.DataFrame()
    if len(p):
        text = power_markdown(p)
        written.append(text.write(out / "power.md"))
        if getattr(args, "power", False):
            print(text.markdown(), end="")
    elif getattr(args, "power", False):
        print("power: no sample rows with per-item outcomes in the store")
    return written


ITEMS = [
    Section(
        name="differences",
        render=_render,
        flags=(
            cli_flag(
                "--reference-model",
                metavar="LABEL",
                help="the model each differences table compares every other one against (a "
                "model label as the tables print it, or a unique part of one; default: the "
                "highest mean)",
            ),
            cli_flag(
                "--power",
                action="store_true",
                help="also print power.md: the smallest difference each task's items can detect",
            ),
        ),
    )
]
