"""pass@j, maj@k and pass@1 over draws (bench.evaluate.passk)."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from bench.evaluate.passk import majority, pass_at, score_draws


@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_pass_at_j_is_the_chance_that_j_draws_of_n_hold_a_correct_one(n):
    # by enumeration: every j-subset of the n draws of an item with c correct ones
    for c in range(n + 1):
        draws = [1] * c + [0] * (n - c)
        for j in range(1, n + 1):
            subsets = list(combinations(draws, j))
            want = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at(n, c, j) == pytest.approx(want, abs=1e-12), (n, c, j)


def test_pass_at_refuses_j_outside_the_draws():
    for j in (0, 5):
        with pytest.raises(ValueError, match=f"pass@{j}: j must be in 1..4"):
            pass_at(4, 1, j)


def test_majority_ties_go_to_the_answer_reached_first_and_none_casts_no_vote():
    # items: a tie a/b (a first), b outvotes a, no answers at all, None ignored
    answers = [["a", "a", None, None], ["b", "b", None, "x"], ["b", "b", None, None],
               ["a", "c", None, "y"]]  # fmt: skip
    outcomes = np.array([[1, 0, 1, 0], [0, 1, 1, 1], [0, 1, 1, 0], [1, 0, 1, 0]])
    got = majority(answers, outcomes)
    # item 0: a (draw 0) and b (draw 1) two votes each -> a, draw 0's outcome 1
    # item 1: a, b, b, c -> b (two votes, first at draw 1) -> 1
    # item 2: nobody answered -> 0 even though every outcome reads 1
    # item 3: x (draw 1) and y (draw 3) one vote each -> x -> outcome of draw 1 = 1
    assert got.tolist() == [1.0, 1.0, 0.0, 1.0]
    # the rule never looks at the outcomes: flipping them flips the chosen draw's outcome only
    assert majority(answers, 1 - outcomes).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_k_draws_give_a_narrower_pass1_interval_than_one_draw():
    rng = np.random.default_rng(0)
    p = rng.beta(1.0, 1.0, size=300)  # per-item difficulty
    y = (rng.random((8, 300)) < p).astype(float)
    many, one = score_draws(y).pass1, score_draws(y[:1]).pass1
    assert many.low <= many.value <= many.high and one.low <= one.value <= one.high
    assert (many.high - many.low) < 0.8 * (one.high - one.low)
    assert many.value == pytest.approx(y.mean())


def test_pass_j_grows_with_j_and_each_interval_covers_its_value():
    rng = np.random.default_rng(1)
    y = (rng.random((6, 120)) < rng.beta(0.5, 2.0, size=120)).astype(float)
    s = score_draws(y, answers=[[int(v) for v in row] for row in y])
    vals = [s.pass_j[j].value for j in range(1, 7)]
    assert all(a < b for a, b in zip(vals, vals[1:]))
    assert vals[0] == pytest.approx(y.mean()) and vals[-1] == pytest.approx((y.sum(0) > 0).mean())
    for iv in [*s.pass_j.values(), s.maj]:
        assert iv.low <= iv.value <= iv.high and iv.high > iv.low
    # answers that are the outcomes themselves: maj@k is the majority outcome (ties: draw 0's)
    c = y.sum(0)
    want = np.where(c * 2 > 6, 1.0, np.where(c * 2 < 6, 0.0, y[0]))
    assert s.maj.value == pytest.approx(want.mean())


def test_every_item_solved_gives_wilson_not_a_zero_width_interval():
    s = score_draws(np.ones((3, 10)))
    for iv in [s.pass1, *s.pass_j.values()]:
        assert iv.value == 1.0 and iv.low < 1.0 and iv.high == pytest.approx(1.0)


def test_bad_outcomes_are_refused():
    with pytest.raises(ValueError, match="0/1"):
        score_draws(np.full((2, 3), 0.5))
    with pytest.raises(ValueError, match=r"\(draws, items\)"):
        score_draws(np.ones(3))
