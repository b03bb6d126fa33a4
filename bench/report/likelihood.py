"""``likelihood.md``: held-out likelihood per model, in the papers' layout.

One table per task: a row per model (its training recipe and variant, :mod:`bench.report.models`),
a column per dataset (the likelihood cells' ``subset``: ``heldout``, ``owt-valid``, ``text:...``,
zero-shot corpora), each entry the perplexity with its 95 % bootstrap interval over sequences
(one training seed) or the mean +- sd over seeds, prefixed ``<=`` where it is an upper bound
(a NELBO); "no bound" for a method that has none (S-FLM). A second table gives the NLL in
nats/token with the Monte-Carlo standard error of its estimate and the bound's kind. Each table
is headed by its metric and unit, and its caption is printed under the heading.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.common import prepared
from bench.report.document import Doc, Table, ids
from bench.report.items import Section

NO_BOUND = "no bound"


def _num(v) -> float | None:
    v = pd.to_numeric(v, errors="coerce")
    return None if pd.isna(v) else float(v)


def entry(g: pd.DataFrame, metric: str, digits: int = 2) -> str:
    """One table entry from a model's rows of one dataset (any seeds)."""
    if (g["bound_kind"].fillna("") == "").all():
        return NO_BOUND
    r = g[g["metric"] == metric]
    vals = [v for v in map(_num, r["value"]) if v is not None]
    if not vals:
        return ""
    upper = "<= " if (r["bound_kind"] != "exact").any() else ""
    if len(vals) == 1:
        lo, hi = _num(r["ci_low"].iloc[0]), _num(r["ci_high"].iloc[0])
        ci = f" [{lo:.{digits}f}, {hi:.{digits}f}]" if lo is not None and hi is not None else ""
        return f"{upper}{vals[0]:.{digits}f}{ci}"
    s = pd.Series(vals)
    return f"{upper}{s.mean():.{digits}f} +- {s.std():.{digits}f} (sd, {len(vals)} seeds)"


#: (metric, caption, digits) of the two tables; the caption's first clause is the table's title
TABLES = (
    ("ppl", "Perplexity per token (<=: an upper bound from the NELBO); 95 % CI over sequences", 2),
    ("nll", "NLL in nats/token (<=: an upper bound); mc s.e.: Monte-Carlo standard error of "
     "the estimate, nats/token", 4),
)  # fmt: skip


def task_tables(t: pd.DataFrame) -> list[Table]:
    """The perplexity table and the NLL table of one task's likelihood rows."""
    datasets = list(dict.fromkeys(t["subset"].astype(str)))
    models = sorted(t["model_base"].unique())
    out = []
    for metric, caption, digits in TABLES:
        rows, sources = [], []
        for m in models:
            g = t[t["model_base"] == m]
            row = {"model": m}
            for d in datasets:
                row[d] = entry(g[g["subset"].astype(str) == d], metric, digits)
                if metric == "nll":
                    at = g[(g["subset"].astype(str) == d) & (g["metric"] == "nll_mc_se")]
                    se = [v for v in map(_num, at["value"]) if v is not None]
                    row[f"{d} mc s.e."] = f"{max(se):.4f}" if se else ""
            if metric == "nll":
                kinds = sorted({k for k in g["bound_kind"].fillna("") if k})
                row["bound"] = ", ".join(kinds) or NO_BOUND
            rows.append(row)
            sources.append(ids(g["cell_id"]))
        frame = pd.DataFrame(rows)
        out.append(
            Table(frame, sources=sources, keys=frozenset({"model", "bound"}), caption=caption)
        )
    return out


def _render(item, df: pd.DataFrame, out: Path, args) -> list[Path]:
    if not len(df) or "kind" not in df:
        return []
    lk = prepared(df)
    lk = lk[lk["kind"] == "likelihood"]
    if not len(lk):
        return []
    if "bound_kind" not in lk:
        lk = lk.assign(bound_kind=None)
    doc = Doc(
        [
            "# Likelihood",
            "",
            "Held-out likelihood of every model: exact for AR (chain rule), an upper bound for "
            "the diffusion models that have one (their NELBO, estimated by Monte Carlo over "
            "time), none for a method without a bound (docs/likelihood.md).",
        ]
    )
    for task, t in lk.groupby("task", sort=True):
        doc += ["", f"## {task}", ""]
        for tab in task_tables(t):  # titled by metric and unit: the two tables look alike
            title, _, rest = tab.caption.partition(" (")
            doc += [f"### {title.split(';')[0]}", "", tab.caption, "", tab, ""]
    return [doc.write(out / "likelihood.md")]


ITEMS = [Section(name="likelihood", render=_render)]
