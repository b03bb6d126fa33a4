"""The report's tables as data, and the documents that hold them.

A :class:`Table` is built once by the code that computes it: its values as shown (a pandas
DataFrame of strings), and per row (and, where narrower, per cell) the store cells it came from,
which of its columns are the paper's numbers, which are labels, a caption and the interval
method. A :class:`Doc` is one report file: Markdown prose lines and tables, in order.
The Markdown file, the table's CSV where one is written, and the HTML page are views of the same
objects: :meth:`Doc.write` writes ``<name>.md`` and, beside it, ``.page/<name>.md.json`` (the
blocks with every table's values and sources) that the page renders from
(:mod:`bench.report.html.page`). Nothing reads the Markdown back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench import atomic

#: the folder, beside a report file, holding the page's structured copy of it
PAGE_DATA = ".page"


def _text(v) -> str:
    return "" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)


def _md_cell(text: str) -> str:
    """A table entry as Markdown table text: a ``|`` escaped, a line break as ``<br>`` (what a
    model wrote may hold both)."""
    return text.replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>")


def ids(cells: Iterable) -> tuple[str, ...]:
    """Store cell ids, once each, in order (from a Series, a list, or several)."""
    out: dict[str, None] = {}
    for c in cells:
        if isinstance(c, str) and c:
            out[c] = None
    return tuple(out)


@dataclass(eq=False)
class Table:
    """One report table. ``frame``: the values as shown, one column per header; ``sources``:
    per row, the store cells behind it (empty for a row that is not a store cell's, e.g. the
    paper's); ``cells``: (row, column) -> cells, where one entry comes from fewer cells than its
    row (a subset column); ``paper``: columns holding the paper's reported numbers; ``keys``:
    columns that name the row (model, subset, NFE, ...), not values; ``computed``: what
    computed rows that come from no store cell (shown on hover instead of cells); ``folded``:
    the page shows it behind one click (the full list behind a short one)."""

    frame: pd.DataFrame
    sources: Sequence[tuple[str, ...]] = ()
    cells: dict[tuple[int, str], tuple[str, ...]] = field(default_factory=dict)
    paper: frozenset[str] = frozenset()
    keys: frozenset[str] = frozenset()
    computed: str = ""
    caption: str = ""
    ci_method: str = ""
    folded: bool = False

    def __post_init__(self):
        self.frame = self.frame.reset_index(drop=True)
        if not self.sources:
            self.sources = [()] * len(self.frame)
        if len(self.sources) != len(self.frame):
            raise ValueError(f"{len(self.sources)} source lists for {len(self.frame)} rows")
        self.sources = [tuple(s) for s in self.sources]
        self.paper, self.keys = frozenset(self.paper), frozenset(self.keys)

    @property
    def header(self) -> list[str]:
        return [str(c) for c in self.frame.columns]

    def rows(self) -> list[list[str]]:
        return [[_text(v) for v in r] for r in self.frame.itertuples(index=False)]

    def markdown(self) -> str:
        head = self.header
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(map(_md_cell, r)) + " |" for r in self.rows()]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "kind": "table",
            "header": self.header,
            "rows": self.rows(),
            "sources": [list(s) for s in self.sources],
            "cells": [[i, c, list(v)] for (i, c), v in sorted(self.cells.items())],
            "paper": sorted(self.paper),
            "keys": sorted(self.keys),
            "computed": self.computed,
            "caption": self.caption,
            "ci_method": self.ci_method,
            "folded": self.folded,
        }


def by_key(frame: pd.DataFrame, rows: pd.DataFrame, on: Sequence[str], *, cell_col: str = ""):
    """(per row of ``frame``, the cell ids of ``rows`` whose ``on`` columns equal the row's;
    with ``cell_col``, also (row, value of ``rows[cell_col]`` as a column of ``frame``) -> ids):
    the sources of a table built by grouping or pivoting ``rows``."""
    key = [frame[c].astype(str).tolist() for c in on]
    groups = {
        tuple(str(x) for x in (k if isinstance(k, tuple) else (k,))): g
        for k, g in rows.groupby(list(on), sort=False, dropna=False)
    }
    sources, cells = [], {}
    for i, k in enumerate(zip(*key)):
        g = groups.get(tuple(k))
        sources.append(ids(g["cell_id"]) if g is not None else ())
        if g is not None and cell_col:
            for col, gc in g.groupby(cell_col, sort=False):
                if str(col) in frame.columns:
                    cells[(i, str(col))] = ids(gc["cell_id"])
    return sources, cells


class Doc:
    """One report file: Markdown prose lines (``# heading``, ``- item``, paragraphs, blank lines)
    and :class:`Table` objects, in order. ``doc += [...]`` appends parts (or another Doc's)."""

    def __init__(self, parts: Iterable = ()):
        self.parts: list = []
        self += parts

    def __iadd__(self, more):
        if isinstance(more, Doc):
            more = more.parts
        elif isinstance(more, (str, Table)):
            more = [more]
        for p in more:
            if isinstance(p, str):
                self.parts.extend(p.splitlines() or [""])
            else:
                self.parts.append(p)
        return self

    def append(self, part) -> None:
        self += [part]

    def markdown(self) -> str:
        text = "\n".join(p.markdown() if isinstance(p, Table) else p for p in self.parts)
        return text if text.endswith("\n") else text + "\n"

    __str__ = markdown

    def __contains__(self, text: str) -> bool:
        return text in self.markdown()

    def blocks(self) -> list[dict]:
        """The page's blocks: ``heading`` (level, text), ``paragraph`` (text), ``list`` (items),
        ``table`` (:meth:`Table.to_json`); prose as the lines say it, tables as built."""
        out: list[dict] = []
        para: list[str] = []

        def flush():
            if para:
                out.append({"kind": "paragraph", "text": " ".join(para)})
                para.clear()

        for p in self.parts:
            if isinstance(p, Table):
                flush()
                out.append(p.to_json())
                continue
            s = p.strip()
            if not s:
                flush()
            elif s.startswith("#") and s.lstrip("#").startswith(" "):
                flush()
                level = len(s) - len(s.lstrip("#"))
                out.append({"kind": "heading", "level": level, "text": s[level:].strip()})
            elif s.startswith("- "):
                flush()
                if not out or out[-1]["kind"] != "list":
                    out.append({"kind": "list", "items": []})
                out[-1]["items"].append(s[2:])
            elif p.startswith("  ") and out and out[-1]["kind"] == "list" and not para:
                out[-1]["items"][-1] += " " + s  # a bullet's continuation line
            else:
                para.append(s)
        flush()
        return out

    def write(self, path: Path) -> Path:
        """``path`` (the Markdown) and its page data ``.page/<name>.json`` beside it, each
        atomically; returns ``path``."""
        path = Path(path)
        data = {"format": "sflm-bench-report-doc", "version": 1, "blocks": self.blocks()}
        side = page_data_path(path)
        side.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(side, json.dumps(data, separators=(",", ":")))
        return atomic.write_text(path, self.markdown())


def entry_cells(table: dict):
    """For a table's page data (:meth:`Table.to_json`): ``(row, column) -> store cell ids`` of
    that entry: none for a label or a paper column, else the entry's own cells, else its row's."""
    narrow = {(i, c): tuple(v) for i, c, v in table["cells"]}
    skip = set(table["keys"]) | set(table["paper"])

    def of(i: int, column: str) -> tuple[str, ...]:
        if column in skip:
            return ()
        return narrow.get((i, column), tuple(table["sources"][i]))

    return of


def page_data_path(path: Path) -> Path:
    """Where :meth:`Doc.write` puts the page's copy of report file ``path``."""
    path = Path(path)
    return path.parent / PAGE_DATA / f"{path.name}.json"


def read_page_data(path: Path) -> list[dict] | None:
    """The blocks :meth:`Doc.write` stored for report file ``path``; None when there are none
    (a file another tool wrote) or they are unreadable."""
    p = page_data_path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != "sflm-bench-report-doc":
        return None
    return data.get("blocks")
