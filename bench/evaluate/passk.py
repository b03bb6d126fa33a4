"""Several draws per item: pass@j, maj@k and the mean over draws, with their intervals.

A cell that draws k samples per item (``sample.n_per_item: k``) scores every draw; from the
(k, N) matrix of 0/1 outcomes (draws x items, the items in the task's order):

- **pass@1** is the mean over the k draws and the N items (open-r1 and lm-eval report pass@1
  averaged over n draws "to mitigate variance"), with the two-level percentile bootstrap of
  :func:`bench.evaluate.paired.two_level_bootstrap`: items resampled jointly, then draws, the
  draws of an item playing the part the seeds of a model play there;
- **pass@j** for every j <= k by the unbiased estimator of Chen et al. 2021 (the Codex paper,
  eq. 1): per item with c correct of n = k draws, ``1 - C(n - c, j) / C(n, j)``, averaged over
  items; its interval is the percentile bootstrap over items of those per-item estimates
  (the Wilson interval of 0/N or N/N when every estimate is 0, or every one is 1);
- **maj@k**: per item, the answer most of the k draws give (``answers``: the executed answer of
  a program task, the whole output of a Sudoku grid, ...), scored as that answer's outcome;
  ties go to the answer reached first (the lowest draw index among the tied answers), a stated
  rule that never looks at the outcomes. A draw with no answer (None) casts no vote; an item with
  no answer at all scores 0. The interval is over items, as for pass@j.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import comb

from bench.evaluate.bootstrap import SAMPLES_CI_METHOD, bootstrap_statistic, wilson_interval
from bench.evaluate.paired import ALL_EQUAL, CONFIDENCE, RESAMPLES, Interval, two_level_bootstrap

#: how a pass@j or maj@k interval is computed (its rows' ``ci_method``): scipy's percentile
#: bootstrap over items of the per-item estimates
OVER_ITEMS = SAMPLES_CI_METHOD.replace("samples", "items")
#: the tie rule of :func:`majority`, for the docs and the rows
TIE_RULE = "ties: the answer first reached (lowest draw index)"


def _draws(y) -> np.ndarray:
    a = np.asarray(y, dtype=float)
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"expected a (draws, items) array of 0/1 outcomes, got shape {a.shape}")
    if not np.all((a == 0) | (a == 1)):
        raise ValueError("outcomes must be 0/1")
    return a


def pass_at(n: int, c, j: int) -> np.ndarray:
    """The unbiased pass@j of items with ``c`` correct of ``n`` draws (Chen et al. 2021, eq. 1):
    ``1 - C(n - c, j) / C(n, j)``; ``j`` in 1..n."""
    if not 1 <= j <= n:
        raise ValueError(f"pass@{j}: j must be in 1..{n} (the draws per item)")
    c = np.asarray(c, dtype=float)
    return 1.0 - comb(n - c, j, exact=False) / comb(n, j, exact=False)


def item_interval(
    per_item, *, n_resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> Interval:
    """The mean of per-item values in [0, 1] with its percentile bootstrap over items (Wilson's
    interval of 0/N or N/N when every value is 0, or every one is 1)."""
    v = np.asarray(per_item, dtype=float)
    n = len(v)
    if v[0] in (0.0, 1.0) and np.all(v == v[0]):
        lo, hi = wilson_interval(int(v[0]) * n, n, confidence)
        return Interval(float(v[0]), lo, hi, 1, n, ALL_EQUAL)
    ci = bootstrap_statistic(
        (v,), np.mean, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    return Interval(float(v.mean()), ci.low, ci.high, 1, n, OVER_ITEMS)


def majority(answers: list[list], outcomes) -> np.ndarray:
    """Per item, the outcome of the answer most draws give (module docstring: ties, None).
    ``answers[d][i]``: draw d's answer to item i (hashable, or None); ``outcomes``: (k, N)."""
    y = _draws(outcomes)
    k, n = y.shape
    if len(answers) != k or any(len(a) != n for a in answers):
        raise ValueError(f"answers: expected {k} draws of {n} items")
    out = np.zeros(n)
    for i in range(n):
        votes: dict = {}
        for d in range(k):
            a = answers[d][i]
            if a is None:
                continue
            first, count = votes.get(a, (d, 0))
            votes[a] = (first, count + 1)
        if votes:
            # most votes; among equals the answer whose first draw is lowest
            best = min(votes, key=lambda a: (-votes[a][1], votes[a][0]))
            out[i] = y[votes[best][0], i]
    return out


@dataclass(frozen=True)
class DrawScores:
    """What a k-draw cell reports of its headline metric."""

    k: int
    pass1: Interval
    pass_j: dict[int, Interval]
    maj: Interval | None


def score_draws(outcomes, answers: list[list] | None = None, *, seed: int = 0) -> DrawScores:
    """pass@1 (two-level), pass@j for j = 1..k and maj@k (when ``answers`` are given) of a
    (k, N) outcome matrix."""
    y = _draws(outcomes)
    k = y.shape[0]
    c = y.sum(axis=0)
    pass_j = {j: item_interval(pass_at(k, c, j), seed=seed) for j in range(1, k + 1)}
    maj = None if answers is None else item_interval(majority(answers, y), seed=seed)
    return DrawScores(k, two_level_bootstrap(y, seed=seed), pass_j, maj)
