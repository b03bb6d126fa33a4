"""The ``program`` kind (GSM8K, its CPU stand-in): accuracy with its 95 % bootstrap CI at every
NFE and temperature.

These tasks score executed programs: the headline ``accuracy`` is the paper's bootstrap point
estimate with its 95 % percentile CI (bench/evaluate/bootstrap.py). The generic report shows one NFE
and T per model; the paper's GSM8K figures plot accuracy vs NFE with CI error bars at T = 1 and
T = 0.1. This kind adds that table (a section of ``<task>.md``) and figure
(``<task>_accuracy_ci_vs_nfe``): the kind's :class:`~bench.report.items.TaskSection`
(:data:`ITEMS`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.common import flag, metric_with_rank, model_label, pct, rows
from bench.report.document import Doc, Table, ids
from bench.report.figures import log2_nfe_axis, save_figure
from bench.report.items import TaskSection
from bench.report.uncertainty import pool_seeds

KIND = "program"


def _program_rows(task: str, df: pd.DataFrame) -> pd.DataFrame:
    s = rows(df, task)
    s = s[s["metric"] == metric_with_rank(s, 0)].copy()
    if not len(s):
        return s
    s["model"] = [model_label(r) for _, r in s.iterrows()]
    # several training seeds: one row per cell with the two-level (seeds x items) interval; rows
    # without per-item outcomes (older stores) stay one per seed, each with its own interval
    has = s["item_outcomes"].notna() if "item_outcomes" in s else pd.Series(False, index=s.index)
    old = s[~has].copy()
    if old["seed"].nunique() > 1:
        old["model"] = old["model"] + " seed " + old["seed"].fillna(0).astype(int).astype(str)
    old = old.assign(
        seeds=1,
        items=old["n"],
        ci_method=old.get("ci_method"),
        cells=[(c,) for c in old["cell_id"]],
    )
    s = pd.concat([pool_seeds(s[has], ["model", "subset", "nfe", "temperature"]), old])
    s["length_bound"] = flag(s["nfe_is_length"])
    s["t_free"] = flag(s["temperature_free"])
    s["nfe"] = s["nfe"].astype(int)
    s["temperature"] = s["temperature"].astype(float)
    return s


def _with_t_free(s: pd.DataFrame, temp: float) -> pd.DataFrame:
    """Rows at temperature ``temp``, plus temperature-free decodings (AR greedy, S-FLM top-1:
    the planner samples them once, at T = 1) for models with no row at ``temp``."""
    at = s[s["temperature"] == temp]
    extra = s[s["t_free"] & ~s["model"].isin(at["model"])]
    return pd.concat([at, extra])


def _stand_in(s: pd.DataFrame) -> str:
    """The benchmark ``s``'s task stands in for ("" when it is the real one)."""
    v = s["stand_in_for"].dropna()
    return str(v.iloc[0]) if len(v) else ""


