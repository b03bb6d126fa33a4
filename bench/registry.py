"""Name -> implementation: the built-in methods and tasks (one line each), plus those installed
packages add through entry points (:mod:`bench.plugins`; docs/adding-a-method.md).

Nothing else in the tree dispatches on a method name.
"""

from __future__ import annotations

from baselines.ar import AR
from baselines.candi import CANDI
from baselines.duo import Duo
from baselines.flm import FLM
from baselines.mdlm import MDLM
from bench.data.owt.task import OWTTask
from bench.data.program.arith import ArithTask
from bench.data.program.gsm8k import GSM8KTask
from bench.data.sudoku.task import SudokuTask
from bench.data.toy import SortTask
from bench.plugins import Plugin, PluginError, Registry
from sflm.method import SFLM


def _is_subclass(base_path: str):
    def check(p: Plugin) -> None:
        mod, _, attr = base_path.rpartition(".")
        import importlib

        base = getattr(importlib.import_module(mod), attr)
        if not (isinstance(p.obj, type) and issubclass(p.obj, base)):
            raise PluginError(
                f"plug-in {p.name!r} of package {p.package}: {p.value} is not a {attr} subclass"
            )

    return check


#: method name -> class: the six built-ins, then those of installed packages (entry-point group
#: ``sflm_bench.methods``; bench.plugins)
METHODS = Registry(
    "methods",
    {cls.name: cls for cls in (AR, MDLM, CANDI, Duo, FLM, SFLM)},
    name_of=lambda cls: getattr(cls, "name", None),
    check=_is_subclass("bench.method.Method"),
)

#: task name -> class (group ``sflm_bench.tasks``)
TASKS = Registry(
    "tasks",
    {cls.name: cls for cls in (SudokuTask, SortTask, ArithTask, GSM8KTask, OWTTask)},
    name_of=lambda cls: getattr(cls, "name", None),
    check=_is_subclass("bench.data.base.Task"),
)


def make_task(cfg):
    """Instantiate the task named by ``cfg.name`` (a :class:`bench.config.TaskConfig`)."""
    return TASKS[cfg.name](cfg)


def make_method(name: str, options, task, vocab_size: int | None = None):
    """Instantiate method ``name`` for ``task``'s vocabulary and length. ``options``: its
    ``Options`` object, or the canonical dict of one a planned cell carries (validated when the
    sweep was planned, :mod:`bench.plan`; not validated again here). ``vocab_size``: the model's
    classes when they exceed the task's (an imported checkpoint whose [PAD] is a class)."""
    cls = METHODS[name]
    if isinstance(options, dict):
        options = cls.Options(**options)
    return cls(options, vocab_size or task.vocab_size, task.seq_len)


def listing() -> str:
    """What ``python -m bench.sweep --list`` prints: every method and task with the package that
    provides it, and the report plug-ins of installed packages."""
    from bench.plugins import discover

    lines = ["methods:"]
    for name in sorted(METHODS):
        cls = METHODS[name]
        decs = ", ".join(cls.decodings)
        lines.append(f"  {name:<10} {METHODS.package(name):<22} decodings: {decs}")
    lines.append("tasks:")
    for name in sorted(TASKS):
        cls = TASKS[name]
        lines.append(f"  {name:<14} {TASKS.package(name):<18} headline: {cls.headline_metric}")
    items = discover("report")
    lines.append("report plug-ins:" + ("" if items else " none"))
    for p in items:
        n = len(p.obj) if isinstance(p.obj, list | tuple) else 1
        lines.append(f"  {p.name:<14} {p.package:<18} {n} item(s) ({p.value})")
    return "\n".join(lines)
