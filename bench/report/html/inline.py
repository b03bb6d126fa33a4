"""Inline formatting of the report's prose on the page: backtick code spans and
``[text](file)`` links as separate segments, every string kept as plain text (the templates
escape it). Tables are never text here: they come as data (:mod:`bench.report.document`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


@dataclass
class Segment:
    """A run of inline text: ``kind`` is ``text``, ``code`` or ``link`` (``href`` set)."""

    kind: str
    text: str
    href: str = ""


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
