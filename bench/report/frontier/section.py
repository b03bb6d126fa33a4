"""The ``frontier`` kind (OpenWebText): Gen. PPL vs unigram entropy, one curve per model and
decoding sweeping the temperature (paper figure "Gen. PPL / Entropy Frontier on OpenWebText"
and appendix "Gen. PPL / Entropy Frontier Protocol").

For every task whose rows have ``task_kind == "frontier"`` (OWT's ``report_kind``), this kind's
:class:`~bench.report.items.TaskSection` (:data:`ITEMS`) writes the files below; its headline is no
fraction, so ``<task>.md`` only points to ``<task>_frontier.md``:

- ``<task>_gen_ppl_vs_entropy_nfe{N}.png/.pdf`` per NFE (the paper's file names for ``owt``) and
  ``<task>_gen_ppl_vs_entropy_all_nfe.png/.pdf`` (every NFE panel): drawn by
  :mod:`bench.report.frontier.draw` (curves over temperature, 95 % intervals as error bars,
  degenerate cells as crosses, Pareto-optimal cells ringed, the held-out "data" point, rows with
  ``method == "data"`` and ``kind == "reference"``, a star; autoregressive models, NFE =
  length, on every panel);
- ``<task>_gen_ppl_vs_seconds``: Gen. PPL against sampling seconds per sample, where the cells
  carry their measured seconds (:mod:`bench.report.frontier.seconds`; the scalar table and the
  cell table then gain ``s / sample``, and ``device`` where the seconds come from several);
- ``<task>_frontier.md``: one scalar per (model, decoding, NFE): the Gen. PPL interpolated at the
  data's entropy along the model's curve (linear in log PPL between the two cells that bracket
  it) with a 95 % interval (:func:`bench.report.frontier.data.scalar_ci`), or "outside the
  window" / "does not reach H_data" / "degenerate"; the Pareto-optimal cells per NFE; every cell
  (H and Gen. PPL with their CIs, pooled Gen. PPL, n, degenerate or not).

Window (paper: 4.5 <= H <= 6.0 nats, PPL <= 500; ``--frontier-window HMIN HMAX PPLMAX``): cells
outside it are listed but neither drawn nor used for Pareto points and the scalar. Degenerate
cells (:mod:`bench.evaluate.degenerate`: half or more of the samples empty after the first
end-of-text, one repeated token, or of unigram entropy below ln 2 nats; rows without the
``degenerate_fraction`` metric are judged from their stored mean entropy and empty fraction) are
listed and drawn, marked, but are never Pareto-optimal and never enter a scalar. The headline
is ``gen_ppl`` (per-sample mean, the paper's text); ``gen_ppl_pooled`` (the reference code's
token-pooled value) is in the cell table. The paper's figures by label (``fig-owt-pareto-main``,
``fig-appendix-owt-pareto-all``) are drawn by :mod:`bench.report.frontier.paper` from the same
cells.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.evaluate import degenerate as dg
from bench.evaluate.bootstrap import SAMPLES_CI_METHOD as CI_METHOD
from bench.report.document import Doc, Table, ids
from bench.report.frontier.data import (  # noqa: F401 - the frontier's API, re-exported
    DATA_METHOD,
    ENTROPY,
    KIND,
    POOLED,
    PPL,
    REFERENCE,
    SCALAR_CI_METHOD,
    Window,
    at_nfe,
    curve_scalar,
    data_point,
    frontier_cells,
    nfe_panels,
    pareto_cells,
    pareto_mask,
    ppl_at_entropy,
    scalar_ci,
)
from bench.report.frontier.draw import draw_panel, frontier_figures  # noqa: F401
from bench.report.frontier.seconds import (
    COL_DEVICE,
    COL_SECONDS,
    cell_seconds,
    device_text,
    has_seconds,
    seconds_figure,
    seconds_note,
    seconds_text,
    several_devices,
)
from bench.report.items import TaskSection, cli_flag

SCALAR_COL = "Gen. PPL at H_data [95 % CI]"


def _scalar_text(sc) -> str:
    if sc.status == "no data":
        return "no data point"
    if sc.status == "outside":
        return "outside the window"
    if sc.status == "degenerate":
        return "degenerate (every cell in the window)"
    if sc.status == "short":
        return f"does not reach H_data (H {sc.h_range[0]:.2f}-{sc.h_range[1]:.2f})"
    ci = f" [{sc.ci[0]:.1f}, {sc.ci[1]:.1f}]" if sc.ci else " [no CI]"
    return f"{sc.value:.1f}{ci}"


def scalar_table(c: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Per (curve, NFE): Gen. PPL interpolated at the data's entropy inside the window, from
    healthy cells, with its interval."""
    data = data_point(c)
    secs, devs = has_seconds(c), several_devices(c) if has_seconds(c) else False
    out = []
    for nfe in nfe_panels(c):
        at = at_nfe(c, nfe)
        for curve, g in at[~at["is_data"]].groupby("curve", sort=True):
            sc = curve_scalar(g, data, window)
            out.append(
                {
                    "model": curve,
                    "NFE": "length" if g["length_bound"].all() else nfe,
                    SCALAR_COL: _scalar_text(sc),
                    "cells in window": f"{sc.in_window}/{sc.cells}",
                    "degenerate cells": f"{sc.degenerate}/{sc.cells}",
                    **({COL_SECONDS: seconds_text(cell_seconds(g))} if secs else {}),
                    **({COL_DEVICE: device_text(g)} if devs else {}),
                    SOURCES: ids(x for cs in g["cells"] for x in cs),
                }
            )
    t = pd.DataFrame(out)
    return t.drop_duplicates(subset=["model", "NFE"]) if len(t) else t


