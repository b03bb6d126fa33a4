"""The store as lm-evaluation-harness result files, read back by lm-eval's own code: its file-name
helpers, its results table, the datasets library (as its hub details are loaded) and its W&B
logger (offline)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from bench.records import read as read_records
from bench.report.lmeval_cli import log_wandb
from bench.report.lmeval_export import ExportError, export
from bench.results import Store

SWEEP = """
name: lmeval-export
results_dir: {root}
task: {{name: sudoku, grid: 4, difficulties: [easy, hard], train_mix: true, n_train: 300,
        n_valid: 32}}
backbone: {{size: cpu-mini}}
train: {{steps: 12, batch_size: 8}}
sample: {{nfe: [3], temperature: [1.0], n_samples: 16, batch_size: 16}}
likelihood: {{datasets: [heldout], n_sequences: 16, batch_size: 16}}
seeds: [0]
executor: {{kind: debug}}
methods:
  - method: ar
  - method: mdlm
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("lmeval-export") / "results"
    sweep = root.parent / "sweep.yaml"
    sweep.write_text(SWEEP.format(root=root))
    proc = subprocess.run(
        [sys.executable, "-m", "bench.sweep", str(sweep), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


@pytest.fixture(scope="module")
def exported(store, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported") / "lm"
    files = export(store, Store(store).read(), out)
    return out, files


def test_lm_eval_finds_every_file_by_its_own_name_rules(exported):
    from lm_eval.utils import (
        get_file_datetime,
        get_file_task_name,
        get_results_filenames,
        get_sample_results_filenames,
    )

    out, files = exported
    names = [str(f.relative_to(out.parent)) for f in files]
    results = get_results_filenames(names)
    samples = get_sample_results_filenames(names)
    # two models at one setting, and their likelihoods: four runs, one results file each
    assert len(results) == 4 and len(results) + len(samples) == len(names)
    for s in samples:
        task = get_file_task_name(os.path.basename(s))
        assert task in {"sudoku_easy", "sudoku_hard", "sudoku_likelihood_heldout"}, s
        res = [r for r in results if os.path.dirname(r) == os.path.dirname(s)]
        assert len(res) == 1  # its results file sits beside it, with the same date
        assert get_file_datetime(os.path.basename(s)) == get_file_datetime(res[0])[: -len(".json")]
        assert task in json.loads((out.parent / res[0]).read_text())["results"]


def _results(out):
    return {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/results_*.json")}


def test_values_and_stderr_are_the_stores(store, exported):
    out, _ = exported
    df = Store(store).read()
    seen = 0
    for res in _results(out).values():
        for cell in res["config"]["sflm_bench"]["cells"]:
            rows = df[df["cell_id"] == cell]
            task = f"sudoku_{'likelihood_' if rows['kind'].iloc[0] == 'likelihood' else ''}"
            task += rows["subset"].iloc[0]
            for _, r in rows.iterrows():
                if r["value"] is None or (isinstance(r["value"], float) and math.isnan(r["value"])):
                    continue
                if r["metric"] == "tokens":
                    continue
                got = res["results"][task][f"{r['metric']},none"]
                assert got == pytest.approx(r["value"], abs=0, rel=1e-12)
                iv = res["intervals"][task][r["metric"]]
                assert (iv["low"], iv["high"]) == (r["ci_low"], r["ci_high"]) or r["ci_low"] != r[
                    "ci_low"
                ]
                if r["metric_rank"] == 0 and r["kind"] == "sample":  # the items' mean_stderr
                    o = np.array([int(c) for c in r["item_outcomes"]], float)
                    se = o.std(ddof=1) / math.sqrt(len(o))
                    assert res["results"][task][f"{r['metric']}_stderr,none"] == pytest.approx(se)
                seen += 1
    assert seen > 10
    for res in _results(out).values():
        assert res["higher_is_better"].get("sudoku_likelihood_heldout", {}).get("nll") in (
            False,
            None,
        )


def test_lm_eval_results_table_prints_them(exported):
    from lm_eval.utils import make_table

    out, _ = exported
    for res in _results(out).values():
        table = make_table(res)
        for task, metrics in res["results"].items():
            assert task in table
            for k, v in metrics.items():
                if k.endswith(",none") and "_stderr" not in k and isinstance(v, float):
                    assert f"{v:.4f}" in table, (task, k)


def test_samples_load_as_a_dataset_and_score_as_the_results(store, exported):
    import datasets

    out, _ = exported
    kinds = set()
    for folder, res in _results(out).items():
        for f in (out / folder).glob("samples_*.jsonl"):
            ds = datasets.load_dataset("json", data_files=str(f), split="train")
            task = f.name[len("samples_") :].rsplit("_", 1)[0]
            metric = ds[0]["metrics"][0]
            want = res["results"][task][f"{metric},none"]
            assert len(ds) == res["results"][task]["sample_len"]
            if res["configs"][task]["output_type"] == "generate_until":
                assert np.mean(ds[metric]) == pytest.approx(want)
            else:  # (summed nll, tokens) pairs: nats per token over the whole set
                pairs = np.array(ds[metric])
                assert pairs[:, 0].sum() / pairs[:, 1].sum() == pytest.approx(want)
            kinds.add(res["configs"][task]["output_type"])
            cells = res["config"]["sflm_bench"]["cells"]
            (cell,) = [c for c, v in cells.items() if v["task"] == task]
            recs = read_records(store, f"records/{cell}.jsonl.gz")
            key = "output" if "output" in recs[0] else "nll"
            got = [x[0][0] for x in ds["resps"]]  # requests x repeats
            want_resps = [r[key] if key == "output" else -r[key] for r in recs]
            if key == "nll":
                assert sorted(got) == pytest.approx(sorted(want_resps))
            else:
                assert sorted(got) == sorted(want_resps)
    assert kinds == {"generate_until", "loglikelihood_rolling"}


def test_export_twice_writes_the_same_bytes(store, exported, tmp_path):
    out, files = exported
    again = export(store, Store(store).read(), tmp_path / "again")
    assert [f.relative_to(tmp_path / "again") for f in again] == [f.relative_to(out) for f in files]
    for a, b in zip(again, files):
        assert a.read_bytes() == b.read_bytes()


def test_a_folder_that_is_not_empty_is_refused_and_left_as_it_was(store, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(ExportError, match="busy: exists and is not an empty folder"):
        export(store, Store(store).read(), out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    df = Store(store).read()
    with pytest.raises(ExportError, match="no sample or likelihood cell"):
        export(store, df[df["kind"] == "train"], tmp_path / "none")
    assert not (tmp_path / "none").exists() and not list(tmp_path.glob(".none.*"))


def test_wandb_offline_logs_the_same_tables(exported, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out, _ = exported
    assert log_wandb(out, {"project": "sflm-bench-test", "dir": str(tmp_path)}) == 4
    tables = list(tmp_path.rglob("eval_results_*.table.json"))
    assert len(tables) == 4
    logged = {}
    for t in tables:
        for task, _v, _f, _n, metric, value, _se in json.loads(t.read_text())["data"]:
            logged[(task, metric, value)] = True
    for res in _results(out).values():
        for task, metrics in res["results"].items():
            for k, v in metrics.items():
                if k.endswith(",none") and "_stderr" not in k:
                    assert (task, k.split(",")[0], str(v)) in logged


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=600
    )


def test_results_export_command_writes_once_and_refuses_a_full_folder(store, tmp_path):
    out = tmp_path / "cli"
    p = _run(
        "bench.results",
        "export",
        "--lm-eval",
        str(out),
        "--results-dir",
        str(store),
        "--model",
        "mdlm",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"{out}: 2 lm-eval runs, 3 samples files"
    before = sorted((f, f.read_bytes()) for f in out.rglob("*") if f.is_file())
    again = _run("bench.results", "export", "--lm-eval", str(out), "--results-dir", str(store))
    assert again.returncode == 2
    assert again.stderr.strip() == f"error: {out}: exists and is not an empty folder"
    assert sorted((f, f.read_bytes()) for f in out.rglob("*") if f.is_file()) == before
    none = _run(
        "bench.results",
        "export",
        "--lm-eval",
        str(tmp_path / "x"),
        "--results-dir",
        str(store),
        "--task",
        "gsm8k",
    )
    assert none.returncode == 2 and "no sample or likelihood cell" in none.stderr
    assert len(none.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


def test_bench_eval_writes_the_lm_eval_files_of_its_cells(store, tmp_path):
    run_dir = next((store / "runs").glob("mdlm-*"))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "f").write_text("x")
    p = _run("bench.eval", str(run_dir), "--nfe", "3", "--output-lm-eval", str(busy))
    assert p.returncode == 2 and p.stderr.strip().endswith("exists and is not an empty folder")
    out = tmp_path / "eval"
    p = _run(
        "bench.eval",
        str(run_dir),
        "--nfe",
        "3",
        "--set",
        "sample.n_samples=16",
        "--output-lm-eval",
        str(out),
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    assert "(0 computed now" in p.stdout  # the sweep's own cells, reused
    (res,) = _results(out).values()
    assert set(res["results"]) == {"sudoku_easy", "sudoku_hard"}
    assert (
        res["config"]["gen_kwargs"]["nfe"] == 3 and res["config"]["model_args"]["method"] == "mdlm"
    )
    p = _run(
        "bench.eval",
        str(run_dir),
        "--likelihood",
        "heldout",
        "--limit",
        "16",
        "--output-lm-eval",
        str(tmp_path / "lk"),
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    (res,) = _results(tmp_path / "lk").values()
    assert list(res["results"]) == ["sudoku_likelihood_heldout"]
