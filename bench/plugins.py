"""Plug-ins: methods, tasks and report items that installed packages add through Python entry
points, on equal terms with the built-in ones.

A package declares them in its ``pyproject.toml``::

    [project.entry-points."sflm_bench.methods"]
    mymethod = "mypkg.method:MyMethod"        # a bench.method.Method subclass, name = "mymethod"

    [project.entry-points."sflm_bench.tasks"]
    mytask = "mypkg.task:MyTask"              # a bench.data.base.Task subclass

    [project.entry-points."sflm_bench.evaluators"]
    mymetric = "mypkg.score"                  # a module: CLI_HELP, add_arguments(p), run(args)

    [project.entry-points."sflm_bench.report"]
    mypkg = "mypkg.report:ITEMS"              # a list of report items (bench.report.items)

and, once installed (``pip install -e .``), its method trains, samples, scores and reports like
the built-in ones, with no edit to this tree (docs/adding-a-method.md). The registries
(:mod:`bench.registry`) read the groups on first use. A plug-in that fails to import, or a name
that two packages (or a package and a built-in) both claim, is a :class:`PluginError`: one line
naming the package, exit 2 from every CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from bench.config import ConfigError

#: the entry-point group of each kind of plug-in
GROUPS = {
    "methods": "sflm_bench.methods",
    "tasks": "sflm_bench.tasks",
    "evaluators": "sflm_bench.evaluators",
    "report": "sflm_bench.report",
    "cell_kinds": "sflm_bench.cell_kinds",
}
#: the distribution name the built-in entries are reported under
BUILTIN = "sflm-bench"


class PluginError(ConfigError):
    """A plug-in that cannot be used: the message names the package and the entry point."""


@dataclass(frozen=True)
class Plugin:
    """One loaded entry point."""

    name: str
    obj: Any
    package: str  # distribution that declared it
    value: str  # "module:attr"


def _package(ep) -> str:
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) or ep.value.split(":")[0].split(".")[0]


def discover(kind: str) -> list[Plugin]:
    """Load every entry point of group ``GROUPS[kind]`` (in a stable order: package, name)."""
    from importlib.metadata import entry_points

    out = []
    eps = sorted(entry_points(group=GROUPS[kind]), key=lambda e: (_package(e), e.name))
    for ep in eps:
        pkg = _package(ep)
        try:
            obj = ep.load()
        except Exception as e:  # anything a broken plug-in raises while importing
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise PluginError(
                f"plug-in {ep.name!r} of package {pkg} ({GROUPS[kind]} = {ep.value}) failed to "
                f"import: {type(e).__name__}{': ' + first if first else ''}"
            ) from None
        out.append(Plugin(ep.name, obj, pkg, ep.value))
    return out


def _resolve(spec: Any) -> Any:
    """A built-in given by import path (``"module:attr"`` / ``"module"``), imported; else as is."""
    if not isinstance(spec, str):
        return spec
    import importlib

    mod, _, attr = spec.partition(":")
    obj = importlib.import_module(mod)
    return getattr(obj, attr) if attr else obj


class Registry(Mapping):
    """name -> implementation: the built-ins plus the plug-ins of one group, loaded on first use.

    ``builtins``: name -> object, or its import path (``"package.module:attr"``, or
    ``"package.module"`` for a module), imported on first use like a plug-in (so a registry is
    cheap to import); ``name_of(obj)``: the name an object declares (a method's or task's
    ``name``), which must equal its entry point's name; ``check(plugin)`` raises
    :class:`PluginError` for an object of the wrong kind."""

    def __init__(
        self,
        kind: str,
        builtins: dict[str, Any],
        name_of: Callable[[Any], str] | None = None,
        check: Callable[[Plugin], None] | None = None,
    ):
        self.kind = kind
        self._builtins = dict(builtins)
        self._name_of = name_of
        self._check = check
        self._items: dict[str, Any] | None = None
        self._source: dict[str, str] = {}

    def _load(self) -> dict[str, Any]:
        if self._items is None:
            items = {n: _resolve(v) for n, v in self._builtins.items()}
            source = {n: BUILTIN for n in items}
            for p in discover(self.kind):
                if self._check is not None:
                    self._check(p)
                declared = self._name_of(p.obj) if self._name_of else p.name
                if declared != p.name:
                    raise PluginError(
                        f"plug-in {p.name!r} of package {p.package}: the entry point is named "
                        f"{p.name!r} but {p.value} declares name {declared!r}"
                    )
                if p.name in items:
                    if items[p.name] is p.obj:  # our own built-in, also declared as an entry point
                        continue
                    raise PluginError(
                        f"plug-in {p.name!r} of package {p.package}: the {self.kind[:-1]} name "
                        f"{p.name!r} is already taken by {source[p.name]}"
                    )
                items[p.name] = p.obj
                source[p.name] = p.package
            self._items, self._source = items, source
        return self._items

    def __getitem__(self, name: str) -> Any:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def package(self, name: str) -> str:
        """The distribution that provides ``name`` (``sflm-bench`` for the built-ins)."""
        self._load()
        return self._source[name]

    def reload(self) -> None:
        """Forget what was loaded (tests that install a plug-in in-process)."""
        self._items, self._source = None, {}
