"""Sudoku scoring: exact match (the paper's metric), cell / blank accuracy and grid validity.

The reference harness (``main.py::_sudoku_eval``) scores exact match of the 89 solution tokens
against the ground truth. Here the solution half of each generated sequence is decoded to an
n x n grid (separators are layout, not scored) and compared cell by cell:

- ``exact_match``: all n*n cells equal the reference solution (puzzles have a unique solution,
  so this is "solved").
- ``cell_accuracy``: share of all cells equal to the reference.
- ``blank_accuracy``: share of the cells blank in the puzzle that equal the reference.
- ``valid_grid``: share of grids whose every row, column and box holds each digit 1..n once,
  whether or not the grid agrees with the givens or the reference.

``n`` is the number of puzzles. Intervals are 95%: Wilson score intervals for the two
per-puzzle proportions, and a percentile bootstrap over puzzles (cells of one puzzle are not
independent) for the two cell-level ratios; a ratio of 0 or 1 (no cell right, or every one),
where every resample is the same and the bootstrap's interval has zero width, gets the Wilson
score interval of 0 / N or N / N over the N puzzles instead.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from bench.data.sudoku.format import decode
from bench.data.sudoku.solver import BOXES
from bench.evaluate.bootstrap import bootstrap_ratio
from bench.evaluate.metrics import MetricValue

CONFIDENCE = 0.95
N_BOOTSTRAP = 2000


def _numpy(a) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def valid_grids(grids: np.ndarray) -> np.ndarray:
    """(N,) bool: each (n, n) grid satisfies every row, column and box constraint."""
    g = _numpy(grids).astype(np.int64)
    N, n = g.shape[0], g.shape[1]
    br, bc = BOXES[n]
    target = np.arange(1, n + 1)
    boxes = g.reshape(N, n // br, br, n // bc, bc).transpose(0, 1, 3, 2, 4).reshape(N, n, n)
    ok = np.ones(N, bool)
    for units in (g, g.transpose(0, 2, 1), boxes):  # each (N, n units, n cells)
        ok &= (np.sort(units, axis=-1) == target).all(axis=(1, 2))
    return ok


WILSON = "Wilson score interval"


def _wilson(k: int, n: int) -> tuple[float, float]:
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


BOOT = "percentile bootstrap over puzzles (ratio of sums)"
#: a cell ratio of 0 or 1 (no cell right, or every cell right): the bootstrap is zero-width there
RATIO_ALL_EQUAL = f"{WILSON} over puzzles (0/n or n/n)"


def _ratio_ci(hits: np.ndarray, totals: np.ndarray) -> tuple[float | None, float | None, str]:
    """(low, high, method): percentile bootstrap over puzzles of sum(hits) / sum(totals); when
    no cell is right, or every cell is, the Wilson score interval of 0 / N or N / N over the N
    puzzles that count (cells of one puzzle are not independent, so N, not the cells)."""
    counted = totals > 0
    if counted.any() and (not hits.any() or np.array_equal(hits[counted], totals[counted])):
        n = int(counted.sum())
        return (*_wilson(n if hits.any() else 0, n), RATIO_ALL_EQUAL)
    lo, hi = bootstrap_ratio(hits, totals, n_resamples=N_BOOTSTRAP, confidence=CONFIDENCE, seed=0)
    return lo, hi, BOOT


def evaluate_sudoku(samples, puzzles, solutions) -> list[MetricValue]:
    """Score generated sequences.

    Args:
        samples: (N, L) generated token ids (full sequences, prompt included).
        puzzles: (N, n, n) puzzles, 0 = blank.
        solutions: (N, n, n) reference solutions.

    Returns:
        MetricValue rows exact_match, cell_accuracy, blank_accuracy, valid_grid.
    """
    sol = _numpy(solutions).astype(np.int64)
    puz = _numpy(puzzles).astype(np.int64)
    if sol.ndim != 3 or sol.shape[1] != sol.shape[2] or sol.shape[1] not in BOXES:
        raise ValueError(
            f"solutions: expected (N, n, n) with n in {sorted(BOXES)}, got shape {sol.shape}"
        )
    N, n = sol.shape[0], sol.shape[1]
    if N == 0:
        raise ValueError("samples: nothing to evaluate (0 sequences)")
    if puz.shape != sol.shape:
        raise ValueError(f"puzzles: shape {puz.shape} does not match solutions {sol.shape}")
    x = _numpy(samples)
    if x.ndim != 2 or x.shape[0] != N:
        raise ValueError(f"samples: expected shape ({N}, L), got {x.shape}")
    _, gen = decode(x, n)  # raises on a length that is not the n x n layout
    gen = gen.astype(np.int64)

    eq = gen == sol
    exact = eq.all(axis=(1, 2))
    cell_hits = eq.sum(axis=(1, 2))
    blank = puz == 0
    blank_hits = (eq & blank).sum(axis=(1, 2))
    blank_tot = blank.sum(axis=(1, 2))
    valid = valid_grids(gen)

    k_exact, k_valid = int(exact.sum()), int(valid.sum())
    cell_ci = _ratio_ci(cell_hits, np.full(N, n * n))
    blank_ci = _ratio_ci(blank_hits, blank_tot)
    return [
        MetricValue("exact_match", k_exact / N, N, *_wilson(k_exact, N), WILSON, outcomes=exact),
        MetricValue("cell_accuracy", float(cell_hits.sum() / (N * n * n)), N, *cell_ci),
        MetricValue(
            "blank_accuracy", float(blank_hits.sum() / max(blank_tot.sum(), 1)), N, *blank_ci
        ),
        MetricValue("valid_grid", k_valid / N, N, *_wilson(k_valid, N), WILSON, outcomes=valid),
    ]
