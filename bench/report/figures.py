"""Figures every task gets, and :func:`save_figure` (PNG + PDF) for all of them.

``<task>_<metric>_vs_nfe``: the headline metric against NFE per model, one panel per subset, at
the temperature closest to 1; ``<task>_<metric>_vs_temperature`` when the grid has several
temperatures (at each model's largest NFE).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench import atomic
from bench.report.common import model_label, rows, subsets


def save_figure(fig, stem: Path) -> list[Path]:
    """Write ``fig`` as ``stem.png`` and ``stem.pdf`` (atomically) and close it. The PDF carries
    no creation date, so the same rows give byte-identical files."""
    import matplotlib.pyplot as plt

    paths = []
    for ext in ("png", "pdf"):
        p = stem.with_name(f"{stem.name}.{ext}")
        meta = {"CreationDate": None} if ext == "pdf" else {}
        atomic.write_with(
            p,
            lambda t, ext=ext, meta=meta: fig.savefig(
                t, format=ext, dpi=150, bbox_inches="tight", metadata=meta
            ),
        )
        paths.append(p)
    plt.close(fig)
    return paths


def log2_nfe_axis(ax, ticks) -> None:
    """A log2 NFE axis with plain-number ticks at ``ticks``."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _panels(sns, data, x: str, subs, *, xlabel: str, ylabel: str, title: str, **kw):
    """One line panel per subset: ``value_pct`` vs ``x``, one hue per model."""
    g = sns.relplot(
        data=data,
        x=x,
        y="value_pct",
        hue="model",
        col="subset",
        col_order=subs,
        kind="line",
        marker="o",
        height=3.2,
        aspect=1.1,
        **kw,
    )
    g.set(xlabel=xlabel, ylabel=ylabel)
    g.set_titles("{col_name}")
    g.figure.suptitle(title, y=1.03)
    return g


def figures(task: str, df: pd.DataFrame, metric: str, out: Path) -> list[Path]:
    """``metric`` vs NFE (and vs temperature) for ``task``; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns

    s = rows(df, task)
    s = s[s["metric"] == metric].copy()
    if not len(s):
        return []
    s["model"] = [model_label(r) for _, r in s.iterrows()]
    s["value_pct"] = 100 * s["value"].astype(float)
    s["nfe"] = s["nfe"].astype(float)
    subs = subsets(s)
    ylabel = f"{metric.replace('_', ' ')} (%)"
    written = []
    sns.set_theme(style="whitegrid", context="paper", font_scale=1.1)
    # metric vs NFE at T closest to 1 (AR, whose NFE is the length, appears as a single marker)
    s["_tdist"] = (s["temperature"].astype(float) - 1).abs()
    at1 = s[s["_tdist"] == s.groupby("model")["_tdist"].transform("min")]
    g = _panels(
        sns,
        at1,
        "nfe",
        subs,
        xlabel="NFE (backbone calls; AR: generated length)",
        ylabel=ylabel,
        title=f"{task}: {metric.replace('_', ' ')} vs NFE (T closest to 1)",
        markersize=7,
        facet_kws={"sharey": True},
    )
    ticks = sorted(at1["nfe"].unique())
    for ax in g.axes.flat:
        log2_nfe_axis(ax, ticks)
    written += save_figure(g.figure, out / f"{task}_{metric}_vs_nfe")
    if s["temperature"].nunique() > 1:
        top = s[s["nfe"] == s.groupby("model")["nfe"].transform("max")]
        g = _panels(
            sns,
            top,
            "temperature",
            subs,
            xlabel="temperature",
            ylabel=ylabel,
            title=f"{task}: {metric.replace('_', ' ')} vs temperature (largest NFE)",
        )
        written += save_figure(g.figure, out / f"{task}_{metric}_vs_temperature")
    return written
