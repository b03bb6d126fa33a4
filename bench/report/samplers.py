"""``<task>_samplers.md``: does a ranking of the methods survive each method's best sampler?

A *trained model* is a method's training recipe (the rows' ``recipe``: the train cell without its
seed); its *samplers* are the (decoding, sampling-only options) it was sampled with, each at the
temperatures of the sweep. The *paper's sampler* of a model is its method's default decoding with
no sampling option (the rows' ``default_decoding`` and an empty ``sampling``): ancestral for MDLM
and Duo, the exact velocity for S-FLM, sampling for AR. A model sampled with nothing else ranks
with its paper sampler as its best; a store where no model was sampled otherwise gets no file.
Per subset:

- **at each NFE**: the paper's sampler at its best temperature against the best (sampler,
  temperature) of the model at that NFE (a method whose NFE is its generated length, AR, is in
  every NFE group, as the differences tables place it), the paired difference with its two-level
  95 % CI over seeds and items (:func:`bench.report.uncertainty.paired_difference`), and the
  method's rank among the models under each;
- **at equal sampling seconds**: for budgets B (per NFE of the grid, the geometric mean over the
  models of their paper sampler's seconds per sample there), the best cell of each model whose
  seconds per sample is at most B (any sampler, NFE and temperature) against the best such cell
  of its paper sampler; a model with no cell within B is left out of that row;
- **rankings that change**: every pair of models whose order under the best samplers is the
  reverse of their order under the paper's, with the paired CI of the new order.

The best is chosen on the same items it is scored on: an optimistic estimate of what a sampler
chosen in advance would give (said in the file). Only rows with per-item outcomes are compared.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.report.common import flag, metric_with_rank, pct, rows, subsets
from bench.report.cost import weighted_seconds, with_cost
from bench.report.document import Doc, Table, ids
from bench.report.items import Section
from bench.report.models import base_label
from bench.report.uncertainty import one_per_seed, paired_difference


def _sampling(v) -> str:
    """The row's sampling-only options as ``k=v, ...`` ("" for none; rows before the column)."""
    if not isinstance(v, str) or not v:
        return ""
    try:
        d = json.loads(v)
    except ValueError:
        return v
    return ", ".join(f"{k}={d[k]}" for k in sorted(d)) if isinstance(d, dict) else v


def sampler_rows(task: str, df: pd.DataFrame) -> pd.DataFrame:
    """The task's headline-metric sample rows with per-item outcomes, with ``trained`` (method +
    recipe), ``sampler`` (decoding and sampling options), ``paper`` (the paper's sampler) and
    seconds per sample: the trained models sampled with their paper sampler (those sampled with
    nothing else too: they rank with their paper sampler as their best), when at least one was
    sampled with another."""
    s = rows(df, task)
    if not len(s) or "item_outcomes" not in s:
        return s.iloc[0:0]
    s = s[(s["metric"] == metric_with_rank(s, 0)) & s["item_outcomes"].notna()].copy()
    if not len(s):
        return s
    s = with_cost(s, df)
    opts = (s["sampling"] if "sampling" in s else pd.Series("", index=s.index)).map(_sampling)
    # a sampler with sampling options is named by its entry's variant ("psi [psi-capped]"); the
    # file's legend gives the options (:func:`legend`)
    s["options"] = opts
    s["sampler"] = [
        d + (f" [{v}]" if o else "")
        for d, o, v in zip(s["decoding"].astype(str), opts, s["variant"].astype(str))
    ]
    s["paper"] = flag(s["default_decoding"]) & opts.eq("")
    s["trained"] = s["method"].astype(str) + "|" + s["recipe"].astype(str)
    s["length_bound"] = flag(s["nfe_is_length"])
    s["temperature"] = s["temperature"].astype(float)
    # every model with its paper sampler takes part in the rankings (one sampled only so: its
    # best is the paper's); none when no model was sampled otherwise
    if not (s.groupby("trained")["sampler"].nunique() > 1).any():
        return s.iloc[0:0]
    s = s[s.groupby("trained")["paper"].transform("any")]
    names = {}
    for t, g in s.groupby("trained"):
        p = g[g["paper"]].iloc[0]
        names[t] = base_label(p["method"], p["variant"], None)
    s["name"] = s["trained"].map(names)
    return s


def _cells(g: pd.DataFrame):
    """(sampler, nfe, temperature) -> that cell's rows (its seeds)."""
    return {k: c for k, c in g.groupby(["sampler", "nfe", "temperature"], sort=True)}


def _mean(c: pd.DataFrame) -> float:
    return float(one_per_seed(c)["value"].astype(float).mean())


