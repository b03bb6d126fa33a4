"""Paper tables with ours beside the paper's numbers (``results/paper/<task>.csv``): the main
table of a task, and the helpers every paper table uses (the rows a table needs, one entry of
ours, writing ``<label>.md`` / ``.csv``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from bench import atomic
from bench.report.common import (
    cell_text,
    ci_methods,
    flag,
    headline_cells,
    headline_rows,
    pct,
    task_rows,
)
from bench.report.document import Doc, Table, ids
from bench.report.items import Artifact
from bench.report.paper.numbers import ours_for, paper_numbers, protocol, protocol_differences


def best_cells(df: pd.DataFrame, task: str) -> tuple[pd.DataFrame, str]:
    """Our headline cells of ``task`` (or its stand-in) at the largest NFE and T closest to 1,
    and the task's printed name."""
    s, name = task_rows(df, task)
    return (headline_cells(headline_rows(s)) if len(s) else s), name


def paper_table_needs(table: str) -> Callable:
    """``needs`` of a table of the paper's CSV: one entry per (method, variant, decoding) row."""

    def needs(a: Artifact, df: pd.DataFrame) -> tuple[list[str], list[str]]:
        p = paper_numbers(a.task)
        best, _ = best_cells(df, a.task)
        have, miss = [], []
        if p is None:
            return have, miss
        for (m, v, d), _g in p[p["table"] == table].groupby(
            ["method", "variant", "decoding"], sort=False
        ):
            what = f"{m}/{v}" + (f" ({d})" if d else "")
            (have if len(best) and len(ours_for(best, m, v, d)) else miss).append(what)
        return have, miss

    return needs


def ours_text(best: pd.DataFrame, m: str, v: str, d: str, sub: str | None) -> str:
    """Our entry for the paper row (method, variant, decoding) on subset ``sub`` (None: any)."""
    if not len(best):
        return ""
    o = ours_for(best, m, v, d)
    if sub is not None:
        o = o[o["subset"] == sub]
    return cell_text(o) if len(o) else ""


def ours_cells(best: pd.DataFrame, m: str, v: str, d: str, sub: str | None) -> tuple[str, ...]:
    """The store cells behind :func:`ours_text` (the same rows)."""
    if not len(best):
        return ()
    o = ours_for(best, m, v, d)
    return ids(o["cell_id"] if sub is None else o.loc[o["subset"] == sub, "cell_id"])


def write_table(
    a: Artifact,
    out: Path,
    table: pd.DataFrame,
    head: str,
    notes: list[str],
    missing: list[str],
    *,
    sources=None,
    cells=None,
    computed: str = "",
) -> list[Path]:
    """``<label>.md`` (title, ``head``, the table, notes, missing cells) and ``<label>.csv``.
    ``sources`` / ``cells``: the store cells per row / per (row, column) entry (the page's
    provenance); columns ending ``(paper)`` or starting ``paper `` are the paper's numbers; the
    first column names the row."""
    t = Table(
        table,
        sources,
        cells or {},
        paper={
            c for c in table.columns if str(c).endswith("(paper)") or str(c).startswith("paper ")
        },
        keys={table.columns[0]} if len(table.columns) else set(),
        computed=computed,
    )
    text = Doc([f"# {a.label}: {a.title}", "", head, "", t, ""])
    text += [f"- {n}" for n in notes]
    if missing:
        text += ["", "Missing cells (not in the store): " + "; ".join(missing)]
    stem = out / a.label
    atomic.write_with(stem.with_suffix(".csv"), lambda t: table.to_csv(t, index=False))
    return [text.write(stem.with_suffix(".md")), stem.with_suffix(".csv")]


def render_main_table(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    """The paper's main table of ``a.task`` (``results/paper/<task>.csv``, table ``main``),
    ours beside each row at the largest NFE and T closest to 1."""
    p = paper_numbers(a.task)
    p = p[p["table"] == "main"]
    best, name = best_cells(df, a.task)
    paper_subs = list(dict.fromkeys(p["subset"]))
    our_subs = sorted(best["subset"].dropna().unique()) if len(best) else []
    table, sources, cells = [], [], {}
    for (m, v, d), g in p.groupby(["method", "variant", "decoding"], sort=False):
        row = {"model": g["label"].iloc[0]}
        sources.append(ours_cells(best, m, v, d, None))
        for sub in paper_subs:
            ours_sub = sub if sub in our_subs or len(our_subs) != 1 else our_subs[0]
            row[f"{sub} (ours)"] = ours_text(best, m, v, d, ours_sub)
            cells[(len(table), f"{sub} (ours)")] = ours_cells(best, m, v, d, ours_sub)
            row[f"{sub} (paper)"] = pct(float(g.loc[g["subset"] == sub, "value"].iloc[0]))
        table.append(row)
    _, missing = a.needs(a, df)
    methods = ci_methods(best)
    head = (
        f"Ours: {name}{_where(best)}, headline metric at the largest NFE of the grid and T "
        "closest to 1 (%"
        + (f"; intervals: {'; '.join(methods)}" if methods else "")
        + f"). Paper: its reported numbers ({protocol(a.task)})."
    )
    departs = protocol_differences(a.task, best)
    if departs:  # said before the table, where a reader looks first
        head = (
            f"**Not comparable:** this store departs from the paper's protocol "
            f"({'; '.join(departs)}); the (ours) and (paper) columns measure different things.\n\n"
            + head
        )
    return write_table(a, out, pd.DataFrame(table), head, [], missing, sources=sources, cells=cells)


def _where(best: pd.DataFrame) -> str:
    """What our numbers come from: sweep(s), task protocol, NFE and T of the headline cells (a
    CPU quickstart's 4x4 Sudoku must not read as the paper's 9x9)."""
    if not len(best):
        return ""

    def vals(col, fmt=str):
        v = best[col].dropna() if col in best else []
        return ", ".join(dict.fromkeys(fmt(x) for x in v if str(x) != ""))

    parts = [f"sweep {vals('sweep')}"] if vals("sweep") else []
    if vals("task_protocol"):
        parts.append(vals("task_protocol"))
    length = flag(best["nfe_is_length"])
    nfe = ", ".join(str(int(x)) for x in sorted(set(best.loc[~length, "nfe"].dropna())))
    ar = ", ".join(str(int(x)) for x in sorted(set(best.loc[length, "nfe"].dropna())))
    temp = vals("temperature", lambda x: f"{float(x):g}")
    parts.append(
        ", ".join(x for x in (f"NFE {nfe}" if nfe else "", f"NFE = length {ar}" if ar else "") if x)
        + f", T = {temp}"
    )
    return " (" + "; ".join(parts) + ")"
