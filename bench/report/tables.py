"""The generic Markdown of every task (``<task>.md``) and the training table (``training.md``).

``<task>.md``: the headline metric (the rows' ``metric_rank`` 0) as model x subset at the largest
NFE and the temperature closest to 1, beside the paper's numbers; the paper's ablation tables;
one table per secondary metric; every cell of the grid. Per-kind sections are appended by
the task kind's :class:`~bench.report.items.TaskSection`. ``training.md`` is the section
``training`` (:data:`ITEMS`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.report.common import (
    cell_text,
    ci_methods,
    headline_cells,
    metric_with_rank,
    model_label,
    pct,
    rows,
    secondary_metrics,
    seeds_items,
    subsets,
)
from bench.report.cost import headline_columns
from bench.report.document import Doc, Table, by_key, ids
from bench.report.items import Section
from bench.report.paper.numbers import (
    ablation_markdown,
    lookup,
    paper_numbers,
    protocol,
    protocol_differences,
)


def task_markdown(task: str, df: pd.DataFrame) -> tuple[Doc, str | None]:
    """``<task>.md`` and the task's headline metric (None when the store has no row of it)."""
    s = rows(df, task)
    headline = metric_with_rank(s, 0)
    if headline is None:
        return Doc(
            [f"# {task}", "", "No sample row of the task's headline metric in the store."]
        ), None
    subs = subsets(s)
    numbers = paper_numbers(task)
    best = headline_cells(s)
    h = best[best["metric"] == headline]
    departs = protocol_differences(task, h) if numbers is not None else []
    beside = numbers if not departs else None  # the paper's columns only beside a like protocol
    out = Doc()
    out += [
        f"# {task}: {headline.replace('_', ' ')} (%)",
        "",
        "One row per model (training recipe, variant and decoding), at the largest NFE of the "
        "grid and the temperature closest to 1 (values in %, 95 % CI in brackets where the "
        f"evaluator gives one). {_about(task, numbers, departs)}",
        "",
    ]
    cost = headline_columns(h, df)  # s / sample (and its device) where the rows have seconds
    methods = ci_methods(h)
    out.append(_headline_table(h, subs, beside, headline, cost, methods))
    note = [f"Intervals (95 %): {'; '.join(methods)}."] if methods else []
    if len(h) and h["seed"].nunique() <= 1:
        note.append("One training seed per model: intervals cover the items, not retraining.")
    if cost is not None:
        note.append(cost.note)
    out += ["", " ".join(note)] if note else []
    if departs:
        out += _paper_alone(task, numbers, headline, departs)
    out += ablation_markdown(best, headline, subs, numbers, comparable=not departs)
    for metric in secondary_metrics(s):
        out += _secondary(best[best["metric"] == metric], metric, h, subs, headline)
    out += _every_cell(s, headline, subs)
    return out, headline


def _about(task: str, numbers, departs: list[str]) -> str:
    """The headline paragraph's last sentence: where the paper's numbers are, and why."""
    if numbers is None:
        return "ours only: the paper reports no numbers for this task."
    if departs:
        return (
            "The paper's numbers are in their own table below: this store's protocol differs "
            f"from the paper's ({'; '.join(departs)}), so they are not comparable."
        )
    return (
        f"`paper` columns are the S-FLM paper's reported numbers ({protocol(task)}); this "
        "store's recipe and NFE match the paper's protocol."
    )


def _headline_table(h, subs, beside, headline: str, cost, methods) -> Table:
    """One row per model of the headline cells ``h`` (one column per subset, the paper's
    ``beside`` it when given, the cost columns ``cost`` when the rows have seconds)."""
    table, sources, cells = [], [], {}
    for _model, g in h.groupby("model", sort=True):
        r = g.iloc[0]
        sources.append(ids(g["cell_id"]))
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
            cells[(len(table), sub)] = ids(gs["cell_id"])
            pv = lookup(beside, r, sub, headline)
            if beside is not None:
                row[f"{sub} (paper)"] = "" if pv is None else pct(pv)
        if cost is not None:
            row.update(cost.per_row.get(_model, dict.fromkeys(cost.columns, "")))
        table.append(row)
    frame = pd.DataFrame(table)
    return Table(
        frame,
        sources,
        cells,
        paper={c for c in frame.columns if c.endswith("(paper)")},
        keys={"model", "nfe", "T", "device"},
        caption=f"{headline.replace('_', ' ')} (%) per model and subset"
        + (f"; {cost.caption}" if cost is not None and cost.caption else ""),
        ci_method="; ".join(methods),
    )


