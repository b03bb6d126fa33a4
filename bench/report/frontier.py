"""The ``frontier`` kind (OpenWebText): Gen. PPL vs unigram entropy, one curve per model and
decoding sweeping the temperature (paper figure "Gen. PPL / Entropy Frontier on OpenWebText"
and appendix "Gen. PPL / Entropy Frontier Protocol").

For every task whose rows have ``task_kind == "frontier"`` (OWT's ``report_kind``), this kind's
:class:`~bench.report.items.TaskSection` (:data:`ITEMS`) writes the files below; its headline is no
fraction, so ``<task>.md`` only points to ``<task>_frontier.md``:

- ``<task>_gen_ppl_vs_entropy_nfe{N}.png/.pdf`` per NFE (the paper's file names for ``owt``):
  x = entropy (nats), y = Gen. PPL (log scale), one curve per (model, decoding) ordered by
  temperature; temperature-free decodings (S-FLM top-1, AR greedy) are single markers;
  autoregressive models (NFE = length) appear on every panel; the held-out "data" point
  (rows with ``method == "data"``, ``kind == "reference"``) is a star on every panel;
  Pareto-optimal points inside the window are ringed;
- ``<task>_gen_ppl_vs_entropy_all_nfe.png/.pdf``: the grid of every NFE panel;
- ``<task>_frontier.md``: every cell (H, Gen. PPL with CI, pooled Gen. PPL, n), and one scalar per
  (model, decoding, NFE): the Gen. PPL interpolated at the data's entropy along the model's
  curve (linear in log PPL between the two cells that bracket it), with its CI interpolated the
  same way, or "outside the window" / "does not reach H_data".

Window (paper: 4.5 <= H <= 6.0 nats, PPL <= 500; ``--frontier-window HMIN HMAX PPLMAX``): cells
outside it are listed but neither drawn nor used for Pareto points and the scalar. The headline
is ``gen_ppl`` (per-sample mean, the paper's text); ``gen_ppl_pooled`` (the reference code's
token-pooled value) is in the cell table. The paper's figures by label (``fig-owt-pareto-main``,
``fig-appendix-owt-pareto-all``) are drawn by :mod:`bench.report.frontier_paper` from the same
cells.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench import atomic
from bench.report.common import flag, md_table, rows
from bench.report.figures import save_figure
from bench.report.items import TaskSection, cli_flag

KIND = "frontier"
DATA_METHOD = "data"
REFERENCE = "reference"  # the store rows' kind of the held-out data point (bench/cells.py)
PPL, POOLED, ENTROPY = "gen_ppl", "gen_ppl_pooled", "entropy"


@dataclass(frozen=True)
class Window:
    """The visible window (paper appendix "Visible window")."""

    h_min: float = 4.5
    h_max: float = 6.0
    ppl_max: float = 500.0

    def contains(self, h, ppl) -> np.ndarray:
        h, ppl = np.asarray(h, float), np.asarray(ppl, float)
        return (h >= self.h_min) & (h <= self.h_max) & (ppl <= self.ppl_max) & np.isfinite(ppl)


def pareto_mask(h, ppl) -> np.ndarray:
    """True where no other point has entropy >= and Gen. PPL <= with one of them strict
    (higher entropy and lower Gen. PPL are both better)."""
    h, ppl = np.asarray(h, float), np.asarray(ppl, float)
    out = np.ones(len(h), bool)
    for i in range(len(h)):
        dominated = (h >= h[i]) & (ppl <= ppl[i]) & ((h > h[i]) | (ppl < ppl[i]))
        out[i] = not dominated.any()
    return out


def ppl_at_entropy(h, ppl, target: float) -> float | None:
    """Gen. PPL at entropy ``target`` along a curve of points (any order): linear in log PPL
    between the two points with the nearest entropies below and above; an exact hit is returned
    as is; None when no point lies on one side of ``target``. Points are sorted by entropy;
    a non-monotone curve uses the closest bracketing pair."""
    h, ppl = np.asarray(h, float), np.asarray(ppl, float)
    ok = np.isfinite(h) & np.isfinite(ppl) & (ppl > 0)
    h, ppl = h[ok], ppl[ok]
    if not len(h):
        return None
    hit = np.isclose(h, target, rtol=0, atol=1e-12)
    if hit.any():
        return float(ppl[hit][0])
    lo, hi = h < target, h > target
    if not lo.any() or not hi.any():
        return None
    i = np.where(lo)[0][np.argmax(h[lo])]
    j = np.where(hi)[0][np.argmin(h[hi])]
    w = (target - h[i]) / (h[j] - h[i])
    return float(math.exp((1 - w) * math.log(ppl[i]) + w * math.log(ppl[j])))


# --------------------------------------------------------------------------- cells


def _curve_label(r) -> str:
    label = r["method"] if r["variant"] in ("base", "", None) else f"{r['method']}/{r['variant']}"
    return f"{label} {r['decoding']}" if r.get("decoding") else label


def frontier_cells(task: str, df: pd.DataFrame) -> pd.DataFrame:
    """One row per sample cell of ``task`` (and per "data" reference): curve, nfe, temperature,
    H, PPL (+ CI), pooled PPL, n, t_free, length_bound, is_data."""
    s = rows(df, task, kind=None)
    s = s[s["kind"].isin(["sample", REFERENCE]) & s["metric"].isin([PPL, POOLED, ENTROPY])]
    if not len(s):
        return pd.DataFrame()
    keys = ["method", "variant", "decoding", "nfe", "temperature", "seed", "subset"]
    out = []
    for _, g in s.groupby(keys, dropna=False, sort=False):
        m = {r["metric"]: r for _, r in g.iterrows()}
        if PPL not in m or ENTROPY not in m:
            continue
        first = g.iloc[0]
        is_data = first["method"] == DATA_METHOD
        out.append(
            {
                "curve": "data (held-out)" if is_data else _curve_label(first),
                "method": first["method"],
                "decoding": first["decoding"],
                "nfe": None if pd.isna(first["nfe"]) else int(first["nfe"]),
                "temperature": None
                if pd.isna(first["temperature"])
                else float(first["temperature"]),
                "seed": first["seed"],
                "subset": first["subset"],
                "H": float(m[ENTROPY]["value"]),
                "PPL": float(m[PPL]["value"]),
                "PPL_lo": m[PPL]["ci_low"],
                "PPL_hi": m[PPL]["ci_high"],
                "pooled": float(m[POOLED]["value"]) if POOLED in m else float("nan"),
                "n": int(m[PPL]["n"]) if pd.notna(m[PPL]["n"]) else None,
                "t_free": bool(flag(g["temperature_free"]).any()),
                "length_bound": bool(flag(g["nfe_is_length"]).any()),
                "is_data": is_data,
                "stand_in_for": first.get("stand_in_for") or "",
                "protocol": first.get("task_protocol") or "",
            }
        )
    return pd.DataFrame(out)


def nfe_panels(c: pd.DataFrame) -> list[int]:
    m = c[~c["is_data"] & ~c["length_bound"]]
    return sorted(int(v) for v in m["nfe"].dropna().unique())


def _at_nfe(c: pd.DataFrame, nfe: int) -> pd.DataFrame:
    """Cells drawn on the NFE panel: that NFE, autoregressive (NFE = length) and data."""
    return c[(c["nfe"] == nfe) | c["length_bound"] | c["is_data"]]


def _data_point(c: pd.DataFrame):
    d = c[c["is_data"]]
    return (float(d["H"].mean()), float(d["PPL"].mean())) if len(d) else None


def scalar_table(c: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Per (curve, NFE): Gen. PPL interpolated at the data's entropy inside the window."""
    data = _data_point(c)
    out = []
    for nfe in nfe_panels(c):
        at = _at_nfe(c, nfe)
        for curve, g in at[~at["is_data"]].groupby("curve", sort=True):
            inside = g[window.contains(g["H"], g["PPL"])]
            row = {"model": curve, "NFE": "length" if g["length_bound"].all() else nfe}
            if data is None:
                row["Gen. PPL at H_data"] = "no data point"
            elif not len(inside):
                row["Gen. PPL at H_data"] = "outside the window"
            else:
                v = ppl_at_entropy(inside["H"], inside["PPL"], data[0])
                lo = ppl_at_entropy(inside["H"], inside["PPL_lo"].astype(float), data[0])
                hi = ppl_at_entropy(inside["H"], inside["PPL_hi"].astype(float), data[0])
                if v is None:
                    row["Gen. PPL at H_data"] = (
                        f"does not reach H_data (H {inside['H'].min():.2f}-{inside['H'].max():.2f})"
                    )
                else:
                    ci = f" [{lo:.1f}, {hi:.1f}]" if lo is not None and hi is not None else ""
                    row["Gen. PPL at H_data"] = f"{v:.1f}{ci}"
            row["cells in window"] = f"{len(inside)}/{len(g)}"
            out.append(row)
    t = pd.DataFrame(out)
    return t.drop_duplicates(subset=["model", "NFE"]) if len(t) else t


