"""Seconds in the report: what a sample costs beside what it scores.

Sample rows carry their cell's measured cost (:data:`bench.measure.SAMPLE_COST_COLUMNS`):
``sample_s`` (sampling seconds of the cell, net of scoring and of loading the model),
``score_s``, ``seconds_per_sample`` (``sample_s`` / items), ``device_name``, ``threads``, ...;
stores written before them have ``sample_s`` / ``score_s`` only, or neither. From the rows alone:

- :func:`with_cost`: every row's sampling seconds per sample (``seconds_per_sample``, else
  ``sample_s / n``; a re-scored row, which sampled nothing, takes those of the cell whose samples
  it scored, ``rescored_from``), seconds per item with its scoring ((``sample_s`` + ``score_s``) /
  ``n``) and the device the seconds were measured on (``device_name``, with the intra-op threads
  on a CPU: seconds under 4 and 16 threads are not one device's);
- :func:`headline_columns`: the columns ``s / sample`` (and, for a task that scores by running
  programs, ``s / item incl. scoring``) of a headline table
  (:func:`bench.report.tables.task_markdown`), the device named once in the caption, or per row
  (``device``) when the rows' seconds come from different devices: seconds of two devices are
  never put in one column without saying so;
- the section ``vs_seconds`` (:data:`ITEMS`): ``<task>_<metric>_vs_seconds`` beside every
  fraction task's ``<task>_<metric>_vs_nfe``: the headline metric against sampling seconds per
  sample (log axis), one line per model (training recipe, variant and decoding) through its NFE
  grid at the temperature closest to 1, every point labelled with its NFE and its 95 % interval as
  an error bar. A model measured on several devices draws one line per device.

No row with seconds: no column, no figure (the tables read as before).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.report.common import at_headline, metric_with_rank, rows, subsets
from bench.report.figures import model_style, save_figure
from bench.report.items import Section
from bench.report.uncertainty import pool_seeds

#: the columns :func:`with_cost` adds: sampling seconds per sample, seconds per item with its
#: scoring, the device they were measured on ("" when the row does not say)
SPS, IPS, DEVICE = "cost_s_per_sample", "cost_s_per_item_scored", "cost_device"
#: the task kind whose scoring runs the model's programs (a sandbox, a grader): its headline
#: table also shows the seconds per item with scoring
SCORED_KIND = "program"
#: the name of a device the rows do not record (stores written before ``device_name``)
UNRECORDED = "unrecorded"
COL_SAMPLE = "s / sample"
COL_SCORED = "s / item incl. scoring"
COL_DEVICE = "device"


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df:
        return pd.Series(np.nan, index=df.index, dtype=float)
    return pd.to_numeric(df[col], errors="coerce").astype(float)


def _text(v) -> str:
    return v.strip() if isinstance(v, str) else ""


def device_of(name, threads) -> str:
    """The device a row's seconds were measured on: ``device_name``, and on a CPU its intra-op
    ``threads`` (``cpu: AMD EPYC 7763 (8 threads)``); "" when the row names none."""
    name = _text(name)
    if not name:
        return ""
    try:
        t = int(float(threads))
    except (TypeError, ValueError):
        t = 0
    return (
        f"{name} ({t} thread{'s' if t > 1 else ''})"
        if t > 0 and name.lower().startswith("cpu")
        else name
    )


def _own(s: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(seconds per sample, score seconds per item, device) from each row's own columns."""
    n = _num(s, "n").where(lambda x: x > 0)
    sps = _num(s, "seconds_per_sample")
    sps = sps.where(sps.notna(), _num(s, "sample_s") / n)
    per_item_score = _num(s, "score_s") / n
    names = s["device_name"] if "device_name" in s else pd.Series(None, index=s.index)
    threads = s["threads"] if "threads" in s else pd.Series(None, index=s.index)
    dev = pd.Series([device_of(a, b) for a, b in zip(names, threads)], index=s.index, dtype=object)
    return sps, per_item_score, dev


def with_cost(s: pd.DataFrame, store: pd.DataFrame | None = None) -> pd.DataFrame:
    """``s`` with :data:`SPS`, :data:`IPS` and :data:`DEVICE` per row (module docstring).
    ``store``: the rows a re-scored row's ``rescored_from`` cell is looked up in (default ``s``)."""
    s = s.copy()
    sps, score, dev = _own(s)
    frm = s["rescored_from"].map(_text) if "rescored_from" in s else None
    if frm is not None and (sps.isna() & (frm != "")).any():  # re-scored rows without seconds
        src = _source_costs(s if store is None else store)
        take = sps.isna() & frm.isin(src.index)
        if take.any():
            sps[take] = frm[take].map(src["sps"]).astype(float)
            dev[take & (dev == "")] = frm[take & (dev == "")].map(src["dev"])
    s[SPS], s[IPS], s[DEVICE] = sps, sps + score, dev
    return s


