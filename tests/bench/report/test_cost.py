"""Seconds in the report (bench/report/cost.py, bench/report/frontier/seconds.py, the measured
columns of bench/report/training_cost.py): from stores whose rows carry the measured cost
columns, the headline tables' ``s / sample`` (and, for a program task, ``s / item incl.
scoring``) computed from the rows, the device named once or per row, the accuracy-vs-seconds
figures beside the NFE ones, the frontier's panel over seconds and the training cost's s/step;
a store without those columns reports as before."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.report import main
from bench.report import training_cost as tc
from bench.report.cost import seconds_points
from bench.report.document import read_page_data
from bench.report.tables import task_markdown
from bench.results import Store, read, sample_columns, task_columns

H100 = "cuda: NVIDIA H100 80GB HBM3"
EPYC = "cpu: AMD EPYC 7763 64-Core Processor"


def _cell(task_cls, method_cls, decoding, subset, nfe, value, *, seed=0, n=256, cost=None,
          metric=None, temperature=1.0, **extra):  # fmt: skip
    """One sample cell's rows: the headline metric (with a 95 % interval) and, for Sudoku, one
    secondary metric; ``cost``: the measured columns every row of the cell carries."""
    metric = metric or task_cls.headline_metric
    metrics = {metric: value}
    if task_cls.secondary_metrics:
        metrics[task_cls.secondary_metrics[0]] = min(1.0, value + 0.2)
    return [
        {
            "task": task_cls.name,
            "method": method_cls.name,
            "variant": "base",
            "decoding": decoding,
            "kind": "sample",
            "subset": subset,
            "metric": m,
            "value": v,
            "ci_low": max(0.0, v - 0.05),
            "ci_high": min(1.0, v + 0.05),
            "n": n,
            "nfe": nfe,
            "temperature": temperature,
            "train_steps": 600,
            "seed": seed,
            **sample_columns(task_cls, method_cls, decoding, subset, m),
            **(cost or {}),
            **extra,
        }
        for m, v in metrics.items()
    ]


def _headline(md: str) -> pd.DataFrame:
    """The first Markdown table of ``md`` (the headline table), indexed by model."""
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    end = next((i for i, ln in enumerate(lines[2:], 2) if not ln.startswith("| ")), len(lines))
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines[:end]]
    head = rows[0]
    body = [r for r in rows[2:] if len(r) == len(head)]
    return pd.DataFrame(body, columns=head).set_index("model")


def _sudoku_store(root, devices=(H100, H100, H100)):
    """MDLM (two seeds, NFE 4 and 16, two subsets), AR (NFE = length 19) and FLM (rows with
    ``seconds_per_sample`` and no ``sample_s``, its subsets of 256 and 64 items), each on its
    device of ``devices``."""
    from baselines.ar import AR
    from baselines.flm import FLM
    from baselines.mdlm import MDLM
    from bench.data.sudoku.task import SudokuTask

    s = Store(root)
    mdlm_dev, ar_dev, flm_dev = devices
    k = 0
    for seed in (0, 1):
        for sub in ("easy", "medium"):
            for nfe in (4, 16):
                k += 1
                # NFE 16: 2, 3, 4, 5 s over 256 items each; NFE 4: a quarter of that
                secs = (2.0 + 2 * seed + (sub == "medium")) * (1 if nfe == 16 else 0.25)
                cost = {"sample_s": secs, "score_s": 0.1, "device_name": mdlm_dev}
                if seed == 0:  # the newer column where the row has it, sample_s / n where not
                    cost["seconds_per_sample"] = secs / 256
                v = 0.3 + 0.1 * seed + (0.1 if nfe == 16 else 0.0)
                s.write_cell(
                    f"m{k}", _cell(SudokuTask, MDLM, "ancestral", sub, nfe, v, seed=seed, cost=cost)
                )
        for sub in ("easy", "medium"):
            cost = {"sample_s": 0.5, "score_s": 0.1, "device_name": ar_dev}
            s.write_cell(f"a{seed}{sub}", _cell(SudokuTask, AR, "greedy", sub, 19, 0.6,
                                                seed=seed, cost=cost))  # fmt: skip
    for sub, n, sps in (("easy", 256, 0.5), ("medium", 64, 1.0)):
        cost = {"seconds_per_sample": sps, "device_name": flm_dev}
        s.write_cell(f"f{sub}", _cell(SudokuTask, FLM, "euler", sub, 16, 0.2, n=n, cost=cost))
    return root


def test_headline_table_figure_and_page_show_seconds_per_sample(tmp_path):
    _sudoku_store(tmp_path)
    out = tmp_path / "rep"
    assert main(["--results-dir", str(tmp_path), "--out", str(out)]) == 0
    md = (out / "sudoku.md").read_text()
    t = _headline(md)
    # MDLM at its headline NFE (16): (2 + 3 + 4 + 5) s over 4 x 256 items, seeds and subsets
    assert t.loc["mdlm (ancestral)", "s / sample"] == f"{14 / 1024:.3g}" == "0.0137"
    assert t.loc["ar (greedy)", "s / sample"] == f"{1 / 512:.3g}"  # 4 x 0.5 s / 4 x 256 items
    # seconds_per_sample as recorded, weighted by items: (256 x 0.5 + 64 x 1.0) / 320
    assert t.loc["flm (euler)", "s / sample"] == "0.6"
    # Sudoku's scoring is not the program kind's: no column with scoring; one device: no column
    assert "s / item incl. scoring" not in t.columns and "device" not in t.columns
    assert f"measured on {H100}" in md
    (table,) = [b for b in read_page_data(out / "sudoku.md") if b["kind"] == "table"][:1]
    assert table["caption"].endswith(f"seconds measured on {H100}")
    # the figure beside the NFE one: every NFE's point at its seconds
    for ext in ("svg", "png", "pdf"):
        assert (out / f"sudoku_exact_match_vs_seconds.{ext}").is_file()
        assert (out / f"sudoku_exact_match_vs_nfe.{ext}").is_file()
    p, metric = seconds_points("sudoku", read(tmp_path))
    assert metric == "exact_match"
    m = p[(p["model"] == "mdlm (ancestral)") & (p["subset"] == "easy")].set_index("nfe")
    # seeds 0 and 1: a quarter of 2 and 4 s at NFE 4, 2 and 4 s at NFE 16, over 2 x 256 items
    assert m.loc[4.0, "seconds"] == pytest.approx((0.5 + 1.0) / 512)
    assert m.loc[16.0, "seconds"] == pytest.approx((2.0 + 4.0) / 512)
    assert m.loc[16.0, "seeds"] == 2 and m.loc[16.0, "value"] == pytest.approx(0.45)
    html = (out / "index.html").read_text()
    assert "sudoku_exact_match_vs_seconds.svg" in html and "s / sample" in html


def test_seconds_from_different_devices_are_named_per_row(tmp_path):
    _sudoku_store(tmp_path, devices=(H100, EPYC, H100))
    md = task_markdown("sudoku", read(tmp_path))[0].markdown()
    t = _headline(md)
    assert t.loc["ar (greedy)", "device"] == EPYC
    assert t.loc["mdlm (ancestral)", "device"] == t.loc["flm (euler)", "device"] == H100
    assert "measured on different devices" in md and f"measured on {H100}" not in md


def test_a_model_measured_on_two_devices_says_mixed_and_draws_a_line_per_device(tmp_path):
    from baselines.mdlm import MDLM
    from bench.data.sudoku.task import SudokuTask

    s = Store(tmp_path)
    for seed, (dev, threads) in enumerate(((EPYC, 8), (EPYC, 16))):
        cost = {"sample_s": 1.0 + seed, "device_name": dev, "threads": threads}
        s.write_cell(f"m{seed}", _cell(SudokuTask, MDLM, "ancestral", "easy", 16, 0.5,
                                       seed=seed, cost=cost))  # fmt: skip
    df = read(tmp_path)
    t = _headline(task_markdown("sudoku", df)[0].markdown())
    # the same CPU under 8 and 16 threads is two devices
    assert t.loc["mdlm (ancestral)", "device"] == f"mixed: {EPYC} (16 threads); {EPYC} (8 threads)"
    p, _ = seconds_points("sudoku", df)
    assert sorted(p["seconds"]) == pytest.approx([1 / 256, 2 / 256]) and set(p["seeds"]) == {1}


def test_program_task_adds_seconds_with_scoring_and_rescored_models_keep_the_sampling(tmp_path):
    from baselines.mdlm import MDLM
    from bench.data.program.arith import ArithTask

    s = Store(tmp_path)
    cost = {"sample_s": 1.28, "score_s": 2.56, "device_name": H100}
    s.write_cell("g", _cell(ArithTask, MDLM, "ancestral", "heldout", 32, 0.5, n=128, cost=cost))
    # a re-score of the same samples with another grader: its own scoring, no sampling
    s.write_cell("r", _cell(ArithTask, MDLM, "ancestral", "heldout", 32, 0.4, n=128,
                            cost={"score_s": 1.28}, rescored_from="g",
                            scorer='{"grader":"reference"}'))  # fmt: skip
    out = tmp_path / "rep"
    assert main(["--results-dir", str(tmp_path), "--out", str(out), "--no-html"]) == 0
    t = _headline((out / "arith_standin.md").read_text())
    own, rescored = t.loc["mdlm (ancestral)"], t.loc["mdlm [scored grader=reference] (ancestral)"]
    assert own["s / sample"] == rescored["s / sample"] == "0.01"  # 1.28 s / 128 problems
    assert own["s / item incl. scoring"] == "0.03"  # (1.28 + 2.56) / 128
    assert rescored["s / item incl. scoring"] == "0.02"  # (1.28 + 1.28) / 128
    assert (out / "arith_standin_accuracy_vs_seconds.png").is_file()


def test_a_store_without_seconds_reports_as_before(tmp_path):
    from baselines.mdlm import MDLM
    from bench.data.sudoku.task import SudokuTask

    s = Store(tmp_path)
    s.write_cell("m", _cell(SudokuTask, MDLM, "ancestral", "easy", 16, 0.5))
    s.write_cell("o", _cell(SudokuTask, MDLM, "ancestral", "easy", 4, 0.4, cost={"score_s": 1.0}))
    out = tmp_path / "rep"
    assert main(["--results-dir", str(tmp_path), "--out", str(out), "--no-html"]) == 0
    md = (out / "sudoku.md").read_text()
    assert "s / sample" not in md and "device" not in _headline(md).columns
    assert (out / "sudoku_exact_match_vs_nfe.png").is_file()
    assert not list(out.glob("*vs_seconds*"))


def test_seconds_without_a_device_say_it_is_unrecorded(tmp_path):
    """A store written before ``device_name`` (``sample_s`` only): seconds, device unknown."""
    from baselines.mdlm import MDLM
    from bench.data.sudoku.task import SudokuTask

    s = Store(tmp_path)
    s.write_cell("m", _cell(SudokuTask, MDLM, "ancestral", "easy", 16, 0.5,
                            cost={"sample_s": 0.64, "score_s": 0.1}))  # fmt: skip
    md = task_markdown("sudoku", read(tmp_path))[0].markdown()
    assert _headline(md).loc["mdlm (ancestral)", "s / sample"] == "0.0025"
    assert "does not record the device" in md


# --------------------------------------------------------------------------- the frontier


def _owt_cell(method, nfe, temperature, H, ppl, *, cost=None, kind="sample"):
    base = {
        "task": "owt",
        "method": method,
        "variant": "base",
        "decoding": "ancestral" if method != "data" else "data",
        "kind": kind,
        "subset": "standin-x",
        "nfe": nfe,
        "temperature": temperature,
        "train_steps": 10,
        "seed": 0,
        "n": 16,
        "task_kind": "frontier",
        "task_title": "OpenWebText",
        "stand_in_for": "",
        "nfe_is_length": False,
        "temperature_free": False,
        "default_decoding": True,
        **(cost or {}),
    }
    return [
        {**base, "metric": "gen_ppl", "value": ppl, "ci_low": 0.9 * ppl, "ci_high": 1.1 * ppl,
         "metric_rank": 0},
        {**base, "metric": "entropy", "value": H, "ci_low": H - 0.01, "ci_high": H + 0.01,
         "metric_rank": 2},
    ]  # fmt: skip


def test_frontier_scalar_table_and_panel_over_seconds(tmp_path):
    from bench.report.frontier.section import _files

    s = Store(tmp_path)
    for nfe, secs in ((8, 1.6), (32, 6.4)):  # 16 samples each: 0.1 and 0.4 s per sample
        for i, (T, H, p) in enumerate(((0.8, 5.0, 30.0), (1.2, 5.8, 200.0))):
            cost = {"sample_s": secs * (1 + i), "score_s": 9.0, "device_name": H100}
            s.write_cell(f"m{nfe}-{i}", _owt_cell("mdlm", nfe, T, H, p, cost=cost))
    s.write_cell("data", _owt_cell("data", None, None, 5.4, 25.0, kind="reference"))
    out = tmp_path / "rep"
    out.mkdir()
    written = _files("owt", read(tmp_path), out)
    assert out / "owt_gen_ppl_vs_seconds.svg" in written
    md = (out / "owt_frontier.md").read_text()
    # per model and NFE: both temperatures' cells, (1.6 + 3.2) s over 32 samples
    assert "| mdlm ancestral | 8 |" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| mdlm ancestral | 8 |"))
    assert row.rstrip().endswith(f"| {4.8 / 32:.3g} |"), row
    assert f"measured on {H100}" in md


def test_frontier_without_seconds_has_no_column_and_no_panel(tmp_path):
    from bench.report.frontier.section import _files

    s = Store(tmp_path)
    for i, (T, H, p) in enumerate(((0.8, 5.0, 30.0), (1.2, 5.8, 200.0))):
        s.write_cell(f"m{i}", _owt_cell("mdlm", 8, T, H, p))
    s.write_cell("data", _owt_cell("data", None, None, 5.4, 25.0, kind="reference"))
    out = tmp_path / "rep"
    out.mkdir()
    _files("owt", read(tmp_path), out)
    assert "s / sample" not in (out / "owt_frontier.md").read_text()
    assert not list(out.glob("*vs_seconds*"))


# --------------------------------------------------------------------------- training cost


def _train_cell(seed, cost):
    from bench.data.sudoku.task import SudokuTask

    base = {
        "task": "sudoku",
        "method": "mdlm",
        "variant": "base",
        "backbone": "cpu-mini",
        "seed": seed,
        "config_hash": f"mdlm-{seed}",
        "train_cell": f"mdlm-{seed}",
        "kind": "train",
        "train_steps": 600,
        "subset": "all",
        "wall_s": 120.0,
        **task_columns(SudokuTask),
        **cost,
    }
    return [
        {**base, "metric": "train_steps_per_s", "value": 5.0, "n": 600},
        {**base, "metric": "train_final_loss", "value": 0.5, "n": 600},
    ]


def test_training_cost_shows_measured_columns_and_their_device(tmp_path):
    s = Store(tmp_path)
    for seed, (sps, tok) in enumerate(((0.2, 1000.0), (0.3, 3000.0))):
        cost = {"s_per_step": sps, "tokens_per_s": tok, "peak_mem_mb": 512.0 * (1 + seed),
                "device_name": H100}  # fmt: skip
        s.write_cell(f"t{seed}", _train_cell(seed, cost))
    table, tidy, _, _ = tc.cost_table(read(tmp_path))
    row = table.set_index("model").loc["MDLM"]
    assert row["s/step sudoku"] == "0.25" and row["tokens/s sudoku"] == "2,000"
    assert row["peak mem (MB) sudoku"] == "768"
    assert "device sudoku" not in table.columns  # one device: named in the note
    md = tc.markdown(read(tmp_path), "t")[0].markdown()
    assert f"measured on {H100}" in md
    ours = tidy[(tidy["model"] == "MDLM") & (tidy["task"] == "sudoku")]
    assert ours["s_per_step"].tolist() == [0.25] and ours["device_name"].tolist() == [H100]


def test_training_cost_names_each_entry_s_device_when_they_differ(tmp_path):
    s = Store(tmp_path)
    s.write_cell("t0", _train_cell(0, {"s_per_step": 0.2, "device_name": H100}))
    s.write_cell("t1", _train_cell(1, {"s_per_step": 0.4, "device_name": EPYC, "threads": 8}))
    table, _, _, _ = tc.cost_table(read(tmp_path))
    entry = table.set_index("model").loc["MDLM", "device sudoku"]
    assert entry == f"mixed: {EPYC} (8 threads); {H100}"


def test_training_cost_without_measured_columns_is_unchanged(tmp_path):
    s = Store(tmp_path)
    s.write_cell("t0", _train_cell(0, {}))
    table, _, _, _ = tc.cost_table(read(tmp_path))
    assert not [c for c in table.columns if c.startswith(("s/step", "tokens/s", "peak mem"))]
    assert "device sudoku" not in table.columns
    assert "measured on" not in tc.markdown(read(tmp_path), "t")[0].markdown()
