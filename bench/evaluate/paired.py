"""Uncertainty over items and training seeds: cell CIs, paired differences, detectable effects.

Every model is scored on the same items of a task (the same GSM8K problems, the same Sudoku
puzzles), so two models' outcomes are paired by item, and a difference between them is far better
determined than two independent intervals suggest: resampling the items jointly cancels the
per-item difficulty both share (Miller, "Adding Error Bars to Evals", 2024, section "Paired
differences"). Training seeds add a second level of variation: the same recipe trained again
lands elsewhere.

- :func:`two_level_bootstrap`: the percentile bootstrap of a cell's mean over S seeds x N items:
  each resample draws items with replacement (one draw shared by every seed, since the seeds saw
  the same items) and then seeds with replacement, and averages. With S = 1 it is the
  ordinary item bootstrap. With few seeds the seed level is under-dispersed (a bootstrap of S
  values has variance (S - 1) / S of theirs), so a 3-seed interval is somewhat too narrow.
  When every outcome is equal (all 0 or all 1, over every seed) every resample is too and the
  percentile interval has zero width; the interval is then the Wilson score interval of 0 / N or
  N / N over the N items (:data:`ALL_EQUAL`; N, not S x N: the seeds saw the same items).
- :func:`two_level_difference`: the same for mean(A) - mean(B) with one item draw shared by both
  models (paired) and independent seed draws (a seed of A is not a seed of B).
- :func:`mcnemar_exact`: the exact test of equal accuracy for paired 0/1 outcomes (one seed each):
  under the null, the discordant items split as Binomial(b + c, 1/2) (McNemar 1947, exact form).
- :func:`detectable_difference`: the smallest difference a paired comparison over N items detects
  with a two-sided level-alpha test at the given power (normal approximation:
  (z_{1-alpha/2} + z_{power}) * sd(d) / sqrt(N)).

Outcomes travel in the results store as strings of ``0`` / ``1`` (one character per item, in the
task's item order; :func:`encode_outcomes` / :func:`decode_outcomes`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

RESAMPLES = 1000
CONFIDENCE = 0.95
TWO_LEVEL = "two-level percentile bootstrap (items, then seeds)"
PAIRED = "paired two-level percentile bootstrap (items shared, seeds per model)"
#: the method of :func:`two_level_bootstrap` when every outcome is 0, or every outcome is 1
ALL_EQUAL = "Wilson score interval over the items (0/n or n/n)"


def encode_outcomes(x) -> str:
    """0/1 outcomes (bools or numbers) as a string of ``0`` / ``1``."""
    a = np.asarray(x).reshape(-1)
    if a.dtype != bool and not np.all((a == 0) | (a == 1)):
        raise ValueError("outcomes must be 0/1 (or bool)")
    return "".join("1" if v else "0" for v in a.astype(bool))


def decode_outcomes(s: str) -> np.ndarray:
    """The inverse of :func:`encode_outcomes`: a float array of 0 / 1."""
    if not isinstance(s, str) or (s and set(s) - {"0", "1"}):
        raise ValueError(f"item outcomes must be a string of 0 and 1, got {str(s)[:20]!r}")
    return np.frombuffer(s.encode(), dtype=np.uint8).astype(float) - ord("0")


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval: ``seeds`` x ``items`` outcomes behind it."""

    value: float
    low: float
    high: float
    seeds: int
    items: int
    method: str

    @property
    def covers_zero(self) -> bool:
        return self.low <= 0.0 <= self.high


def _matrix(y, name: str) -> np.ndarray:
    a = np.asarray(y, dtype=float)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"{name}: expected a (seeds, items) array, got shape {a.shape}")
    return a


def _item_weights(rng: np.random.Generator, n: int, b: int) -> np.ndarray:
    """(b, n) resampling weights of n items: multinomial counts / n (one bootstrap draw each)."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=b) / n


@functools.lru_cache(maxsize=8)
def _first_weights(seed: int, n: int, b: int) -> tuple[np.ndarray, dict]:
    """The item weights a fresh ``default_rng(seed)`` draws first, and the generator's state
    after that draw, computed once per (seed, n, b). A report bootstraps hundreds of cells and
    differences over the same items with the same seed: the multinomial draw (about 15 ms for
    256 items x 1,000 resamples) was most of its time, always with the same result. The array is
    read-only (shared by every caller)."""
    rng = np.random.default_rng(seed)
    w = _item_weights(rng, n, b)
    w.flags.writeable = False
    return w, rng.bit_generator.state


def _fresh(seed, n: int, b: int) -> tuple[np.random.Generator, np.ndarray]:
    """(generator, item weights) exactly as ``rng = default_rng(seed); _item_weights(rng, n, b)``
    leaves them (same weights, same generator state after), from :func:`_first_weights` when
    ``seed`` is a plain int (anything else numpy accepts as a seed is drawn anew)."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        w, state = _first_weights(int(seed), int(n), int(b))
        rng = np.random.default_rng(int(seed))
        rng.bit_generator.state = state
        return rng, w
    rng = np.random.default_rng(seed)
    return rng, _item_weights(rng, n, b)


