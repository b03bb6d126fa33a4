"""Percentile-bootstrap confidence intervals: accuracies over problems, and any statistic of
per-sample values (:func:`bootstrap_statistic`, e.g. the Gen. PPL scorer's means).

The paper (appendix "Bootstrap Confidence Intervals on TinyGSM"): resample the N per-problem
outcomes with replacement B = 1,000 times, recompute the accuracy on each resample; the point
estimate is the **mean of the B accuracies** and the 95 % interval runs from the 2.5th to the
97.5th percentile of them. Reference harness: `gsm8k.bootstrap_size`, rng seeded with the
config seed. We use :func:`scipy.stats.bootstrap` (``method="percentile"``) with a seeded numpy
Generator.

At 0 / n and n / n (every outcome 0, or every outcome 1; n = 1 included) every resample is the
same and the percentile interval has zero width, ``[0, 0]`` for 0 of 8 problems, which claims a
certainty eight problems do not give. :func:`bootstrap_accuracy` then returns the Wilson score
interval of k / n (:func:`wilson_interval`, ``scipy.stats.binomtest(k, n).proportion_ci``) and
says so in ``method``; every other accuracy keeps the paper's percentile bootstrap.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

PAPER_RESAMPLES = 1000
#: :attr:`BootstrapCI.method` of a percentile-bootstrap interval
PERCENTILE = "percentile bootstrap"
#: :attr:`BootstrapCI.method` (and a row's ``ci_method``) of a Wilson score interval
WILSON = "Wilson score interval"
#: how per-sample statistics' intervals are computed (the Gen. PPL scorer's cell values)
SAMPLES_CI_METHOD = "95 % percentile bootstrap over samples (scipy.stats.bootstrap, seeded)"


@dataclass(frozen=True)
class BootstrapCI:
    """A bootstrapped mean.

    Attributes:
        accuracy: the plain mean over problems (for a difference: mean(a) - mean(b)).
        point: the paper's point estimate, the mean of the bootstrap means.
        low, high: percentile interval bounds.
        n: number of problems.
        n_resamples: B.
        confidence: e.g. 0.95.
        seed: seed of the numpy Generator.
        method: :data:`PERCENTILE`, or :data:`WILSON` where :func:`bootstrap_accuracy` found
            every outcome equal (the percentile interval would have zero width there).
    """

    accuracy: float
    point: float
    low: float
    high: float
    n: int
    n_resamples: int
    confidence: float
    seed: int
    method: str = PERCENTILE

    def to_dict(self) -> dict:
        return asdict(self)


def _as_outcomes(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float).reshape(-1)
    if not np.all((a == 0) | (a == 1)):
        raise ValueError(f"{name}: outcomes must be 0/1 (or bool), got values outside {{0, 1}}")
    return a


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials: never zero-width for
    n >= 1 (at 0 / n it is [0, z^2 / (n + z^2)])."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"Wilson interval: need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    from scipy import stats  # scipy.stats: ~0.8 s to import, only where it is used

    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def _check(n_resamples: int, confidence: float) -> None:
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _result(
    data: tuple, statistic, *, paired: bool, n_resamples: int, confidence: float, seed: int
) -> BootstrapCI:
    n = data[0].shape[0]
    if n == 0:
        nan = float("nan")
        return BootstrapCI(nan, nan, nan, nan, 0, n_resamples, confidence, seed)
    plain = float(statistic(*data, axis=-1))
    if n == 1:  # every resample is the single observation
        return BootstrapCI(plain, plain, plain, plain, 1, n_resamples, confidence, seed)
    from scipy import stats  # scipy.stats: ~0.8 s to import, only where it is used

    res = stats.bootstrap(
        data,
        statistic,
        n_resamples=int(n_resamples),
        vectorized=True,
        paired=paired,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    dist = np.asarray(res.bootstrap_distribution, dtype=float)
    return BootstrapCI(
        plain,
        float(dist.mean()),
        float(res.confidence_interval.low),
        float(res.confidence_interval.high),
        n,
        int(n_resamples),
        confidence,
        seed,
    )


def _mean(a, axis=-1):
    return np.mean(a, axis=axis)


def _diff(a, b, axis=-1):
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def bootstrap_statistic(
    data: tuple,
    statistic,
    *,
    paired: bool = False,
    n_resamples: int = PAPER_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapCI:
    """Percentile bootstrap of ``statistic(*arrays, axis)`` (vectorized) over the samples of the
    equally long 1-D arrays ``data``; ``paired`` resamples them jointly. Same resampling as
    :func:`bootstrap_accuracy`."""
    _check(n_resamples, confidence)
    arrays = tuple(np.asarray(a, dtype=float).reshape(-1) for a in data)
    return _result(
        arrays, statistic, paired=paired, n_resamples=n_resamples, confidence=confidence, seed=seed
    )


def bootstrap_accuracy(
    correct, *, n_resamples: int = PAPER_RESAMPLES, confidence: float = 0.95, seed: int = 0
) -> BootstrapCI:
    """Percentile bootstrap of the accuracy of 0/1 per-problem outcomes (paper appendix); the
    Wilson score interval (``method`` :data:`WILSON`) when every outcome is equal, where the
    percentile interval has zero width."""
    _check(n_resamples, confidence)
    a = _as_outcomes(correct, "correct")
    if a.size and a.min() == a.max():
        v = float(a[0])
        lo, hi = wilson_interval(int(a.sum()), a.size, confidence)
        return BootstrapCI(v, v, lo, hi, a.size, int(n_resamples), confidence, seed, WILSON)
    return _result(
        (a,), _mean, paired=False, n_resamples=n_resamples, confidence=confidence, seed=seed
    )


def paired_bootstrap_difference(
    correct_a,
    correct_b,
    *,
    n_resamples: int = PAPER_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapCI:
    """Accuracy of A minus accuracy of B on the same problems: problems are resampled jointly
    (paired), so the interval reflects per-problem agreement between the two methods."""
    _check(n_resamples, confidence)
    a = _as_outcomes(correct_a, "correct_a")
    b = _as_outcomes(correct_b, "correct_b")
    if a.shape != b.shape:
        raise ValueError(
            f"paired bootstrap: {a.shape[0]} vs {b.shape[0]} problems; the two "
            "methods must be scored on the same problems in the same order"
        )
    return _result(
        (a, b), _diff, paired=True, n_resamples=n_resamples, confidence=confidence, seed=seed
    )


def bootstrap_ratio(
    num, den, *, n_resamples: int, confidence: float = 0.95, seed: int = 0
) -> tuple[float | None, float | None]:
    """Percentile-bootstrap interval over items of the ratio ``sum(num) / sum(den)`` (items
    resampled in pairs: Sudoku's cell accuracy, a likelihood's nats per token). (None, None) with
    fewer than 2 items or ``sum(den) == 0``; (r, r) when every item has the same ratio r."""
    from scipy import stats

    num, den = np.asarray(num), np.asarray(den)
    if len(num) < 2 or den.sum() == 0:
        return None, None
    if np.all(num * den.sum() == den * num.sum()):  # every item has the same ratio
        r = float(num.sum() / den.sum())
        return r, r

    def stat(a, b, axis=-1):
        return a.sum(axis=axis) / np.maximum(b.sum(axis=axis), 1)

    res = stats.bootstrap(
        (num, den),
        stat,
        paired=True,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)
