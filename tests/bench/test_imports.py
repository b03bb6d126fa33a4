"""The packages' import graph has no cycle (every import counts: module-level, inside functions
and methods, relative or absolute), and every module imports on its own."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bench", "baselines", "sflm")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the packages (``pkg/__init__.py`` is
    ``pkg``)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package modules that module ``name`` imports anywhere in its body. ``from P import x``
    counts P.x when that is a module, else P; relative imports are resolved against ``name``."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            subs = {f"{target}.{a.name}" for a in node.names} & modules
            found |= subs
            if len(subs) < len(node.names):  # a name defined in ``target`` itself
                found.add(target)
    return {m for m in found if m in modules and m != name}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = module_files(root)
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path ``[a, b, ..., a]``, or None (depth-first search, three colours)."""
    colour = dict.fromkeys(graph, 0)  # 0 new, 1 on the stack, 2 finished
    stack: list[str] = []

    def visit(u: str) -> list[str] | None:
        colour[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if colour.get(v, 0) == 1:
                return stack[stack.index(v) :] + [v]
            if colour.get(v, 0) == 0:
                cyc = visit(v)
                if cyc:
                    return cyc
        stack.pop()
        colour[u] = 2
        return None

    for u in sorted(graph):
        if colour[u] == 0:
            cyc = visit(u)
            if cyc:
                return cyc
    return None


def test_cycle_finder_finds_cycles_and_only_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None  # a diamond is no cycle
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"y"}}) == ["y", "y"]


def test_import_walker_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "bench"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "a.py").write_text("def f():\n    from bench.sub import b\n    return b\n")
    (pkg / "sub" / "b.py").write_text("class C:\n    def m(self):\n        import bench.a\n")
    (pkg / "c.py").write_text("from .sub import b, helper\n")  # a module and a name of the package
    for other in PACKAGES[1:]:
        (tmp_path / other).mkdir()
    g = import_graph(tmp_path)
    assert g == {
        "bench": set(),
        "bench.sub": {"bench.sub.b"},
        "bench.a": {"bench.sub.b"},
        "bench.sub.b": {"bench.a"},
        "bench.c": {"bench.sub", "bench.sub.b"},
    }
    assert find_cycle(g) == ["bench.a", "bench.sub.b", "bench.a"]


