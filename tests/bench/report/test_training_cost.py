"""Training cost (paper table ``tab:training-cost``) from a synthetic store of train rows only:
steps/s, duration and device-hours per (task, model) beside the paper's numbers, as the report
section ``training_cost`` and the paper artifact ``tab-training-cost``."""

import pandas as pd
import pytest

from bench.report import main, renderers
from bench.report import training_cost as tc
from bench.results import Store, read, task_columns


def _train_cell(task_cls, method, variant, steps, sps, seed=0):
    base = {
        "task": task_cls.name,
        "method": method,
        "variant": variant,
        "backbone": "cpu-mini",
        "seed": seed,
        "config_hash": f"{task_cls.name}-{method}-{variant}-{seed}",
        "train_cell": f"{task_cls.name}-{method}-{variant}-{seed}",
        "kind": "train",
        "train_steps": steps,
        "subset": "all",
        "wall_s": steps / sps / 2,  # as if resumed: the last process ran half the steps
        **task_columns(task_cls),
    }
    return [
        {**base, "metric": "train_steps_per_s", "value": sps, "n": steps},
        {**base, "metric": "train_final_loss", "value": 0.5, "n": steps},
        {**base, "metric": "n_params", "value": 1000.0, "n": 1},
    ]


@pytest.fixture
def store(tmp_path):
    from bench.data.owt.task import OWTTask
    from bench.data.program.arith import ArithTask
    from bench.data.sudoku.task import SudokuTask

    s = Store(tmp_path)
    cells = [
        (ArithTask, "ar", "base", 800, 10.0, 0),
        (ArithTask, "ar", "base", 800, 12.0, 1),
        (ArithTask, "sflm", "trunc-adaptive", 2000, 4.0, 0),
        (OWTTask, "mdlm", "base", 100, 2.0, 0),
        (SudokuTask, "sflm", "sarch-trunc-adaptive", 600, 3.0, 0),
        (SudokuTask, "candi", "pure-gaussian", 600, 5.0, 0),
    ]
    for i, c in enumerate(cells):
        s.write_cell(f"t{i}", _train_cell(*c))
    return tmp_path


def test_paper_numbers_are_the_table_and_self_consistent():
    p = tc.paper_cost()
    assert len(p) == 8 * 2 * 3 and set(p["task"]) == {"gsm8k", "owt"}
    v = p.pivot_table(index=["label", "task"], columns="metric", values="value").reset_index()
    ar = v[(v["label"] == "AR") & (v["task"] == "owt")].iloc[0]
    assert (ar["steps_per_s"], ar["duration_h"], ar["gpu_hours"]) == (6.0, 46.6, 745.7)
    meta = p.groupby("task")[["steps", "gpus"]].first()
    assert meta.loc["gsm8k"].tolist() == [250_000, 8] and meta.loc["owt"].tolist() == [10**6, 16]
    # the paper derives duration from steps/s and GPU-hours from duration x GPUs (its caption)
    v = v.merge(meta, left_on="task", right_index=True)
    dur = v["steps"] / v["steps_per_s"] / 3600
    assert ((dur / v["duration_h"] - 1).abs() < 0.03).all()
    assert ((v["duration_h"] * v["gpus"] / v["gpu_hours"] - 1).abs() < 0.01).all()


def test_table_in_the_paper_layout_with_ours_beside(store):
    table, tidy, have, miss = tc.cost_table(read(store))
    assert list(table["model"][:8]) == list(dict.fromkeys(tc.paper_cost()["label"]))
    row = table.set_index("model")
    head = "TinyGSM [ours: arith_standin]"  # the stand-in fills the paper's TinyGSM column
    assert row.loc["AR", f"steps/s {head}"] == "11 (2 runs)"  # mean of 10 and 12 steps/s
    assert row.loc["AR", "steps/s TinyGSM (paper)"] == "5.4"  # one paper column per task
    # duration = steps / (steps/s), per run, then the mean: (800/10 + 800/12) / 2 s
    want = (80 + 800 / 12) / 2 / 3600
    assert row.loc["AR", f"duration (h) {head}"] == f"{want:.3g} (800 steps)"
    assert row.loc["AR", f"device-hours {head}"] == f"{want:.3g} unrecorded"
    assert row.loc["S-FLM + adapt.", f"steps/s {head}"] == "4"
    assert row.loc["MDLM", "steps/s OWT"] == "2" and row.loc["MDLM", "steps/s OWT (paper)"] == "3.5"
    assert row.loc["MDLM", f"steps/s {head}"] == ""
    # S-arch: the quickstart's variant name is an accepted alternative; Sudoku has no paper column
    assert row.loc["S-FLM + adapt. + S-arch", "steps/s sudoku"] == "3"
    assert "steps/s sudoku (paper)" not in table.columns
    assert row.loc["candi/pure-gaussian (not in the paper's table)", "steps/s sudoku"] == "5"
    assert f"{head}: AR" in have and "OWT: AR" in miss and "OWT: MDLM" in have
    ar = tidy[(tidy["model"] == "AR") & (tidy["column"] == head)].iloc[0]
    assert ar["runs"] == 2 and ar["paper_gpu_hours"] == 102.1 and ar["paper_gpus"] == 8
    assert ar["duration_h"] == pytest.approx(want) and ar["wall_s"] == pytest.approx(want * 1800)


def test_gpu_rows_give_gpu_hours(store):
    df = read(store)
    df["device"], df["devices"] = "cuda:NVIDIA H100", 8  # columns a store may record
    r = tc.runs(df)
    assert set(r["unit"]) == {"GPU"}
    assert (r["device_hours"] == 8 * r["duration_h"]).all()
    table, *_ = tc.cost_table(df)
    assert table.set_index("model").loc["MDLM", "device-hours OWT"] == f"{8 * 50 / 3600:.3g} GPU"
    df["device"], df["devices"] = "cpu", 1
    assert set(tc.runs(df)["unit"]) == {"CPU"}


def test_report_section_and_paper_label(store, capsys):
    out = store / "rep"
    assert main(["--results-dir", str(store), "--out", str(out)]) == 0
    md = (out / "training_cost.md").read_text()
    assert "| AR |" in md and "5.4" in md and "unrecorded" in md
    assert pd.read_csv(out / "training_cost.csv")["runs"].max() == 2
    assert main(["--results-dir", str(store), "--out", str(out), "--list"]) == 0
    listing = capsys.readouterr().out
    line = next(x for x in listing.splitlines() if x.startswith(tc.LABEL))
    assert "partial" in line and "gsm8k_smoke" in line
    assert "need: OWT: AR" in listing
    assert tc.LABEL in renderers.paper_artifacts()
    assert main(["--results-dir", str(store), "--out", str(out), "--figure", tc.LABEL]) == 0
    assert (out / "paper" / f"{tc.LABEL}.md").read_text().count("| S-FLM") == 3


def test_no_train_rows_no_section_but_the_label_shows_the_paper(tmp_path):
    out = tmp_path / "rep"
    assert (
        main(["--results-dir", str(tmp_path / "none"), "--out", str(out), "--figure", tc.LABEL])
        == 0
    )
    text = (out / "paper" / f"{tc.LABEL}.md").read_text()
    assert "no train rows" in text and "| AR |" in text and "745.7" in text
