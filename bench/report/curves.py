"""Training curves: the training loss, and the validation loss where the run logged one, against
the optimiser step, per model (a store-wide section, ``training_curves``).

Every train job logs through Lightning's loggers (:mod:`bench.train`); its train rows name the
CSV log in ``train_log`` (relative to the results folder: ``runs/<run>/logs/metrics.csv``). For
every task with such rows this section writes ``<task>_training_curves.png`` / ``.pdf``: one
column of panels per training subset (Sudoku: one model per difficulty), the training ``loss`` in
the top row and ``val_loss`` (fixed held-out examples, EMA weights; MDLM, Duo, FLM, CANDI: their
NELBO bound, AR: its NLL, S-FLM: its training loss) in the bottom row when any run logged it; one
colour per model (method / variant), a thin line per training seed and, with several seeds,
their mean over the steps they share as a thick line. A panel's loss axis is logarithmic when
every value drawn is positive and the largest is at least :data:`LOG_RATIO` times the smallest
(early losses are often ten times the final ones, which on a linear axis would flatten the
differences between models at the end of training to a few pixels).

A log that is missing or unreadable is skipped with a one-line note on stderr; the report goes on.
The section reads the results table and the log files it names, nothing else.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from bench.report.common import rows, subsets
from bench.report.figures import save_figure
from bench.report.items import Section

#: the columns of a training log the figure draws (bench.train: Lightning's CSV logger)
LOSS, VAL_LOSS, STEP = "loss", "val_loss", "step"
#: a loss panel is drawn on a log axis when its largest value is this many times its smallest
LOG_RATIO = 4.0


def read_log(path: Path) -> pd.DataFrame | str:
    """A training log as (step, loss, val_loss) rows sorted by step, or why it cannot be read."""
    if not path.is_file():
        return "no such file"
    try:
        log = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as e:
        return f"unreadable ({type(e).__name__})"
    if STEP not in log or not ({LOSS, VAL_LOSS} & set(log)):
        return f"no {STEP} / {LOSS} columns"
    cols = [c for c in (STEP, LOSS, VAL_LOSS) if c in log]
    log = log[cols].apply(pd.to_numeric, errors="coerce").dropna(subset=[STEP])
    return log.sort_values(STEP, kind="stable").reset_index(drop=True)


def curves(df: pd.DataFrame, results_dir: Path) -> dict[str, pd.DataFrame]:
    """Per task: the logged points of every train cell with a readable log, as rows (model,
    seed, subset, train_cell, step, metric, value)."""
    t = rows(df, kind="train")
    t = t[t["train_log"].notna() & (t["train_log"].astype(str) != "")]
    # train rows carry no subset rank: take the task's order from its sample rows
    s = rows(df, kind="sample")
    rank = pd.to_numeric(s["subset_rank"], errors="coerce").groupby([s["task"], s["subset"]]).min()
    out: dict[str, list[pd.DataFrame]] = {}
    for _, r in t.drop_duplicates("train_cell").iterrows():
        path = Path(results_dir) / str(r["train_log"])
        log = read_log(path)
        if isinstance(log, str):
            print(f"note: training curves: {path}: {log}; skipped", file=sys.stderr)
            continue
        long = log.melt(id_vars=STEP, var_name="metric", value_name="value").dropna()
        long = long.assign(
            model=r["model_base"],  # one colour per recipe and variant
            seed=r["seed"],
            subset=r["subset"],
            train_cell=r["train_cell"],
            subset_rank=rank.get((r["task"], r["subset"])),
        )
        out.setdefault(str(r["task"]), []).append(long)
    return {task: pd.concat(parts, ignore_index=True) for task, parts in out.items()}


def figure(task: str, c: pd.DataFrame, out: Path) -> list[Path]:
    """``<task>_training_curves.png`` / ``.pdf`` from :func:`curves`' rows of one task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # matplotlib's default style, whatever a figure drawn before in this process set (a seaborn
    # theme): the curves look the same whichever tasks the store holds
    with plt.style.context("default"):
        return _figure(task, c, out, plt)


def _figure(task: str, c: pd.DataFrame, out: Path, plt) -> list[Path]:
    subs = subsets(c)
    metrics = [m for m in (LOSS, VAL_LOSS) if (c["metric"] == m).any()]
    models = sorted(c["model"].unique())
    colors = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(models)}
    fig, axes = plt.subplots(
        len(metrics),
        len(subs),
        figsize=(max(3.6 * len(subs), 5.0), 2.8 * len(metrics)),
        squeeze=False,
        sharex="col",
    )
    for i, metric in enumerate(metrics):
        for j, sub in enumerate(subs):
            ax = axes[i][j]
            part = c[(c["metric"] == metric) & (c["subset"] == sub)]
            for model in models:
                m = part[part["model"] == model]
                runs = list(m.groupby("train_cell", sort=True))
                for _, run in runs:
                    ax.plot(
                        run[STEP],
                        run["value"],
                        color=colors[model],
                        lw=0.6 if len(runs) > 1 else 1.2,
                        alpha=0.4 if len(runs) > 1 else 0.9,
                        label=None if len(runs) > 1 else model,
                    )
                if len(runs) > 1:  # the mean over seeds, at the steps every seed logged
                    per_step = m.groupby(STEP)
                    mean = per_step["value"].mean()[per_step["train_cell"].nunique() == len(runs)]
                    ax.plot(mean.index, mean.values, color=colors[model], lw=1.6, label=model)
            if len(part) and (part["value"] > 0).all():
                if part["value"].max() >= LOG_RATIO * part["value"].min():
                    _log_axis(ax)
            ax.set_title(f"{sub}" if i == 0 else "")
            ax.set_ylabel(metric.replace("_", " ") if j == 0 else "")
            ax.set_xlabel("step" if i == len(metrics) - 1 else "")
            ax.grid(alpha=0.3)
    legend = {}  # label -> handle, over every panel (a model may miss from the first)
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(lab, h)
    handles, labels = list(legend.values()), list(legend)
    if handles:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.suptitle(f"{task}: training curves", y=1.02)
    fig.tight_layout()
    return save_figure(fig, out / f"{task}_training_curves")


def _log_axis(ax) -> None:
    """A logarithmic y axis with plain-number labels at 1, 2 and 5 times each power of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))


def _render(sec: Section, df: pd.DataFrame, out: Path, args) -> list[Path]:
    results_dir = Path(getattr(args, "results_dir", None) or "results")
    written: list[Path] = []
    for task, c in sorted(curves(df, results_dir).items()):
        written += figure(task, c, out)
    return written


ITEMS = [Section(name="training_curves", render=_render)]