def frontier_markdown(task: str, c: pd.DataFrame, window: Window) -> str:
    data = _data_point(c)
    stand_in = next((s for s in c["stand_in_for"] if s), "")
    out = [f"# {task}: Gen. PPL / entropy frontier", ""]
    if stand_in:
        out += [
            f"Task `{task}` is trained and scored on a stand-in corpus, not {stand_in}: "
            "its numbers are not comparable to the paper's.",
            "",
        ]
    out += [
        "Gen. PPL = per-sample exp(mean NLL) under the reference LM up to the first end-of-text, "
        "averaged over samples (paper appendix); `pooled` = exp(total NLL / total tokens) over "
        "all samples (the reference code's). Entropy = per-sample unigram entropy (nats) over "
        f"the L generated ids, averaged. Window: {window.h_min:g} <= H <= {window.h_max:g}, "
        f"Gen. PPL <= {window.ppl_max:g}.",
        "",
    ]
    protocols = sorted({p for p in c["protocol"] if isinstance(p, str) and p})
    if protocols:  # corpus, L, reference LM, end-of-text masking (bench/data/owt.py)
        out += ["Protocol: " + "; ".join(f"`{p}`" for p in protocols) + ".", ""]
    if data is not None:
        out += [
            f"Held-out data (same length, same scorer): H = {data[0]:.3f}, "
            f"Gen. PPL = {data[1]:.1f}.",
            "",
        ]
    else:
        out += ["No held-out data point in the store.", ""]
    sc = scalar_table(c, window)
    if len(sc):
        out += ["## Gen. PPL at the data's entropy (per model and NFE)", "", md_table(sc), ""]
    cells = c.sort_values(["is_data", "curve", "nfe", "temperature"], na_position="first")
    t = pd.DataFrame(
        {
            "model": cells["curve"],
            "NFE": [
                "length" if lb else ("" if pd.isna(n) else int(n))
                for lb, n in zip(cells["length_bound"], cells["nfe"])
            ],
            "T": ["" if pd.isna(v) else f"{v:g}" for v in cells["temperature"]],
            "H": [f"{v:.3f}" for v in cells["H"]],
            "Gen. PPL [95 % CI]": [
                f"{p:.1f}" + (f" [{lo:.1f}, {hi:.1f}]" if pd.notna(lo) else "")
                for p, lo, hi in zip(cells["PPL"], cells["PPL_lo"], cells["PPL_hi"])
            ],
            "pooled": [f"{v:.1f}" for v in cells["pooled"]],
            "n": cells["n"],
            "in window": ["yes" if w else "no" for w in window.contains(cells["H"], cells["PPL"])],
        }
    )
    out += ["## Every cell", "", md_table(t), ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- figures


def draw_panel(ax, c: pd.DataFrame, nfe: int, window: Window, colors: dict) -> None:
    at = _at_nfe(c, nfe)
    vis = at[window.contains(at["H"], at["PPL"])]
    for curve, g in vis[~vis["is_data"]].groupby("curve", sort=True):
        g = g.sort_values("temperature")
        style = dict(color=colors[curve], label=curve, ms=5)
        if g["t_free"].all() or len(g) == 1:
            ax.plot(g["H"], g["PPL"], marker="D", ls="none", **style)
        else:
            ax.plot(g["H"], g["PPL"], marker="o", lw=1.3, **style)
    model = vis[~vis["is_data"]]
    if len(model):
        par = model[pareto_mask(model["H"], model["PPL"])]
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
    ax.set_yscale("log")
    ax.set_xlim(window.h_min, window.h_max)
    ax.set_title(f"NFE = {nfe}")
    ax.set_xlabel("unigram entropy (nats)")


def frontier_figures(task: str, c: pd.DataFrame, out: Path, window: Window) -> list[Path]:
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
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        frameon=False,
    )
    fig.suptitle(f"{name}: Gen. PPL vs entropy, every NFE", y=1.01)
    fig.tight_layout()
    paths += save_figure(fig, out / f"{task}_gen_ppl_vs_entropy_all_nfe")
    return paths


