"""A method from a package that is not ours, installed with pip, trains, samples, scores and
appears in the report and ``--list`` like the built-in six, with no edit to this tree; a name
clash or a plug-in that fails to import is one line naming the package, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

METHOD = '''
"""A masked-diffusion variant in an outside package: MDLM's process with its own option."""
from dataclasses import dataclass

from baselines.mdlm import MDLM, MDLMOptions
from bench.options import option


@dataclass
class DemoOptions(MDLMOptions):
    label: str = option("demo", help="an option only this package knows")


class Demo(MDLM):
    name = "demo"
    Options = DemoOptions
'''

SWEEP = """
name: plug
results_dir: {rd}
task: {{name: sort, n_train: 256, options: {{n_digits: 4}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 4, batch_size: 16, warmup_steps: 1, checkpoint_every: 2, ema: 0.5}}
sample: {{nfe: [2], temperature: [1.0], n_samples: 8, batch_size: 8}}
executor: {{kind: debug}}
methods:
  - {{method: demo, options: {{label: x}}}}
  - {{method: mdlm}}
"""


def _package(root: Path, name: str, entry_points: str, modules: dict[str, str]) -> Path:
    pkg = root / name
    (pkg / name.replace("-", "_")).mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{name}"
        version = "0.0.1"

        [tool.setuptools]
        packages = ["{name.replace("-", "_")}"]
        """)
        + entry_points
    )
    for mod, text in modules.items():
        (pkg / name.replace("-", "_") / f"{mod}.py").write_text(text)
    (pkg / name.replace("-", "_") / "__init__.py").write_text("")
    return pkg


def _install(pkg: Path, site: Path) -> None:
    """pip install into a folder of the test's own (the venv stays as it was)."""
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(site), str(pkg)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


def _run(site: Path, *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_an_outside_package_adds_a_method(tmp_path):
    site = tmp_path / "site"
    pkg = _package(
        tmp_path,
        "sflm-demo-plugin",
        '\n[project.entry-points."sflm_bench.methods"]\ndemo = "sflm_demo_plugin.method:Demo"\n',
        {"method": METHOD},
    )
    _install(pkg, site)
    r = _run(site, "-m", "bench.sweep", "--list", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.split()[:1] == ["demo"])
    assert "sflm-demo-plugin" in line
    sweep = tmp_path / "plug.yaml"
    sweep.write_text(SWEEP.format(rd=tmp_path / "results"))
    r = _run(site, "-m", "bench.sweep", str(sweep), "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    r = _run(site, "-m", "bench.report", "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    report = (tmp_path / "results" / "report" / "sort.md").read_text()
    assert "demo" in report and "mdlm" in report
    import pandas as pd

    df = pd.read_csv(tmp_path / "results" / "report" / "results.csv")
    demo = df[(df.method == "demo") & (df.kind == "sample")]
    assert len(demo) and set(df[df.method == "demo"].kind) == {"train", "sample"}
    # without the package, the same sweep names an unknown method (nothing of ours knows it)
    r = subprocess.run(
        [sys.executable, "-m", "bench.sweep", str(sweep), "--dry-run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "unknown method 'demo'" in r.stderr


@pytest.mark.parametrize(
    "entry, module, message",
    [
        ('mdlm = "sflm_clash_plugin.method:Demo"', METHOD.replace('"demo"', '"mdlm"'),
         "already taken by sflm-bench"),
        ('demo = "sflm_clash_plugin.missing:Demo"', METHOD, "failed to import"),
        ('other = "sflm_clash_plugin.method:Demo"', METHOD, "declares name 'demo'"),
        ('demo = "sflm_clash_plugin.method:DemoOptions"', METHOD, "not a Method subclass"),
    ],
)  # fmt: skip
def test_bad_plugins_are_one_line_naming_the_package(tmp_path, entry, module, message):
    site = tmp_path / "site"
    pkg = _package(
        tmp_path,
        "sflm-clash-plugin",
        f'\n[project.entry-points."sflm_bench.methods"]\n{entry}\n',
        {"method": module},
    )
    _install(pkg, site)
    for args in (["-m", "bench.sweep", "--list"],):
        r = _run(site, *args, cwd=tmp_path, timeout=120)
        err = r.stderr.strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1, err
        assert "sflm-clash-plugin" in err and message in err, err


EVALUATOR = """
CLI_HELP = "count the lines of a file"


def add_arguments(p):
    p.add_argument("--file", required=True)


def run(args):
    with open(args.file) as f:
        print(f"lines: {sum(1 for _ in f)}")
    return 0
"""


def test_an_outside_package_adds_an_evaluator(tmp_path):
    site = tmp_path / "site"
    pkg = _package(
        tmp_path,
        "sflm-eval-plugin",
        '\n[project.entry-points."sflm_bench.evaluators"]\nlines = "sflm_eval_plugin.score"\n',
        {"score": EVALUATOR},
    )
    _install(pkg, site)
    (tmp_path / "x.txt").write_text("a\nb\nc\n")
    r = _run(site, "-m", "bench.evaluate", "lines", "--file", "x.txt", cwd=tmp_path, timeout=120)
    assert r.returncode == 0 and "lines: 3" in r.stdout, r.stderr
    r = _run(site, "-m", "bench.evaluate", "--help", cwd=tmp_path, timeout=120)
    assert "lines" in r.stdout and "gsm8k" in r.stdout
