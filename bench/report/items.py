"""Report items: everything ``python -m bench.report`` writes, in one protocol.

A :class:`ReportItem` has a unique ``name`` and the command-line flags it reads (``flags``: each a
:class:`Flag`, added to ``python -m bench.report``'s parser). Three kinds, by where they run:

- :class:`Section`: store-wide, written on every report run into the output folder
  (``training.md``, ``training_cost.md``, training curves, S-FLM's ``alpha_star.md``);
- :class:`TaskSection`: what a task kind (the rows' ``task_kind``, a task class's
  ``report_kind``) adds to ``<task>.md`` and to the task's figures; ``fraction=False`` says the
  kind's headline is not a fraction (OWT's Gen. PPL), so the generic tables (in %) and figures
  are left out and the kind writes the task's page itself;
- :class:`Artifact`: one of the paper's tables or figures by its label (``fig-x`` for the paper's
  ``fig:x``), written by ``--paper`` / ``--figure LABEL`` into ``<out>/paper`` and listed with
  what it needs by ``--list``.

Modules define items in lists (``ITEMS``); :mod:`bench.report.renderers` collects the built-in
ones and those of installed packages (entry-point group ``sflm_bench.report``, each entry point a
list of items; :mod:`bench.plugins`). Render callables take the item first, so one function can
serve several items (``render(item, store, out, args) -> files written``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Flag:
    """A command-line flag: the arguments of ``ArgumentParser.add_argument``."""

    names: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def add(self, parser) -> None:
        parser.add_argument(*self.names, **self.kwargs)


def cli_flag(*names: str, **kwargs: Any) -> Flag:
    """``cli_flag("--mc-trials", type=int, default=None, help=...)``: one flag of an item."""
    return Flag(tuple(names), dict(kwargs))


@dataclass(frozen=True, kw_only=True)
class ReportItem:
    """What every report item has: a unique name and the flags it reads from ``args``."""

    name: str
    flags: tuple[Flag, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Section(ReportItem):
    """Store-wide, on every report run: ``render(section, store, out, args)`` writes its files
    under ``out`` (atomically) and returns their paths (none when the store has nothing for it)."""

    render: Callable[[Section, pd.DataFrame, Path, argparse.Namespace], list[Path]]


def _no_markdown(task: str, df: pd.DataFrame, args=None) -> str:
    return ""


def _no_figures(task: str, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    return []


@dataclass(frozen=True, kw_only=True)
class TaskSection(ReportItem):
    """What every task of kind ``task_kind`` adds: ``markdown(task, rows, args)`` is appended to
    ``<task>.md``, ``figures(task, rows, out, args)`` writes files (``rows``: every row of the
    store with its report columns). ``fraction=False``: the headline is not a fraction; the
    generic tables and figures are left out and ``<task>.md`` is ``# <task>`` plus the
    markdown."""

    task_kind: str
    markdown: Callable[..., str] = _no_markdown
    figures: Callable[..., list[Path]] = _no_figures
    fraction: bool = True


def no_store(a: Artifact, df: pd.DataFrame) -> tuple[list[str], list[str]]:
    """``needs`` of an artifact that needs no store."""
    return [], []


@dataclass(frozen=True, kw_only=True)
class Artifact(ReportItem):
    """One of the paper's tables or figures; ``name`` is its label (``fig-x`` for ``fig:x``),
    which names its files. ``render(artifact, store, out, args) -> files``;
    ``needs(artifact, store) -> (present, missing)`` descriptions (both empty: needs no store).
    ``task``: the paper's task (its CPU stand-in is accepted); ``explicit_only``: written only
    when asked for by label (``--figure``), never by ``--paper``."""

    kind: str  # "figure" | "table"
    title: str
    sweep: str
    render: Callable[[Artifact, pd.DataFrame, Path, argparse.Namespace], list[Path]]
    needs: Callable[[Artifact, pd.DataFrame], tuple[list[str], list[str]]] = no_store
    task: str = ""
    explicit_only: bool = False

    @property
    def label(self) -> str:
        return self.name

    def status(self, df: pd.DataFrame) -> tuple[str, list[str], list[str]]:
        """(complete | partial | missing | no store needed, present, missing)."""
        have, miss = self.needs(self, df)
        if not have and not miss:
            return "no store needed", have, miss
        if not have:
            return "missing", have, miss
        return ("complete" if not miss else "partial"), have, miss
