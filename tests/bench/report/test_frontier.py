"""The Gen. PPL / entropy frontier report (bench/report/frontier/section.py): window, Pareto points,
interpolation at the data's entropy, and the files it writes from a synthetic store."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from bench.report.frontier import section as F
from bench.results import Store


def test_window_is_the_papers_by_default():
    w = F.Window()
    got = w.contains([4.4, 4.5, 5.0, 6.0, 6.1, 5.0, 5.0], [10, 10, 500, 10, 10, 501, float("nan")])
    assert got.tolist() == [False, True, True, True, False, False, False]


def test_pareto_points_maximise_entropy_and_minimise_ppl():
    h = [5.0, 5.5, 5.5, 4.8, 6.0]
    p = [20.0, 30.0, 25.0, 19.0, 90.0]
    # (5.5, 30) is dominated by (5.5, 25); the others trade entropy for PPL
    assert F.pareto_mask(h, p).tolist() == [True, False, True, True, True]
    assert F.pareto_mask([5.0, 5.0], [10.0, 10.0]).tolist() == [
        True,
        True,
    ]  # ties: neither strictly better


def test_ppl_at_entropy_is_log_linear_between_bracketing_points():
    h, p = [4.8, 5.2, 5.6], [20.0, 40.0, 160.0]
    assert F.ppl_at_entropy(h, p, 5.2) == 40.0
    mid = F.ppl_at_entropy(h, p, 5.4)
    assert mid == pytest.approx(math.sqrt(40.0 * 160.0))  # geometric mean half way
    assert F.ppl_at_entropy(h[::-1], p[::-1], 5.4) == pytest.approx(mid)  # any order
    assert F.ppl_at_entropy(h, p, 5.7) is None and F.ppl_at_entropy(h, p, 4.0) is None


def _rows(
    method,
    decoding,
    nfe,
    temperature,
    H,
    ppl,
    *,
    variant="base",
    t_free=False,
    stand_in="OpenWebText",
):
    base = {
        "task": "owt",
        "method": method,
        "variant": variant,
        "decoding": decoding,
        "kind": "sample",
        "subset": "standin-x",
        "nfe": nfe,
        "temperature": temperature,
        "train_steps": 10,
        "seed": 0,
        "task_kind": "frontier",
        "task_title": "OpenWebText",
        "stand_in_for": stand_in,
        "nfe_is_length": False,
        "temperature_free": t_free,
        "default_decoding": True,
        "n": 16,
        "task_protocol": "corpus=standin-x; L=64; ref=tiny-lm; eot=paper",
    }
    return [
        {
            **base,
            "metric": "gen_ppl",
            "value": ppl,
            "ci_low": ppl * 0.9,
            "ci_high": ppl * 1.1,
            "metric_rank": 0,
        },
        {**base, "metric": "gen_ppl_pooled", "value": ppl * 0.8, "metric_rank": 1},
        {
            **base,
            "metric": "entropy",
            "value": H,
            "ci_low": H - 0.01,
            "ci_high": H + 0.01,
            "metric_rank": 2,
        },
    ]


def test_report_writes_the_frontier_files(tmp_path):
    from bench.report.cli import main

    s = Store(tmp_path)
    k = 0
    for nfe in (8, 32):
        for T, H, p in ((0.8, 5.0, 30.0), (1.0, 5.4, 60.0), (1.2, 5.8, 200.0)):
            s.write_cell(f"m{k}", _rows("mdlm", "ancestral", nfe, T, H, p * (2 if nfe == 8 else 1)))
            s.write_cell(
                f"d{k}", _rows("duo", "ancestral", nfe, T, H - 1.5, p)
            )  # collapsed: H < 4.5
            k += 1
        s.write_cell(f"t{nfe}", _rows("sflm", "top1", nfe, 1.0, 5.2, 45.0, t_free=True))
    data = _rows("data", "data", None, None, 5.4, 25.0)
    s.write_cell("data", [dict(r, variant="held-out", kind="reference") for r in data])
    out = tmp_path / "rep"
    assert main(["--results-dir", str(tmp_path), "--out", str(out)]) == 0
    for stem in (
        "owt_gen_ppl_vs_entropy_nfe8",
        "owt_gen_ppl_vs_entropy_nfe32",
        "owt_gen_ppl_vs_entropy_all_nfe",
    ):
        assert (out / f"{stem}.png").is_file() and (out / f"{stem}.pdf").is_file()
    md = (out / "owt_frontier.md").read_text()
    # Gen. PPL is no fraction: no generic percent tables, owt.md points to the frontier
    assert (
        "(%)" not in (out / "owt.md").read_text()
        and "owt_frontier.md" in (out / "owt.md").read_text()
    )
    assert "stand-in corpus, not OpenWebText" in md
    assert "H = 5.400, Gen. PPL = 25.0" in md
    assert "Protocol: `corpus=standin-x; L=64; ref=tiny-lm; eot=paper`" in md  # names the scorer
    table = [ln for ln in md.splitlines() if ln.startswith("| mdlm ancestral | 32 |")]
    # H_data = 5.4 is a cell: its exact value; the interval is about that cell's own 95 % CI
    # [54, 66], a little wider for the uncertainty in H (parametric bootstrap)
    m = re.search(r"\| 60\.0 \[([\d.]+), ([\d.]+)\] \|", table[0]) if table else None
    assert m and 53.0 < float(m[1]) < 56.0 and 64.0 < float(m[2]) < 69.0, table
    assert "| duo ancestral | 8 | outside the window |" in md
    assert "| sflm top1 | 32 | does not reach H_data" in md
    # every cell is listed, in the window or not, with the pooled value
    assert md.count("| duo ancestral |") == 2 + 6


def test_report_without_frontier_rows_writes_no_frontier(tmp_path):
    from bench.report.cli import main

    s = Store(tmp_path)
    rows = _rows("mdlm", "ancestral", 8, 1.0, 5.0, 30.0)
    s.write_cell("m", [dict(r, task="other", task_kind="generic") for r in rows])
    out = tmp_path / "rep"
    assert main(["--results-dir", str(tmp_path), "--out", str(out)]) == 0
    assert not list(out.glob("*frontier*")) and not list(out.glob("*gen_ppl_vs_entropy*"))


def test_window_option(tmp_path):
    from bench.report.cli import main

    s = Store(tmp_path)
    for i, (T, H, p) in enumerate(((0.8, 3.0, 30.0), (1.0, 3.4, 60.0))):
        s.write_cell(f"m{i}", _rows("mdlm", "ancestral", 8, T, H, p))
    s.write_cell(
        "data", [dict(r, kind="reference") for r in _rows("data", "data", None, None, 3.2, 25.0)]
    )
    out = tmp_path / "rep"
    assert (
        main(
            [
                "--results-dir",
                str(tmp_path),
                "--out",
                str(out),
                "--frontier-window",
                "2.0",
                "6.0",
                "1000",
            ]
        )
        == 0
    )
    md = (out / "owt_frontier.md").read_text()
    assert f"| mdlm ancestral | 8 | {np.sqrt(30 * 60):.1f}" in md


def test_an_empty_window_falls_back_to_every_cell(tmp_path):
    """Short smoke samples (L = 64: H <= ln 64 = 4.16) never reach the paper's window: the
    figures then show every cell and the Markdown says so."""
    from bench.report.cli import main

    s = Store(tmp_path)
    for i, (T, H, p) in enumerate(((0.8, 3.0, 3000.0), (1.0, 3.4, 9000.0))):
        s.write_cell(f"m{i}", _rows("mdlm", "ancestral", 8, T, H, p))
    s.write_cell(
        "data", [dict(r, kind="reference") for r in _rows("data", "data", None, None, 3.2, 25.0)]
    )
    out = tmp_path / "rep"
    assert main(["--results-dir", str(tmp_path), "--out", str(out)]) == 0
    md = (out / "owt_frontier.md").read_text()
    assert "No model cell lies inside the window (4.5 <= H <= 6" in md
    assert f"| mdlm ancestral | 8 | {np.sqrt(3000 * 9000):.1f}" in md
    assert (out / "owt_gen_ppl_vs_entropy_nfe8.png").is_file()
