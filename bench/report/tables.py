"""The generic Markdown of every task (``<task>.md``) and the training table (``training.md``).

``<task>.md``: the headline metric (the rows' ``metric_rank`` 0) as model x subset at the largest
NFE and the temperature closest to 1, beside the paper's numbers; the paper's ablation tables;
one table per secondary metric; every cell of the grid. Per-kind sections are appended by
the task kind's :class:`~bench.report.items.TaskSection`. ``training.md`` is the section
``training`` (:data:`ITEMS`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench import atomic
from bench.report.common import (
    cell_text,
    ci_methods,
    headline_cells,
    md_table,
    metric_with_rank,
    model_label,
    pct,
    rows,
    secondary_metrics,
    seeds_items,
    subsets,
)
from bench.report.items import Section
from bench.report.paper import ablation_markdown, lookup, paper_numbers, protocol


def task_markdown(task: str, df: pd.DataFrame) -> tuple[str, str | None]:
    """``<task>.md`` and the task's headline metric (None when the store has no row of it)."""
    s = rows(df, task)
    headline = metric_with_rank(s, 0)
    if headline is None:
        return f"# {task}\n\nNo sample row of the task's headline metric in the store.\n", None
    subs = subsets(s)
    numbers = paper_numbers(task)
    best = headline_cells(s)
    out = [
        f"# {task}: {headline.replace('_', ' ')} (%)",
        "",
        "One row per model and decoding, at the largest NFE of the grid and the temperature "
        "closest to 1 (values in %, 95 % CI in brackets where the evaluator gives one). `paper` "
        f"columns are the S-FLM paper's reported numbers ({protocol(task)}); ours come "
        "from whatever this sweep ran, so compare them only when the protocol matches.",
        "",
    ]
    table = []
    h = best[best["metric"] == headline]
    for _model, g in h.groupby("model", sort=True):
        r = g.iloc[0]
        row = {
            "model": model_label(r),
            "nfe": ", ".join(str(int(v)) for v in sorted(g["nfe"].dropna().unique())),
            "T": ", ".join(f"{v:g}" for v in sorted(g["temperature"].dropna().unique())),
            "train steps": _steps(g),
            "seeds x items": seeds_items(g[g["subset"] == subs[0]]) if subs else "",
        }
        for sub in subs:
            gs = g[g["subset"] == sub]
            row[sub] = cell_text(gs) if len(gs) else ""
            pv = lookup(numbers, r, sub, headline)
            if numbers is not None:
                row[f"{sub} (paper)"] = "" if pv is None else pct(pv)
        table.append(row)
    out.append(md_table(pd.DataFrame(table)))
    methods = ci_methods(h)
    note = [f"Intervals (95 %): {'; '.join(methods)}."] if methods else []
    if len(h) and h["seed"].nunique() <= 1:
        note.append("One training seed per model: intervals cover the items, not retraining.")
    out += ["", " ".join(note)] if note else []
    out += ablation_markdown(best, headline, subs, numbers)
    for metric in secondary_metrics(s):
        m = best[best["metric"] == metric]
        m = m.assign(model=[model_label(r) for _, r in m.iterrows()])
        piv = m.pivot_table(index="model", columns="subset", values="value", aggfunc="mean")
        piv = piv[[c for c in subs if c in piv.columns]].map(pct).reset_index()
        out += ["", f"## {metric.replace('_', ' ')} (%)", "", md_table(piv)]
    full = s[s["metric"] == headline]
    full = full.assign(
        model=[model_label(r) for _, r in full.iterrows()], nfe=full["nfe"].astype(int)
    )
    piv = full.pivot_table(
        index=["model", "nfe", "temperature"], columns="subset", values="value", aggfunc="mean"
    )
    piv = piv[[c for c in subs if c in piv.columns]].map(pct).reset_index()
    seeds = " (mean over training seeds)" if s["seed"].nunique() > 1 else ""
    title = f"## Every cell of the grid: {headline.replace('_', ' ')} (%){seeds}"
    out += ["", title, "", md_table(piv), ""]
    return "\n".join(out), headline


def _steps(g: pd.DataFrame) -> str:
    """The training steps of one model's rows (one recipe: one value; an imported file's step)."""
    v = pd.to_numeric(g["train_steps"], errors="coerce").dropna().astype(int).unique()
    return ", ".join(str(x) for x in sorted(v))


def training_markdown(df: pd.DataFrame) -> str:
    """``training.md``: train throughput, final loss and size of every model (one row per
    training recipe and seed: ``model`` names the recipe where a method has several)."""
    t = rows(df, kind="train")
    if not len(t):
        return "# Training\n\nNo training rows.\n"
    idx = ["task", "model_base", "backbone", "subset", "seed"]
    t = t.assign(seed=t["seed"].fillna(0).astype(int))
    piv = t.pivot_table(index=idx, columns="metric", values="value", aggfunc="first").reset_index()
    steps = t.groupby(idx)["train_steps"].max().reset_index()
    piv = piv.merge(steps, on=idx).rename(columns={"model_base": "model"})
    for c in ("train_steps_per_s", "train_final_loss"):
        if c in piv:
            piv[c] = piv[c].map(lambda v: f"{v:.3g}")
    if "n_params" in piv:
        piv["n_params"] = piv["n_params"].map(lambda v: f"{int(v):,}")
    return "# Training\n\n" + md_table(piv) + "\n"


def _training(sec: Section, df: pd.DataFrame, out: Path, args) -> list[Path]:
    return [atomic.write_text(out / "training.md", training_markdown(df))]


ITEMS = [Section(name="training", render=_training)]
