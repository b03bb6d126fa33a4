"""What every command shares (bench.usage): one usage error, and the shared arguments declared in
one place with one destination name each, as every command parses them."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys

import pytest
from test_imports import ROOT, module_files

from bench import usage
from bench.checkpoints import CheckpointError
from bench.config import ConfigError
from bench.plugins import PluginError

#: the flags bench.usage declares for every command (no command spells one itself)
SHARED = ("--set", "--results-dir", "--task", "--limit")


def _declared_flags(path) -> list[tuple[str, int]]:
    """(flag, line) of every ``add_argument("--flag", ...)`` call in the file at ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    out.append((a.value, node.lineno))
    return out


def test_the_shared_flags_are_declared_only_by_bench_usage():
    found, elsewhere = set(), []
    for name, path in module_files().items():
        for flag, line in _declared_flags(path):
            if flag in SHARED:
                if name == "bench.usage":
                    found.add(flag)
                else:
                    elsewhere.append(f"{path.relative_to(ROOT)}:{line}: {flag}")
    assert found == set(SHARED)  # the walker sees the declarations
    assert not elsewhere, "declare these through bench.usage:\n" + "\n".join(elsewhere)


def test_one_usage_error_class():
    classes = []
    for name, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name == "UsageError":
                classes.append(name)
    assert classes == ["bench.usage"]
    # a sweep file's bad value, a checkpoint that cannot be used, a broken plug-in: usage errors
    for cls in (ConfigError, CheckpointError, PluginError):
        assert issubclass(cls, usage.UsageError) and issubclass(cls, ValueError), cls


def test_usage_exit_prints_one_line_and_returns_2(capsys):
    assert usage.usage_exit(usage.UsageError("--limit: must be >= 1, got 0")) == 2
    assert capsys.readouterr().err == "error: --limit: must be >= 1, got 0\n"
    assert usage.usage_exit("bad line", "python -m bench.evaluate") == 2
    assert capsys.readouterr().err == "python -m bench.evaluate: error: bad line\n"


def test_one_line_parser_errors(capsys):
    ap = usage.OneLineParser(prog="prog")
    usage.add_limit(ap, "items")
    with pytest.raises(SystemExit) as e:
        ap.parse_args(["--limit", "x"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("prog: error: argument --limit") and "'x'" in err


def test_the_helpers_parse_one_way():
    ap = argparse.ArgumentParser()
    usage.add_results_dir(ap, "r", default="results")
    usage.add_sets(ap, "s")
    usage.add_limit(ap, "k", default=20)
    usage.add_filters(ap, task="t", model="m", nfe="n", temperature="T", subset="S")
    a = ap.parse_args([])
    assert (a.results_dir, a.sets, a.limit, a.task, a.model, a.nfe) == (
        "results",
        [],
        20,
        *[None] * 3,
    )
    a = ap.parse_args(["--set", "a.b=1", "--set", "c=[2]", "--limit", "3", "--nfe", "8",
                       "--temperature", "0.5", "--subset", "easy", "--task", "sort"])  # fmt: skip
    assert a.sets == ["a.b=1", "c=[2]"] and a.limit == 3 and a.nfe == 8 and a.temperature == 0.5
    assert (a.subset, a.task) == ("easy", "sort")
    bare = argparse.ArgumentParser()
    usage.add_filters(bare, task="t", model="m", nfe="n")  # no --temperature / --subset asked
    assert not hasattr(bare.parse_args([]), "temperature")


@pytest.mark.parametrize(
    "command", ["sweep", "eval", "generate", "samples", "rescore", "rehearse", "cost", "report"]
)
def test_every_command_runs_as_python_m_bench_x(command):
    """``python -m bench.X --help`` for every command (the forwarders in bench/ included)."""
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{command}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"python -m bench.{command}" in proc.stdout
