"""Formatting and row selection shared by the tables and figures (no task or method names)."""

from __future__ import annotations

import pandas as pd

from bench.report.models import base_label, with_models
from bench.report.uncertainty import cell_summary, seeds_and_items
from bench.results import with_report_columns


def prepared(df: pd.DataFrame) -> pd.DataFrame:
    """Every row with its report columns (:func:`bench.results.with_report_columns`: stores
    written before those columns existed) and its model (:func:`bench.report.models.with_models`:
    the ``model`` label every table and figure groups by, one per training recipe, variant and
    decoding). Idempotent; the report calls it once on the whole store."""
    if "model" in df and "recipe_id" in df:
        return df
    return with_models(with_report_columns(df))


def selected(
    s: pd.DataFrame, *, task=None, model=None, nfe=None, temperature=None, subset=None
) -> pd.Series:
    """The mask of the :func:`prepared` rows ``s`` that the store filters select (the commands'
    ``--task``, ``--model`` (the report's label, its base label, the method or method/variant),
    ``--nfe``, ``--temperature``, ``--subset``; None: no filter)."""
    keep = pd.Series(True, index=s.index)
    if task:
        keep &= s["task"] == task
    if model:
        variant = s["method"].astype(str) + "/" + s["variant"].fillna("").astype(str)
        keep &= (
            (s["model"] == model)
            | (s["model_base"] == model)
            | (s["method"] == model)
            | (variant == model)
        )
    if nfe is not None:
        keep &= pd.to_numeric(s["nfe"], errors="coerce") == float(nfe)
    if temperature is not None:
        t = pd.to_numeric(s["temperature"], errors="coerce")
        keep &= (t - float(temperature)).abs() < 1e-9
    if subset:
        keep &= s["subset"] == subset
    return keep


def rows(df: pd.DataFrame, task: str | None = None, kind: str | None = "sample") -> pd.DataFrame:
    """The rows of ``task`` (all tasks: None) and ``kind``, prepared (:func:`prepared`; computed
    over all of ``df`` before filtering, so labels agree across tables)."""
    df = prepared(df)
    if task is not None:
        df = df[df["task"] == task]
    if kind is not None:
        df = df[df["kind"] == kind]
    return df


def task_rows(df: pd.DataFrame, task: str) -> tuple[pd.DataFrame, str]:
    """The sample rows of ``task``, else of its CPU stand-in (rows whose ``stand_in_for`` names
    it), and the name to print ("arith_standin (CPU stand-in, not GSM8K)")."""
    s = rows(df, task=None)
    own = s[s["task"] == task]
    if len(own):
        return own, task
    st = s[s["stand_in_for"].astype(str).str.lower() == task.lower()]
    if len(st):
        name = str(st["task"].iloc[0])
        return st[st["task"] == name], f"{name} (CPU stand-in, not {task.upper()})"
    return own, task


def headline_rows(s: pd.DataFrame) -> pd.DataFrame:
    """The rows of the task's headline metric (``metric_rank`` 0)."""
    r = pd.to_numeric(s["metric_rank"], errors="coerce")
    return s[r == 0]


def flag(col: pd.Series) -> pd.Series:
    """A boolean report column (True / False / empty) as a bool mask; empty is False."""
    return col.map(lambda v: v is True or (not isinstance(v, str) and v == 1)).astype(bool)


def metric_with_rank(s: pd.DataFrame, rank: int) -> str | None:
    """The metric the rows rank ``rank`` (0: the task's headline metric), or None."""
    r = pd.to_numeric(s["metric_rank"], errors="coerce")
    m = s.loc[r == rank, "metric"]
    return m.iloc[0] if len(m) else None


def secondary_metrics(s: pd.DataFrame) -> list[str]:
    """The task's secondary metrics present in ``s``, in the task's declared order."""
    r = pd.to_numeric(s["metric_rank"], errors="coerce")
    ranked = s.assign(_r=r)[r >= 1].groupby("metric")["_r"].min()
    return list(ranked.sort_values(kind="stable").index)


def subsets(df: pd.DataFrame) -> list[str]:
    """The subsets of ``df`` in the task's order (``subset_rank``), unranked ones after, by name."""
    rank = pd.to_numeric(df["subset_rank"], errors="coerce").groupby(df["subset"]).min()
    key = {s: (r if pd.notna(r) else float("inf")) for s, r in rank.items()}
    return sorted(df["subset"].dropna().unique(), key=lambda s: (key.get(s, float("inf")), s))


def model_label(r) -> str:
    """The row's model (``model``, :mod:`bench.report.models`); for a bare (method, variant,
    decoding) mapping: ``method[/variant] (decoding)``."""
    m = r.get("model")
    if isinstance(m, str) and m:
        return m
    return base_label(r["method"], r["variant"], r.get("decoding"))


def pct(v) -> str:
    return "" if pd.isna(v) else f"{100 * v:.1f}"


def md_table(df: pd.DataFrame) -> str:
    """``df`` as a Markdown table (for printing; report files hold :class:`Table` objects)."""
    from bench.report.document import Table

    return Table(df).markdown()


def cell_text(g: pd.DataFrame) -> str:
    """One table entry: the value with its 95 % CI (one seed: the evaluator's; several: the
    two-level bootstrap over seeds and items, :mod:`bench.report.uncertainty`); mean +- sd over
    seeds when the rows carry no per-item outcomes."""
    c = cell_summary(g)
    if c["low"] is not None:
        return f"{pct(c['value'])} [{pct(c['low'])}, {pct(c['high'])}]"
    if c["seeds"] > 1:
        return f"{100 * c['value']:.1f} +- {100 * c['sd']:.1f} (sd, {c['seeds']} seeds)"
    return pct(c["value"])


def seeds_items(g: pd.DataFrame) -> str:
    """``seeds x items`` behind one table entry (``1 seed x 256``)."""
    seeds, items = seeds_and_items(g)
    return f"{seeds} seed{'s' if seeds > 1 else ''} x {items}"


def ci_methods(g: pd.DataFrame) -> list[str]:
    """The interval methods of the cells in ``g`` (one per (model, subset, NFE, T) cell)."""
    keys = [k for k in ("model", "subset", "nfe", "temperature") if k in g]
    found = [cell_summary(x)["method"] for _, x in g.groupby(keys, dropna=False)]
    return sorted({m for m in found if m})


def at_headline(
    s: pd.DataFrame, keys: list[str], *, nfe: bool = True, temperature: bool = True
) -> pd.DataFrame:
    """The headline rule, for every table, figure and difference: per ``keys`` group, the rows
    at the largest NFE (``nfe``) and, among those, the temperature closest to 1
    (``temperature``); every training seed's row at that point is kept."""
    if not len(s):
        return s
    s = s.copy()
    s["_n"] = pd.to_numeric(s["nfe"], errors="coerce").fillna(-1) if nfe else 0
    s["_t"] = (s["temperature"].astype(float) - 1.0).abs() if temperature else 0
    g = s.groupby(keys, dropna=False, sort=False)
    s = s[s["_n"] == g["_n"].transform("max")]
    s = s[s["_t"] == s.groupby(keys, dropna=False, sort=False)["_t"].transform("min")]
    return s.drop(columns=["_n", "_t"])


def headline_cells(s: pd.DataFrame) -> pd.DataFrame:
    """Per (model, subset, metric): the rows at the headline point (:func:`at_headline`)."""
    return at_headline(prepared(s), ["model", "subset", "metric"])
