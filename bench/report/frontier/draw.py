"""The OWT frontier's panels (:mod:`bench.report.frontier.section`,
:mod:`bench.report.frontier.paper`): x = unigram entropy (nats), y = Gen. PPL (log), one curve per
(model, decoding) ordered by temperature, every cell with its 95 % intervals as error bars on both
axes, temperature-free decodings as single diamonds, degenerate cells as crosses (``<curve>
(degenerate)``: never ringed, never joined to their curve), the Pareto-optimal healthy cells
ringed, the held-out data as a star."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from bench.report.figures import save_figure
from bench.report.frontier.data import Window, at_nfe, nfe_panels, pareto_cells


def _errors(v: pd.Series, lo: pd.Series, hi: pd.Series) -> np.ndarray:
    """(2, n) error-bar lengths below / above ``v``; 0 where the interval is missing."""
    v, lo, hi = (np.asarray(x, float) for x in (v, lo, hi))
    return np.nan_to_num(np.clip(np.stack([v - lo, hi - v]), 0, None), nan=0.0)


def _error_bars(ax, g: pd.DataFrame, color) -> None:
    ax.errorbar(
        g["H"],
        g["PPL"],
        xerr=_errors(g["H"], g["H_lo"], g["H_hi"]),
        yerr=_errors(g["PPL"], g["PPL_lo"], g["PPL_hi"]),
        fmt="none",
        ecolor=color,
        elinewidth=0.8,
        capsize=2,
        alpha=0.7,
        zorder=2,
    )


def draw_panel(ax, c: pd.DataFrame, nfe: int, window: Window, colors: dict) -> None:
    at = at_nfe(c, nfe)
    vis = at[window.contains(at["H"], at["PPL"])]
    models = vis[~vis["is_data"]]
    for curve, g in models[~models["degenerate"]].groupby("curve", sort=True):
        g = g.sort_values("temperature")
        style = dict(color=colors[curve], label=curve, ms=5, zorder=3)
        if g["t_free"].all() or len(g) == 1:
            ax.plot(g["H"], g["PPL"], marker="D", ls="none", **style)
        else:
            ax.plot(g["H"], g["PPL"], marker="o", lw=1.3, **style)
        _error_bars(ax, g, colors[curve])
    for curve, g in models[models["degenerate"]].groupby("curve", sort=True):
        ax.plot(
            g["H"],
            g["PPL"],
            marker="X",
            ms=8,
            ls="none",
            color=colors[curve],
            mec="black",
            mew=0.6,
            zorder=4,
            label=f"{curve} (degenerate)",
        )
        _error_bars(ax, g, colors[curve])
    par = pareto_cells(c, nfe, window)
    if len(par):
        ax.scatter(
            par["H"],
            par["PPL"],
            s=110,
            facecolors="none",
            edgecolors="black",
            lw=1.0,
            zorder=5,
            label="Pareto-optimal",
        )
    d = at[at["is_data"]]
    if len(d):
        ax.plot(
            d["H"],
            d["PPL"],
            marker="*",
            ms=14,
            ls="none",
            color="gold",
            mec="black",
            zorder=6,
            label="data (held-out)",
        )
        _error_bars(ax, d, "black")
    ax.set_yscale("log")
    ax.set_xlim(window.h_min, window.h_max)
    ax.set_title(f"NFE = {nfe}")
    ax.set_xlabel("unigram entropy (nats)")


def figure_legend(fig, axes) -> None:
    """One legend right of the figure with every label of every panel once."""
    handles = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            frameon=False,
        )


def frontier_figures(task: str, c: pd.DataFrame, out: Path, window: Window) -> list[Path]:
    """``<task>_gen_ppl_vs_entropy_nfe{N}`` per NFE and ``..._all_nfe`` (png + pdf)."""
    nfes = nfe_panels(c)
    if not nfes:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper", font_scale=1.1)
    curves = sorted(c.loc[~c["is_data"], "curve"].unique())
    palette = sns.color_palette("tab10" if len(curves) <= 10 else "husl", max(len(curves), 1))
    colors = dict(zip(curves, palette))
    stand_in = next((s for s in c["stand_in_for"] if s), "")
    name = f"{task} (stand-in corpus, not {stand_in})" if stand_in else task
    paths = []
    for nfe in nfes:
        fig, ax = plt.subplots(figsize=(5.2, 3.9))
        draw_panel(ax, c, nfe, window, colors)
        ax.set_ylabel("Gen. PPL (per-sample mean)")
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=8)
        fig.suptitle(name, y=1.0, fontsize=9)
        paths += save_figure(fig, out / f"{task}_gen_ppl_vs_entropy_nfe{nfe}")
    cols = min(2, len(nfes))
    nrows = math.ceil(len(nfes) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.0 * cols, 3.8 * nrows), squeeze=False)
    for ax, nfe in zip(axes.flat, nfes):
        draw_panel(ax, c, nfe, window, colors)
    for ax in list(axes.flat)[len(nfes) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("Gen. PPL")
    figure_legend(fig, axes)
    fig.suptitle(f"{name}: Gen. PPL vs entropy, every NFE", y=1.01)
    fig.tight_layout()
    paths += save_figure(fig, out / f"{task}_gen_ppl_vs_entropy_all_nfe")
    return paths
