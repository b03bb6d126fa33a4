"""Typed options: the fields of every config section, method ``Options`` and task ``Options``.

An options class is a dataclass whose fields are declared with :func:`option`: the default
sits beside its help string and its validation rules, which :func:`build` checks when a YAML
mapping is turned into the dataclass (errors, :class:`ConfigError`, name the file and key; both
are importable from :mod:`bench.config` too). Rules: ``gt`` / ``ge`` / ``lt`` / ``le`` (bounds),
``choices``, ``nonempty``, and ``each_<rule>`` for every element of a list. A class may define
``validate()`` for rules across fields (raise :class:`ConfigError` naming the key).

Adding an option to a method or a task is one field::

    @dataclass
    class MyOptions(Options):
        steps: int = option(8, gt=0, help="refinement steps")
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from bench.usage import UsageError


class ConfigError(UsageError):
    """A bad configuration value; the message already names the file and key (a usage error:
    one line, exit status 2)."""


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


# --------------------------------------------------------------------------- building


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against the annotation ``tp``; returns the (possibly converted) value."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{where}: must be one of {list(get_args(tp))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return build(tp, value, where=where)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            # a scalar where a list is expected is accepted as a one-element grid
            value = [value]
        (inner, *_) = get_args(tp) or (Any,)
        return [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):
            try:  # YAML 1.1 reads "3e-4" as a string
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported type {_type_name(tp)}")


def _check_rules(value: Any, meta: dict, where: str) -> None:
    if value is None:
        return
    checks = [
        ("gt", lambda v, b: v > b, ">"),
        ("ge", lambda v, b: v >= b, ">="),
        ("lt", lambda v, b: v < b, "<"),
        ("le", lambda v, b: v <= b, "<="),
    ]
    for key, ok, sym in checks:
        if key in meta and not ok(value, meta[key]):
            raise ConfigError(f"{where}: must be {sym} {meta[key]}, got {value!r}")
        if f"each_{key}" in meta:
            for i, v in enumerate(value):
                if not ok(v, meta[f"each_{key}"]):
                    raise ConfigError(
                        f"{where}[{i}]: must be {sym} {meta[f'each_{key}']}, got {v!r}"
                    )
    if "choices" in meta and value not in meta["choices"]:
        raise ConfigError(f"{where}: must be one of {list(meta['choices'])}, got {value!r}")
    if "each_choices" in meta:
        for i, v in enumerate(value):
            if v not in meta["each_choices"]:
                raise ConfigError(
                    f"{where}[{i}]: must be one of {list(meta['each_choices'])}, got {v!r}"
                )
    if meta.get("nonempty") and len(value) == 0:
        raise ConfigError(f"{where}: must not be empty")


#: the attribute :func:`build` records the keys of its mapping in (read by :func:`is_set`)
_SET_KEYS = "_config_keys_set"


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def is_set(obj: Any, name: str) -> bool:
    """True when field ``name`` of config object ``obj`` holds a chosen value: the mapping
    :func:`build` made ``obj`` from names it, or its value is not the field's default (an object
    built or changed in code). Where it is not set, the planner may use the task's default for
    it (:meth:`bench.data.base.Task.sweep_defaults`)."""
    f = next((f for f in dataclasses.fields(obj) if f.name == name), None)
    if f is None:
        raise KeyError(f"{type(obj).__name__} has no field {name!r}")
    if name in getattr(obj, _SET_KEYS, ()):
        return True
    return getattr(obj, name) != _default(f)


def build(cls: type, data: dict | None, *, where: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``, overriding its defaults.

    Unknown keys, wrong types and out-of-range values raise :class:`ConfigError` naming
    ``where`` + the key (``where`` is usually ``"<file>: section"``). The object records which
    keys ``data`` gave (:func:`is_set`).
    """
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    sep = "." if where and not where.endswith(": ") else ""
    for key in data:
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{where}{sep}{key}: unknown key (known: {known})")
    kwargs = {}
    for name, f in fields.items():
        key_where = f"{where}{sep}{name}"
        if name in data:
            kwargs[name] = _coerce(data[name], hints[name], key_where)
            _check_rules(kwargs[name], f.metadata, key_where)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{key_where}: required key is missing")
    obj = cls(**kwargs)
    try:  # which keys the mapping gave (is_set): the planner fills the others from the task
        object.__setattr__(obj, _SET_KEYS, frozenset(data))
    except AttributeError:  # a slotted dataclass keeps no record: is_set compares with defaults
        pass
    check = getattr(obj, "validate", None)
    if callable(check):
        try:
            check()
        except ConfigError as e:
            raise ConfigError(f"{where}{sep}{e}") from None
    return obj
