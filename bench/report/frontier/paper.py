"""The paper's Gen. PPL / entropy frontier figures by label (``fig-owt-pareto-main``: NFE 32 and
1024; ``fig-appendix-owt-pareto-all``: every NFE), drawn from the cells of
:mod:`bench.report.frontier.section` with its panels (:mod:`bench.report.frontier.draw`: 95 %
intervals as error bars, degenerate cells as crosses and never ringed Pareto-optimal): a
:class:`FrontierFigure` names the NFEs it shows (a panel the store lacks reads "missing cells").
``<label>.csv``: every drawn cell, with its intervals (``H_lo`` / ``H_hi``, ``PPL_lo`` /
``PPL_hi``), ``degenerate_fraction`` and ``degenerate`` flag, and MAUVE (``MAUVE``, ``MAUVE_lo``,
``MAUVE_hi``, ``MAUVE_sd``) where the cells were scored with it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench import atomic
from bench.report.common import rows
from bench.report.figures import save_figure
from bench.report.frontier import section as fr
from bench.report.frontier.draw import figure_legend
from bench.report.items import Artifact

#: the NFEs of the paper's frontier sweep: what a figure of every NFE needs
PAPER_NFES = (32, 64, 128, 256, 512, 1024)


def frontier_task(a: Artifact, df: pd.DataFrame) -> str | None:
    """The store's frontier task for ``a``: ``a.task`` itself, else one standing in for it,
    else the first frontier task by name (None: the store has none)."""
    filled = rows(df, kind=None)
    f = filled[filled["task_kind"] == fr.KIND]
    tasks = sorted(f["task"].dropna().unique())
    if a.task in tasks:
        return a.task
    stand = sorted(f.loc[f["stand_in_for"].astype(str).str.lower() == a.task, "task"].unique())
    return stand[0] if stand else (tasks[0] if tasks else None)


def render_frontier(a: FrontierFigure, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    task = frontier_task(a, df)
    c = fr.frontier_cells(task, df) if task else pd.DataFrame()
    if not len(c):
        raise LookupError("no frontier rows in the store")
    have = fr.nfe_panels(c)
    want = list(a.nfes) if a.nfes else have
    colors = {k: f"C{i % 10}" for i, k in enumerate(sorted(c["curve"].unique()))}
    cols = min(2, len(want))
    nrows = math.ceil(len(want) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.0 * cols, 3.8 * nrows), squeeze=False)
    window = fr.Window()
    for ax, nfe in zip(axes.flat, want):
        if nfe in have:
            fr.draw_panel(ax, c, nfe, window, colors)
        else:
            ax.set_title(f"NFE = {nfe}: missing cells")
    axes[0][0].set_ylabel("Gen. PPL")
    figure_legend(fig, axes)
    fig.suptitle(f"{a.title}: {task}", fontsize=10)
    fig.tight_layout()
    stem = out / a.label
    drawn = c[c["nfe"].isin(want) | c["is_data"] | c["length_bound"]]
    atomic.write_with(stem.with_suffix(".csv"), lambda t: drawn.to_csv(t, index=False))
    return [stem.with_suffix(".csv"), *save_figure(fig, stem)]


def frontier_needs(a: FrontierFigure, df: pd.DataFrame) -> tuple[list[str], list[str]]:
    filled = rows(df, kind=None)
    fr_rows = filled[filled["task_kind"] == fr.KIND]
    got = set(pd.to_numeric(fr_rows["nfe"], errors="coerce").dropna().astype(int))
    want = a.nfes or PAPER_NFES
    return ([f"NFE {n}" for n in want if n in got], [f"NFE {n}" for n in want if n not in got])


@dataclass(frozen=True, kw_only=True)
class FrontierFigure(Artifact):
    """Gen. PPL vs entropy panels at ``nfes`` (empty: every NFE the store has)."""

    kind: str = "figure"
    render: Callable = render_frontier
    needs: Callable = frontier_needs
    nfes: tuple[int, ...] = ()
