"""The frontier over sampling seconds (:mod:`bench.report.frontier.section`):
``<task>_gen_ppl_vs_seconds``, two panels against sampling seconds per sample (log), one line
per (model, decoding) through its NFE grid, every point labelled with its NFE:

- left, the frontier's scalar: Gen. PPL at the held-out data's entropy
  (:func:`bench.report.frontier.data.curve_scalar`, with its 95 % interval), so every point is at
  the same entropy and lower is better at any cost; a curve whose scalar is not defined at an NFE
  (outside the window, degenerate, not reaching H_data) has no point there;
- right, the cells themselves at each curve's temperature closest to 1 (Gen. PPL with its
  interval; entropies are not matched, degenerate cells are crosses), so a store whose curves
  never reach H_data (a short smoke run) still shows what each NFE costs.

Seconds are the cells' ``sample_s`` over their samples (net of scoring with the reference LM);
where the cells' seconds come from several devices each line names its device. No cell with
seconds: no figure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.report.cost import UNRECORDED, log_seconds_axis, seconds_text
from bench.report.figures import save_figure
from bench.report.frontier.data import Window, at_nfe, curve_scalar, data_point, nfe_panels

MARKERS = ("o", "s", "^", "D")
#: the frontier tables' seconds column
COL_SECONDS = "s / sample"
COL_DEVICE = "device"


def has_seconds(c: pd.DataFrame) -> bool:
    """Whether any model cell of :func:`~bench.report.frontier.data.frontier_cells` has seconds."""
    return "seconds" in c and bool(c.loc[~c["is_data"], "seconds"].notna().any())


def cell_seconds(g: pd.DataFrame) -> float:
    """Sampling seconds per sample over the cells ``g`` (total seconds over total samples)."""
    v = g["seconds"].astype(float)
    w = pd.to_numeric(g["n"], errors="coerce").astype(float).fillna(0)
    ok = v.notna() & (w > 0)
    return float((v[ok] * w[ok]).sum() / w[ok].sum()) if ok.any() else float("nan")


def devices(g: pd.DataFrame) -> list[str]:
    """The devices behind the seconds of the cells ``g``, sorted (:data:`UNRECORDED` where a
    cell's rows do not say)."""
    return sorted({d or UNRECORDED for d in g.loc[g["seconds"].notna(), "device"]})


def device_text(g: pd.DataFrame) -> str:
    d = devices(g)
    return "" if not d else (d[0] if len(d) == 1 else "mixed: " + "; ".join(d))


def seconds_note(c: pd.DataFrame) -> str:
    """The frontier page's sentence on its seconds ("" when no cell has any)."""
    if not has_seconds(c):
        return ""
    every = devices(c[~c["is_data"]])
    what = (
        f"`{COL_SECONDS}`: sampling seconds per sample (the cells' `sample_s` over their "
        "samples: net of scoring with the reference LM and of loading the model); per model and "
        "NFE, over its temperatures' cells"
    )
    if len(every) == 1:
        where = (
            "the store does not record the device (rows written before `device_name`)"
            if every[0] == UNRECORDED
            else f"measured on {every[0]}"
        )
        return f"{what}; {where}."
    return (
        f"{what}. The cells' seconds were measured on different devices ({'; '.join(every)}): "
        f"the `{COL_DEVICE}` column names each row's; compare seconds only within one device."
    )


def several_devices(c: pd.DataFrame) -> bool:
    return len(devices(c[~c["is_data"]])) > 1


# --------------------------------------------------------------------------- the figure


def _points(c: pd.DataFrame, window: Window) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scalar points, T-closest-to-1 cells), one row per (curve, device, NFE)."""
    data = data_point(c)
    m = c[~c["is_data"] & c["seconds"].notna()].assign(
        device=lambda x: [d or UNRECORDED for d in x["device"]]
    )
    scal, cells = [], []
    for nfe in nfe_panels(c):
        at = at_nfe(m, nfe)
        for (curve, dev), g in at.groupby(["curve", "device"], sort=True):
            label_nfe = int(g["nfe"].iloc[0]) if g["length_bound"].all() else nfe
            base = {"curve": curve, "device": dev, "nfe": label_nfe, "seconds": cell_seconds(g)}
            sc = curve_scalar(g, data, window)
            if sc.status == "ok":
                lo, hi = sc.ci if sc.ci else (np.nan, np.nan)
                scal.append({**base, "PPL": sc.value, "PPL_lo": lo, "PPL_hi": hi})
            t = (g["temperature"].astype(float) - 1.0).abs().fillna(0.0)
            for _, r in g[t == t.min()].iterrows():  # a tie (0.7 and 1.3): both, two lines
                cells.append(
                    {**base, "seconds": r["seconds"], "PPL": r["PPL"], "PPL_lo": r["PPL_lo"],
                     "PPL_hi": r["PPL_hi"], "degenerate": bool(r["degenerate"]),
                     "T": "" if r["t_free"] or pd.isna(r["temperature"])
                     else f"{r['temperature']:g}"}
                )  # fmt: skip
    dedupe = ["curve", "device", "nfe"]  # AR (NFE = length) sits on every NFE panel: once
    s, k = pd.DataFrame(scal), pd.DataFrame(cells)
    s = s.drop_duplicates(dedupe) if len(s) else s
    k = k.drop_duplicates(dedupe + ["T"]) if len(k) else k
    return s, k


def _errors(v, lo, hi) -> np.ndarray:
    v, lo, hi = (np.asarray(x, float) for x in (v, lo, hi))
    return np.nan_to_num(np.clip(np.stack([v - lo, hi - v]), 0, None), nan=0.0)


def _line(ax, g: pd.DataFrame, color, label: str, ls: str, marker: str) -> None:
    g = g.sort_values("nfe")
    ax.errorbar(
        g["seconds"], g["PPL"], yerr=_errors(g["PPL"], g["PPL_lo"], g["PPL_hi"]), color=color,
        marker=marker, ms=4.5, lw=1.2, ls=ls, capsize=2.5, elinewidth=0.8, label=label,
    )  # fmt: skip
    for x, y, nfe in zip(g["seconds"], g["PPL"], g["nfe"]):
        ax.annotate(f"{int(nfe)}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                    color=color)  # fmt: skip


def seconds_figure(task: str, c: pd.DataFrame, out: Path, window: Window) -> list[Path]:
    """``<task>_gen_ppl_vs_seconds`` (svg, png, pdf); none when no model cell has seconds."""
    if not len(c) or not has_seconds(c) or not nfe_panels(c):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    scal, cells = _points(c, window)
    if not len(cells):
        return []
    curves = sorted(c.loc[~c["is_data"], "curve"].unique())  # the frontier figures' colours
    palette = sns.color_palette("tab10" if len(curves) <= 10 else "husl", max(len(curves), 1))
    colors = dict(zip(curves, palette))
    every = sorted(set(cells["device"]))
    several = len(every) > 1
    dashes = ("-", "--", ":", "-.")
    with plt.style.context("default"):
        fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.9), layout="constrained")
        for ax, pts, title in (
            (axes[0], scal, "Gen. PPL at the data's entropy (matched entropy)"),
            (axes[1], cells, "cells at T closest to 1 (entropy not matched)"),
        ):
            if not len(pts):
                ax.text(0.5, 0.5, "no curve reaches the data's entropy\ninside the window",
                        ha="center", va="center", transform=ax.transAxes, fontsize=8)  # fmt: skip
            pts = pts.assign(T="") if len(pts) and "T" not in pts else pts
            for (curve, dev, temp), g in (
                pts.groupby(["curve", "device", "T"], sort=True) if len(pts) else []
            ):
                label = f"{curve} T {temp}" if temp else curve
                label = f"{label} [{dev}]" if several else label
                temps = sorted(set(pts.loc[pts["curve"] == curve, "T"]))
                rank = temps.index(temp)  # a curve's second temperature: another marker / dash
                ls = dashes[(every.index(dev) if several else rank) % len(dashes)]
                marker = MARKERS[rank % len(MARKERS)]
                healthy = g[~g["degenerate"]] if "degenerate" in g else g
                if len(healthy):
                    _line(ax, healthy, colors[curve], label, ls, marker)
                bad = g[g["degenerate"]] if "degenerate" in g else g.iloc[:0]
                if len(bad):
                    ax.plot(bad["seconds"], bad["PPL"], marker="X", ms=8, ls="none",
                            color=colors[curve], mec="black", mew=0.6,
                            label=f"{label} (degenerate)")  # fmt: skip
            if len(pts):
                log_seconds_axis(ax)
                ax.set_yscale("log")
            ax.set_title(title, fontsize=9)
            ax.grid(alpha=0.3, which="both")
        axes[0].set_ylabel("Gen. PPL (log)")
        fig.supxlabel("sampling seconds per sample (log axis; net of scoring)", fontsize=10)
        handles = {}
        for ax in axes:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
        if handles:
            fig.legend(list(handles.values()), list(handles), loc="outside right center",
                       fontsize=8, frameon=False)  # fmt: skip
        stand_in = next((s for s in c["stand_in_for"] if s), "")
        name = f"{task} (stand-in corpus, not {stand_in})" if stand_in else task
        where = (
            "devices differ: each line names its device"
            if several
            else ("device not recorded" if every == [UNRECORDED] else f"seconds on {every[0]}")
        )
        fig.suptitle(
            f"{name}: Gen. PPL vs sampling seconds per sample\n(points labelled by NFE, AR: "
            f"generated length; {where})",
            fontsize=9,
        )
        return save_figure(fig, out / f"{task}_gen_ppl_vs_seconds")


__all__ = [
    "COL_DEVICE",
    "COL_SECONDS",
    "cell_seconds",
    "device_text",
    "has_seconds",
    "seconds_figure",
    "seconds_note",
    "seconds_text",
    "several_devices",
]
