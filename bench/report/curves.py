"""Training curves: the training loss, and the validation loss where the run logged one, against
the optimiser step, per model (a store-wide section, ``training_curves``).

Every train job logs through Lightning's loggers (:mod:`bench.train`); its train rows name the
CSV log in ``train_log`` (relative to the results folder: ``runs/<run>/logs/metrics.csv``) and
say what its losses are in ``loss_kind`` (the method's :attr:`bench.method.Method.loss_kind`
under its options: e.g. AR's exact NLL, MDLM's NELBO, or a cross-entropy that bounds no
likelihood). For every task with such rows this section writes ``<task>_training_curves.png`` /
``.pdf``: one row of panels per kind of loss, titled with it (the rows in the order of their
text; a store written before ``loss_kind`` existed gets one row that says so), so no axis mixes
quantities; in each row one panel per training subset (Sudoku: one model per difficulty) for the
training ``loss`` and one for ``val_loss`` (fixed held-out examples, EMA weights) when any run
logged it, the panels of a row on one y scale. One colour per model (method / variant; the
palette of :func:`bench.report.figures.model_style`), a thin line per training seed and, with
several seeds, their mean over the steps they share as a thick line; a row's legend sits in its
last panel (up to :data:`INSIDE_LEGEND` models) or under the row: no margin beside the figure.
A row's loss axis is logarithmic when every value drawn is positive and the largest is at least
:data:`LOG_RATIO` times the smallest (early losses are often ten times the final ones, which on a
linear axis would flatten the differences between models at the end of training to a few pixels).

A log that is missing or unreadable is skipped with a one-line note on stderr; the report goes on.
The section reads the results table and the log files it names, nothing else.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pandas as pd

from bench.report.common import rows, subsets
from bench.report.figures import model_style, save_figure
from bench.report.items import Section

#: the columns of a training log the figure draws (bench.train: Lightning's CSV logger)
LOSS, VAL_LOSS, STEP = "loss", "val_loss", "step"
#: a row of loss panels has a log axis when its largest value is this many times its smallest
LOG_RATIO = 4.0
#: the row of runs whose train rows do not say what their loss is (stores older than ``loss_kind``)
UNRECORDED = "loss as logged; what it is was not recorded (a store written before loss_kind)"
#: a row's legend sits in its last panel up to this many models, under the row beyond
INSIDE_LEGEND = 4
#: the panels' titles, per logged column
COLUMN_TITLE = {LOSS: "training batches", VAL_LOSS: "held-out examples (EMA weights)"}


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
    loss_kind, seed, subset, train_cell, step, metric, value)."""
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
            loss_kind=_loss_kind(r.get("loss_kind")),
            seed=r["seed"],
            subset=r["subset"],
            train_cell=r["train_cell"],
            subset_rank=rank.get((r["task"], r["subset"])),
        )
        out.setdefault(str(r["task"]), []).append(long)
    return {task: pd.concat(parts, ignore_index=True) for task, parts in out.items()}


def figure(task: str, c: pd.DataFrame, out: Path) -> list[Path]:
    """``<task>_training_curves`` (svg, png, pdf) from :func:`curves`' rows of one task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # matplotlib's default style, whatever a figure drawn before in this process set (a seaborn
    # theme): the curves look the same whichever tasks the store holds
    with plt.style.context("default"):
        return _figure(task, c, out, plt)


def _loss_kind(v) -> str:
    """A train row's ``loss_kind``, :data:`UNRECORDED` where it has none."""
    return str(v) if isinstance(v, str) and v.strip() else UNRECORDED


def kinds(c: pd.DataFrame) -> list[str]:
    """The kinds of loss of :func:`curves`' rows, one row of panels each: by their text, the
    unrecorded one last."""
    return sorted(c["loss_kind"].unique(), key=lambda k: (k == UNRECORDED, k))


def _figure(task: str, c: pd.DataFrame, out: Path, plt) -> list[Path]:
    subs = subsets(c)
    metrics = [m for m in (LOSS, VAL_LOSS) if (c["metric"] == m).any()]
    columns = [(sub, metric) for sub in subs for metric in metrics]
    rows_ = kinds(c)
    colors = model_style(c["model"].unique())["palette"]
    fig = plt.figure(
        figsize=(max(3.3 * len(columns), 6.0), 2.6 * len(rows_) + 0.3), layout="constrained"
    )
    row_figs = fig.subfigures(len(rows_), 1, squeeze=False)[:, 0]
    steps = (c[STEP].min(), c[STEP].max())
    for r, (row, kind) in enumerate(zip(row_figs, rows_)):
        k = c[c["loss_kind"] == kind]
        axes = row.subplots(1, len(columns), squeeze=False, sharey=True)[0]
        title = textwrap.fill(kind, width=int(12 * fig.get_figwidth()))  # ~ the figure's width
        row.suptitle(title, x=0.01, ha="left", fontsize=10, fontweight="bold")
        handles: dict[str, object] = {}  # model -> its line, for the row's legend
        for ax, (sub, metric) in zip(axes, columns):
            part = k[(k["metric"] == metric) & (k["subset"] == sub)]
            for model in sorted(part["model"].unique()):
                handles[model] = _draw_model(ax, part[part["model"] == model], colors[model])
            if not len(part):
                ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
            title = COLUMN_TITLE[metric]
            ax.set_title(f"{sub}: {title}" if len(subs) > 1 else title, fontsize=9)
            if steps[0] < steps[1]:
                ax.set_xlim(*steps)
            ax.set_xlabel("step" if r == len(rows_) - 1 else "")
            ax.grid(alpha=0.3)
        values = k["value"]
        if len(values) and (values > 0).all() and values.max() >= LOG_RATIO * values.min():
            _log_axis(axes[0])  # the row shares its y axis
        if 0 < len(handles) <= INSIDE_LEGEND:  # a few models: in the row's last panel
            axes[-1].legend(
                list(handles.values()), list(handles), loc="best", fontsize=7, framealpha=0.8
            )
        elif handles:  # more: one line or two under the row, as wide as its panels
            row.legend(
                list(handles.values()),
                list(handles),
                loc="outside lower center",
                fontsize=7,
                frameon=False,
                ncol=min(len(handles), 2 * len(columns)),
            )
    fig.suptitle(f"{task}: training curves (one row per kind of loss)")
    return save_figure(fig, out / f"{task}_training_curves")


def _draw_model(ax, m: pd.DataFrame, color):
    """One model's runs in one panel: a line per run (thin beside a mean over several seeds,
    drawn thick at the steps every run logged); returns the line its legend shows."""
    runs = list(m.groupby("train_cell", sort=True))
    several = len(runs) > 1
    line = None
    for _, run in runs:
        (line,) = ax.plot(
            run[STEP],
            run["value"],
            color=color,
            lw=0.6 if several else 1.2,
            alpha=0.4 if several else 0.9,
        )
    if several:  # the mean over seeds, at the steps every seed logged
        per_step = m.groupby(STEP)
        mean = per_step["value"].mean()[per_step["train_cell"].nunique() == len(runs)]
        (line,) = ax.plot(mean.index, mean.values, color=color, lw=1.6)
    return line


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
