"""What the report renders, in one place: per task kind, and store-wide sections by label.

- Every task gets the generic ``<task>.md`` (:mod:`bench.report.tables`) and figures
  (:mod:`bench.report.figures`); :data:`TASK_RENDERERS` adds, per ``task_kind`` of its rows (a
  task class's ``report_kind``), sections of ``<task>.md`` and figures. A new kind of task is a
  module with its two functions plus one entry here.
- :class:`Section`: a store-wide artifact (``training.md``; a paper figure or table by its label)
  that writes its own files. Built-in ones are in :data:`SECTIONS`; a method package contributes
  its own through a module listed in :data:`PROVIDERS` that defines ``SECTIONS`` (a list of
  :class:`Section`; S-FLM's alpha* table lives in ``sflm/report.py``). Sections run in order:
  built-in, then providers'.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench import atomic
from bench.report.program import program_task_figure, program_task_markdown
from bench.report.tables import training_markdown


@dataclass(frozen=True)
class TaskRenderer:
    """One task kind's additions: Markdown appended to ``<task>.md``, and figures."""

    markdown: Callable[[str, pd.DataFrame], str]  # (task, store) -> text ("" for none)
    figures: Callable[[str, pd.DataFrame, Path], list[Path]]  # (task, store, out) -> files


#: task kinds whose headline is not a fraction (OWT's Gen. PPL): the generic tables (in %) and
#: figures are left out and ``<task>.md`` points to what their section writes
NOT_GENERIC: dict[str, str] = {"frontier": "{task}_frontier.md"}

#: task kind (the rows' ``task_kind``) -> what it adds to the generic tables and figures
TASK_RENDERERS: dict[str, list[TaskRenderer]] = {
    "generic": [],
    "program": [TaskRenderer(program_task_markdown, program_task_figure)],
    "frontier": [],  # OWT: its figures and tables are the bench.report.frontier section
}


@dataclass(frozen=True)
class Section:
    """A store-wide artifact: ``render(store, out, args)`` writes its files under ``out``
    (atomically) and returns their paths (none when the store has nothing for it);
    ``add_arguments`` adds its ``python -m bench.report`` flags."""

    label: str
    render: Callable[[pd.DataFrame, Path, argparse.Namespace], list[Path]]
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None


def _training(df: pd.DataFrame, out: Path, args) -> list[Path]:
    return [atomic.write_text(out / "training.md", training_markdown(df))]


#: built-in store-wide sections
SECTIONS: list[Section] = [Section("training", _training)]
#: modules (method packages' report hooks) whose ``SECTIONS`` the report adds after the built-in
PROVIDERS: tuple[str, ...] = (
    "sflm.report",
    "bench.report.frontier",
    "bench.report.training_cost",
    "bench.report.curves",
)


def sections() -> list[Section]:
    """Every section, built-in first; labels are unique."""
    out = list(SECTIONS)
    for name in PROVIDERS:
        out += list(importlib.import_module(name).SECTIONS)
    labels = [s.label for s in out]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ValueError(f"report sections: duplicate labels {dup}")
    return out


def task_renderers(kind: str) -> list[TaskRenderer]:
    """What a task of ``kind`` adds; an unknown kind adds nothing (a store from newer code)."""
    return TASK_RENDERERS.get(kind, [])