def _best(cells: dict) -> tuple | None:
    """The key of the cell with the highest mean (ties: the first in sorted order)."""
    if not cells:
        return None
    return max(sorted(cells, key=str), key=lambda k: _mean(cells[k]))


def _at_nfe(g: pd.DataFrame, nfe: int) -> pd.DataFrame:
    """A model's rows at ``nfe`` (its length-bound rows whatever the NFE)."""
    return g[g["length_bound"] | (pd.to_numeric(g["nfe"], errors="coerce") == nfe)]


def _compare(cells: dict, paper_cells: dict) -> dict | None:
    pk, bk = _best(paper_cells), _best(cells)
    if pk is None or bk is None:
        return None
    pc, bc = paper_cells[pk], cells[bk]
    d = paired_difference(bc, pc) if bk != pk else None
    return dict(paper_key=pk, best_key=bk, paper=pc, best=bc, diff=d)


def _ranks(values: dict[str, float]) -> dict[str, int]:
    order = sorted(values, key=lambda k: (-values[k], k))
    return {k: i + 1 for i, k in enumerate(order)}


def _key_text(k: tuple, length_bound: bool) -> str:
    sampler, nfe, temp = k
    n = "NFE = length" if length_bound else f"NFE {int(nfe)}"
    return f"{sampler} ({n}, T = {temp:g})"


