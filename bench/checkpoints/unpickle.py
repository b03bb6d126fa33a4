"""Loading a reference checkpoint without running code from it.

The released files are Lightning checkpoints (a zip-format ``torch.save``) whose
``hyper_parameters`` pickle an omegaconf ``DictConfig`` and, for TinyGSM, a tokenizer object of
the reference harness's own ``dataloader`` module. ``torch.load(weights_only=True)`` refuses
them and a plain unpickle imports (and may run) whatever the pickle names. Here the unpickler
resolves an allow-list of globals (tensor rebuilding, containers, numpy arrays) and turns every
other global into an inert :class:`Placeholder` that records its name, constructor arguments and
state and never calls anything. :func:`plain` then reads a config out of such placeholders
(an omegaconf node keeps its value in ``_val`` and a container its children in ``_content``).
"""

from __future__ import annotations

import collections
import pickle
from typing import Any

#: globals resolved for real: torch's own weights-only allow-list (tensor rebuilding, storages,
#: dtypes, Parameter, OrderedDict), plain containers and numpy's array reconstruction.
#: Everything else becomes a placeholder; nothing that could run code or open files resolves.
_BUILTINS = ("dict", "list", "tuple", "set", "frozenset", "int", "float", "complex", "bool",
             "str", "bytes", "bytearray", "slice")  # fmt: skip
_NUMPY = ("_reconstruct", "scalar", "ndarray", "dtype")


def _allowed_globals() -> dict[str, Any]:
    from torch import _weights_only_unpickler as wo  # torch's list of safe globals

    allowed = dict(wo._get_allowed_globals())
    import builtins

    allowed.update({f"builtins.{n}": getattr(builtins, n) for n in _BUILTINS})
    allowed["collections.OrderedDict"] = collections.OrderedDict
    return allowed


_ALLOWED: dict[str, Any] | None = None


class Placeholder:
    """An object of a class the unpickler did not resolve: inert, keeps what the pickle gave it.

    ``_qualname``: ``module.Name`` of the original class; ``_args`` / ``_kwargs``: constructor
    arguments; ``_state``: what ``__setstate__`` received; ``_items`` / ``_dict_items``: what the
    pickle appended or set as items."""

    _qualname = "?"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args, self._kwargs, self._state = args, kwargs, None
        self._items: list = []
        self._dict_items: dict = {}

    def __setstate__(self, state: Any) -> None:
        self._state = state

    # list / dict protocol the pickle may use on an object of an unknown class
    def append(self, item: Any) -> None:
        self._items.append(item)

    def extend(self, items: Any) -> None:
        self._items.extend(items)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._dict_items[key] = value

    def __repr__(self) -> str:
        return f"<placeholder {self._qualname}>"


_placeholder_classes: dict[str, type] = {}


def placeholder_class(module: str, name: str) -> type:
    qual = f"{module}.{name}"
    cls = _placeholder_classes.get(qual)
    if cls is None:
        cls = type(name, (Placeholder,), {"_qualname": qual, "__module__": "placeholder"})
        _placeholder_classes[qual] = cls
    return cls


class _Func(Placeholder):
    """A function of a class the unpickler did not resolve (``copyreg`` reconstructors, a
    ``__reduce__`` that names ``os.system``...): calling it builds a placeholder, runs nothing."""

    def __call__(self, *args: Any, **kwargs: Any) -> Placeholder:
        obj = placeholder_class(_CALL, self._qualname)()
        obj._args, obj._kwargs = args, kwargs
        return obj


class Unpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose ``find_class`` resolves only the allow-list."""

    #: globals seen that were replaced by placeholders (module.name), for ``inspect``
    replaced: set[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replaced = set()

    def find_class(self, module: str, name: str) -> Any:
        global _ALLOWED
        if _ALLOWED is None:
            _ALLOWED = _allowed_globals()
        if module == "__builtin__":
            module = "builtins"
        qual = f"{module}.{name}"
        if qual in _ALLOWED:
            return _ALLOWED[qual]
        if module.split(".")[0] == "numpy" and (name in _NUMPY or name.endswith("DType")):
            return super().find_class(module, name)  # array reconstruction only
        if qual == "copyreg._reconstructor":
            return _reconstructor
        self.replaced.add(f"{module}.{name}")
        if name[:1].isupper():  # a class: instances carry their state
            return placeholder_class(module, name)
        fn = _Func()
        fn._qualname = f"{module}.{name}"
        return fn


#: the module name of the placeholder a call of an unresolved function builds (:class:`_Func`)
_CALL = "call"


def foreign(obj: Any) -> str | None:
    """The global outside the allow-list that ``obj`` stands for, in words (``a call of
    os.system, a global outside the allow-list (never run)``), or None for anything else. Takes
    a placeholder, an unresolved function, or what :func:`plain` made of a placeholder (a dict
    with ``__class__``)."""
    if isinstance(obj, _Func):
        return f"the function {obj._qualname}, a global outside the allow-list (never called)"
    if isinstance(obj, Placeholder):
        qual = obj._qualname
    elif isinstance(obj, dict) and isinstance(obj.get("__class__"), str):
        qual = obj["__class__"]
    else:
        return None
    if qual.startswith(_CALL + "."):
        return f"a call of {qual[len(_CALL) + 1 :]}, a global outside the allow-list (never run)"
    return f"a {qual} object, a class outside the allow-list (never loaded)"


def what(obj: Any) -> str:
    """``obj`` in words for an error line: :func:`foreign`'s words for a placeholder, else its
    type (``a str``)."""
    return foreign(obj) or f"a {type(obj).__name__}"


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    """``copyreg._reconstructor`` for the allowed classes only (object.__new__ of a placeholder
    or a plain container); anything else becomes a placeholder."""
    if isinstance(cls, type) and issubclass(cls, Placeholder):
        return cls()
    if base is object and isinstance(cls, type) and cls in (dict, list, collections.OrderedDict):
        return cls()
    return placeholder_class("copyreg", "_reconstructor")()


class pickle_module:  # noqa: N801 - passed to torch.load as a module
    """What ``torch.load(..., pickle_module=...)`` needs: ``Unpickler`` and ``load``."""

    Unpickler = Unpickler
    __name__ = "bench.checkpoints.unpickle.pickle_module"

    @staticmethod
    def load(f, **kwargs):  # pragma: no cover - torch uses Unpickler directly for zip files
        return Unpickler(f, **kwargs).load()


def plain(obj: Any, depth: int = 0) -> Any:
    """A placeholder-laden object as plain Python: an omegaconf ``DictConfig`` / ``ListConfig``
    (pickled with its node state, or as a call of its constructor on the content) becomes a dict
    / list, a value node its value, an interpolation string stays a string (never resolved).
    Other placeholders become ``{"__class__": name, ...state}``."""
    if depth > 50:
        return None
    if isinstance(obj, Placeholder):
        state = obj._state
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}  # (dict state, slot state)
        if isinstance(state, dict):
            if "_content" in state:
                return plain(state["_content"], depth + 1)
            if "_val" in state:
                return plain(state["_val"], depth + 1)
            return {
                "__class__": obj._qualname,
                **{k: plain(v, depth + 1) for k, v in state.items() if not str(k).startswith("_")},
            }
        if (
            state is None
            and obj._qualname.startswith("omegaconf.")
            and obj._args
            and isinstance(obj._args[0], dict | list)
        ):  # DictConfig(<content>) / ListConfig(<content>): a config built by its constructor
            return plain(obj._args[0], depth + 1)  # (bench.checkpoints.export writes these)
        if obj._items:
            return [plain(v, depth + 1) for v in obj._items]
        if obj._dict_items:
            return {k: plain(v, depth + 1) for k, v in obj._dict_items.items()}
        return {"__class__": obj._qualname}
    if isinstance(obj, dict):
        return {k: plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v, depth + 1) for v in obj]
    return obj