# --------------------------------------------------------------------------- task section


def effective_window(c: pd.DataFrame, window: Window) -> tuple[Window, str]:
    """``window``, or, when no cell of a model lies inside it (e.g. a short-L smoke run, whose
    entropies are all below 4.5 nats: ln L bounds them), every cell's range, with a note."""
    m = c[~c["is_data"]]
    if not len(m) or window.contains(m["H"], m["PPL"]).any():
        return window, ""
    h = c["H"].astype(float)
    wide = Window(round(float(h.min()) - 0.05, 2), round(float(h.max()) + 0.05, 2), float("inf"))
    return wide, (
        f"No model cell lies inside the window ({window.h_min} <= H <= {window.h_max}, "
        f"Gen. PPL <= {window.ppl_max:g}): the figures and scalars below use every cell "
        "(pass --frontier-window HMIN HMAX PPLMAX to set one)."
    )


def _page(task: str, df: pd.DataFrame, args=None) -> str:
    """``<task>.md`` of a frontier task: a pointer to ``<task>_frontier.md``."""
    target = f"{task}_frontier.md"
    return f"\nSee [{target}]({target}).\n"


def _files(task: str, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    """``<task>_frontier.md`` and the figures of one task (none when it has no frontier cell)."""
    c = frontier_cells(task, df)
    if not len(c):
        return []
    w = getattr(args, "frontier_window", None)
    window, note = effective_window(c, Window(*w) if w else Window())
    text = frontier_markdown(task, c, window)
    if note:
        text = text.replace("\n\n", f"\n\n{note}\n\n", 1)
    return [atomic.write_text(out / f"{task}_frontier.md", text)] + frontier_figures(
        task, c, out, window
    )


ITEMS = [
    TaskSection(
        name="frontier",
        task_kind=KIND,
        markdown=_page,
        figures=_files,
        fraction=False,  # Gen. PPL: no generic tables in %
        flags=(
            cli_flag(
                "--frontier-window",
                nargs=3,
                type=float,
                metavar=("HMIN", "HMAX", "PPLMAX"),
                default=None,
                help="Gen. PPL / entropy window (default 4.5 6.0 500, the paper's)",
            ),
        ),
    )
]
