"""AUP (bench/evaluate/aup.py): d3LLM's accuracy under parallelism on pairs worked out by hand
from the formula, its weight and its y_1 - 5 cut, the vectorized form against the plain one, and
the paired bootstrap over items of a grid of settings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.evaluate.aup import TPF, TPFE, GridPoint, aup, aup_rows, grid_aup, weight


def test_aup_on_pairs_worked_out_by_hand():
    # sorted by rho: (1, 80), (2, 78), (3, 76), (4, 70); y_1 = 80, y_min = 75: (4, 70) is cut.
    # AUP = 1 * 80 + 1/2 (2 - 1) (78 W(78) + 80 W(80)) + 1/2 (3 - 2) (76 W(76) + 78 W(78)),
    # W(78) = exp(-3 * 2 / 80) = exp(-0.075), W(76) = exp(-0.15), W(80) = 1
    w78, w76 = math.exp(-0.075), math.exp(-0.15)
    want = 80 + 0.5 * (78 * w78 + 80) + 0.5 * (76 * w76 + 78 * w78)
    assert want == pytest.approx(225.0709, abs=1e-4)
    assert aup([1, 2, 4, 3], [80, 78, 70, 76], 80) == pytest.approx(want, rel=1e-12)
    assert aup_rows([[1, 2, 4, 3]], [[80, 78, 70, 76]], [80])[0] == pytest.approx(want, rel=1e-12)


def test_a_single_setting_is_rho_times_accuracy_and_y_max_defaults_to_the_best():
    assert aup([1.0], [62.0]) == 62.0  # an AR cell: TPF 1
    assert aup([2.5], [40.0], 80.0) == 100.0  # the first term is not weighted
    assert aup([1, 2], [80, 80]) == pytest.approx(80 + 0.5 * (80 + 80))  # no drop: plain area


def test_weight_is_one_at_and_above_y_max_and_decays_exponentially_below():
    assert weight(80, 80) == 1.0 and weight(90, 80) == 1.0  # min(., 1)
    assert weight(40, 80) == pytest.approx(math.exp(-1.5))  # alpha = 3, half of y_max
    assert weight(0, 0) == 1.0  # every accuracy 0: the terms are 0 anyway
    assert aup([1, 2], [0, 0]) == 0.0


def test_settings_below_y_1_minus_5_are_left_out_and_their_neighbours_joined():
    # (2, 70) is more than 5 below y_1 = 80: the trapezoid runs from rho 1 to 3 directly
    want = 80 + 0.5 * (3 - 1) * (79 * math.exp(-3 * 1 / 80) + 80)
    assert aup([1, 2, 3], [80, 70, 79], 80) == pytest.approx(want)
    # a collapsed setting far out adds nothing, however parallel
    assert aup([1, 2, 100], [80, 79, 10], 80) == pytest.approx(aup([1, 2], [80, 79], 80))
    # one just inside the cut counts, penalised by W below its plain trapezoid
    inside = aup([1, 2], [80, 75.5], 80) - 80
    assert 0 < inside < 0.5 * (75.5 + 80)
    assert aup([1, 2], [80, 74.9], 80) == 80.0


def test_y_1_is_the_least_parallel_setting_not_the_most_accurate():
    assert aup([1, 2], [70, 80], 80) == pytest.approx(70 + 0.5 * (80 + 70 * math.exp(-3 / 8)))
    assert aup([1, 2], [80, 70], 80) == 80.0  # 70 < 80 - 5: cut
    # equal parallelism: the more accurate of the two is y_1, in either input order
    assert aup([1, 1, 2], [70, 80, 76], 80) == aup([1, 1, 2], [80, 70, 76], 80)


def test_rows_agree_with_the_plain_formula_on_random_grids():
    rng = np.random.default_rng(3)
    rho = np.round(rng.uniform(0.5, 4, (200, 5)), 1)  # rounded: ties happen
    y = rng.uniform(50, 90, (200, 5))
    y_max = y.max(1) + rng.uniform(0, 5, 200)
    got = aup_rows(rho, y, y_max)
    want = [aup(list(r), list(v), m) for r, v, m in zip(rho, y, y_max)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_mismatched_pairs_are_an_error():
    with pytest.raises(ValueError, match="2 parallelisms for 1 accuracies"):
        aup([1, 2], [80])
    with pytest.raises(ValueError, match="one comparison"):
        grid_aup({"a": [GridPoint(np.ones(4))], "b": [GridPoint(np.ones(5))]})


def _point(rng, n, p, calls, fe, tokens=16.0):
    o = (rng.random(n) < p).astype(float)
    return GridPoint(o, np.full(n, tokens), np.full(n, float(calls)), np.full(n, float(fe)))


def test_grid_intervals_cover_the_estimate_and_identical_models_differ_by_exactly_zero():
    rng = np.random.default_rng(0)
    n = 300
    grid = [_point(rng, n, 0.8, 32, 32), _point(rng, n, 0.78, 16, 16), _point(rng, n, 0.6, 8, 8)]
    r = grid_aup({"a": grid, "b": list(grid), "ar": [_point(rng, n, 0.8, 16, 2)]})
    for kind in (TPF, TPFE):
        for model, s in r.scores[kind].items():
            assert s.low <= s.value <= s.high, (kind, model, s)
            assert s.high > s.low
        assert r.difference(kind, "a", "b") == (0.0, 0.0, 0.0)  # paired: the same resamples
    # TPF 16 / 32 = 0.5, 16 / 16 = 1; the third (about 60 %) is cut; y_max over every model
    a = r.scores[TPF]["a"]
    assert (a.points, a.kept, a.fixed) == (3, 2, 0)
    y = [100 * p.outcomes.mean() for p in grid]
    assert a.value == pytest.approx(aup([0.5, 1.0, 2.0], y, r.y_max))
    # AR: one token per call, 8 tokens per forward-equivalent (its KV-cached calls are cheap)
    assert r.scores[TPF]["ar"].value == pytest.approx(r.scores[TPFE]["ar"].value / 8)
    d, lo, hi = r.difference(TPFE, "ar", "a")
    assert lo <= d <= hi and lo > 0  # priced by forward-equivalents, AR is far ahead


def test_a_point_without_per_item_counts_keeps_its_stored_parallelism():
    rng = np.random.default_rng(1)
    o = (rng.random(100) < 0.7).astype(float)
    r = grid_aup({"m": [GridPoint(o, tpf=2.0, tpfe=0.5)]})
    s = r.scores[TPF]["m"]
    assert s.fixed == 1 and s.value == pytest.approx(2.0 * 100 * o.mean())
    assert r.scores[TPFE]["m"].value == pytest.approx(0.5 * 100 * o.mean())
    # no forward-equivalents stored either: no AUP over them
    r = grid_aup({"m": [GridPoint(o, tpf=2.0)]})
    assert "m" in r.scores[TPF] and "m" not in r.scores[TPFE]