def test_no_import_cycle_in_the_packages():
    graph = import_graph()
    assert {
        "bench.sweep",
        "bench.commands.sweep",
        "bench.plan",
        "bench.cells",
        "bench.executors.slurm",
        "sflm.method",
    } <= set(graph)
    assert "bench.plan" in graph["bench.commands.sweep"]  # the walker sees real edges
    assert "bench.commands.sweep" in graph["bench.sweep"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_config_knows_no_methods_or_tasks():
    """bench.config (and bench.options) sit below every method and task: they import none."""
    graph = import_graph()
    for low in ("bench.config", "bench.options"):
        assert not {
            m
            for m in graph[low]
            if m.startswith(("baselines", "sflm", "bench.registry", "bench.data"))
        }


def _layer(graph: dict[str, set[str]], prefix: str) -> dict[str, set[str]]:
    return {m: deps for m, deps in graph.items() if m == prefix or m.startswith(prefix + ".")}


def test_evaluators_import_no_task():
    """bench.evaluate (scorers, sandbox, statistics, the evaluate CLI) sits beside the tasks, not
    above them: no module of it imports bench.data, anywhere in its body. A scorer that serves
    one task lives with that task in bench.data."""
    graph = import_graph()
    evaluate = _layer(graph, "bench.evaluate")
    # the walker sees edges
    assert "bench.text.reference_lm" in graph["bench.evaluate.genppl.evaluator"]
    bad = {m: sorted(d for d in deps if d.startswith("bench.data")) for m, deps in evaluate.items()}
    assert not {m: d for m, d in bad.items() if d}, bad


def test_text_layer_imports_only_itself():
    """bench.text (tokenizers, the data cache root, offline packages, the reference LM) is the
    layer below both bench.data and bench.evaluate: it imports neither, nor anything else of the
    packages outside bench.text but the leaves below every layer (bench.atomic: the build-once
    cache, importing nothing of the packages)."""
    graph = import_graph()
    text = _layer(graph, "bench.text")
    assert {"bench.text.gpt2", "bench.text.smollm", "bench.text.reference_lm"} <= set(text)
    assert "bench.text.locate" in graph["bench.text.gpt2"]  # the walker sees edges
    assert "bench.text.gpt2" in graph["bench.data.owt.task"]
    leaves = {"bench.atomic"}
    assert not {m: graph[m] for m in leaves if graph[m]}
    outside = {
        m: sorted(
            d
            for d in deps
            if d != "bench.text" and not d.startswith("bench.text.") and d not in leaves
        )
        for m, deps in text.items()
    }
    assert not {m: d for m, d in outside.items() if d}, outside


FIRST_IMPORTS = [
    "bench.sweep",
    "bench.plan",
    "bench.cells",
    "bench.status",
    "bench.executors.local",
    "bench.executors.slurm",
    "bench.config",
]


@pytest.fixture(scope="module")
def fresh_imports():
    """Module name -> ``(returncode, stderr)`` of ``python -c "import <name>"``, one fresh
    interpreter per module, all started at once (each waits on its own imports, one CPU core
    each: together they take the longest one's time on a 2-core machine, not the sum)."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", f"import {name}"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in FIRST_IMPORTS
    }
    out = {}
    try:
        for name, proc in procs.items():
            _, err = proc.communicate(timeout=120)
            out[name] = (proc.returncode, err)
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    return out


@pytest.mark.parametrize("name", FIRST_IMPORTS)
def test_module_imports_first_in_a_fresh_interpreter(name, fresh_imports):
    """Each orchestration module is importable as the first import of a process (what a
    submitit job unpickling a cell or a job class does), not only after its importers."""
    returncode, stderr = fresh_imports[name]
    assert returncode == 0, stderr[-2000:]


def test_pickled_jobs_reference_importable_modules():
    """The SLURM job callables and the cells they carry pickle by reference to their defining
    modules (never ``__main__``), so a job unpickles in any process."""
    slurm = importlib.import_module("bench.executors.slurm")
    plan = importlib.import_module("bench.plan")
    for obj in (slurm.TrainJob, slurm.SampleJob, plan.TrainCell, plan.SampleCell):
        assert obj.__module__ not in ("__main__", None) and importlib.import_module(obj.__module__)


_WEIGHTS_NO_LIGHTNING = """
import json, sys, tempfile
from pathlib import Path

import bench.checkpoints
from bench.checkpoints import build_model
from bench.weights import load_weights, save_weights

backbone_cfg = {"size": "cpu-mini", "n_blocks": 1, "d_model": 16, "n_heads": 2, "cond_dim": 8}
method, backbone = build_model("mdlm", {}, backbone_cfg, 10, 8)
path = Path(tempfile.mkdtemp()) / "weights.pt"
save_weights(path, backbone, method, 7, {"note": "x"})
m2, b2 = build_model("mdlm", {}, backbone_cfg, 10, 8)
assert load_weights(m2, b2, path) == {"steps": 7, "note": "x"}
meta = {"method": "mdlm", "family": "mdlm", "options": {}, "backbone": backbone_cfg,
        "vocab_size": 10, "seq_len": 8}
(path.parent / "model.json").write_text(json.dumps(meta))
assert bench.checkpoints.load(str(path.parent)).method.vocab_size == 10  # a model folder
print("SEEN", sorted(m for m in sys.modules if m.startswith(("lightning", "pytorch_lightning",
                                                             "bench.train"))))
"""


def test_reading_weights_and_the_importer_import_no_lightning():
    """``weights.pt`` is bench.weights' (no trainer): ``import bench.checkpoints``, writing and
    reading a weights file and loading a model folder, in a fresh interpreter, import neither
    Lightning nor bench.train."""
    proc = subprocess.run(
        [sys.executable, "-c", _WEIGHTS_NO_LIGHTNING],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = [ln for ln in proc.stdout.splitlines() if ln.startswith("SEEN ")][-1]
    assert seen == "SEEN []", seen
