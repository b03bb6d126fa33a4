"""The reference families the registered methods read (each method's ``reference`` declaration,
:mod:`bench.reference_format`), and which family a file is.

Built from the registry on first use (the built-in methods and those of installed packages), so
a plug-in method that declares ``reference`` imports, converts and exports like a built-in one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.checkpoints.source import CheckpointError


@dataclass(frozen=True)
class Entry:
    """A family, the method whose models its files hold, and that method's format."""

    method: str
    format: Any  # bench.reference_format.ReferenceFormat
    family: Any  # bench.reference_format.ReferenceFamily


def entries() -> dict[str, Entry]:
    """family name -> :class:`Entry`, in registry order (methods, then their families). Two
    methods claiming one family name is a :class:`CheckpointError` naming both."""
    from bench import registry

    out: dict[str, Entry] = {}
    for name in registry.METHODS:
        fmt = getattr(registry.METHODS[name], "reference", None)
        for fam in getattr(fmt, "families", ()) or ():
            if fam.name in out:
                raise CheckpointError(
                    f"reference family {fam.name!r} is declared by both {out[fam.name].method!r} "
                    f"and {name!r} (Method.reference)"
                )
            out[fam.name] = Entry(name, fmt, fam)
    return out


def names() -> tuple[str, ...]:
    """Every family name the registered methods read (what ``--family`` accepts)."""
    return tuple(entries())


def entry(family: str) -> Entry:
    """The :class:`Entry` of ``family``; an unknown name is a :class:`CheckpointError`."""
    known = entries()
    if family not in known:
        raise CheckpointError(f"unknown family {family!r} (known: {', '.join(known)})")
    return known[family]


def reference_format(method: str, where: str = "") -> Any:
    """Method ``method``'s reference format; a method that declares none is a
    :class:`CheckpointError` (``where``: the file or folder the error names)."""
    from bench import registry

    fmt = (
        getattr(registry.METHODS[method], "reference", None) if method in registry.METHODS else None
    )
    if fmt is None or not getattr(fmt, "families", ()):
        raise CheckpointError(
            f"{where + ': ' if where else ''}method {method!r} declares no reference checkpoint "
            "format (Method.reference)"
        )
    return fmt


def pad_is_class(method: str) -> bool:
    """True when the reference's ``[PAD]`` is one of ``method``'s classes (its format's
    ``pad_is_class``; False for a method without a reference format)."""
    from bench import registry

    if method not in registry.METHODS:
        return False
    fmt = getattr(registry.METHODS[method], "reference", None)
    return bool(getattr(fmt, "pad_is_class", False))


def _best_fits(keys: set[str]) -> list[Entry]:
    """The families a file with ``state_dict`` keys ``keys`` fits best: it has all their
    ``requires`` keys and none of their ``excludes``, and they require the most keys."""
    fits = [
        e
        for e in entries().values()
        if set(e.family.requires) <= keys and not set(e.family.excludes) & keys
    ]
    most = max((len(e.family.requires) for e in fits), default=0)
    return [e for e in fits if len(e.family.requires) == most]


def detect(keys: set[str], config: Mapping, repo: str) -> str:
    """The family of a file with ``state_dict`` keys ``keys`` and config ``config`` written under
    config schema ``repo``: the one family it fits best (:func:`_best_fits`), else the one of
    those whose ``algo_names`` hold ``config.algo.name``, else the one whose ``schemas`` hold
    ``repo``; ``""`` when that leaves none or several (the caller asks for ``--family``)."""
    group = _best_fits(keys)
    if len(group) == 1:
        return group[0].family.name
    algo = config.get("algo") if isinstance(config, Mapping) else None
    name = algo.get("name") if isinstance(algo, Mapping) else None
    if isinstance(name, str):
        named = [e for e in group if name in e.family.algo_names]
        if len(named) == 1:
            return named[0].family.name
    schema = [e for e in group if repo in e.family.schemas]
    if len(schema) == 1:
        return schema[0].family.name
    return ""


def ambiguous(keys: set[str]) -> list[str]:
    """The families a file with these keys fits equally well (for the error asking for
    ``--family``); empty when it fits none."""
    return [e.family.name for e in _best_fits(keys)]
