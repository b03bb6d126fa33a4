"""Sudoku solver and generator of unique-solution puzzles (own implementation, after the
reference harness's ``sudoku_generator.py``).

- Grid side ``n`` in {4, 6, 9} with boxes 2x2, 2x3 (2 rows x 3 columns) and 3x3.
- A bitmask solver with constraint propagation (naked singles) and MRV branching counts
  solutions and stops at a limit (2 for uniqueness).
- A random full grid comes from randomized backtracking (the same solver, digits tried in a
  random order). Cells are then removed in a random order; a removal is kept only if the
  puzzle still has exactly one solution: the removed cell ``c`` held ``v`` in the unique
  solution, so the new puzzle is unique iff no solution puts another digit in ``c`` (the
  solver searches for one). The finished puzzle is verified again with the solution counter
  (limit 2) and must return exactly the grid it came from. If one pass over the cells cannot
  reach the target number of givens (every remaining removal breaks uniqueness), the
  generator restarts with a new grid.
- Givens: 9x9 easy 40, medium 35, hard 30 (paper, "Reasoning on Sudoku"); smaller grids use the same
  ratios, ``round(ratio * n * n)`` (4x4: 8/7/6, 6x6: 18/16/13).
"""

from __future__ import annotations

import random
from functools import cache

import numpy as np

BOXES = {4: (2, 2), 6: (2, 3), 9: (3, 3)}  # side -> (box rows, box cols)
DIFFICULTIES = ("easy", "medium", "hard")
GIVENS_9X9 = {"easy": 40, "medium": 35, "hard": 30}  # paper "Reasoning on Sudoku", of 81


def givens_for(n: int, difficulty: str) -> int:
    """Number of givens: the paper's 9x9 count, scaled by ratio for smaller grids."""
    check_grid(n)
    if difficulty not in GIVENS_9X9:
        raise ValueError(f"difficulty: must be one of {list(DIFFICULTIES)}, got {difficulty!r}")
    return round(GIVENS_9X9[difficulty] / 81 * n * n)


def check_grid(n: int) -> None:
    if n not in BOXES:
        raise ValueError(f"grid: must be one of {sorted(BOXES)}, got {n!r}")


# --------------------------------------------------------------------------- solver


