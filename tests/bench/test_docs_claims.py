"""The README's and docs' claims about what the report writes hold for a quickstart report.

Every backticked output file the README and the guides name (``sudoku.md``, ``power.md``,
``<task>_differences.md``, figure stems such as ``<task>_training_curves``, ...) must be written
by ``python -m bench.report`` (or ``--paper``) for a quickstart store, and every backticked
name said to be a column (``... `mean +- sd` columns``) must be a column of a table it writes
(a Markdown table's header, ``results.csv``, or the page's). The store is the quickstart's plan
written the way jobs write it, with synthetic scores (tests/helpers.py
``write_planned_store``), so the check takes seconds, not the sweep's minutes.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from helpers import write_planned_store

from bench.config import SweepConfig, build, load_yaml
from bench.plan import plan

ROOT = Path(__file__).resolve().parents[2]
#: the guides of other tasks' outputs (OWT's frontier files, GSM8K's sandbox and grader) and the
#: measurement records (what earlier versions wrote, kept as measured) are not about this report
OTHER = ("owt", "gsm8k", "checkpoints", "offline-data", "slurm")
FILE = re.compile(r"`([^`\s]+\.(?:md|csv|html))`")
STEM = re.compile(r"`((?:<task>|sudoku)_[a-z0-9_]+)`")
COLUMN = re.compile(r"`([^`\n]+)` columns?\b")


def _claim_sources() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").glob("*.md")) if not p.name.startswith(OTHER)]
    return [ROOT / "README.md", *docs]


def _repo_names() -> set[str]:
    """Names of files in the repository (a backticked doc or data file is a link, not an
    output claim)."""
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    return {Path(p).name for p in out.split()} | set(out.split())


def claims() -> tuple[dict[str, str], dict[str, str]]:
    """(file or stem claim -> the doc that makes it, column claim -> the doc)."""
    repo = _repo_names()
    files, columns = {}, {}
    for doc in _claim_sources():
        text = doc.read_text()
        for m in FILE.finditer(text):
            name = m.group(1)
            if "/" in name or name in repo or "<label>" in name:
                continue  # a path elsewhere (run folders, results/paper), a repo file, any label
            files.setdefault(name.replace("<task>", "sudoku"), doc.name)
        for m in STEM.finditer(text):
            files.setdefault(m.group(1).replace("<task>", "sudoku") + ".*", doc.name)
        for m in COLUMN.finditer(text):
            columns.setdefault(m.group(1), doc.name)
    return files, columns


@pytest.fixture(scope="module")
def quickstart_report(tmp_path_factory) -> Path:
    from bench.report.cli import main as report

    root = tmp_path_factory.mktemp("qs")
    raw = load_yaml(ROOT / "sweeps" / "quickstart.yaml")
    cfg = build(SweepConfig, {**raw, "results_dir": str(root / "results")}, where="quickstart")
    p = plan(cfg)
    # a different rate per model and NFE, so no table is degenerate
    rates = {}
    write_planned_store(
        p, lambda sc: rates.setdefault((sc.train.id, sc.nfe), 0.1 + 0.05 * len(rates) % 0.8),
        logs=True,
    )  # fmt: skip
    # one cell of a bench.eval of a quickstart model under another protocol (evaluations.md)
    from bench.results import Store

    store = Store(root / "results")
    sc = next(c for c in p.sample_cells if c.kind == "sample")
    rows = [{**r, "evaluation": "bench.eval --limit 8"} for r in store.load(sc.id)]
    store.write_cell(sc.id + "-limit8", rows)
    out = root / "results" / "report"
    assert report(["--results-dir", str(root / "results")]) == 0
    assert report(["--results-dir", str(root / "results"), "--out", str(out), "--paper"]) == 0
    return root / "results"


def _written(results: Path) -> set[str]:
    return {p.name for p in results.rglob("*") if p.is_file()}


def _headers(report: Path) -> set[str]:
    heads = set(pd.read_csv(report / "results.csv", nrows=1).columns)
    for md in report.rglob("*.md"):
        lines = md.read_text().splitlines()
        for line, nxt in zip(lines, lines[1:]):
            if line.startswith("|") and nxt.startswith("|---"):
                heads |= {c.strip() for c in line.strip().strip("|").split("|")}
    page = (report / "index.html").read_text()
    heads |= set(re.findall(r"<th[^>]*>(?:<button[^>]*>)?([^<]+)<", page))
    return heads


def test_the_docs_name_claims_to_check():
    """The scan finds the claims it is there for (a scan that finds nothing checks nothing)."""
    files, columns = claims()
    for name in ("results.csv", "sudoku.md", "power.md", "sudoku_differences.md", "index.html"):
        assert name in files, sorted(files)
    assert "sudoku_training_curves.*" in files
    assert columns


def test_every_output_file_the_docs_name_is_written(quickstart_report):
    files, _ = claims()
    written = _written(quickstart_report)
    missing = []
    for name, doc in sorted(files.items()):
        if name.endswith(".*"):
            ok = any(w.startswith(name[:-1]) for w in written)
        else:
            ok = name in written
        if not ok:
            missing.append(f"{doc}: `{name}`")
    assert not missing, "named in the docs, not written by a quickstart report: " + "; ".join(
        missing
    )


def test_every_column_the_docs_name_is_a_column(quickstart_report):
    _, columns = claims()
    heads = _headers(quickstart_report / "report")
    missing = [f"{doc}: `{c}`" for c, doc in sorted(columns.items()) if c not in heads]
    assert not missing, "columns the docs name that no report table has: " + "; ".join(missing)


def test_a_stale_column_claim_is_caught(quickstart_report, tmp_path):
    """The check fails on the claim this test was written for: the README once told readers of
    the quickstart to read its ``mean +- sd`` columns, which the tables no longer have."""
    heads = _headers(quickstart_report / "report")
    text = "read the quickstart's `mean +- sd` columns as a smoke test"
    stale = [m.group(1) for m in COLUMN.finditer(text)]
    assert stale == ["mean +- sd"] and "mean +- sd" not in heads
