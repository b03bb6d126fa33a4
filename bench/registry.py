"""Name -> implementation: every built-in method, task and evaluator (one line each, by import
path: importing this module imports none of them), plus those installed packages add through
entry points (:mod:`bench.plugins`; docs/adding-a-method.md, docs/adding-a-task.md). The
report's built-in items are registered the same way in :mod:`bench.report.renderers`.

Nothing else in the tree dispatches on a method name.
"""

from __future__ import annotations

from bench.plugins import Plugin, PluginError, Registry


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
    {
        "ar": "baselines.ar:AR",
        "mdlm": "baselines.mdlm:MDLM",
        "candi": "baselines.candi:CANDI",
        "duo": "baselines.duo:Duo",
        "flm": "baselines.flm:FLM",
        "sflm": "sflm.method:SFLM",
    },
    name_of=lambda cls: getattr(cls, "name", None),
    check=_is_subclass("bench.method.Method"),
)

#: task name -> class (group ``sflm_bench.tasks``)
TASKS = Registry(
    "tasks",
    {
        "sudoku": "bench.data.sudoku.task:SudokuTask",
        "sort": "bench.data.toy:SortTask",
        "arith_standin": "bench.data.program.arith:ArithTask",
        "gsm8k": "bench.data.program.gsm8k:GSM8KTask",
        "owt": "bench.data.owt.task:OWTTask",
    },
    name_of=lambda cls: getattr(cls, "name", None),
    check=_is_subclass("bench.data.base.Task"),
)


def _cell_kind(p: Plugin) -> None:
    """A :class:`bench.kind.CellKind` object: what the planner, the jobs, the cost model and the
    views call on it."""
    need = ("name", "validate", "plan_entry", "run", "predict", "load_s", "describe")
    missing = [a for a in need if not hasattr(p.obj, a)]
    if missing or isinstance(p.obj, type):
        what = f"has no {missing[0]}" if missing else "is a class, not a CellKind object"
        raise PluginError(f"plug-in {p.name!r} of package {p.package}: {p.value} {what}")


#: cell kind name -> :class:`bench.kind.CellKind` object: the models (train, import) and the kinds
#: of cells a model gets (sample, likelihood), then those of installed packages (group
#: ``sflm_bench.cell_kinds``); the planner, the jobs, the cost model and the views look them up
#: here
KINDS = Registry(
    "cell_kinds",
    {
        "train": "bench.kinds.train:KIND",
        "import": "bench.kinds.imported:KIND",
        "sample": "bench.kinds.sample:KIND",
        "likelihood": "bench.kinds.likelihood:KIND",
    },
    name_of=lambda k: getattr(k, "name", None),
    check=_cell_kind,
)


def _evaluator(p: Plugin) -> None:
    missing = [a for a in ("CLI_HELP", "add_arguments", "run") if not hasattr(p.obj, a)]
    if missing:
        raise PluginError(
            f"plug-in {p.name!r} of package {p.package}: {p.value} has no {missing[0]}"
        )


#: evaluator name -> module with ``CLI_HELP``, ``add_arguments(parser)``, ``run(args) -> int``
#: (``python -m bench.evaluate <name>``; group ``sflm_bench.evaluators``)
EVALUATORS = Registry(
    "evaluators",
    {"gsm8k": "bench.evaluate.gsm8k", "genppl": "bench.evaluate.genppl.command"},
    check=_evaluator,
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
        if cls.sampling_options:  # the knobs of its samplers (they reuse the trained model)
            lines.append(f"  {'':<10} {'':<22} sampling options: {', '.join(cls.sampling_options)}")
        table = list(getattr(cls, "DECODINGS", {}).values())
        if table and not any(d.eos_stop or d.eos_note for d in table):  # one line: the default
            lines.append(f"  {'':<10} {'':<22} EOS stop (sample.eos_stop): {table[0].eos_text()}")
        for dec, d in getattr(cls, "DECODINGS", {}).items():  # bench.decoding.Decoding
            tf = ", T-free" if d.temperature_free else ""
            opts = ", ".join(d.options) or "none"
            lines.append(f"    {dec:<14} calls: {d.calls_text()}{tf}; options: {opts}")
            lines.append(f"    {'':<14} {d.summary}")
            if d.eos_stop or d.eos_note:
                lines.append(f"    {'':<14} EOS stop (sample.eos_stop): {d.eos_text()}")
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
