"""The report's Markdown read back as blocks the page renders: headings, paragraphs, bullet lists
and tables, with inline code spans and links as separate segments.

The report writes a small, fixed subset of Markdown (``bench.report.common.md_table``, ``#``
headings, paragraphs, ``- `` bullets, backtick code, ``[text](file)`` links), so this reader
keeps every string as plain text: the page's templates escape it (no raw HTML from a store
string ever reaches the page). Table cells are the strings the Markdown holds, not recomputed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


@dataclass
class Segment:
    """A run of inline text: ``kind`` is ``text``, ``code`` or ``link`` (``href`` set)."""

    kind: str
    text: str
    href: str = ""


@dataclass
class Table:
    """A Markdown table: its header and rows of cell strings (as many cells as the header)."""

    header: list[str]
    rows: list[list[str]]


@dataclass
class Block:
    """``kind``: ``heading`` (``level``, ``inline``), ``paragraph`` (``inline``), ``list``
    (``items``: one inline list per bullet) or ``table`` (``table``)."""

    kind: str
    level: int = 0
    inline: list[Segment] = field(default_factory=list)
    items: list[list[Segment]] = field(default_factory=list)
    table: Table | None = None

    @property
    def text(self) -> str:
        """The block's inline text without markup (headings: the title)."""
        return "".join(s.text for s in self.inline)


def inline(text: str) -> list[Segment]:
    """``text`` split into plain, ``code`` and ``[link](href)`` segments (backticks that do not
    pair stay text)."""
    out: list[Segment] = []
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: the last one is text
        parts = [*parts[:-2], parts[-2] + "`" + parts[-1]]
    for i, part in enumerate(parts):
        if not part:
            continue
        if i % 2:
            out.append(Segment("code", part))
            continue
        pos = 0
        for m in _LINK.finditer(part):
            if m.start() > pos:
                out.append(Segment("text", part[pos : m.start()]))
            out.append(Segment("link", m.group(1), m.group(2)))
            pos = m.end()
        if pos < len(part):
            out.append(Segment("text", part[pos:]))
    return out


def _cells(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return [c.strip() for c in s.split("|")]


def _is_rule(line: str) -> bool:
    return bool(re.fullmatch(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?", line.strip()))


def _table(lines: list[str]) -> Table:
    header = _cells(lines[0])
    rows = []
    for ln in lines[1:]:
        if _is_rule(ln):
            continue
        cells = _cells(ln)
        if len(cells) > len(header):  # a "|" inside a cell: keep the extra text in the last one
            cells = cells[: len(header) - 1] + [" | ".join(cells[len(header) - 1 :])]
        rows.append(cells + [""] * (len(header) - len(cells)))
    return Table(header, rows)


def parse(text: str) -> list[Block]:
    """The blocks of one Markdown file of the report, in order."""
    blocks: list[Block] = []
    para: list[str] = []
    lines = text.splitlines()

    def flush() -> None:
        if para:
            blocks.append(Block("paragraph", inline=inline(" ".join(para))))
            para.clear()

    i = 0
    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        if not s:
            flush()
            i += 1
        elif m := re.match(r"(#{1,6})\s+(.*)", s):
            flush()
            blocks.append(Block("heading", level=len(m.group(1)), inline=inline(m.group(2))))
            i += 1
        elif s.startswith("|"):
            flush()
            j = i
            while j < len(lines) and lines[j].strip().startswith("|"):
                j += 1
            blocks.append(Block("table", table=_table(lines[i:j])))
            i = j
        elif s.startswith("- "):
            flush()
            items = []
            while i < len(lines) and lines[i].strip().startswith("- "):
                item = [lines[i].strip()[2:]]
                i += 1
                while (  # a bullet's continuation lines
                    i < len(lines)
                    and lines[i].startswith("  ")
                    and lines[i].strip()
                    and not lines[i].strip().startswith(("- ", "|", "#"))
                ):
                    item.append(lines[i].strip())
                    i += 1
                items.append(inline(" ".join(item)))
            blocks.append(Block("list", items=items))
        else:
            para.append(s)
            i += 1
    flush()
    return blocks
