"""Paper figures of accuracy-vs-NFE curves (the GSM8K figures): a :class:`CurveFigure` is its
panels, each a temperature and its :class:`Series`; the figure draws every series the store has,
with 95 % CI error bars, the paper's text-only numbers (``results/paper/marks.csv``) as dashed
marks, and a note naming the series it lacks. ``<label>.csv`` lists what was drawn and what is
missing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench import atomic
from bench.report.common import flag, headline_rows, task_rows
from bench.report.figures import log2_nfe_axis, save_figure
from bench.report.items import Artifact
from bench.report.paper.numbers import marks, one_recipe


@dataclass(frozen=True)
class Series:
    """One curve: ``method`` / first present of ``variants`` / ``decoding`` (None: the method's
    default decoding) at the panel's temperature (temperature-free decodings: their T = 1 rows)."""

    label: str
    method: str
    variants: tuple[str, ...] = ("base",)
    decoding: str | None = None
    temperature: float | None = None  # None: the panel's

    def need(self, t: float) -> str:
        dec = self.decoding or "default decoding"
        return f"{self.method}/{self.variants[0]} {dec} T={self.temp(t):g}"

    def temp(self, t: float) -> float:
        return t if self.temperature is None else self.temperature


@dataclass(frozen=True)
class Panel:
    title: str
    temperature: float
    series: tuple[Series, ...]


def series_rows(s: pd.DataFrame, ser: Series, t: float) -> tuple[pd.DataFrame, str | None]:
    """Headline rows of one series and the variant used (None: none present)."""
    h = headline_rows(s)
    h = h[h["method"] == ser.method]
    if ser.decoding is None:
        h = h[flag(h["default_decoding"])]
    else:
        h = h[h["decoding"] == ser.decoding]
    tfree = flag(h["temperature_free"])
    h = h[tfree | np.isclose(h["temperature"].astype(float), ser.temp(t))]
    for v in ser.variants:
        g = h[h["variant"] == v]
        if len(g):
            return one_recipe(g), v  # one model per curve, never two recipes pooled as seeds
    return h.iloc[0:0], None


def _curve(g: pd.DataFrame) -> pd.DataFrame:
    """Per NFE: value, CI (one seed: the evaluator's; several: mean +- sd), seeds."""
    out = []
    for nfe, x in g.groupby("nfe"):
        v = x["value"].astype(float)
        if len(x) == 1:
            lo, hi = x["ci_low"].iloc[0], x["ci_high"].iloc[0]
        else:
            sd = float(v.std(ddof=1))
            lo, hi = v.mean() - sd, v.mean() + sd
        out.append(
            {
                "nfe": float(nfe),
                "value": float(v.mean()),
                "ci_low": lo,
                "ci_high": hi,
                "seeds": len(x),
            }
        )
    return pd.DataFrame(out)


def curve_needs(a: CurveFigure, df: pd.DataFrame) -> tuple[list[str], list[str]]:
    s, _ = task_rows(df, a.task)
    have, miss = [], []
    for p in a.panels:
        for ser in p.series:
            g, v = series_rows(s, ser, p.temperature)
            what = f"{p.title}: {ser.need(p.temperature)}"
            if v is not None and v != ser.variants[0]:  # drawn from a fallback variant
                what += f" (drawn from {ser.method}/{v})"
            (have if v is not None else miss).append(what)
    return list(dict.fromkeys(have)), list(dict.fromkeys(miss))


