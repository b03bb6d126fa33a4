"""One evaluation, one protocol: ``python -m bench.eval`` on a sweep's run folder (other items,
another NFE, other likelihood draws) never changes that sweep's report; its cells are reported
apart (``evaluations.md``, ``bench.report --evaluation NAME``), and a sweep that plans a cell an
evaluation computed first makes it its own.

The store is quickstart-shaped at toy size: two methods, two training seeds, an NFE grid, held-out
likelihood (sort-4, cpu-mini, 20 steps), so the report has headline cells, seed pools, paired
differences and a likelihood table for an evaluation to disturb."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import sweep as bench_sweep
from bench.commands import eval as bench_eval
from bench.report import main as report
from bench.results import Store, read

SWEEP = """
name: qs
results_dir: {rd}
task: {{name: sort, n_train: 256, options: {{n_digits: 4}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 20, batch_size: 16, warmup_steps: 5, ema: 0.5, val_every: 0}}
sample: {{nfe: [2, 4], temperature: [1.0], n_samples: 16, batch_size: 16}}
likelihood: {{datasets: [heldout], n_sequences: 16, draws: 2, batch_size: 16}}
seeds: [0, 1]
executor: {{kind: debug}}
methods:
  - {{method: mdlm}}
  - {{method: ar}}
"""

#: what a report folder holds that is a view stamped with its time, not a result
_STAMPED = ("index.html", ".page", ".report-inputs.json")


def _files(folder: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_file() and not any(rel == s or rel.startswith(s + "/") for s in _STAMPED):
            out[rel] = p.read_bytes()
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    base = tmp_path_factory.mktemp("protocol")
    rd = base / "results"
    (base / "qs.yaml").write_text(SWEEP.format(rd=rd))
    assert bench_sweep.main([str(base / "qs.yaml"), "--no-progress"]) == 0
    return base, rd


def _run_folder(rd: Path, method: str) -> Path:
    return next(p for p in sorted((rd / "runs").iterdir()) if p.name.startswith(f"{method}-"))


def test_bench_eval_leaves_the_sweeps_report_as_it_was(store, capsys):
    base, rd = store
    before, after = base / "before", base / "after"
    assert report(["--results-dir", str(rd), "--out", str(before), "--no-html"]) == 0
    mdlm = _run_folder(rd, "mdlm")
    evals = [
        [str(mdlm), "--limit", "8"],  # other items
        [str(mdlm), "--nfe", "3", "--set", "sample.n_samples=16"],  # another NFE
        [str(mdlm), "--likelihood", "heldout", "--draws", "3"],  # other draws
        [str(mdlm), "--likelihood", "heldout", "--limit", "8"],  # other sequences
    ]
    for argv in evals:
        assert bench_eval.main([*argv, "--no-progress"]) == 0, argv
    capsys.readouterr()
    names = {n for n in read(rd)["evaluation"].dropna() if n}
    assert names == {
        "bench.eval --limit 8",
        "bench.eval --nfe 3 --set sample.n_samples=16",
        "bench.eval --likelihood heldout --draws 3",
        "bench.eval --likelihood heldout --limit 8",
    }
    assert report(["--results-dir", str(rd), "--out", str(after), "--no-html"]) == 0
    old, new = _files(before), _files(after)
    assert set(new) - set(old) == {"evaluations.md"}
    changed = [f for f in old if old[f] != new.get(f)]
    assert not changed, changed
    listing = (after / "evaluations.md").read_text()
    for n in names:
        assert f"## `{n}`" in listing
    assert "--evaluation" in listing


def test_an_evaluation_is_reported_on_its_own(store, capsys):
    base, rd = store
    mdlm = _run_folder(rd, "mdlm")
    assert bench_eval.main([str(mdlm), "--limit", "4", "--no-progress"]) == 0
    capsys.readouterr()
    assert report(["--results-dir", str(rd), "--evaluation", "bench.eval --limit 4"]) == 0
    folders = list((rd / "evaluations").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("limit-4-")
    # the evaluation's cells and its model's training rows, nothing of the sweep's grid
    import pandas as pd

    csv = pd.read_csv(folders[0] / "results.csv")
    samples = csv[csv["kind"] == "sample"]
    assert len(samples) and set(samples["n"]) == {4}
    assert set(samples["evaluation"]) == {"bench.eval --limit 4"}
    assert set(csv["kind"]) == {"sample", "train"}
    # an unknown name: one line naming it and the ones there, exit 2
    assert report(["--results-dir", str(rd), "--evaluation", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'nope'" in err and "bench.eval --limit 4" in err


def test_a_sweep_adopts_the_cells_an_evaluation_computed_first(store, tmp_path):
    base, rd = store
    mdlm = _run_folder(rd, "mdlm")
    assert bench_eval.main([str(mdlm), "--nfe", "8", "--set", "sample.n_samples=16",
                            "--no-progress"]) == 0  # fmt: skip
    ep = bench_eval.prepare(str(mdlm), nfe=[8], sets=["sample.n_samples=16"])
    cid = ep.sample_cells[0].id
    rows = Store(rd).load(cid)
    assert {r["evaluation"] for r in rows} == {"bench.eval --nfe 8 --set sample.n_samples=16"}
    values = [r["value"] for r in rows]
    wider = tmp_path / "wider.yaml"
    wider.write_text(SWEEP.format(rd=rd).replace("nfe: [2, 4]", "nfe: [2, 4, 8]"))
    assert bench_sweep.main([str(wider), "--no-progress"]) == 0
    rows = Store(rd).load(cid)
    assert {r["evaluation"] for r in rows} == {None}
    assert [r["value"] for r in rows] == values  # adopted, not computed again
