"""The page's content: a header (store, sweeps, commits, cells done / failed, when written), one
section per task (its headline table and other tables, its figures, its training curves and
training runs), the store-wide tables, the paper items with their ``--list`` status, and every
other file of the folder.

Every table comes as data from the report file that holds it (its page copy,
:func:`bench.report.document.read_page_data`: values, and the store cells of each row and
entry), every figure from the folder (:mod:`~bench.report.html.files`); the store is read only
for the header, the paper items' status and the records of each number's cells
(:mod:`~bench.report.html.provenance`). A Markdown file without a page copy (written by another
tool) is linked, not shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from bench.report.document import read_page_data
from bench.report.html.files import Figure, Group, group, inventory
from bench.report.html.inline import Segment, inline
from bench.report.html.provenance import SOURCE_FIELDS, Provenance, Sources
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
    #: shown folded (one click opens it): the table says so (e.g. every pair of the
    #: differences, after the comparisons that matter)
    collapsed: bool = False
    caption: str = ""


@dataclass
class Block:
    """A page block: ``heading`` (``level``, ``inline``), ``paragraph`` (``inline``), ``list``
    (``items``: one inline list per bullet) or ``table`` (its :class:`TableView`)."""

    kind: str
    level: int = 0
    inline: list[Segment] = field(default_factory=list)
    items: list[list[Segment]] = field(default_factory=list)


@dataclass
class Doc:
    """One report file as page blocks (tables as :class:`TableView`); ``missing``: it has no
    page copy (the page links the file instead)."""

    name: str
    anchor: str
    blocks: list[tuple[Block, TableView | None]] = field(default_factory=list)
    missing: bool = False


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


def anchor(name: str) -> str:
    """An HTML id for a file or a task (letters, digits, ``-``, ``_``)."""
    return "f-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)


def doc(out: Path, name: str, res: Sources, keep=None) -> Doc:
    """Report file ``out/name`` as page blocks from its page copy, each table with the
    provenance of its rows and entries (``keep(header, row)``: rows to show; default all)."""
    d = Doc(name, anchor(name))
    blocks = read_page_data(out / name)
    if blocks is None:
        d.missing = True
        return d
    for b in blocks:
        kind = b.get("kind")
        if kind == "heading":
            d.blocks.append(
                (Block("heading", level=int(b["level"]), inline=inline(b["text"])), None)
            )
        elif kind == "paragraph":
            d.blocks.append((Block("paragraph", inline=inline(b["text"])), None))
        elif kind == "list":
            d.blocks.append((Block("list", items=[inline(x) for x in b["items"]]), None))
        elif kind == "table":
            d.blocks.append((Block("table"), _table_view(b, res, keep)))
    return d


def _table_view(t: dict, res: Sources, keep) -> TableView:
    header = list(t["header"])
    entry = res.entries(t)
    rows = []
    for i, r in enumerate(t["rows"]):
        if keep is not None and not keep(header, r):
            continue
        cells = [Cell(x, entry(i, h).summary(), bool(_NUMBER.match(x))) for h, x in zip(header, r)]
        rows.append((cells, res.row(t, i)))
    has = any(p.sources for _, p in rows)
    return TableView(header, rows, has, bool(t.get("folded")), str(t.get("caption", "")))


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


def tasks(out: Path, names: list[str], groups: dict[str, Group], res: Sources) -> list[dict]:
    """Per task: its Markdown (``<task>.md`` first: the headline table leads), figures (training
    curves last), CSV files, and its rows of ``training.md``."""
    result = []
    for t in names:
        g = groups[t]
        md = sorted(g.markdown, key=lambda n: (n != f"{t}.md", n))
        figs = sorted(g.figures, key=lambda f: (f.stem == f"{t}_training_curves", f.stem))
        training = None
        if "training.md" in groups[""].markdown:
            training = doc(out, "training.md", res, keep=_task_keep(t))
            training.blocks = [(b, tv) for b, tv in training.blocks if tv is not None]
            if not any(tv.rows for _, tv in training.blocks):
                training = None
        result.append(
            {
                "name": t,
                "anchor": anchor(t),
                "docs": [doc(out, n, res) for n in md[:1]],
                # after the figures: the differences and any other file of the task
                "more_docs": [doc(out, n, res) for n in md[1:]],
                "figures": figs,
                "csv": g.csv,
                "other": g.other,
                "training": training,
            }
        )
    return result


def paper_items(out: Path, df: pd.DataFrame, paper: dict[str, Group], res: Sources) -> list:
    """Every paper label (the registry's order) with its status and what it wrote."""
    from bench.report import renderers

    items = []
    for label, a in renderers.paper_artifacts().items():
        try:
            status, have, miss = a.status(df)
        except Exception as e:  # a plug-in's check that fails: shown, the page goes on
            status, have, miss = f"unknown ({type(e).__name__}: {e})", [], []
        g = paper.get(label, Group())
        items.append(
            PaperItem(
                label=label,
                kind=a.kind,
                title=a.title,
                sweep=a.sweep,
                status=status,
                have=have,
                missing=miss,
                docs=[doc(out, n, res) for n in g.markdown],
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

    res = Sources(df)
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
        "wide_docs": [doc(out, n, res) for n in wide_md],
        "wide_figures": store_wide.figures,
        "wide_files": [*store_wide.csv, *store_wide.other],
        "paper": paper_items(out, df, paper, res),
        "paper_rest": paper_rest,
        "paper_rest_docs": [doc(out, n, res) for n in paper_rest.markdown],
        "source_fields": SOURCE_FIELDS,
    }
