"""The speed section's figures (:mod:`bench.report.speed.section`), one row of panels per subset:

- ``<task>_speed_pareto``: accuracy against forward-equivalents per sample, seconds per sample at
  batch 1 and seconds per sample batched (log axes), every setting of every model a point with
  its 95 % interval, each model's Pareto front (no setting of it both cheaper and at least as
  accurate) joined by a line, its other settings hollow;
- ``<task>_speed_aup``: the curves AUP integrates, accuracy against tokens per call (TPF) and
  against tokens per forward-equivalent, each model's settings joined in order of parallelism,
  the threshold ``y_1 - 5`` of each model a dotted segment under its curve.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.evaluate.aup import OFFSET
from bench.report.common import subsets
from bench.report.cost import log_seconds_axis
from bench.report.figures import model_style, save_figure
from bench.report.speed.cells import pareto

PARETO_PANELS = (
    ("fe", "forward-equivalents per sample"),
    ("latency", "seconds per sample, batch 1"),
    ("batched", "seconds per sample, batched"),
)
AUP_PANELS = (("tpf", "tokens per call (TPF)"), ("tpfe", "tokens per forward-equivalent"))


def _yerr(g: pd.DataFrame) -> np.ndarray:
    v = 100 * g["value"].to_numpy(float)
    lo = 100 * pd.to_numeric(g["low"], errors="coerce").to_numpy(float)
    hi = 100 * pd.to_numeric(g["high"], errors="coerce").to_numpy(float)
    return np.nan_to_num(np.clip(np.stack([v - lo, hi - v]), 0, None), nan=0.0)


def _pareto_panel(ax, part: pd.DataFrame, col: str, style: dict) -> None:
    for model, g in part.groupby("model", sort=True):
        g = g[np.isfinite(g[col].astype(float))].sort_values(col)
        if not len(g):
            continue
        colour, marker = style["palette"][model], style["markers"][model]
        front = pareto(g[col], g["value"])
        x, y = g[col].to_numpy(float), 100 * g["value"].to_numpy(float)
        ax.errorbar(x, y, yerr=_yerr(g), fmt="none", ecolor=colour, elinewidth=0.7, capsize=2,
                    alpha=0.6)  # fmt: skip
        ax.plot(x[front], y[front], color=colour, marker=marker, ms=5, lw=1.3, label=model)
        ax.plot(x[~front], y[~front], ls="none", marker=marker, ms=5, mfc="none", color=colour)
    ax.grid(alpha=0.3, which="both")


def _aup_panel(ax, part: pd.DataFrame, col: str, style: dict) -> None:
    for model, g in part.groupby("model", sort=True):
        g = g[np.isfinite(g[col].astype(float))]
        if not len(g):
            continue
        g = g.assign(_v=-g["value"].astype(float)).sort_values([col, "_v"])
        colour, marker = style["palette"][model], style["markers"][model]
        x, y = g[col].to_numpy(float), 100 * g["value"].to_numpy(float)
        ax.plot(x, y, color=colour, marker=marker, ms=5, lw=1.2, label=model)
        ax.hlines(y[0] - OFFSET, x.min(), x.max(), colors=colour, linestyles=":", lw=0.9)
    ax.grid(alpha=0.3)


def _figure(task: str, st: pd.DataFrame, metric: str, panels, draw, title: str, log: bool):
    import matplotlib.pyplot as plt

    subs = subsets(st)
    style = model_style(st["model"].unique())
    width = max(map(len, st["model"])) * 0.06 + 0.6
    fig, axes = plt.subplots(len(subs), len(panels), squeeze=False, sharey="row",
                             figsize=(3.7 * len(panels) + width, 3.2 * len(subs)),
                             layout="constrained")  # fmt: skip
    for row, sub in zip(axes, subs):
        part = st[st["subset"] == sub]
        for ax, (col, label) in zip(row, panels):
            draw(ax, part, col, style)
            if log and part[col].astype(float).gt(0).any():
                log_seconds_axis(ax)
            ax.set_xlabel(f"{label} (log)" if log else label, fontsize=9)
            ax.set_title(f"{sub}" if len(subs) > 1 else "", fontsize=9)
        row[0].set_ylabel(f"{metric.replace('_', ' ')} (%)")
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="outside right center", fontsize=8,
               frameon=False)  # fmt: skip
    fig.suptitle(f"{task}: {title}", fontsize=10)
    return fig


def speed_figures(task: str, st: pd.DataFrame, metric: str, out: Path) -> list[Path]:
    """``<task>_speed_pareto`` and ``<task>_speed_aup`` (svg, png, pdf) of the settings ``st``
    (:func:`bench.report.speed.cells.settings`); none when there are none."""
    if not len(st):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # a model's curve: one trained model and decoding over its settings (cells.aup_models)
    st = st.assign(subset_rank=[r["rows"]["subset_rank"].iloc[0] for _, r in st.iterrows()],
                   model=st["aup_model"])  # fmt: skip
    written: list[Path] = []
    with plt.style.context("default"):
        fig = _figure(task, st, metric, PARETO_PANELS, _pareto_panel,
                      "accuracy against cost; each model's Pareto front joined (95 % CI bars; "
                      "seconds on the device each setting names)", log=True)  # fmt: skip
        written += save_figure(fig, out / f"{task}_speed_pareto")
        fig = _figure(task, st, metric, AUP_PANELS, _aup_panel,
                      f"the accuracy-parallelism curves AUP integrates (dotted: y_1 - {OFFSET:g}, "
                      "settings below it left out)", log=False)  # fmt: skip
        written += save_figure(fig, out / f"{task}_speed_aup")
    return written
