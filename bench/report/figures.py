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
from bench.report.common import at_headline, model_label, rows, subsets
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


#: one colour per model, distinct hues: ``tab10``, then black and navy (12; no light / dark pairs
#: of one hue, as ``tab20`` has); beyond 12 the colours repeat and marker and dash tell apart
PALETTE = (
    "#1f77b4",  # blue
    "#ff7f0e",  # orange
    "#2ca02c",  # green
    "#d62728",  # red
    "#9467bd",  # purple
    "#8c564b",  # brown
    "#e377c2",  # pink
    "#7f7f7f",  # grey
    "#bcbd22",  # olive
    "#17becf",  # cyan
    "#000000",  # black
    "#000080",  # navy
)
#: filled markers, 13 (coprime with the 12 colours and 7 dashes)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*", "p", "h", "d")
#: dash patterns (seaborn: segment, gap, ... in line widths; "" solid), 7
DASHES = ("", (4, 1.5), (1, 1), (3, 1.25, 1.5, 1.25), (5, 1, 1, 1, 1, 1), (8, 2.5), (2, 1, 2, 4))


def model_style(models) -> dict:
    """Seaborn line arguments that keep models apart: the i-th model in name order gets colour
    i mod 12 (:data:`PALETTE`: distinct hues), marker i mod 13 and dash i mod 7, so any two of up
    to 12 models differ in colour and marker, and any two of up to 84 in at least two of colour,
    marker and dash. A function of the set of names only (not of their order)."""
    models = sorted(set(models))
    return {
        "hue": "model",
        "hue_order": models,
        "palette": {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(models)},
        "style": "model",
        "style_order": models,
        "markers": {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(models)},
        "dashes": {m: DASHES[i % len(DASHES)] for i, m in enumerate(models)},
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
    at1 = at_headline(s, ["model"], nfe=False)
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
        top = at_headline(s, ["model"], temperature=False)
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
