"""What the report renders, in one place: every report item (:mod:`bench.report.items`).

The built-in items are imported plainly from the modules that define them (:data:`BUILTIN`);
those of installed packages come through the entry-point group ``sflm_bench.report``
(:func:`bench.plugins.discover`), each entry point a list of items. S-FLM's items (``sflm``:
its ``alpha_star.md`` section and paper tables) take that route too, declared in this project's
``pyproject.toml``, so the framework names no method package. A package adds a report item
with::

    [project.entry-points."sflm_bench.report"]
    mypkg = "mypkg.report:ITEMS"    # a list of Section / TaskSection / Artifact

Names (a section's, a task section's, a paper label) are unique across all packages; a clash,
an entry point that is not a list of items, or a flag two items declare differently is a
:class:`~bench.plugins.PluginError` naming the package (exit 2). Order: sections and task
sections run built-in first, then the packages' (by package and entry-point name); paper labels
follow the catalogue's :data:`bench.report.paper.catalogue.LABELS`, other labels after them.
"""

from __future__ import annotations

import argparse

from bench.plugins import BUILTIN as BUILTIN_PACKAGE
from bench.plugins import PluginError, discover
from bench.report import (
    cost,
    curves,
    differences,
    field,
    likelihood,
    passk,
    program,
    samplers,
    samples_view,
    tables,
    training_cost,
)
from bench.report.frontier import section as frontier
from bench.report.items import Artifact, ReportItem, Section, TaskSection
from bench.report.paper import catalogue as artifacts
from bench.report.speed import section as speed

#: the built-in items, in the order they run
BUILTIN: tuple[ReportItem, ...] = (
    *tables.ITEMS,  # training.md
    *training_cost.ITEMS,  # training_cost.md, tab-training-cost
    *curves.ITEMS,  # <task>_training_curves
    *cost.ITEMS,  # <task>_<metric>_vs_seconds (beside the generic <task>_<metric>_vs_nfe)
    *differences.ITEMS,  # <task>_differences.md / .csv, power.md
    *passk.ITEMS,  # <task>_passk.md / figure (cells with several draws per item only)
    *samplers.ITEMS,  # <task>_samplers.md (each method's best sampler against the paper's)
    *speed.ITEMS,  # <task>_speed.md / figures (rows with batch-1 seconds, latency_s, only)
    *samples_view.ITEMS,  # <task>_samples.md (the records behind the headline cells)
    *likelihood.ITEMS,  # likelihood.md (held-out NLL / PPL per model and dataset)
    *field.ITEMS,  # field_weights.md (the authors' published weights against their papers)
    *program.ITEMS,  # the program kind (GSM8K, its stand-in)
    *frontier.ITEMS,  # the frontier kind (OWT)
    *artifacts.ITEMS,  # the paper's labels
)

_loaded: dict[str, tuple[ReportItem, str]] | None = None  # name -> (item, package)


def _add(found: dict, item: ReportItem, package: str, entry: str) -> None:
    if item.name in found:
        if found[item.name][0] is item:  # the same item declared twice (e.g. built-in and entry)
            return
        raise PluginError(
            f"{entry}of package {package}: the report item name {item.name!r} is already taken "
            f"by {found[item.name][1]}"
        )
    found[item.name] = (item, package)


def _load() -> dict[str, tuple[ReportItem, str]]:
    global _loaded
    if _loaded is None:
        found: dict[str, tuple[ReportItem, str]] = {}
        for item in BUILTIN:
            _add(found, item, BUILTIN_PACKAGE, "built-in report item ")
        for p in discover("report"):
            objs = p.obj
            if not isinstance(objs, list | tuple) or not all(
                isinstance(x, ReportItem) for x in objs
            ):
                raise PluginError(
                    f"plug-in {p.name!r} of package {p.package}: {p.value} is not a list of "
                    "report items (bench.report.items: Section, TaskSection, Artifact)"
                )
            for item in objs:
                _add(found, item, p.package, f"plug-in {p.name!r} ")
        _flags(found)
        _loaded = found
    return _loaded


def _flags(found: dict) -> None:
    """Every option string is declared once, or identically by several items."""
    seen: dict[str, tuple] = {}
    for item, package in found.values():
        for f in item.flags:
            for opt in f.names:
                if opt in seen and seen[opt][0] != f:
                    raise PluginError(
                        f"report item {item.name!r} of package {package}: flag {opt} is already "
                        f"declared differently by {seen[opt][1]}"
                    )
                seen.setdefault(opt, (f, package))


def reload() -> None:
    """Forget the loaded items (tests that install a plug-in in-process)."""
    global _loaded
    _loaded = None


def items() -> list[ReportItem]:
    """Every item: the built-in ones, then the packages'."""
    return [item for item, _ in _load().values()]


def package(name: str) -> str:
    """The distribution that provides item ``name`` (``sflm-bench`` for the built-ins)."""
    return _load()[name][1]


def sections() -> list[Section]:
    """The store-wide sections, in the order they run."""
    return [x for x in items() if isinstance(x, Section)]


def task_sections(kind: str) -> list[TaskSection]:
    """What a task of ``kind`` adds; an unknown kind adds nothing (a store from newer code)."""
    return [x for x in items() if isinstance(x, TaskSection) and x.task_kind == kind]


def fraction_tasks(df) -> list[str]:
    """The tasks of ``df`` whose headline is a fraction (no task section of their kind says
    otherwise: the generic tables and figures serve them), in name order."""
    out = []
    for task in sorted(df["task"].dropna().unique()):
        kinds = df.loc[df["task"] == task, "task_kind"].dropna()
        kind = str(kinds.iloc[0]) if len(kinds) else "generic"
        if all(r.fraction for r in task_sections(kind)):
            out.append(str(task))
    return out


def paper_artifacts() -> dict[str, Artifact]:
    """label -> artifact, in the catalogue's order (:data:`bench.report.paper.catalogue.LABELS`),
    the labels it does not list after them in the order they register."""
    found = [x for x in items() if isinstance(x, Artifact)]
    rank = {label: i for i, label in enumerate(artifacts.LABELS)}
    found.sort(key=lambda a: rank.get(a.label, len(rank)))  # stable: the rest keep their order
    return {a.label: a for a in found}


def add_arguments(ap: argparse.ArgumentParser, paper: argparse._ArgumentGroup) -> None:
    """Every item's flags: sections' and task sections' on ``ap``, paper labels' in ``paper``
    (a flag several items declare identically is added once)."""
    added: set[str] = set()
    for item in items():
        target = paper if isinstance(item, Artifact) else ap
        for f in item.flags:
            if set(f.names) & added:
                continue
            try:
                f.add(target)
            except argparse.ArgumentError as e:
                raise PluginError(
                    f"report item {item.name!r} of package {package(item.name)}: {e}"
                ) from None
            added |= set(f.names)
