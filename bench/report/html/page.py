"""The page's content: a header (store, sweeps, commits, cells done / failed, when written), one
section per task (its headline table and other tables, its figures, its training curves and
training runs), the store-wide tables, the paper items with their ``--list`` status, and every
other file of the folder.

Every table comes from a Markdown file the report wrote (:mod:`~bench.report.html.markdown`),
every figure from the folder (:mod:`~bench.report.html.files`); the store is read only for the
header, the paper items' status and each number's provenance
(:mod:`~bench.report.html.provenance`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from bench.report.html import markdown
from bench.report.html.files import Figure, Group, group, inventory
from bench.report.html.provenance import SOURCE_FIELDS, Provenance, Resolver
from bench.results import failed_runs

_NUMBER = re.compile(r"^[-+]?\d[\d,]*(\.\d+)?")
STORE_WIDE = ("training.md", "training_cost.md", "alpha_star.md")


@dataclass
class Cell:
    text: str
    title: str = ""
    numeric: bool = False


@dataclass
class TableView:
    header: list[str]
    rows: list[tuple[list[Cell], Provenance]]
    has_sources: bool
    #: shown folded (one click opens it): a table under a heading that starts with "All "
    #: (e.g. every pair of the differences), after the table that matters
    collapsed: bool = False


@dataclass
class Doc:
    """One Markdown file as page blocks (tables as :class:`TableView`)."""

    name: str
    anchor: str
    blocks: list[tuple[markdown.Block, TableView | None]] = field(default_factory=list)


@dataclass
class PaperItem:
    label: str
    kind: str
    title: str
    sweep: str
    status: str
    have: list[str]
    missing: list[str]
    docs: list[Doc]
    figures: list[Figure]
    files: list[str]


#: a table under a heading that starts with this is drawn folded (the full list behind a summary)
FOLDED = "All "


def anchor(name: str) -> str:
    """An HTML id for a file or a task (letters, digits, ``-``, ``_``)."""
    return "f-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)


def doc(out: Path, name: str, task: str | None, res: Resolver, keep=None) -> Doc:
    """``out/name`` parsed, each table with its provenance (``keep(header, row)``: rows to
    show; default all)."""
    d = Doc(name, anchor(name))
    heading = ""
    for b in markdown.parse((out / name).read_text(encoding="utf-8", errors="replace")):
        if b.kind == "heading":
            heading = b.text
        if b.kind != "table":
            d.blocks.append((b, None))
            continue
        t = b.table
        body = [r for r in t.rows if keep is None or keep(t.header, r)]
        prov = res.table(task, heading, t.header, body)
        rows = [
            ([Cell(x, p.summary(), bool(_NUMBER.match(x))) for x, p in zip(r, cells)], rp)
            for r, (rp, cells) in zip(body, prov)
        ]
        has = any(rp.sources for _, rp in rows)
        folded = heading.startswith(FOLDED)
        d.blocks.append((b, TableView(t.header, rows, has, folded)))
    return d


def header(df: pd.DataFrame, results_dir: Path) -> dict:
    """Store, sweeps (with the sweep file where ``sweeps/<name>.yaml`` exists), commits, cells
    done (sample / train) and failed (runs with ``failed.json``; damaged store files)."""
    cells = df.drop_duplicates("cell_id") if len(df) else df
    sweeps, commits = [], []
    if len(cells):
        for name, g in cells.groupby(cells["sweep"].fillna(""), sort=True):
            f = Path("sweeps") / f"{name}.yaml"
            found = re.fullmatch(r"[\w.-]+", str(name)) and f.is_file()
            sweeps.append({"name": name, "cells": len(g), "file": str(f) if found else ""})
        for sha, g in cells.groupby(cells["git_sha"].fillna(""), sort=True):
            commits.append({"sha": sha or "(none)", "cells": len(g)})
    failed = failed_runs(results_dir)
    corrupt = results_dir / "store" / "corrupt"
    kinds = cells["kind"].value_counts().to_dict() if len(cells) else {}
    return {
        "results_dir": str(results_dir),
        "rows": len(df),
        "done": len(cells),
        "done_kinds": ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())),
        "failed": failed,
        "corrupt": len(list(corrupt.glob("*.json"))) if corrupt.is_dir() else 0,
        "sweeps": sweeps,
        "commits": commits,
        "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _task_keep(task: str):
    def keep(head: list[str], row: list[str]) -> bool:
        return dict(zip(head, row)).get("task") == task

    return keep


def tasks(out: Path, names: list[str], groups: dict[str, Group], res: Resolver) -> list[dict]:
    """Per task: its Markdown (``<task>.md`` first: the headline table leads), figures (training
    curves last), CSV files, and its rows of ``training.md``."""
    result = []
    for t in names:
        g = groups[t]
        md = sorted(g.markdown, key=lambda n: (n != f"{t}.md", n))
        figs = sorted(g.figures, key=lambda f: (f.stem == f"{t}_training_curves", f.stem))
        training = None
        if "training.md" in groups[""].markdown:
            training = doc(out, "training.md", None, res, keep=_task_keep(t))
            training.blocks = [(b, tv) for b, tv in training.blocks if tv is not None]
            if not any(tv.rows for _, tv in training.blocks):
                training = None
        result.append(
            {
                "name": t,
                "anchor": anchor(t),
                "docs": [doc(out, n, t, res) for n in md[:1]],
                # after the figures: the differences and any other file of the task
                "more_docs": [doc(out, n, t, res) for n in md[1:]],
                "figures": figs,
                "csv": g.csv,
                "other": g.other,
                "training": training,
            }
        )
    return result


def paper_items(out: Path, df: pd.DataFrame, paper: dict[str, Group], res: Resolver) -> list:
    """Every paper label (the registry's order) with its status and what it wrote."""
    from bench.report import renderers
    from bench.report.common import task_rows

    items = []
    for label, a in renderers.paper_artifacts().items():
        try:
            status, have, miss = a.status(df)
        except Exception as e:  # a plug-in's check that fails: shown, the page goes on
            status, have, miss = f"unknown ({type(e).__name__}: {e})", [], []
        g = paper.get(label, Group())
        task = None
        if a.task and len(df):
            _s, name = task_rows(df, a.task)
            task = str(_s["task"].iloc[0]) if len(_s) else a.task
        items.append(
            PaperItem(
                label=label,
                kind=a.kind,
                title=a.title,
                sweep=a.sweep,
                status=status,
                have=have,
                missing=miss,
                docs=[doc(out, n, task, res) for n in g.markdown],
                figures=g.figures,
                files=[*g.csv, *g.other],
            )
        )
    return items


def _paper_groups(names: list[str], labels: list[str]) -> tuple[dict[str, Group], Group]:
    """The ``paper/`` files by label, and those no label claims."""
    grouped = group(names, labels)
    return {k: v for k, v in grouped.items() if k}, grouped[""]


def _written(task: dict) -> bool:
    """Whether the folder holds anything of a task's section (a table, figure, file, or training
    rows)."""
    keys = ("docs", "more_docs", "figures", "csv", "other", "training")
    return any(task.get(k) for k in keys)


def context(out: Path, df: pd.DataFrame, results_dir: Path) -> dict:
    """Everything the template needs."""
    from bench.report import renderers

    res = Resolver(df)
    top, paper_files = inventory(out)
    task_names = sorted(str(t) for t in df["task"].dropna().unique()) if len(df) else []
    groups = group(top, task_names)
    store_wide = groups[""]
    labels = list(renderers.paper_artifacts())
    paper, paper_rest = _paper_groups(paper_files, labels)
    wide_md = sorted(
        store_wide.markdown,
        key=lambda n: (n not in STORE_WIDE, STORE_WIDE.index(n) if n in STORE_WIDE else 0, n),
    )
    # a task the store has but the folder holds nothing of (e.g. only --paper wrote here): no
    # empty section for it
    task_views = [t for t in tasks(out, task_names, groups, res) if _written(t)]
    return {
        "head": header(df, results_dir),
        "tasks": task_views,
        # anything of the report itself (not --paper) in the folder; without it the page says so
        # instead of showing empty task and store-wide sections
        "report_written": bool(task_views or store_wide.all_files()),
        "paper_written": len(paper_files),
        "wide_docs": [doc(out, n, None, res) for n in wide_md],
        "wide_figures": store_wide.figures,
        "wide_files": [*store_wide.csv, *store_wide.other],
        "paper": paper_items(out, df, paper, res),
        "paper_rest": paper_rest,
        "paper_rest_docs": [doc(out, n, None, res) for n in paper_rest.markdown],
        "source_fields": SOURCE_FIELDS,
    }
