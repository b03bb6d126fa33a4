"""``python -m bench.report --paper / --figure / --list``: every paper label is written from a
synthetic store (rows only, no training) with the paper's series, marks and missing notes; the
alpha*(delta) grid needs no store; top-k decodings reuse the trained model."""

import sys
import types

import numpy as np
import pandas as pd
import pytest
import torch

from bench.report import main, renderers
from bench.report.paper import catalogue as artifacts
from bench.report.paper.curves import CurveFigure
from bench.results import Store, sample_columns

NFES = (8, 32)


def _rows(task_cls, method_cls, variant, decoding, subset, nfe, temp, metrics, seed=0):
    return [
        {
            "task": task_cls.name,
            "method": method_cls.name,
            "variant": variant,
            "decoding": decoding,
            "kind": "sample",
            "subset": subset,
            "metric": m,
            "value": v,
            "ci_low": v - 0.01,
            "ci_high": v + 0.01,
            "n": 128,
            "nfe": nfe,
            "temperature": temp,
            "train_steps": 100,
            "seed": seed,
            **sample_columns(task_cls, method_cls, decoding, subset, m),
        }
        for m, v in metrics.items()
    ]


def _store(root, gsm8k_cls=None):
    from baselines.ar import AR
    from baselines.candi import CANDI
    from baselines.duo import Duo
    from baselines.flm import FLM
    from baselines.mdlm import MDLM
    from bench.data.owt.task import OWTTask
    from bench.data.program.gsm8k import GSM8KTask
    from bench.data.sudoku.task import SudokuTask
    from sflm.method import SFLM

    task = gsm8k_cls or GSM8KTask
    s = Store(root)
    n = [0]

    def put(rows):
        n[0] += 1
        s.write_cell(f"c{n[0]}", rows)

    sflm_gsm = [
        ("sarch", d) for d in ("exact", "stochastic", *(f"top{k}" for k in artifacts.TOPK_GRID))
    ]
    sflm_gsm += [
        ("trunc-adaptive", "exact"),
        ("base", "exact"),
        ("trunc", "exact"),
        ("trunc-norenorm", "exact"),
        ("trunc0.8", "exact"),
        ("trunc-d0.01", "exact"),
        ("trunc0.9", "exact"),
    ]
    for variant, dec in sflm_gsm:
        temps = (1.0,) if dec == "top1" else (1.0, 0.1)
        for nfe in NFES:
            for t in temps:
                put(_rows(task, SFLM, variant, dec, "test", nfe, t, {"accuracy": 0.1}))
    for cls, dec in (
        (MDLM, "ancestral"),
        (Duo, Duo.decodings[0]),
        (CANDI, CANDI.decodings[0]),
        (FLM, FLM.decodings[0]),
    ):
        for nfe in NFES:
            for t in (1.0, 0.1):
                put(_rows(task, cls, "base", dec, "test", nfe, t, {"accuracy": 0.2}))
    for dec in ("sample", "greedy"):
        put(_rows(task, AR, "base", dec, "test", 64, 1.0, {"accuracy": 0.5}))
    # Sudoku: the main table and the renorm ablation
    sud = [
        (AR, "base", "sample"),
        (AR, "base", "greedy"),
        (MDLM, "base", "ancestral"),
        (Duo, "base", Duo.decodings[0]),
        (CANDI, "base", CANDI.decodings[0]),
        (CANDI, "pure-gaussian", CANDI.decodings[0]),
        (FLM, "base", FLM.decodings[0]),
    ]
    sud += [
        (SFLM, v, "exact")
        for v in (
            "base",
            "trunc",
            "trunc-adaptive",
            "cos2",
            "cos2-trunc",
            "renorm",
            "trunc-renorm",
            "cos2-renorm",
            "cos2-trunc-renorm",
        )
    ]
    for cls, v, dec in sud:
        for sub in ("easy", "medium", "hard"):
            put(_rows(SudokuTask, cls, v, dec, sub, 16, 1.0, {"exact_match": 0.4}))
    # OWT frontier cells at the two NFEs of the main figure
    for nfe in (32, 1024):
        for t in (0.8, 1.0):
            put(
                _rows(
                    OWTTask,
                    MDLM,
                    "base",
                    "ancestral",
                    "all",
                    nfe,
                    t,
                    {"gen_ppl": 100 * t, "gen_ppl_pooled": 90 * t, "entropy": 5.0 + t / 2},
                )
            )
    return s


