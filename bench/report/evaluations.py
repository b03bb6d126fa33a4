"""Evaluations apart from a sweep: the cells ``python -m bench.eval`` computed on a sweep's models.

A report table compares cells evaluated under one protocol: the same items (subset, item count,
``--limit``), the same NFE / temperature / decoding grid and, for likelihood, the same dataset,
layout and draws. A sweep file is such a protocol. ``bench.eval`` on one of its run folders with
other flags (``--limit 32``, ``--nfe 40``, ``--likelihood heldout --draws 4``) is another one:
its rows record the call in ``evaluation`` (:func:`bench.source_model.evaluation_name`).

The report keeps those rows out of the sweep's tables, figures, seed pools, headline cells and
paired differences, so a sweep's report is the same file for file whatever was evaluated beside
it, and lists them in ``evaluations.md`` (one table per evaluation, and the command that reports
it in full). ``python -m bench.report --evaluation NAME`` reports the cells of evaluation NAME
(with their models' training rows) as a report of their own, by default in
``<results>/evaluations/<slug>/``.

A cell belongs to the evaluation that computed it: ``bench.eval`` on a cell that is in the store
computes nothing and leaves its rows as they are, and a sweep that plans a cell a ``bench.eval``
computed first makes it its own (:meth:`bench.results.Store.adopt`).
"""

from __future__ import annotations

import hashlib
import re
import shlex

import pandas as pd

from bench.report.document import Doc, Table, ids
from bench.report.uncertainty import cell_summary

FILE = "evaluations.md"


def names(df: pd.DataFrame) -> pd.Series:
    """Per row, the evaluation that computed it ("" for a sweep's own cell)."""
    if "evaluation" not in df:
        return pd.Series("", index=df.index, dtype=object)
    return df["evaluation"].map(lambda v: v if isinstance(v, str) else "")


def split(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the sweeps' rows, the rows of evaluations apart), each re-indexed from 0."""
    apart = names(df) != ""
    return df[~apart].reset_index(drop=True), df[apart].reset_index(drop=True)


def select(df: pd.DataFrame, wanted: list[str]) -> pd.DataFrame:
    """The rows of the evaluations ``wanted`` and the train / import rows of their models."""
    ev = names(df)
    mine = df[ev.isin(wanted)]
    models = set(mine["train_cell"].dropna()) if "train_cell" in df else set()
    kind = df["kind"] if "kind" in df else pd.Series("", index=df.index)
    own = (ev == "") & kind.isin(["train", "import"]) & df.get("train_cell", kind).isin(models)
    return df[ev.isin(wanted) | own].reset_index(drop=True)


def slug(name: str) -> str:
    """A folder name for evaluation ``name``: its flags in safe characters and a short hash."""
    text = re.sub(r"[^A-Za-z0-9.]+", "-", name.removeprefix("bench.eval")).strip("-") or "defaults"
    return f"{text[:60]}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"


def _num(v) -> str:
    return "" if v is None or v != v else f"{float(v):.4g}"


def _table(rows: pd.DataFrame) -> Table:
    """One line per (model, task, subset, NFE, T, decoding, metric) of one evaluation: the value,
    its interval (seeds pooled as the report pools them), seeds x items."""
    out, sources = [], []
    keys = ["model", "task", "subset", "nfe", "temperature", "decoding", "metric"]
    for key, g in rows.groupby(keys, dropna=False, sort=True):
        s = cell_summary(g)
        ci = f"[{_num(s['low'])}, {_num(s['high'])}]" if s["low"] is not None else ""
        bound = g["bound_kind"] if "bound_kind" in g else pd.Series(dtype=object)
        upper = bound.astype(str).str.startswith("upper").any()  # a NELBO's nll, ppl, bpd
        le = "<= " if upper and key[-1] in ("nll", "ppl", "bpd") else ""
        model, task, subset, nfe, temp, dec, metric = key
        out.append(
            {
                "model": model,
                "task": task,
                "subset": subset,
                "NFE": "" if nfe != nfe or nfe is None else f"{int(nfe)}",
                "T": "" if temp != temp or temp is None else f"{float(temp):g}",
                "metric": metric,
                "value": le + _num(s["value"]) if s["value"] == s["value"] else "",
                "95% CI": ci,
                "seeds x items": f"{s['seeds']} x {int(s['items'])}",
            }
        )
        sources.append(ids(g["cell_id"]))
    return Table(
        pd.DataFrame(out),
        sources=sources,
        keys=frozenset({"model", "task", "subset", "NFE", "T", "metric"}),
    )


def markdown(apart: pd.DataFrame, results_dir: str) -> Doc:
    """``evaluations.md``: per evaluation apart, its cells as a table and the command that reports
    it in full. ``apart``: prepared rows (:func:`bench.report.common.prepared`)."""
    doc = Doc(
        [
            "# Evaluations apart from the sweeps",
            "",
            "Cells `python -m bench.eval` computed on a sweep's models under another protocol "
            "(other items, NFE grid or likelihood draws). They are not in the sweeps' tables, "
            "seed pools or paired differences; each is reported here on its own.",
        ]
    )
    ev = names(apart)
    for name in sorted(ev.unique()):
        g = apart[ev == name]
        g = g[g["kind"].isin(["sample", "likelihood"])]
        cmd = shlex.join(["python", "-m", "bench.report", "--results-dir", str(results_dir),
                          "--evaluation", name])  # fmt: skip
        doc += ["", f"## `{name}`", "", f"{g['cell_id'].nunique()} cells; in full: `{cmd}`", ""]
        doc.append(_table(g))
    return doc
