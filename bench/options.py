"""Typed options: the fields of every config section, method ``Options`` and task ``Options``.

An options class is a dataclass whose fields are declared with :func:`option`: the default
sits beside its help string and its validation rules, which :func:`bench.config.build` checks
when a YAML mapping is turned into the dataclass (errors name the file and key). Rules:
``gt`` / ``ge`` / ``lt`` / ``le`` (bounds), ``choices``, ``nonempty``, and ``each_<rule>`` for
every element of a list. A class may define ``validate()`` for rules across fields (raise
:class:`bench.config.ConfigError` naming the key).

Adding an option to a method or a task is one field::

    @dataclass
    class MyOptions(Options):
        steps: int = option(8, gt=0, help="refinement steps")
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def option(
    default: Any = dataclasses.MISSING, *, factory: Any = None, help: str = "", **rules: Any
):
    """A dataclass field with a help string and validation rules in its metadata
    (``factory``: a default factory for mutable defaults; no default: a required key)."""
    meta = {"help": help, **rules}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Options:
    """Base of per-method and per-task options; each subclass adds its own fields."""