def program_task_markdown(task: str, df: pd.DataFrame, args=None) -> str:
    """Accuracy [95 % CI] (%) per model at every NFE, one table per temperature."""
    s = _program_rows(task, df)
    if not len(s) or s["ci_low"].isna().all():
        return ""
    cell = lambda r: (  # noqa: E731
        f"{pct(r['value'])} [{pct(r['ci_low'])}, {pct(r['ci_high'])}]"
        if pd.notna(r["ci_low"])
        else pct(r["value"])
    )
    n = int(s["n"].max())
    seeds = int(s["seeds"].max())
    methods = "; ".join(sorted({m for m in s["ci_method"].dropna() if m}))
    out = [
        "",
        "## Accuracy (%) with 95 % bootstrap CI at every NFE and temperature",
        "",
        "One training seed: point estimate = mean of the bootstrap accuracies, interval = 2.5 / "
        '97.5 percentiles (paper appendix "Bootstrap Confidence Intervals"); several seeds: the '
        f"mean over seeds and problems with the two-level interval. Up to {n} problems. "
        "Autoregressive models make one call per generated token: their column is `length` "
        "(calls used in brackets). Temperature-free decodings (greedy, top-1) appear in every "
        f"temperature's table. Behind each number: {seeds} training seed"
        f"{'s' if seeds > 1 else ''} x {n} problems"
        + (f"; intervals: {methods}." if methods else "."),
    ]
    if _stand_in(s):
        out[-1] += f" Task `{task}` is the CPU stand-in, not {_stand_in(s)}."
    grid = sorted(s.loc[~s["length_bound"], "nfe"].unique())
    for temp in sorted(s["temperature"].unique(), reverse=True):
        at = _with_t_free(s, temp)
        table, sources, cells = [], [], {}
        for model, g in at.groupby("model", sort=True):
            row = {"model": model}
            sources.append(ids(c for cs in g["cells"] for c in cs))
            for nfe in grid:
                hit = g[(g["nfe"] == nfe) & ~g["length_bound"]]
                row[f"NFE {nfe}"] = cell(hit.iloc[0]) if len(hit) else ""
                cells[(len(table), f"NFE {nfe}")] = ids(hit.iloc[0]["cells"]) if len(hit) else ()
            lb = g[g["length_bound"]]
            if len(lb):
                row["length"] = f"{cell(lb.iloc[0])} ({int(lb.iloc[0]['nfe'])})"
                cells[(len(table), "length")] = ids(lb.iloc[0]["cells"])
            table.append(row)
        table = pd.DataFrame(table)
        if "length" not in table:
            table["length"] = ""
        t = Table(table.fillna(""), sources, cells, keys={"model"}, ci_method=methods)
        out += ["", f"### T = {temp:g}", "", t]
    return Doc(out)


def program_task_figure(task: str, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    """Accuracy vs NFE with 95 % CI error bars, one panel per temperature (paper figures
    "Accuracy on GSM8K" at T = 1 and T = 0.1); AR as a horizontal line with its CI band."""
    s = _program_rows(task, df)
    if not len(s) or s["ci_low"].isna().all():
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper", font_scale=1.1)
    models = sorted(s["model"].unique())
    palette = sns.color_palette("tab10" if len(models) <= 10 else "husl", len(models))
    colors = dict(zip(models, palette))
    temps = sorted(s["temperature"].unique(), reverse=True)
    grid = sorted(s.loc[~s["length_bound"], "nfe"].unique())
    fig, axes = plt.subplots(
        1, len(temps), figsize=(4.6 * len(temps), 3.6), sharey=True, squeeze=False
    )
    for ax, temp in zip(axes[0], temps):
        at = _with_t_free(s, temp)
        for model, g in at.groupby("model", sort=True):
            g = g.sort_values("nfe")
            v, lo, hi = (
                100 * g[c].astype(float).to_numpy() for c in ("value", "ci_low", "ci_high")
            )
            if g["length_bound"].iloc[0]:
                ax.axhline(
                    v[0], color=colors[model], ls="--", lw=1.2, label=f"{model}, NFE = length"
                )
                ax.axhspan(lo[0], hi[0], color=colors[model], alpha=0.15, lw=0)
                continue
            yerr = [(v - lo).clip(min=0), (hi - v).clip(min=0)]
            ax.errorbar(
                g["nfe"],
                v,
                yerr=yerr,
                color=colors[model],
                marker="o",
                ms=4,
                capsize=3,
                lw=1.3,
                label=model,
            )
        if grid:
            log2_nfe_axis(ax, grid)
        ax.set_title(f"T = {temp:g}")
        ax.set_xlabel("NFE (backbone calls)")
        ax.set_ylim(bottom=0)
    axes[0][0].set_ylabel("accuracy (%), 95 % bootstrap CI")
    handles = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    labels = list(handles)
    fig.legend(
        [handles[k] for k in labels],
        labels,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        frameon=False,
    )
    title = s["task_title"].dropna()
    stand_in = _stand_in(s)
    name = (
        f"{task} (CPU stand-in, not {stand_in})"
        if stand_in
        else (str(title.iloc[0]) if len(title) else task)
    )
    fig.suptitle(f"{name}: accuracy vs NFE", y=1.02)
    fig.tight_layout()
    return save_figure(fig, out / f"{task}_accuracy_ci_vs_nfe")


ITEMS = [
    TaskSection(
        name=KIND, task_kind=KIND, markdown=program_task_markdown, figures=program_task_figure
    )
]