def _source_costs(store: pd.DataFrame) -> pd.DataFrame:
    """Per sample cell of ``store``: its seconds per sample and device (from its headline row
    where it has one: every row of a cell carries the same seconds, ``n`` may differ)."""
    if not len(store) or "cell_id" not in store:
        return pd.DataFrame(columns=["sps", "dev"])
    st = store[store["kind"] == "sample"] if "kind" in store else store
    rank = _num(st, "metric_rank").fillna(np.inf)
    st = st.assign(_rank=rank).sort_values("_rank", kind="stable")
    sps, _score, dev = _own(st)
    t = pd.DataFrame({"cell": st["cell_id"], "sps": sps, "dev": dev})
    t = t[t["sps"].notna()].drop_duplicates("cell")
    return t.set_index("cell")


def weighted_seconds(g: pd.DataFrame, col: str = SPS) -> float:
    """The seconds per item of the rows ``g`` together: each row's ``col`` weighted by its
    items (``n``), i.e. total seconds over total items; NaN when no row has ``col``."""
    v, w = g[col].astype(float), _num(g, "n")
    ok = v.notna() & (w > 0)
    return float((v[ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else float("nan")


def devices(g: pd.DataFrame) -> list[str]:
    """The devices behind the seconds of the rows ``g`` (:data:`UNRECORDED` for rows that do
    not say), sorted."""
    d = g.loc[g[SPS].notna(), DEVICE]
    return sorted({x or UNRECORDED for x in d})


def seconds_text(x: float) -> str:
    """Seconds to three significant digits (thousands separated from 1,000 s); "" for NaN."""
    if x is None or not np.isfinite(x):
        return ""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def device_text(devs: list[str]) -> str:
    return devs[0] if len(devs) == 1 else "mixed: " + "; ".join(devs)


@dataclass
class Columns:
    """What a headline table gains: per row key, its cost entries (column -> text); the columns
    in order; the caption's device clause; the note under the table."""

    per_row: dict = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    caption: str = ""
    note: str = ""


def headline_columns(
    h: pd.DataFrame, store: pd.DataFrame | None = None, by: str = "model"
) -> Columns | None:
    """The cost columns of a headline table whose rows are ``h`` grouped by ``by`` (rows at the
    headline cell, every subset and seed): ``s / sample`` (sampling seconds over items), for a
    task of kind :data:`SCORED_KIND` also ``s / item incl. scoring``, and ``device`` when the
    rows' seconds come from more than one device. None when no row has seconds (no column)."""
    c = with_cost(h, store)
    if c[SPS].isna().all():
        return None
    scored = (c["task_kind"] == SCORED_KIND).any() if "task_kind" in c else False
    every = devices(c)
    cols = [
        COL_SAMPLE,
        *([COL_SCORED] if scored else []),
        *([COL_DEVICE] if len(every) > 1 else []),
    ]
    out = Columns(columns=cols)
    for key, g in c.groupby(by, sort=True):
        have = int(g[SPS].notna().sum())
        part = f" ({have}/{len(g)} cells)" if 0 < have < len(g) else ""
        entry = {COL_SAMPLE: seconds_text(weighted_seconds(g)) + (part if have else "")}
        if scored:
            entry[COL_SCORED] = seconds_text(weighted_seconds(g, IPS))
        if len(every) > 1:
            entry[COL_DEVICE] = device_text(devices(g)) if have else ""
        out.per_row[key] = entry
    what = (
        f"`{COL_SAMPLE}`: sampling seconds per sample (the cells' `sample_s` over their items: "
        "net of scoring and of loading the model) at the row's NFE and temperature, over its "
        "subsets and seeds (total seconds over total items)"
    )
    if scored:
        what += f"; `{COL_SCORED}`: (`sample_s` + `score_s`) / items, scoring included"
    if "rescored_from" in c and c["rescored_from"].map(_text).ne("").any():
        what += "; a re-scored model's sampling seconds are those of the cells it re-scored"
    if len(every) == 1:
        where = (
            "the store does not record the device (rows written before `device_name`)"
            if every[0] == UNRECORDED
            else f"measured on {every[0]}"
        )
        out.caption = f"seconds {where}"
        out.note = f"{what}; {where}."
    else:
        out.note = (
            f"{what}. The rows' seconds were measured on different devices "
            f"({'; '.join(every)}): the `{COL_DEVICE}` column names each row's; compare seconds "
            "only between rows of one device."
        )
    return out


# --------------------------------------------------------------------------- the figure


def seconds_points(task: str, df: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The headline metric's cells of ``task`` that have seconds, at each model's temperature
    closest to 1, every NFE: one row per (model, device, subset, NFE, T) with the training seeds
    pooled (:func:`bench.report.uncertainty.pool_seeds`: value, 95 % interval) and the seconds
    per sample over those seeds' cells (``seconds``); and the metric."""
    s = rows(df, task)
    metric = metric_with_rank(s, 0)
    if metric is None:
        return s.iloc[:0], None
    s = with_cost(s[s["metric"] == metric], df)
    models = sorted(s["model"].unique())  # the colours of the task's other figures
    s = s[s[SPS].notna()]
    if not len(s):
        return s, metric
    s = at_headline(s, ["model"], nfe=False)
    keys = ["model", DEVICE, "subset", "nfe", "temperature"]
    points = []
    for _, g in s.groupby(keys, dropna=False, sort=False):
        r = pool_seeds(g, keys).iloc[0].copy()
        r["seconds"] = weighted_seconds(g)
        points.append(r)
    p = pd.DataFrame(points)
    p["nfe"] = p["nfe"].astype(float)
    p.attrs["models"] = models
    return p, metric


def seconds_figure(task: str, df: pd.DataFrame, out: Path) -> list[Path]:
    """``<task>_<metric>_vs_seconds`` (svg, png, pdf); none when no cell has seconds."""
    p, metric = seconds_points(task, df)
    if metric is None or not len(p):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.style.context("default"):
        return _draw(task, p, metric, out, plt)


def log_seconds_axis(ax) -> None:
    """A logarithmic seconds (x) axis labelled in plain numbers at 1, 2 and 5 times each power
    of ten (matplotlib's default labels every minor tick of a short range as ``a x 10^k``, one
    over the other)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _draw(task: str, p: pd.DataFrame, metric: str, out: Path, plt) -> list[Path]:
    subs = subsets(p)
    every = sorted({d or UNRECORDED for d in p[DEVICE]})
    several = len(every) > 1
    style = model_style(p.attrs.get("models") or p["model"].unique())
    program = (p["task_kind"] == SCORED_KIND).any() if "task_kind" in p else False
    unit = "problem" if program else "sample"
    labels = [f"{m} [{d or UNRECORDED}]" if several else m for m, d in zip(p["model"], p[DEVICE])]
    legend_in = 0.06 * max(map(len, labels)) + 0.5  # the legend right of the panels, in inches
    fig, axes = plt.subplots(
        1, len(subs), figsize=(4.4 * len(subs) + legend_in, 3.7), sharex=True, sharey=True,
        squeeze=False, layout="constrained",
    )  # fmt: skip
    dashes = ("-", "--", ":", "-.")
    for ax, sub in zip(axes[0], subs):
        part = p[p["subset"] == sub]
        for (model, dev), g in part.groupby(["model", DEVICE], sort=True):
            g = g.sort_values("nfe")
            x, v = g["seconds"].to_numpy(float), 100 * g["value"].to_numpy(float)
            lo, hi = 100 * g["ci_low"].to_numpy(float), 100 * g["ci_high"].to_numpy(float)
            yerr = np.nan_to_num(np.clip(np.stack([v - lo, hi - v]), 0, None), nan=0.0)
            label = f"{model} [{dev or UNRECORDED}]" if several else model
            ls = dashes[every.index(dev or UNRECORDED) % len(dashes)] if several else "-"
            ax.errorbar(
                x, v, yerr=yerr, color=style["palette"][model], marker=style["markers"][model],
                ms=5, lw=1.2, ls=ls, capsize=2.5, elinewidth=0.8, label=label,
            )  # fmt: skip
            for xi, vi, nfe in zip(x, v, g["nfe"]):
                ax.annotate(
                    f"{int(nfe)}", (xi, vi), textcoords="offset points", xytext=(4, 4),
                    fontsize=7, color=style["palette"][model],
                )  # fmt: skip
        log_seconds_axis(ax)
        ax.set_title(str(sub) if len(subs) > 1 else "", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    fig.supxlabel(f"sampling seconds per {unit} (log axis; net of scoring)", fontsize=10)
    name = metric.replace("_", " ")
    axes[0][0].set_ylabel(f"{name} (%), 95 % CI")
    handles = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(
        list(handles.values()), list(handles), loc="outside right center", fontsize=8,
        frameon=False,
    )  # fmt: skip
    where = (
        "devices differ: each line names its device"
        if several
        else ("device not recorded" if every[0] == UNRECORDED else f"seconds on {every[0]}")
    )
    fig.suptitle(
        f"{task}: {name} vs sampling seconds per {unit}\n(T closest to 1; points labelled by "
        f"NFE, AR: generated length; {where})",
        fontsize=9,
    )
    return save_figure(fig, out / f"{task}_{metric}_vs_seconds")


def _render(sec: Section, df: pd.DataFrame, out: Path, args) -> list[Path]:
    written: list[Path] = []
    s = rows(df)
    if not len(s):
        return written
    # the tasks with the generic tables and figures (bench.report.cli: renderers.fraction_tasks)
    for task in getattr(args, "fraction_tasks", ()):
        if task not in set(s["task"].dropna()):
            continue
        written += seconds_figure(task, df, out)
    return written


ITEMS = [Section(name="vs_seconds", render=_render)]