def _seed_means(y: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(b,) means of resampled seeds, each seed's mean taken under the item weights ``w``."""
    per_seed = w @ y.T  # (b, S): every seed's mean over the resampled items
    s = y.shape[0]
    if s == 1:
        return per_seed[:, 0]
    pick = rng.integers(0, s, size=(len(w), s))
    return np.take_along_axis(per_seed, pick, axis=1).mean(axis=1)


def _percentiles(v: np.ndarray, confidence: float) -> tuple[float, float]:
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(v, [a, 1.0 - a])
    return float(lo), float(hi)


def two_level_bootstrap(
    y, *, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> Interval:
    """Mean of ``y`` ((seeds, items), or (items,) for one seed) with its two-level percentile
    interval; the point is the plain mean over seeds and items. All outcomes 0, or all 1: the
    Wilson score interval over the items (:data:`ALL_EQUAL`), never zero-width."""
    y = _matrix(y, "y")
    v = float(y.flat[0])
    if v in (0.0, 1.0) and np.all(y == v):
        from bench.evaluate.bootstrap import wilson_interval

        n = y.shape[1]
        lo, hi = wilson_interval(int(v) * n, n, confidence)
        return Interval(v, lo, hi, y.shape[0], n, ALL_EQUAL)
    rng, w = _fresh(seed, y.shape[1], n_resamples)
    boots = _seed_means(y, w, rng)
    lo, hi = _percentiles(boots, confidence)
    return Interval(float(y.mean()), lo, hi, y.shape[0], y.shape[1], TWO_LEVEL)


def two_level_difference(
    a, b, *, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> Interval:
    """mean(a) - mean(b) over the same items (columns in the same order), seeds resampled per
    model; ``seeds`` of the result is min(S_a, S_b)."""
    a, b = _matrix(a, "a"), _matrix(b, "b")
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"paired difference: {a.shape[1]} vs {b.shape[1]} items; both models must be scored "
            "on the same items in the same order"
        )
    rng, w = _fresh(seed, a.shape[1], n_resamples)
    boots = _seed_means(a, w, rng) - _seed_means(b, w, rng)
    lo, hi = _percentiles(boots, confidence)
    d = float(a.mean() - b.mean())
    return Interval(d, lo, hi, min(a.shape[0], b.shape[0]), a.shape[1], PAIRED)


def unpaired_difference(
    a, b, *, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> Interval:
    """mean(a) - mean(b) with the items of each model resampled independently: what two
    separate per-cell intervals amount to (the comparison a paired design improves on)."""
    a, b = _matrix(a, "a"), _matrix(b, "b")
    rng, wa = _fresh(seed, a.shape[1], n_resamples)
    ba = _seed_means(a, wa, rng)
    bb = _seed_means(b, _item_weights(rng, b.shape[1], n_resamples), rng)
    lo, hi = _percentiles(ba - bb, confidence)
    return Interval(
        float(a.mean() - b.mean()), lo, hi, min(a.shape[0], b.shape[0]), a.shape[1], "unpaired"
    )


def mcnemar_exact(a, b) -> float:
    """Two-sided exact McNemar p-value for paired 0/1 outcomes of one seed each."""
    a = np.asarray(a, dtype=float).reshape(-1)
    b = np.asarray(b, dtype=float).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"McNemar: {a.size} vs {b.size} items")
    only_a = int(((a == 1) & (b == 0)).sum())
    only_b = int(((a == 0) & (b == 1)).sum())
    if only_a + only_b == 0:
        return 1.0
    from scipy import stats  # scipy.stats: ~0.8 s to import, only where it is used

    return float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


def detectable_difference(
    n_items: int, sd: float, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Smallest true difference a two-sided level-``alpha`` test over ``n_items`` paired items
    finds with probability ``power``, when one item's difference has standard deviation ``sd``."""
    if n_items < 1:
        raise ValueError(f"n_items must be >= 1, got {n_items}")
    from scipy import stats  # scipy.stats: ~0.8 s to import, only where it is used

    z = stats.norm.ppf(1.0 - alpha / 2.0) + stats.norm.ppf(power)
    return float(z * sd / np.sqrt(n_items))


#: sd of one item's difference of two independent 0/1 outcomes at 50 % accuracy (the worst
#: case: p (1 - p) is largest at p = 1/2, twice for the two models)
WORST_CASE_SD = float(np.sqrt(0.5))