def _cell_name(r) -> str:
    t = "" if pd.isna(r["temperature"]) or r["t_free"] else f" T {r['temperature']:g}"
    n = " (NFE = length)" if r["length_bound"] else ""
    return f"{r['curve']}{t}{n}"


def pareto_table(c: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Per NFE panel: its Pareto-optimal cells (:func:`pareto_cells`)."""
    out = []
    for nfe in nfe_panels(c):
        par = pareto_cells(c, nfe, window).sort_values(["curve", "temperature"])
        names = ", ".join(_cell_name(r) for _, r in par.iterrows())
        out.append(
            {
                "NFE": nfe,
                "Pareto-optimal cells (healthy, in the window)": names or "none",
                SOURCES: ids(x for cs in par["cells"] for x in cs),
            }
        )
    return pd.DataFrame(out)


def _degenerate_text(r) -> str:
    if r["deg_source"] == "measured":
        return f"{'yes' if r['degenerate'] else 'no'} ({100 * r['degenerate_fraction']:.0f} %)"
    return {
        "stored": "no (not measured)",
        "stored mean H": "yes (from mean H)",
        "stored empty fraction": "yes (from empty fraction)",
    }.get(r["deg_source"], "")


def _ci_text(v, lo, hi, fmt: str) -> str:
    ci = f" [{lo:{fmt}}, {hi:{fmt}}]" if pd.notna(lo) and pd.notna(hi) else ""
    return f"{v:{fmt}}{ci}"


MAUVE_COL = "MAUVE [95 % CI] (sd over seeds)"


def _mauve_text(v, lo, hi, sd) -> str:
    if pd.isna(v):
        return ""
    out = _ci_text(v, lo, hi, ".3f")
    return f"{out} ({sd:.3f})" if pd.notna(sd) else out


def has_mauve(c: pd.DataFrame) -> bool:
    return "MAUVE" in c and bool(c["MAUVE"].notna().any())


def cell_table(c: pd.DataFrame, window: Window) -> pd.DataFrame:
    cells = c.sort_values(["is_data", "curve", "nfe", "temperature"], na_position="first")
    mauve = {}
    if has_mauve(c):  # bench.evaluate.mauve_score: cells scored with task.options.mauve
        cols = zip(cells["MAUVE"], cells["MAUVE_lo"], cells["MAUVE_hi"], cells["MAUVE_sd"])
        mauve[MAUVE_COL] = [_mauve_text(*v) for v in cols]
    cost = {}
    if has_seconds(c):  # the cell's sampling seconds per sample (and device, where they differ)
        cost[COL_SECONDS] = [seconds_text(v) for v in cells["seconds"]]
        if several_devices(c):
            cost[COL_DEVICE] = [device_text(cells.loc[[i]]) for i in cells.index]
    return pd.DataFrame(
        {
            "model": cells["curve"],
            "NFE": [
                "length" if lb else ("" if pd.isna(n) else int(n))
                for lb, n in zip(cells["length_bound"], cells["nfe"])
            ],
            "T": ["" if pd.isna(v) else f"{v:g}" for v in cells["temperature"]],
            "H [95 % CI]": [
                _ci_text(*v, ".3f") for v in zip(cells["H"], cells["H_lo"], cells["H_hi"])
            ],
            "Gen. PPL [95 % CI]": [
                _ci_text(*v, ".1f") for v in zip(cells["PPL"], cells["PPL_lo"], cells["PPL_hi"])
            ],
            "pooled": [f"{v:.1f}" for v in cells["pooled"]],
            **mauve,
            "n": cells["n"],
            "degenerate": [_degenerate_text(r) for _, r in cells.iterrows()],
            "in window": ["yes" if w else "no" for w in window.contains(cells["H"], cells["PPL"])],
            **cost,
            SOURCES: list(cells["cells"]) if "cells" in cells else [()] * len(cells),
        }
    )


#: the column of :func:`scalar_table`, :func:`pareto_table` and :func:`cell_table` holding each
#: row's store cells (the page's provenance; not shown)
SOURCES = "_cells"


def _table(t: pd.DataFrame, keys: set[str]) -> Table:
    """A frontier table as report data: its rows' cells from the :data:`SOURCES` column."""
    if not len(t):
        return Table(t)
    return Table(t.drop(columns=SOURCES), list(t[SOURCES]), keys=keys)


def frontier_markdown(task: str, c: pd.DataFrame, window: Window, note: str = "") -> Doc:
    data = data_point(c)
    stand_in = next((s for s in c["stand_in_for"] if s), "")
    out = [f"# {task}: Gen. PPL / entropy frontier", ""]
    if note:  # the window was widened (effective_window)
        out += [note, ""]
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
        f"Intervals: cells' H and Gen. PPL: {CI_METHOD}, B = the task's `bootstrap` option "
        f"(default 1000). Gen. PPL at H_data: {SCALAR_CI_METHOD}; [no CI] where a cell or the "
        "data lacks an interval or H_data sits at the end of the curve.",
        "",
        "Degenerate: a sample is degenerate when it is empty after the first end-of-text, one "
        f"repeated token, or of unigram entropy below ln 2 = {dg.SAMPLE_ENTROPY_MIN:.3f} nats "
        f"(fewer than 2 effective distinct tokens); a cell when at least "
        f"{100 * dg.CELL_FRACTION:.0f} % of its samples are (rows without that fraction: mean "
        f"H < {dg.LEGACY_MEAN_ENTROPY_MAX:.3f} or at least half the samples empty). Degenerate "
        "cells are drawn as crosses and left out of the Pareto sets and the scalars.",
        "",
    ]
    if has_mauve(c):
        out += [
            "MAUVE (Pillutla et al. 2021): samples against held-out text cut to each sample's "
            "length, features from the featurizer the protocol names (`mauve=`), the mean over "
            "k-means seeds; interval: a 95 % t-interval over the seeds (the quantization's "
            "randomness only), sd over the seeds in parentheses. Degenerate cells keep their MAUVE "
            "and their flag.",
            "",
        ]
    protocols = sorted({p for p in c["protocol"] if isinstance(p, str) and p})
    if protocols:  # corpus, L, reference LM, end-of-text masking (bench/data/owt/task.py)
        out += ["Protocol: " + "; ".join(f"`{p}`" for p in protocols) + ".", ""]
    if seconds_note(c):
        out += [seconds_note(c), ""]
    if data is not None:
        out += [
            f"Held-out data (same length, same scorer): H = {data.H:.3f}, "
            f"Gen. PPL = {data.PPL:.1f}.",
            "",
        ]
    else:
        out += ["No held-out data point in the store.", ""]
    sc = scalar_table(c, window)
    if len(sc):
        out += [
            "## Gen. PPL at the data's entropy (per model and NFE)",
            "",
            _table(sc, {"model", "NFE", COL_DEVICE}),
            "",
        ]
        out += ["## Pareto-optimal cells (per NFE panel)", ""]
        out += [_table(pareto_table(c, window), {"NFE"}), ""]
    every = _table(cell_table(c, window), {"model", "NFE", "T", COL_DEVICE})
    out += ["## Every cell", "", every, ""]
    return Doc(out)


def effective_window(c: pd.DataFrame, window: Window) -> tuple[Window, str]:
    """``window``, or, when no healthy model cell lies inside it (e.g. a short-L smoke run,
    whose entropies are all below 4.5 nats: ln L bounds them), every cell's range, with a note."""
    m = c[~c["is_data"]]
    healthy = m[~m["degenerate"]]
    if not len(m) or window.contains(healthy["H"], healthy["PPL"]).any():
        return window, ""
    h = c["H"].astype(float)
    wide = Window(round(float(h.min()) - 0.05, 2), round(float(h.max()) + 0.05, 2), float("inf"))
    return wide, (
        f"No model cell lies inside the window ({window.h_min} <= H <= {window.h_max}, "
        f"Gen. PPL <= {window.ppl_max:g}; degenerate cells not counted): the figures and "
        "scalars below use every cell "
        "(pass --frontier-window HMIN HMAX PPLMAX to set one)."
    )


# --------------------------------------------------------------------------- task section


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
    text = frontier_markdown(task, c, window, note)
    return (
        [text.write(out / f"{task}_frontier.md")]
        + frontier_figures(task, c, out, window)
        + seconds_figure(task, c, out, window)
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
