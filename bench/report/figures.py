"""Figures every task gets, and :func:`save_figure` (SVG + PNG + PDF) for all of them.

``<task>_<metric>_vs_nfe``: the headline metric against NFE per model, one panel per subset, at
the temperature closest to 1; ``<task>_<metric>_vs_temperature`` when the grid has several
temperatures (at each model's largest NFE). Each model has its own colour, marker and dash
pattern; each point is a cell (training seeds pooled) with its 95 % interval as an error bar.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench import atomic
from bench.report.common import model_label, rows, subsets
from bench.report.uncertainty import pool_seeds

#: what :func:`save_figure` writes: SVG (the report page's, sharp at any zoom), PNG (its
#: fallback, and for Markdown viewers), PDF (for papers)
FORMATS = ("svg", "png", "pdf")
#: no date in the files (the same rows give byte-identical files); SVG ids from a fixed salt
_META = {"svg": {"Date": None}, "pdf": {"CreationDate": None}, "png": {}}
_SVG_RC = {"svg.hashsalt": "sflm-bench", "svg.fonttype": "path"}


def save_figure(fig, stem: Path) -> list[Path]:
    """Write ``fig`` as ``stem.svg``, ``stem.png`` and ``stem.pdf`` (atomically) and close it.
    None of the files carries a date, so the same rows give byte-identical files."""
    import matplotlib
    import matplotlib.pyplot as plt

    paths = []
    with matplotlib.rc_context(_SVG_RC):
        for ext in FORMATS:
            p = stem.with_name(f"{stem.name}.{ext}")
            atomic.write_with(
                p,
                lambda t, ext=ext: fig.savefig(
                    t, format=ext, dpi=150, bbox_inches="tight", metadata=_META[ext]
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


def model_style(models) -> dict:
    """Seaborn line arguments that keep up to 20 models apart: one colour each (``tab10``, or
    ``tab20`` beyond ten), a marker and a dash pattern each, the legend in name order."""
    import seaborn as sns

    models = sorted(models)
    palette = sns.color_palette("tab10" if len(models) <= 10 else "tab20", len(models))
    return {
        "hue": "model",
        "hue_order": models,
        "palette": dict(zip(models, palette)),
        "style": "model",
        "style_order": models,
        "markers": True,
        "dashes": True,
    }


def _panels(sns, data, x: str, subs, *, xlabel: str, ylabel: str, title: str, **kw):
    """One line panel per subset: ``value_pct`` vs ``x``, one colour, marker and dash per model;
    each point (a cell, its training seeds pooled) with its 95 % interval as an error bar (the
    evaluator's for one seed, the two-level bootstrap over seeds and items for several;
    :mod:`bench.report.uncertainty`). Bars, not bands: with many models bands cover each other."""
    style = model_style(data["model"].unique())
    g = sns.relplot(
        data=data,
        x=x,
        y="value_pct",
        col="subset",
        col_order=subs,
        kind="line",
        errorbar=None,
        height=3.4,
        aspect=1.1,
        markersize=6,
        **style,
        **kw,
    )
    for sub, ax in g.axes_dict.items():
        d = data[(data["subset"] == sub) & data["ci_low"].notna()]
        for model, m in d.groupby("model"):
            v = m["value_pct"].to_numpy(float)
            lo, hi = 100 * m["ci_low"].to_numpy(float), 100 * m["ci_high"].to_numpy(float)
            ax.errorbar(
                m[x].to_numpy(float),
                v,
                yerr=[(v - lo).clip(min=0), (hi - v).clip(min=0)],
                fmt="none",
                ecolor=style["palette"][model],
                elinewidth=1,
                capsize=3,
            )
    g.set(xlabel=xlabel, ylabel=ylabel + ", 95 % CI")
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
    s = pool_seeds(s, ["model", "subset", "nfe", "temperature"])  # one point per cell
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