def _diff_text(c: dict) -> str:
    d = c["diff"]
    if c["best_key"] == c["paper_key"]:
        return "0 (the paper's)"
    if d is None:
        return ""
    return f"{100 * d['diff']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def comparisons(s: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    """(per NFE, at equal seconds, flipped pairs): one row per (subset, NFE or budget, model)."""
    per_nfe, per_budget, flips = [], [], []
    for sub in subsets(s):
        g = s[s["subset"] == sub]
        grid = sorted(
            int(n) for n in pd.to_numeric(g.loc[~g["length_bound"], "nfe"]).dropna().unique()
        )
        models = sorted(g["trained"].unique())
        # per model, its cells and their seconds per sample, once for every budget below
        cells = {t: _cells(g[g["trained"] == t]) for t in models}
        seconds = {t: {k: weighted_seconds(c) for k, c in cells[t].items()} for t in models}
        for nfe in grid:
            found = {}
            for t in models:
                m = _at_nfe(g[g["trained"] == t], nfe)
                c = _compare(_cells(m), _cells(m[m["paper"]]))
                if c is not None:
                    found[t] = dict(c, length=bool(m["length_bound"].all()))
            _add_rows(per_nfe, flips, found, g, sub, f"NFE {nfe}")
        # equal seconds: one budget per NFE of the grid
        for nfe in grid:
            secs = []
            for t in models:
                m = _at_nfe(g[(g["trained"] == t) & g["paper"]], nfe)
                x = weighted_seconds(m) if len(m) else np.nan
                if np.isfinite(x) and x > 0:
                    secs.append(x)
            if not secs:
                continue
            # one part in 10^6 above the mean: a cell at exactly the budget is within it
            budget = float(np.exp(np.mean(np.log(secs)))) * (1 + 1e-6)
            found = {}
            for t in models:
                x = seconds[t]
                within = {k: c for k, c in cells[t].items() if np.isfinite(x[k]) and x[k] <= budget}
                paper = {k: c for k, c in within.items() if bool(c["paper"].all())}
                c = _compare(within, paper)
                if c is not None:
                    length = bool(g.loc[g["trained"] == t, "length_bound"].all())
                    found[t] = dict(c, length=length)
            _add_rows(per_budget, flips, found, g, sub, f"{budget:.3g} s / sample (NFE {nfe})")
    return pd.DataFrame(per_nfe), pd.DataFrame(per_budget), flips


def _add_rows(out: list, flips: list, found: dict, g, sub: str, point: str) -> None:
    if not found:
        return
    paper = _ranks({t: _mean(c["paper"]) for t, c in found.items()})
    best = _ranks({t: _mean(c["best"]) for t, c in found.items()})
    name = dict(zip(g["trained"], g["name"]))
    for t, c in found.items():
        out.append(
            dict(
                subset=sub,
                point=point,
                model=name[t],
                paper_sampler=_key_text(c["paper_key"], c["length"]),
                paper_value=_mean(c["paper"]),
                best_sampler=_key_text(c["best_key"], c["length"]),
                best_value=_mean(c["best"]),
                difference=_diff_text(c),
                covers_zero=(c["diff"] or {}).get("covers_zero"),
                rank_paper=paper[t],
                rank_best=best[t],
                sources=ids([*c["paper"]["cell_id"], *c["best"]["cell_id"]]),
            )
        )
    for a, b in itertools.combinations(sorted(found), 2):
        # a reversal of two different means (not a tie broken by name)
        dp = _mean(found[a]["paper"]) - _mean(found[b]["paper"])
        db = _mean(found[a]["best"]) - _mean(found[b]["best"])
        if dp * db >= 0:
            continue
        first, second = (a, b) if best[a] < best[b] else (b, a)
        d = paired_difference(found[first]["best"], found[second]["best"])
        flips.append(
            dict(
                subset=sub,
                point=point,
                now_first=name[first],
                now_second=name[second],
                diff=d,
                sources=ids([*found[first]["best"]["cell_id"], *found[second]["best"]["cell_id"]]),
            )
        )


def _table(d: pd.DataFrame, point: str) -> Table:
    frame = pd.DataFrame(
        {
            "subset": d["subset"],
            point: d["point"].str.replace("NFE ", "", regex=False)
            if point == "NFE"
            else d["point"],
            "model": d["model"],
            "paper's sampler": d["paper_sampler"],
            "value": d["paper_value"].map(pct),
            "best sampler": d["best_sampler"],
            "best value": d["best_value"].map(pct),
            "best - paper [95 % CI]": d["difference"],
            "rank (paper -> best)": [
                f"{a} -> {b}" + (" *" if a != b else "")
                for a, b in zip(d["rank_paper"], d["rank_best"])
            ],
        }
    ).reset_index(drop=True)
    return Table(
        frame,
        list(d["sources"]),
        keys={"subset", point, "model"},
        caption="values in %; * the method's rank among the models changes under its best sampler",
        ci_method="paired two-level bootstrap over training seeds and items (95 %)",
    )


def samplers_markdown(task: str, s: pd.DataFrame) -> Doc | None:
    per_nfe, per_budget, flips = comparisons(s)
    if not len(per_nfe) and not len(per_budget):
        return None
    doc = Doc(
        [
            f"# {task}: the best sampler of each method against the paper's",
            "",
            "Per trained model, the paper's sampler (the method's default decoding, no sampling "
            "option, at its best temperature) against the best of every (sampler, temperature) "
            "the store holds for that model: first at each NFE, then within a budget of sampling "
            "seconds per sample. Differences are paired over the same items and training seeds "
            "(two-level bootstrap, 95 %). The best is picked on the items it is scored on, so its "
            "value is optimistic for a sampler one would fix in advance.",
            "",
        ]
    )
    if len(per_nfe):
        doc += ["## At each NFE", "", _table(per_nfe, "NFE"), ""]
    if len(per_budget):
        doc += [
            "## At equal sampling seconds",
            "",
            "Budget: per NFE of the grid, the geometric mean over the models of their paper "
            "sampler's seconds per sample there; each model's best cell (any sampler, NFE and "
            "temperature) whose seconds per sample is within it.",
            "",
            _table(per_budget, "budget"),
            "",
        ]
    named = legend(s)
    if named:
        doc += ["Samplers with sampling options, by their entry's variant:", ""]
        doc += [f"- {k}: {v}" for k, v in named.items()]
        doc += [""]
    doc += ["## Rankings that change", ""]
    if not flips:
        doc += ["No two models change order under their best samplers.", ""]
    for f in flips:
        d = f["diff"]
        ci = (
            f"{100 * d['diff']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"
            + ("; the CI covers 0" if d["covers_zero"] else "")
            if d
            else "not paired (different items)"
        )
        doc += [
            f"- {f['subset']}, {f['point']}: {f['now_first']} now above {f['now_second']} "
            f"(best samplers, difference {ci})",
        ]
    doc += [""]
    return doc


def legend(s: pd.DataFrame) -> dict[str, str]:
    """``method/variant`` -> its sampling options, for the samplers named by a variant."""
    out = {}
    for (m, v), g in s[s["options"] != ""].groupby(["method", "variant"], sort=True):
        out[f"{m}/{v}"] = str(g["options"].iloc[0])
    return out


def _render(sec: Section, df: pd.DataFrame, out: Path, args) -> list[Path]:
    written = []
    for task in sorted(df["task"].dropna().unique()):
        s = sampler_rows(task, df)
        if not len(s):
            continue
        doc = samplers_markdown(task, s)
        if doc is not None:
            written.append(doc.write(out / f"{task}_samplers.md"))
    return written


ITEMS = [Section(name="samplers", render=_render)]
