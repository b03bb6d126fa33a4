"""``python -m bench.eval``: one model evaluated without a sweep file, on the cells (and ids) a
sweep plans, with its rows and records in the store; a re-run does nothing; bad input is one line
and exit 2 with nothing written. Models: the tiny sort-4 runs of ``eval_runs`` and reference-format
files (tests/helpers.py ``reference_checkpoint``)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from eval_runs import SAME_AS_EVAL, copy_runs, snapshot
from helpers import reference_checkpoint

from bench import records
from bench.commands import eval as bench_eval
from bench.config import load_sweep
from bench.plan import plan
from bench.results import Store

SORT4 = ["--task", "sort", "--set", "task.options.n_digits=4"]


@pytest.fixture
def runs(tmp_path_factory, tmp_path):
    return copy_runs(tmp_path_factory, tmp_path / "results")


def _eval(capsys, *argv) -> tuple[int, str, str]:
    rc = bench_eval.main([*map(str, argv), "--no-progress"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _table_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "exact_match" in line]


def test_run_folder_with_limit_writes_rows_records_and_sweep_ids(runs, tmp_path, capsys):
    rd = tmp_path / "results"
    rc, out, _ = _eval(capsys, runs["mdlm"], "--nfe", "2", "4", "--limit", "8")
    assert rc == 0, out
    lines = _table_lines(out)
    assert len(lines) == 2 and all("1 seed x 8" in line for line in lines), out
    assert "model" in out and "CI" in out and "wall_s" in out
    assert "s/sample" in out and "tok/s" in out
    ep = bench_eval.prepare(str(runs["mdlm"]), nfe=[2, 4], limit=8)
    df = bench_eval.table(ep)
    assert len(df) and all(float(v) > 0 for col in ("s/sample", "tok/s") for v in df[col])
    store = Store(rd)
    for c in ep.sample_cells:
        rows = store.load(c.id)
        assert rows and {r["item_limit"] for r in rows} == {8}
        assert {r["n"] for r in rows} == {8} and {r["sweep"] for r in rows} == {"tiny"}
        recs = records.read(rd, rows[0]["records"], rows[0]["records_sha256"])
        assert len(recs) == 8 and [r["index"] for r in recs] == list(range(8))
    # the ids are the ones a sweep with the same settings plans (n_samples = the limit)
    sweep = tmp_path / "same.yaml"
    sweep.write_text(SAME_AS_EVAL.format(rd=rd))
    p = plan(load_sweep(sweep), str(sweep))
    mdlm = [c.id for c in p.sample_cells if c.train.method == "mdlm"]
    assert sorted(c.id for c in ep.sample_cells) == sorted(mdlm)
    assert ep.train_cells[0].run_dir == runs["mdlm"]


def test_second_run_computes_nothing_and_prints_the_same_table(runs, tmp_path, capsys):
    rc, first, _ = _eval(capsys, runs["ar"], "--limit", "8", "--decoding", "sample", "greedy")
    assert rc == 0
    assert len(_table_lines(first)) == 2  # AR: NFE = length, greedy is temperature-free
    before = snapshot(tmp_path / "results")
    rc, second, err = _eval(capsys, runs["ar"], "--limit", "8", "--decoding", "sample", "greedy")
    assert rc == 0 and snapshot(tmp_path / "results") == before
    assert "(0 computed now" in second and "to compute" not in err
    assert _table_lines(second) == _table_lines(first)


def test_a_full_run_and_a_limited_run_are_different_cells(runs, tmp_path):
    full = bench_eval.prepare(str(runs["mdlm"]), nfe=[2])
    part = bench_eval.prepare(str(runs["mdlm"]), nfe=[2], limit=8)
    assert full.limit is None and part.limit == 8 and full.sample_cells[0].n_samples == 2000
    assert {c.id for c in full.sample_cells}.isdisjoint(c.id for c in part.sample_cells)
    assert all(c.limit == 8 and c.n_samples == 8 for c in part.sample_cells)
    # --limit K with K every item is the full run itself
    every = bench_eval.prepare(str(runs["mdlm"]), nfe=[2], sets=["sample.n_samples=16"], limit=16)
    assert every.limit is None and every.sample_cells[0].limit is None
    # and that is the sweep's own cell (nfe 2, 16 items): found in the store, nothing to sample
    assert all(Store(tmp_path / "results").has(c.id) for c in every.sample_cells)


BAD = [
    (["{rd}/runs/nope"], "no such file or folder"),
    (["{mdlm}", "--limit", "0"], "--limit: must be >= 1, got 0"),
    (["{mdlm}", "--limit", "3000"], "--limit: 3000 is more than the 2000 items"),
    (["{mdlm}", "--task", "sudoku"], "is a model of task 'sort', not 'sudoku'"),
    (["{mdlm}", "--seeds", "0", "1"], "training seed 1 of this model has no weights"),
    (["{mdlm}", "--set", "task.n_train=9"], "planned from its cell.json the model's id is"),
    (["{mdlm}", "--decoding", "bogus"], "--decoding: mdlm: unknown decoding 'bogus'"),
    (["{mdlm}", "--nfe", "0"], "--nfe: must be >= 1"),
    (["{mdlm}", "--results-dir", "{rd}/elsewhere"], "its own results folder"),
    (["{mdlm}", "--set", "sample.bogus=1"], "sample.bogus: unknown key"),
    (["{rd}/runs"], "neither a run folder"),
]


@pytest.mark.parametrize("argv, needle", BAD)
def test_bad_input_is_one_line_exit_2_nothing_written(runs, tmp_path, capsys, argv, needle):
    rd = tmp_path / "results"
    before = snapshot(rd)
    argv = [a.format(rd=rd, mdlm=runs["mdlm"]) for a in argv]
    rc, out, err = _eval(capsys, *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert snapshot(rd) == before


def test_reference_file_directly_and_converted(tmp_path, capsys):
    ck = reference_checkpoint(tmp_path, "m", "mdlm", {})
    rd = tmp_path / "evals"
    rc, out, _ = _eval(capsys, ck, *SORT4, "--nfe", "2", "--limit", "8", "--results-dir", rd)
    assert rc == 0 and len(_table_lines(out)) == 1 and "mdlm/base" in out, out
    ep = bench_eval.prepare(str(ck), task="sort", sets=SORT4[3:], nfe=[2], limit=8,
                            results_dir=str(rd))  # fmt: skip
    tc = ep.train_cells[0]
    assert (
        tc.imported and (tc.run_dir / "weights.pt").is_file() and not (tc.run_dir / "ckpt").exists()
    )
    df = Store(rd).read()
    assert set(df[df.kind == "sample"].item_limit) == {8} and set(df.sweep) == {"eval"}
    before = snapshot(rd)  # again: nothing to do
    assert _eval(capsys, ck, *SORT4, "--nfe", "2", "--limit", "8", "--results-dir", rd)[0] == 0
    assert snapshot(rd) == before
    # the same file converted by python -m bench.checkpoints convert: a model folder
    from bench.checkpoints.__main__ import main as checkpoints_main

    folder = tmp_path / "converted"
    assert checkpoints_main(["convert", str(ck), "--out", str(folder)]) == 0
    capsys.readouterr()
    rc, out, _ = _eval(capsys, folder, *SORT4, "--nfe", "2", "--limit", "8", "--results-dir", rd)
    assert rc == 0 and len(_table_lines(out)) == 1, out
    # a task the model's vocabulary cannot serve (Sudoku: 12 classes; the file: 10)
    before = snapshot(rd)
    rc, out, err = _eval(
        capsys, ck, "--task", "sudoku", "--set", "task.grid=4", "--results-dir", rd
    )
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "|V| = 10" in err, err
    assert snapshot(rd) == before
    rc, _, err = _eval(capsys, ck, "--limit", "8")  # a checkpoint names no task
    assert rc == 2 and "--task: required" in err


def test_cli_prints_a_table_in_under_a_minute(runs, tmp_path):
    """As a user runs it (a fresh process), with --limit 32 (the issue's bound: < 1 min)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.eval", str(runs["mdlm"]), "--limit", "32", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(_table_lines(proc.stdout)) == 2 and "1 seed x 32" in proc.stdout  # NFE 2, 4
    assert wall < 60, wall


def test_help_imports_no_torch():
    code = (
        "import sys\nfrom bench import eval, generate\n"
        "for m in (eval, generate):\n"
        "    try:\n        m.main(['--help'])\n    except SystemExit:\n        pass\n"
        "assert 'torch' not in sys.modules, 'torch'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--limit" in proc.stdout and "--suffix" in proc.stdout


def test_every_quickstart_run_folder_plans_to_the_sweeps_cells(tmp_path):
    """For each train cell of sweeps/quickstart.yaml (8 models x 2 seeds), a run folder holding
    its cell.json plans, with the quickstart's grid and the entry's decodings, exactly the sample
    cells the sweep plans on it (planning only: the weights file is a placeholder)."""
    import dataclasses
    import json
    from pathlib import Path

    from bench.kinds.likelihood import LikelihoodCell

    root = Path(__file__).resolve().parents[2]
    cfg = load_sweep(root / "sweeps" / "quickstart.yaml")
    cfg.results_dir = str(tmp_path / "results")
    p = plan(cfg, "quickstart")
    assert len(p.train_cells) == 16
    for tc in p.train_cells:
        tc.run_dir.mkdir(parents=True)
        (tc.run_dir / "cell.json").write_text(json.dumps(dataclasses.asdict(tc)))
        (tc.run_dir / "weights.pt").write_bytes(b"")
        entry = next(
            e for e in cfg.methods if e.method == tc.method and (e.variant or "base") == tc.variant
        )
        ep = bench_eval.prepare(
            str(tc.run_dir),
            nfe=[4, 16],
            temperature=[1.0, 0.5],
            decoding=entry.decoding,
            sets=[f"sample.n_samples={cfg.sample.n_samples}"],  # bench.eval's default: the task's
        )
        assert [t.id for t in ep.train_cells] == [tc.id]
        want = {  # its sampling cells (its likelihood cells: bench.eval --likelihood)
            c.id
            for c in p.samples_of(tc)
            if c.variant == tc.variant and not isinstance(c, LikelihoodCell)
        }
        assert {c.id for c in ep.sample_cells} == want, tc.label()
    # --seeds: the other seed's run folder of the same model, pooled in one table
    mdlm = [tc for tc in p.train_cells if tc.method == "mdlm"]
    ep = bench_eval.prepare(str(mdlm[1].run_dir), seeds=[0, 1], nfe=[4])
    assert {t.id for t in ep.train_cells} == {tc.id for tc in mdlm}