def _secondary(m: pd.DataFrame, metric: str, h: pd.DataFrame, subs, headline: str) -> list:
    """A secondary metric's section (model x subset, from its headline cells ``m``), or one line
    when it equals the headline's table everywhere."""
    piv = m.pivot_table(index="model", columns="subset", values="value", aggfunc="mean")
    piv = piv[[c for c in subs if c in piv.columns]]
    name = metric.replace("_", " ")
    if _same_as(piv, h):
        return ["", f"## {name} (%)", "", f"Equal to {headline.replace('_', ' ')} in every "
                "row of the headline table (not repeated)."]  # fmt: skip
    frame = piv.map(pct).reset_index()
    src, per = by_key(frame, m, ["model"], cell_col="subset")
    return ["", f"## {name} (%)", "", Table(frame, src, per, keys={"model"})]


def _every_cell(s: pd.DataFrame, headline: str, subs) -> list:
    """The last section: the headline metric in every cell of the grid (model x NFE x T)."""
    full = s[s["metric"] == headline]
    full = full.assign(nfe=full["nfe"].astype(int))
    piv = full.pivot_table(
        index=["model", "nfe", "temperature"], columns="subset", values="value", aggfunc="mean"
    )
    piv = piv[[c for c in subs if c in piv.columns]].map(pct).reset_index()
    src, per = by_key(piv, full, ["model", "nfe", "temperature"], cell_col="subset")
    seeds = " (mean over training seeds)" if s["seed"].nunique() > 1 else ""
    title = f"## Every cell of the grid: {headline.replace('_', ' ')} (%){seeds}"
    return ["", title, "", Table(piv, src, per, keys={"model", "nfe", "temperature"}), ""]


def _same_as(piv: pd.DataFrame, h: pd.DataFrame) -> bool:
    """Whether a secondary metric's (model x subset) means equal the headline's everywhere."""
    ref = h.pivot_table(index="model", columns="subset", values="value", aggfunc="mean")
    ref = ref.reindex(index=piv.index, columns=piv.columns)
    return bool(len(piv)) and piv.shape == ref.shape and np.allclose(piv, ref, atol=1e-12)


def _paper_alone(task: str, numbers: pd.DataFrame, headline: str, departs: list[str]) -> list:
    """The paper's main-table numbers in a table of their own (its protocol is not ours)."""
    p = numbers[(numbers["table"] == "main") & (numbers["metric"] == headline)]
    if not len(p):
        return []
    piv = p.pivot_table(
        index="label", columns="subset", values="value", aggfunc="first", sort=False
    )
    piv = piv[list(dict.fromkeys(p["subset"]))].map(pct)
    piv.columns = [f"{c} (paper)" for c in piv.columns]
    piv = (
        piv.reindex(list(dict.fromkeys(p["label"])))
        .reset_index()
        .rename(columns={"label": "model"})
    )
    return [
        "",
        "## The paper's numbers (not comparable with the table above)",
        "",
        f"The S-FLM paper's main table ({protocol(task)}). This store departs from that protocol: "
        f"{'; '.join(departs)}.",
        "",
        Table(piv, paper=set(piv.columns) - {"model"}, keys={"model"}),
    ]


def _steps(g: pd.DataFrame) -> str:
    """The training steps of one model's rows (one recipe: one value; an imported file's step)."""
    v = pd.to_numeric(g["train_steps"], errors="coerce").dropna().astype(int).unique()
    return ", ".join(str(x) for x in sorted(v))


def training_markdown(df: pd.DataFrame) -> Doc:
    """``training.md``: train throughput, final loss and size of every model (one row per
    training recipe and seed: ``model`` names the recipe where a method has several)."""
    t = rows(df, kind="train")
    if not len(t):
        return Doc(["# Training", "", "No training rows."])
    idx = ["task", "model_base", "backbone", "subset", "seed"]
    t = t.assign(seed=t["seed"].fillna(0).astype(int))
    piv = t.pivot_table(index=idx, columns="metric", values="value", aggfunc="first").reset_index()
    steps = t.groupby(idx)["train_steps"].max().reset_index()
    piv = piv.merge(steps, on=idx)
    src, _ = by_key(piv, t, idx)
    piv = piv.rename(columns={"model_base": "model"})
    for c in ("train_steps_per_s", "train_final_loss"):
        if c in piv:
            piv[c] = piv[c].map(lambda v: f"{v:.3g}")
    if "n_params" in piv:
        piv["n_params"] = piv["n_params"].map(lambda v: f"{int(v):,}")
    keys = {"task", "model", "backbone", "subset", "seed"}
    return Doc(["# Training", "", Table(piv, src, keys=keys)])


def _training(sec: Section, df: pd.DataFrame, out: Path, args) -> list[Path]:
    return [training_markdown(df).write(out / "training.md")]


ITEMS = [Section(name="training", render=_training)]
