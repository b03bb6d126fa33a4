"""Proportion intervals are never zero-width: at 0 / n and n / n (where every bootstrap resample is
the same) the evaluators and the report give the Wilson score interval and name it in
``ci_method``; other proportions keep the percentile bootstrap.

The expected bounds are computed here from the Wilson formula itself (not through scipy): for
k = 0 the interval is [0, z^2 / (n + z^2)], for k = n it is [n / (n + z^2), 1]."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from bench.data.program.task import metric_values as program_metric_values
from bench.evaluate import paired
from bench.evaluate.bootstrap import PERCENTILE, WILSON, bootstrap_accuracy, wilson_interval

Z = NormalDist().inv_cdf(0.975)  # 1.95996...


def wilson_formula(k: int, n: int, z: float = Z) -> tuple[float, float]:
    """The Wilson score interval written out (Wilson 1927)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize("n", [1, 8, 50])
def test_wilson_at_the_edges_matches_the_formula_and_the_closed_forms(n):
    lo, hi = wilson_interval(0, n)
    assert lo == pytest.approx(0.0, abs=1e-12)
    assert hi == pytest.approx(Z * Z / (n + Z * Z), rel=1e-9)
    assert (lo, hi) == pytest.approx(wilson_formula(0, n), abs=1e-9)
    assert hi > 0
    lo, hi = wilson_interval(n, n)
    assert lo == pytest.approx(n / (n + Z * Z), rel=1e-9) and hi == pytest.approx(1.0)
    assert (lo, hi) == pytest.approx(wilson_formula(n, n), abs=1e-9)
    with pytest.raises(ValueError, match="k=3, n=2"):
        wilson_interval(3, 2)


def test_bootstrap_accuracy_0_of_8_and_8_of_8_are_wilson_not_zero_width():
    for v in (0.0, 1.0):
        ci = bootstrap_accuracy(np.full(8, v))
        assert ci.method == WILSON
        assert (ci.accuracy, ci.point) == (v, v)
        assert ci.low <= v <= ci.high and ci.high - ci.low > 0.3
        assert (ci.low, ci.high) == pytest.approx(wilson_formula(int(8 * v), 8), abs=1e-9)
    assert bootstrap_accuracy(np.full(8, 0.0)).high == pytest.approx(Z * Z / (8 + Z * Z))
    # mixed outcomes keep the paper's percentile bootstrap
    mixed = bootstrap_accuracy([1, 0, 0, 0, 0, 0, 0, 0], seed=1)
    assert mixed.method == PERCENTILE and mixed.low == 0.0 < mixed.high


def _program_rows(correct):
    return [{"correct": c, "status": "ok", "isolation": "rlimits"} for c in correct]


def test_program_task_rows_record_the_method():
    for v in (False, True):
        rows = program_metric_values(_program_rows([v] * 8), n_resamples=200, seed=0)
        acc = {m.metric: m for m in rows}["accuracy"]
        assert acc.ci_method.startswith(WILSON)
        assert acc.ci_low <= acc.value <= acc.ci_high and acc.ci_high > acc.ci_low
        assert (acc.ci_low, acc.ci_high) == pytest.approx(wilson_formula(8 * v, 8), abs=1e-9)
    acc = program_metric_values(_program_rows([True, False] * 4), n_resamples=200, seed=0)[0]
    assert acc.ci_method == "percentile bootstrap over problems, B = 200"


@pytest.mark.parametrize("seeds", [1, 3])
def test_two_level_bootstrap_all_equal_pool_is_wilson_over_the_items(seeds):
    for v in (0.0, 1.0):
        iv = paired.two_level_bootstrap(np.full((seeds, 8), v))
        assert iv.method == paired.ALL_EQUAL and (iv.seeds, iv.items) == (seeds, 8)
        assert iv.low <= iv.value == v <= iv.high and iv.high - iv.low > 0.3
        # the seeds saw the same 8 items: the Wilson interval of 8, not of 8 x seeds
        assert (iv.low, iv.high) == pytest.approx(wilson_formula(int(8 * v), 8), abs=1e-9)
    mixed = paired.two_level_bootstrap(np.tile([1.0, 0, 0, 0, 0, 0, 0, 0], (seeds, 1)))
    assert mixed.method == paired.TWO_LEVEL


def _toy_rows(outcomes: list[str]) -> pd.DataFrame:
    """Sample rows of a metric with per-item outcomes and no evaluator interval (the toy
    tasks' exact_match), one per training seed."""
    return pd.DataFrame(
        {
            "model": "m",
            "seed": range(len(outcomes)),
            "value": [s.count("1") / len(s) for s in outcomes],
            "n": [len(s) for s in outcomes],
            "ci_low": np.nan,
            "ci_high": np.nan,
            "item_outcomes": outcomes,
            "items_key": "k" * 16,
            "cell_id": [f"c{i}" for i in range(len(outcomes))],
        }
    )


def test_report_cells_of_0_of_8_print_a_real_interval():
    from bench.report.common import cell_text
    from bench.report.uncertainty import pool_seeds

    hi = Z * Z / (8 + Z * Z)
    for outcomes in (["00000000"], ["00000000"] * 3):
        g = _toy_rows(outcomes)
        text = cell_text(g)
        assert "[0.0, 0.0]" not in text and "[0, 0]" not in text, text
        pooled = pool_seeds(g, ["model"]).iloc[0]
        assert pooled["ci_method"] == paired.ALL_EQUAL
        assert pooled["ci_low"] == pytest.approx(0.0, abs=1e-12)
        assert pooled["ci_high"] == pytest.approx(hi)


def test_sudoku_ratios_at_0_and_1_are_wilson_over_puzzles():
    from bench.data.sudoku import task as S
    from bench.data.sudoku.score import RATIO_ALL_EQUAL, evaluate_sudoku

    pz, sl = S.generate_stream(4, "hard", "valid", 6, 0, 8, workers=1)
    right = {m.metric: m for m in evaluate_sudoku(S.encode(pz, sl)[0], pz, sl)}
    wrong = {m.metric: m for m in evaluate_sudoku(S.encode(pz, sl % 4 + 1)[0], pz, sl)}
    for rows, k in ((right, 8), (wrong, 0)):
        for name in ("cell_accuracy", "blank_accuracy"):
            m = rows[name]
            assert m.value == k / 8 and m.ci_method == RATIO_ALL_EQUAL
            assert m.ci_low <= m.value <= m.ci_high and m.ci_high > m.ci_low
            assert (m.ci_low, m.ci_high) == pytest.approx(wilson_formula(k, 8), abs=1e-9)
        for name in ("exact_match", "valid_grid"):
            if rows[name].value in (0.0, 1.0):
                assert rows[name].ci_high > rows[name].ci_low


def test_degenerate_fraction_of_0_and_n_samples_is_wilson():
    from bench.evaluate.genppl import score as G

    n = 8
    for deg, k in (([False] * n, 0), ([True] * n, n)):
        s = G.summarize(np.full(n, 200.0), np.full(n, 50), np.full(n, 3.5), degenerate=deg)
        lo, hi = s["degenerate_fraction_ci"]
        assert (lo, hi) == pytest.approx(wilson_formula(k, n), abs=1e-9)
        assert lo <= s["degenerate_fraction"] <= hi and hi > lo
        row = {m.metric: m for m in G.metric_values(s)}["degenerate_fraction"]
        assert row.ci_method.startswith(WILSON)