def render_curves(a: CurveFigure, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    """Accuracy (%) vs NFE (log2), one panel per :class:`Panel`, 95 % CI error bars, the paper's
    text numbers as dashed marks; ``<label>.csv`` lists what was drawn and what is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s, name = task_rows(df, a.task)
    mk = marks(a.label)
    n = len(a.panels)
    # one color per series label across the panels (a series keeps its color left and right)
    labels = list(dict.fromkeys(ser.label for p in a.panels for ser in p.series))
    color = {lab: f"C{i % 10}" for i, lab in enumerate(labels)}
    fig, axes = plt.subplots(1, n, figsize=(5.0 * n, 3.8), squeeze=False, sharey=True)
    data, missing = [], []
    for ax, p in zip(axes[0], a.panels):
        ticks = _draw_series(ax, p, s, color, data, missing)
        _draw_marks(ax, p, mk, data)
        if ticks:
            log2_nfe_axis(ax, sorted(ticks))
        title = "" if p.title == "main" else p.title  # "main": the figure's only panel
        if "T =" not in title and all(ser.temperature is None for ser in p.series):
            title = f"{title} (T = {p.temperature:g})" if title else f"T = {p.temperature:g}"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("NFE")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    axes[0][0].set_ylabel(a.ylabel)
    fig.suptitle(f"{a.title}: {name}", fontsize=10)
    if missing:
        fig.text(
            0.01,
            -0.02,
            "missing cells (not in the store): " + "; ".join(missing),
            fontsize=6,
            wrap=True,
            va="top",
            color="firebrick",
        )
    fig.tight_layout()
    stem = out / a.label
    atomic.write_with(stem.with_suffix(".csv"), lambda t: pd.DataFrame(data).to_csv(t, index=False))
    return [stem.with_suffix(".csv"), *save_figure(fig, stem)]


def _draw_series(ax, p: Panel, s: pd.DataFrame, color: dict, data: list, missing: list) -> set:
    """Panel ``p``'s series on ``ax`` (our rows ``s``, 95 % CI error bars), each drawn point and
    each missing series added to ``data`` (and ``missing``); the NFEs drawn."""
    ticks = set()
    for ser in p.series:
        g, v = series_rows(s, ser, p.temperature)
        if v is None:
            missing.append(f"{p.title}: {ser.need(p.temperature)}")
            data.append({"panel": p.title, "series": ser.label, "kind": "missing"})
            continue
        c = _curve(g)
        label = ser.label + ("" if v == ser.variants[0] else f" [{ser.method}/{v}]")
        lo, hi = c["value"] - c["ci_low"].astype(float), c["ci_high"].astype(float) - c["value"]
        ax.errorbar(
            c["nfe"],
            100 * c["value"],
            yerr=np.nan_to_num(np.array([lo, hi]) * 100),
            marker="o",
            ms=4,
            capsize=2,
            lw=1.3,
            label=label,
            color=color[ser.label],
        )
        ticks |= set(c["nfe"])
        for _, r in c.iterrows():
            data.append(
                {"panel": p.title, "series": label, "kind": "ours", "variant": v, **r.to_dict()}
            )
    return ticks


def _draw_marks(ax, p: Panel, mk: pd.DataFrame, data: list) -> None:
    """The paper's text numbers ``mk`` that belong to panel ``p``, as dashed lines on ``ax``
    (each added to ``data``)."""
    here = [x in ("main", p.title) or p.title.startswith(f"{x}:") for x in mk["panel"]]
    for _, m in mk[np.asarray(here, dtype=bool)].iterrows():
        ax.axhline(100 * float(m["value"]), ls="--", lw=0.9, color="0.4")
        ax.annotate(
            f"paper: {m['series']} {100 * float(m['value']):.0f}%",
            (0.02, 100 * float(m["value"])),
            xycoords=("axes fraction", "data"),
            fontsize=7,
            color="0.3",
            va="bottom",
        )
        data.append(
            {
                "panel": p.title,
                "series": f"paper: {m['series']}",
                "kind": "paper",
                "value": float(m["value"]),
                "source": m["source"],
            }
        )


@dataclass(frozen=True, kw_only=True)
class CurveFigure(Artifact):
    """A figure of accuracy-vs-NFE curves: ``panels`` left to right, ``ylabel`` on the left."""

    kind: str = "figure"
    render: Callable = render_curves
    needs: Callable = curve_needs
    panels: tuple[Panel, ...] = ()
    ylabel: str = "accuracy (%)"
