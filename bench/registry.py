"""Name -> implementation. Adding a method, task or evaluator is a new module plus one line here.

Nothing else in the tree dispatches on a method name.
"""

from __future__ import annotations

from baselines.ar import AR
from baselines.candi import CANDI
from baselines.duo import Duo
from baselines.flm import FLM
from baselines.mdlm import MDLM
from bench.data.arith import ArithTask
from bench.data.gsm8k import GSM8KTask
from bench.data.owt import OWTTask
from bench.data.sudoku import SudokuTask
from bench.data.toy import SortTask
from sflm.method import SFLM

METHODS = {
    cls.name: cls
    for cls in (
        AR,
        MDLM,
        CANDI,
        Duo,
        FLM,
        SFLM,
    )
}

TASKS = {
    cls.name: cls
    for cls in (
        SudokuTask,
        SortTask,
        ArithTask,
        GSM8KTask,
        OWTTask,
    )
}


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