def _fake_run(root):
    """A trained adaptive S-FLM run: cell.json + weights.pt with a fitted adaptive schedule."""
    import json

    run = root / "runs" / "sflm-trunc-adaptive-abc"
    run.mkdir(parents=True)
    run.joinpath("cell.json").write_text(
        json.dumps(
            {
                "method": "sflm",
                "variant": "trunc-adaptive",
                "options": {"schedule": "linear", "adaptive": True, "eps": 1e-3},
            }
        )
    )
    g = np.linspace(0, 1, 50)
    vals = 0.12 * (1 - g) ** 2 + 1e-3
    torch.save(
        {
            "method_state": {
                "adaptive._extra_state": {"alpha_vals": torch.tensor(vals), "refit_count": 7}
            }
        },
        run / "weights.pt",
    )


@pytest.fixture
def fake_token_lengths(monkeypatch):
    mod = types.ModuleType("bench.data.program.length_stats")

    def run(standin=0, **k):
        hist = {"edges": [0, 32, 64], "counts": [3, 5], "bin_width": 32}
        return {
            "data": f"{standin} generated stand-in problems (test)",
            "tokenizers": {
                "gpt2": {"median": 40.0, "n": 8, "histogram": hist},
                "smollm": {"median": 30.0, "n": 8, "histogram": hist},
            },
        }

    mod.run = run
    monkeypatch.setitem(sys.modules, "bench.data.program.length_stats", mod)


def test_every_label_is_written_with_its_series(tmp_path, fake_token_lengths):
    _store(tmp_path)
    _fake_run(tmp_path)
    out = tmp_path / "rep"
    labels = [
        x for x in renderers.paper_artifacts() if x != "fig-S-FLM-fig1"
    ]  # a diagram, not data
    argv = ["--results-dir", str(tmp_path), "--out", str(out), "--mc-trials", "200"]
    for x in labels:
        argv += ["--figure", x]
    assert main(argv) == 0
    paper = out / "paper"
    for x in labels:
        a = renderers.paper_artifacts()[x]
        assert (paper / f"{x}.csv").is_file(), x
        if a.kind == "figure":
            assert (paper / f"{x}.pdf").stat().st_size > 0, x
        else:
            assert (paper / f"{x}.md").is_file(), x
    # curve figures: every series of every panel drawn from the store, the marks beside them
    for a in renderers.paper_artifacts().values():
        if not isinstance(a, CurveFigure):
            continue
        d = pd.read_csv(paper / f"{a.label}.csv")
        ours = d[d["kind"] == "ours"]
        assert not (d["kind"] == "missing").any(), a.label
        for p in a.panels:
            got = set(ours.loc[ours["panel"] == p.title, "series"])
            assert {s.label for s in p.series} <= got, (a.label, p.title)
            assert set(ours.loc[ours["panel"] == p.title, "nfe"]) == set(NFES)
    top = pd.read_csv(paper / "fig-tinygsm-T0p1.csv")
    marks = set(top.loc[top["kind"] == "paper", "value"].round(2))
    assert {0.36, 0.33, 0.18} <= marks  # Duo 36 %, MDLM 33 %, S-FLM ~18 % at T = 0.1
    # tables: ours beside the paper
    main_t = pd.read_csv(paper / "tab-tinygsm_main.csv")
    assert main_t.loc[main_t["model"] == "MDLM", "test (paper)"].iloc[0] == 18.0
    assert main_t["test (ours)"].notna().all()
    abl = pd.read_csv(paper / "tab-sfm_tinygsm_all_schedules.csv")
    assert list(abl["paper (ablation)"]) == [1.21, 4.62, 7.66, 7.43, 7.73]
    assert abl.loc[abl["variant"] == "sflm/trunc", "paper (main table)"].iloc[0] == 7.7
    assert "disagrees with itself" in (paper / "tab-sfm_tinygsm_all_schedules.md").read_text()
    ren = pd.read_csv(paper / "tab-sfm_renorm.csv")
    assert len(ren) == 4 and ren["with hard (paper)"].tolist() == [11.3, 40.1, 28.8, 34.1]
    sched = pd.read_csv(paper / "tab-noise-schedules.csv")
    assert {"adaptive: sflm-trunc-adaptive-abc", "base: sflm-trunc-adaptive-abc"} <= set(
        sched["series"]
    )
    tl = pd.read_csv(paper / "fig-tokenlen-smollm-gpt2.csv")
    assert set(tl.loc[tl["kind"] == "paper", "value"]) == {204, 180}
    owt = pd.read_csv(paper / "fig-owt-pareto-main.csv")
    assert set(owt["nfe"]) == {32, 1024}


