"""Paired differences, two-level (seeds x items) intervals, McNemar and the detectable
difference: properties checked by simulation with fixed seeds."""

import numpy as np
import pytest
from scipy import stats

from bench.evaluate.paired import (
    WORST_CASE_SD,
    decode_outcomes,
    detectable_difference,
    encode_outcomes,
    mcnemar_exact,
    two_level_bootstrap,
    two_level_difference,
    unpaired_difference,
)


def _correlated(rng, n, p_a, p_b, rho_scale=2.5):
    """0/1 outcomes of two models on the same n items: a shared per-item difficulty makes them
    strongly correlated; the population accuracies are p_a and p_b."""
    z = rng.normal(size=n) * rho_scale
    la, lb = stats.norm.ppf(p_a), stats.norm.ppf(p_b)
    # E over z ~ N(0, r^2) of Phi(l * sqrt(1 + r^2) - z) = Phi(l) = p: the marginal accuracy
    s = np.sqrt(1 + rho_scale**2)
    a = rng.random(n) < stats.norm.cdf(la * s - z)
    b = rng.random(n) < stats.norm.cdf(lb * s - z)
    return a.astype(float), b.astype(float)


def test_outcomes_round_trip_and_reject_garbage():
    x = np.array([1, 0, 0, 1, 1])
    s = encode_outcomes(x)
    assert s == "10011"
    np.testing.assert_array_equal(decode_outcomes(s), x)
    with pytest.raises(ValueError, match="0/1"):
        encode_outcomes([0, 2])
    with pytest.raises(ValueError, match="string of 0 and 1"):
        decode_outcomes("01x")


def test_paired_interval_is_narrower_than_unpaired_on_correlated_outcomes():
    rng = np.random.default_rng(0)
    a, b = _correlated(rng, 400, 0.6, 0.5)
    assert np.corrcoef(a, b)[0, 1] > 0.4  # the design is what makes pairing pay
    p = two_level_difference(a, b, seed=1)
    u = unpaired_difference(a, b, seed=1)
    assert p.value == pytest.approx(a.mean() - b.mean())
    assert p.low <= p.value <= p.high
    assert (p.high - p.low) < 0.75 * (u.high - u.low)


def test_paired_interval_covers_the_true_difference_at_its_nominal_rate():
    """300 simulated evaluations of two correlated models with true accuracies 0.6 and 0.5:
    the 95 % paired interval covers 0.1 in 90-99 % of them (binomial slack for 300 trials)."""
    rng = np.random.default_rng(12345)
    hits = 0
    trials = 300
    for t in range(trials):
        a, b = _correlated(rng, 300, 0.6, 0.5)
        iv = two_level_difference(a, b, n_resamples=400, seed=t)
        hits += iv.low <= 0.1 <= iv.high
    assert 0.90 <= hits / trials <= 0.99


def test_two_level_interval_widens_with_seed_spread_and_matches_the_item_bootstrap_for_one_seed():
    rng = np.random.default_rng(3)
    n = 300
    one = (rng.random(n) < 0.5).astype(float)
    iv = two_level_bootstrap(one, n_resamples=2000, seed=0)
    ref = stats.bootstrap(
        (one,), np.mean, method="percentile", n_resamples=2000, rng=np.random.default_rng(0)
    ).confidence_interval
    assert iv.seeds == 1 and iv.items == n
    assert iv.low == pytest.approx(ref.low, abs=0.015)
    assert iv.high == pytest.approx(ref.high, abs=0.015)
    # three seeds of a recipe whose seed moves accuracy by +-15 points: wider than the same
    # number of outcomes with no seed effect
    spread = np.stack([(rng.random(n) < p).astype(float) for p in (0.35, 0.5, 0.65)])
    flat = np.stack([(rng.random(n) < 0.5).astype(float) for _ in range(3)])
    w_spread = two_level_bootstrap(spread, seed=0)
    w_flat = two_level_bootstrap(flat, seed=0)
    assert (w_spread.high - w_spread.low) > 2 * (w_flat.high - w_flat.low)
    assert w_spread.seeds == 3 and w_spread.low <= w_spread.value <= w_spread.high