@cache
def _geometry(n: int):
    """Per-cell row/col/box indices, full mask and bit tables for side ``n`` (digit d = bit d-1)."""
    check_grid(n)
    br, bc = BOXES[n]
    rows = [i // n for i in range(n * n)]
    cols = [i % n for i in range(n * n)]
    boxes = [(r // br) * (n // bc) + c // bc for r, c in zip(rows, cols)]
    full = (1 << n) - 1
    pop = [bin(m).count("1") for m in range(full + 1)]
    digits = [tuple(d + 1 for d in range(n) if m >> d & 1) for m in range(full + 1)]
    single = [digits[m][0] if pop[m] == 1 else 0 for m in range(full + 1)]
    return rows, cols, boxes, full, pop, digits, single


class _Board:
    """A grid (flat list, 0 = blank) with row/column/box digit masks."""

    __slots__ = ("n", "g", "cells", "rm", "cm", "bm")

    def __init__(self, n: int, cells):
        self.n = n
        self.g = _geometry(n)
        R, C, B = self.g[0], self.g[1], self.g[2]
        self.cells = [int(v) for v in cells]
        self.rm = [0] * n
        self.cm = [0] * n
        self.bm = [0] * n
        for i, v in enumerate(self.cells):
            if v:
                bit = 1 << (v - 1)
                if (self.rm[R[i]] | self.cm[C[i]] | self.bm[B[i]]) & bit:
                    raise ValueError(f"conflicting given {v} at cell {i}")
                self.rm[R[i]] |= bit
                self.cm[C[i]] |= bit
                self.bm[B[i]] |= bit

    def put(self, i: int, v: int) -> None:
        bit = 1 << (v - 1)
        g = self.g
        self.cells[i] = v
        self.rm[g[0][i]] |= bit
        self.cm[g[1][i]] |= bit
        self.bm[g[2][i]] |= bit

    def clear(self, i: int) -> None:
        v = self.cells[i]
        bit = ~(1 << (v - 1))
        g = self.g
        self.cells[i] = 0
        self.rm[g[0][i]] &= bit
        self.cm[g[1][i]] &= bit
        self.bm[g[2][i]] &= bit

    def candidates(self, i: int) -> int:
        g = self.g
        return g[3] & ~(self.rm[g[0][i]] | self.cm[g[1][i]] | self.bm[g[2][i]])

    def empties(self) -> list[int]:
        return [i for i, v in enumerate(self.cells) if not v]

    def search(self, limit: int, rng: random.Random | None = None, out: list | None = None) -> int:
        """Count solutions up to ``limit`` (naked singles + MRV). The board is left unchanged.

        ``rng`` tries branch digits in a random order (random fill); ``out`` receives a copy
        of each solution found.
        """
        return _search(
            self.cells, self.rm, self.cm, self.bm, self.empties(), limit, self.g, rng, out
        )


def _search(cells, rm, cm, bm, empties, limit, g, rng, out) -> int:
    R, C, B, full, pop, digits, single = g
    assigned = []
    while True:  # propagate naked singles until none is left, tracking the MRV cell
        rest = []
        best = -1
        best_k = 99
        best_m = 0
        progress = False
        for i in empties:
            if cells[i]:
                continue
            r = R[i]
            c = C[i]
            b = B[i]
            m = full & ~(rm[r] | cm[c] | bm[b])
            if not m:
                best = -2  # contradiction
                break
            k = pop[m]
            if k == 1:
                cells[i] = single[m]
                rm[r] |= m
                cm[c] |= m
                bm[b] |= m
                assigned.append(i)
                progress = True
            else:
                rest.append(i)
                if k < best_k:
                    best_k = k
                    best = i
                    best_m = m
        if best == -2 or not progress:
            break
        empties = rest
    count = 0
    if best == -2:
        pass
    elif best == -1:  # no empty cell left: a solution
        count = 1
        if out is not None:
            out.append(list(cells))
    else:
        r = R[best]
        c = C[best]
        b = B[best]
        order = digits[best_m]
        if rng is not None:
            order = rng.sample(order, len(order))
        for d in order:
            bit = 1 << (d - 1)
            cells[best] = d
            rm[r] |= bit
            cm[c] |= bit
            bm[b] |= bit
            count += _search(cells, rm, cm, bm, rest, limit - count, g, rng, out)
            rm[r] &= ~bit
            cm[c] &= ~bit
            bm[b] &= ~bit
            cells[best] = 0
            if count >= limit:
                break
    for i in assigned:  # undo the singles placed at this node
        m = ~(1 << (cells[i] - 1))
        rm[R[i]] &= m
        cm[C[i]] &= m
        bm[B[i]] &= m
        cells[i] = 0
    return count


def count_solutions(puzzle, limit: int = 2) -> int:
    """Number of solutions of ``puzzle`` ((n, n) array-like, 0 = blank), counting stops at
    ``limit``."""
    arr = np.asarray(puzzle)
    n = arr.shape[0]
    if arr.shape != (n, n):
        raise ValueError(f"puzzle: expected a square grid, got shape {arr.shape}")
    try:
        board = _Board(n, arr.reshape(-1).tolist())
    except ValueError:
        return 0
    return board.search(limit)


def solve(puzzle) -> np.ndarray | None:
    """One solution of ``puzzle`` as an (n, n) uint8 array, or None if it has none."""
    arr = np.asarray(puzzle)
    n = arr.shape[0]
    out: list = []
    try:
        _Board(n, arr.reshape(-1).tolist()).search(1, out=out)
    except ValueError:
        return None
    return np.array(out[0], dtype=np.uint8).reshape(n, n) if out else None


def random_grid(n: int, rng: random.Random) -> list[int]:
    """A random full grid by randomized backtracking (flat list of n*n digits)."""
    out: list = []
    _Board(n, [0] * (n * n)).search(1, rng=rng, out=out)
    return out[0]


@cache
def all_grids(n: int) -> tuple[tuple[int, ...], ...]:
    """Every solution grid of side ``n`` in lexicographic order (only sensible for n = 4: 288)."""
    if n != 4:
        raise ValueError("all_grids: only the 4x4 grid set is small enough to enumerate")
    out: list = []
    _Board(n, [0] * (n * n)).search(10**9, out=out)
    return tuple(sorted(tuple(s) for s in out))


def _removable(board: _Board, i: int) -> bool:
    """Remove cell ``i`` (the board has a unique solution) if the result stays unique.

    The solutions of the reduced puzzle are the old one plus any that put another digit in
    ``i``; it stays unique iff the solver finds no solution for each other candidate.
    """
    v = board.cells[i]
    board.clear(i)
    others = board.candidates(i) & ~(1 << (v - 1))
    for d in board.g[5][others]:
        board.put(i, d)
        found = board.search(1)
        board.clear(i)
        if found:
            board.put(i, v)
            return False
    return True


def make_puzzle(
    n: int, n_givens: int, rng: random.Random, grids=None
) -> tuple[list[int], list[int]]:
    """(puzzle, solution) flat lists: a unique-solution puzzle with exactly ``n_givens`` givens.

    ``grids``: a sequence of solution grids to draw from (4x4 split); None = random grids.
    """
    if not 0 < n_givens <= n * n:
        raise ValueError(f"n_givens: must be in [1, {n * n}], got {n_givens}")
    for _attempt in range(10_000):
        sol = list(grids[rng.randrange(len(grids))]) if grids is not None else random_grid(n, rng)
        board = _Board(n, sol)
        order = list(range(n * n))
        rng.shuffle(order)
        left = n * n
        for i in order:
            if left == n_givens:
                break
            if _removable(board, i):
                left -= 1
        if left != n_givens:
            continue  # stuck above the target: restart with a new grid
        puzzle = list(board.cells)
        # independent final check with the solution counter (stops at 2)
        check: list = []
        if board.search(2, out=check) != 1 or check[0] != sol:
            raise RuntimeError("sudoku generator: uniqueness check failed (solver bug)")
        return puzzle, sol
    raise RuntimeError(
        f"sudoku generator: no {n}x{n} puzzle with {n_givens} givens in 10000 attempts"
    )
