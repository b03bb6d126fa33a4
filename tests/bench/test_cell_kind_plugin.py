"""A cell kind from an outside package (tests/fixtures/count_kind, written from
docs/adding-a-cell-kind.md alone), found through its entry point (group
``sflm_bench.cell_kinds``), runs through a sweep, ``--status``, ``--dry-run`` (with its own
prediction) and the report with no edit to this tree; its settings live under ``kinds:`` and a
kind name no package provides is one line, exit 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from bench import registry
from bench.report import main as report
from bench.results import read
from bench.sweep import main as sweep

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "count_kind"
SWEEP = """
name: counted
results_dir: {rd}
task: {{name: sort, n_train: 128, options: {{n_digits: 4}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 6, batch_size: 16, warmup_steps: 1, checkpoint_every: 6, ema: 0.5, val_every: 0}}
sample: {{nfe: [2], temperature: [1.0], n_samples: 8, batch_size: 8}}
kinds: {{count: {{n: {n}}}}}
executor: {{kind: debug}}
methods:
  - {{method: mdlm}}
"""


@pytest.fixture
def count_kind(tmp_path, monkeypatch):
    """The package on the path with its entry point, as pip would leave it (a dist-info)."""
    site = tmp_path / "site"
    shutil.copytree(FIXTURE, site)
    info = site / "count_kind-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: count-kind\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[sflm_bench.cell_kinds]\ncount = count_kind:KIND\n")
    monkeypatch.syspath_prepend(str(site))
    registry.KINDS.reload()
    yield
    registry.KINDS.reload()  # the path is restored after: the next lookup forgets the kind


def _sweep_file(tmp_path, n=4) -> Path:
    f = tmp_path / "counted.yaml"
    f.write_text(SWEEP.format(rd=tmp_path / "results", n=n))
    return f


def test_a_plugin_kind_runs_through_sweep_status_dry_run_and_report(count_kind, tmp_path, capsys):
    f = _sweep_file(tmp_path)
    assert registry.KINDS.package("count") == "count-kind"
    assert sweep([str(f), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "count" in dry
    assert sweep([str(f), "--no-progress"]) == 0
    df = read(tmp_path / "results")
    counted = df[df["kind"] == "count"]
    # sort-4: 4 digits given, 4 sorted digits generated: 4 x 4 positions of 4 items
    assert counted["value"].tolist() == [16.0], counted
    assert sweep([str(f), "--status"]) == 0
    status = capsys.readouterr().out
    assert "count" in status
    assert report(["--results-dir", str(tmp_path / "results"), "--no-html"]) == 0
    csv = pd.read_csv(tmp_path / "results" / "report" / "results.csv")
    assert (csv["kind"] == "count").sum() == 1
    # a second run computes nothing
    files = sorted((tmp_path / "results" / "store").glob("*.json"))
    stamps = [p.stat().st_mtime_ns for p in files]
    assert sweep([str(f), "--no-progress"]) == 0
    assert [p.stat().st_mtime_ns for p in files] == stamps


def test_kind_settings_are_checked_at_plan_time(count_kind, tmp_path, capsys):
    assert sweep([str(_sweep_file(tmp_path, n=0)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "kinds.count.n" in err


def test_an_unknown_kind_is_one_line(tmp_path, capsys):
    assert sweep([str(_sweep_file(tmp_path)), "--dry-run"]) == 2  # no package provides "count"
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "kinds.count: no cell kind" in err and "likelihood" in err