def test_difference_rejects_unpaired_items():
    with pytest.raises(ValueError, match="same items"):
        two_level_difference(np.ones(5), np.ones(6))


def test_mcnemar_exact_counts_only_discordant_items():
    a = np.array([1] * 10 + [0] * 2 + [1] * 50 + [0] * 38)
    b = np.array([0] * 10 + [1] * 2 + [1] * 50 + [0] * 38)
    assert mcnemar_exact(a, b) == pytest.approx(stats.binomtest(10, 12, 0.5).pvalue)
    assert mcnemar_exact(a, a) == 1.0
    assert mcnemar_exact(a, b) < 0.05 < mcnemar_exact(a[:4], b[:4])


def test_detectable_difference_has_the_stated_power():
    """Two independent models whose accuracies differ by the worst-case detectable difference
    at 50 %: a paired z-test at level 0.05 rejects in about 80 % of 400 simulated runs."""
    n = 400
    mde = detectable_difference(n, WORST_CASE_SD)
    assert 0.05 < mde < 0.15
    rng = np.random.default_rng(7)
    rejections = 0
    for _ in range(400):
        a = (rng.random(n) < 0.5 + mde / 2).astype(float)
        b = (rng.random(n) < 0.5 - mde / 2).astype(float)
        d = a - b
        z = d.mean() / (d.std(ddof=1) / np.sqrt(n))
        rejections += abs(z) > stats.norm.ppf(0.975)
    assert 0.72 <= rejections / 400 <= 0.88
    assert detectable_difference(4 * n, WORST_CASE_SD) == pytest.approx(mde / 2)


def test_cached_item_weights_give_the_uncached_intervals_exactly():
    """The first item draw of a fresh generator is computed once per (seed, items, resamples)
    (bench.evaluate.paired._first_weights); every interval is the one drawn from scratch, on a
    first call and on a cached one, the seed draws after it included (several seeds per model)."""
    from bench.evaluate import paired

    def from_scratch(a, b, seed, n_resamples=paired.RESAMPLES):
        a, b = paired._matrix(a, "a"), paired._matrix(b, "b")
        rng = np.random.default_rng(seed)
        w = paired._item_weights(rng, a.shape[1], n_resamples)
        one = paired._seed_means(a, w, rng)
        rng = np.random.default_rng(seed)
        w = paired._item_weights(rng, a.shape[1], n_resamples)
        diff = paired._seed_means(a, w, rng) - paired._seed_means(b, w, rng)
        rng = np.random.default_rng(seed)
        ua = paired._seed_means(a, paired._item_weights(rng, a.shape[1], n_resamples), rng)
        ub = paired._seed_means(b, paired._item_weights(rng, b.shape[1], n_resamples), rng)
        return [paired._percentiles(v, paired.CONFIDENCE) for v in (one, diff, ua - ub)]

    rng = np.random.default_rng(7)
    paired._first_weights.cache_clear()
    for seeds, n, seed in [(1, 50, 0), (2, 50, 0), (3, 64, 5), (2, 50, np.int64(0))]:
        a = (rng.random((seeds, n)) < 0.6).astype(float)
        b = (rng.random((seeds, n)) < 0.5).astype(float)
        want = from_scratch(a, b, seed)
        for _ in range(2):  # first call fills the cache, the second reads it
            got = [
                paired.two_level_bootstrap(a, seed=seed),
                paired.two_level_difference(a, b, seed=seed),
                paired.unpaired_difference(a, b, seed=seed),
            ]
            assert [(iv.low, iv.high) for iv in got] == want
    assert paired._first_weights.cache_info().hits > 0
    w, _ = paired._first_weights(0, 50, paired.RESAMPLES)
    with pytest.raises(ValueError):  # shared by every caller: read-only
        w[0, 0] = 1.0