def test_missing_cells_are_drawn_with_a_note_and_listed(tmp_path, capsys):
    from baselines.mdlm import MDLM
    from bench.data.program.arith import ArithTask

    Store(tmp_path).write_cell(
        "m", _rows(ArithTask, MDLM, "base", "ancestral", "heldout", 8, 1.0, {"accuracy": 0.3})
    )
    out = tmp_path / "rep"
    assert main(["--results-dir", str(tmp_path), "--out", str(out), "--list"]) == 0
    listing = capsys.readouterr().out
    assert "fig-tinygsm-T1p0" in listing and "partial" in listing
    assert "need: right: vs MDLM, Duo: duo/base" in listing
    assert (
        main(["--results-dir", str(tmp_path), "--out", str(out), "--paper", "--mc-trials", "0"])
        == 0
    )
    d = pd.read_csv(out / "paper" / "fig-tinygsm-T1p0.csv")
    assert set(d.loc[d["kind"] == "ours", "series"]) == {"MDLM"}
    assert "Duo" in set(d.loc[d["kind"] == "missing", "series"])
    # the store has no Sudoku rows: that table is skipped (listed as missing), never empty
    assert not (out / "paper" / "tab-sudoku.md").exists()
    assert (out / "paper" / "tab-alpha-crit-grid.md").is_file()  # needs no store


def test_alpha_crit_grid_needs_no_store_and_matches_the_paper(tmp_path):
    out = tmp_path / "rep"
    assert (
        main(
            [
                "--results-dir",
                str(tmp_path / "nothing"),
                "--out",
                str(out),
                "--figure",
                "tab-alpha-crit-grid",
                "--mc-trials",
                "500",
            ]
        )
        == 0
    )
    t = pd.read_csv(out / "paper" / "tab-alpha-crit-grid.csv")
    assert len(t) == 30
    assert ((t["alpha* (ours)"] - t["alpha* (paper)"]).abs() <= 0.0005 + 1e-9).all()
    assert t["P[target nearest]"].between(0, 1).all()
    assert main(["--results-dir", str(tmp_path), "--figure", "no-such-label"]) == 2


def test_topk_decodings_reuse_one_trained_model():
    """Every top<k> of the paper's grid is accepted by the planner and the S-arch model's sample
    cells all hang off one train cell (a new k needs no training)."""
    from bench.config import load_sweep
    from bench.plan import plan

    p = plan(load_sweep("sweeps/gsm8k_nfe.yaml"), "gsm8k_nfe.yaml")
    sarch = [tc for tc in p.train_cells if tc.variant == "sarch"]
    assert len(sarch) == 1
    decs = {c.decoding for c in p.samples_of(sarch[0])}
    assert {f"top{k}" for k in artifacts.TOPK_GRID} <= decs
    variants = {tc.variant for tc in p.train_cells if tc.method == "sflm"}
    assert {"base", "trunc", "trunc0.8", "trunc-d0.01", "trunc0.9"} <= variants
