"""Sudoku: a reproducible generator of unique-solution puzzles and the benchmark task.

Generator (after the reference harness's ``sudoku_generator.py``; own implementation):

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
- Every puzzle has its own seed, ``SeedSequence(seed, spawn_key=(n, difficulty, split, i))``,
  so the data do not depend on the number of worker processes or on chunking.

Splits (paper: 48k train / 2k validation, no overlap):

- 6x6 and 9x9: the validation set of a difficulty is the first ``n_valid`` puzzles of its
  validation stream with distinct solution grids. The training set is the first ``n_train``
  puzzles of the training stream whose solution grid is new within the training set and is
  not the solution of ANY validation puzzle of ANY difficulty (so ``train_mix`` models never
  see a validation grid either).
- 4x4 has only 288 solution grids, so deduplication by solution is impossible at 48k. The set
  of grids itself is split: a seeded ~15% of the 288 grids (43) are validation grids, the rest
  training grids, shared by all difficulties. Each puzzle picks a grid of its split at random,
  so grids (and, at the hard end, whole puzzles) repeat within a split, never across splits.

Token format (reference ``dataloader.py::SudokuTokenizer``): vocabulary 12, 0 = blank cell,
1-9 digits, 10 = row separator, 11 = BOS. Sequence = [BOS] puzzle rows joined by 10 [BOS]
solution rows joined by 10; for 9x9 that is 1 + 89 + 1 + 89 = 180 tokens and the prompt is
the first 91 positions. Methods that need a mask token append their own id (12). There is no
EOS: the reference tokenizer's ``eos_token_id`` is 10, the row separator, so EOS-based early
stopping must never be used on Sudoku.

Masks (a deliberate departure from the reference): the reference trains on all 89 solution
tokens (``attention_mask = [0]*91 + [1]*89``). Here the prompt is clean and out of the loss as
in the reference, and in the solution half the cells that are GIVEN in the puzzle and the row
separators are also clean (never noised) and out of the loss: they are copies of the prompt /
fixed layout. Only the blank cells of the solution are generated and scored by the loss.
``x`` holds the full reference sequence; samplers must read only its clean positions.

Cache: each split is generated once and stored as ``.npz`` (written atomically) under
``cfg.data_dir``, else ``$SFLM_BENCH_DATA``, else ``~/.cache/sflm-bench`` (subfolder
``sudoku``), keyed by (grid, difficulty, split sizes, seed, ``GENERATOR_VERSION``).

Task options (``task.options``): ``workers`` (processes used for generation, default 2).
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing as mp
import os
import random
import sys
import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from bench.config import ConfigError, TaskConfig
from bench.data.base import MetricValue, Task, TaskData

log = logging.getLogger(__name__)

GENERATOR_VERSION = 1

# Token ids (reference SudokuTokenizer).
BLANK = 0
SEP = 10  # row separator; the reference also calls it eos_token_id
BOS = 11
VOCAB_SIZE = 12

BOXES = {4: (2, 2), 6: (2, 3), 9: (3, 3)}  # side -> (box rows, box cols)
DIFFICULTIES = ("easy", "medium", "hard")
GIVENS_9X9 = {"easy": 40, "medium": 35, "hard": 30}  # paper "Reasoning on Sudoku", of 81
SPLITS = ("train", "valid")
VALID_GRID_FRAC_4X4 = 0.15  # share of the 288 4x4 solution grids held out for validation
_KNOWN_OPTIONS = {"workers": 2}


def givens_for(n: int, difficulty: str) -> int:
    """Number of givens: the paper's 9x9 count, scaled by ratio for smaller grids."""
    _check_grid(n)
    if difficulty not in GIVENS_9X9:
        raise ValueError(f"difficulty: must be one of {list(DIFFICULTIES)}, got {difficulty!r}")
    return round(GIVENS_9X9[difficulty] / 81 * n * n)


def _check_grid(n: int) -> None:
    if n not in BOXES:
        raise ValueError(f"grid: must be one of {sorted(BOXES)}, got {n!r}")


# --------------------------------------------------------------------------- solver


@cache
def _geometry(n: int):
    """Per-cell row/col/box indices, full mask and bit tables for side ``n`` (digit d = bit d-1)."""
    _check_grid(n)
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
        return _search(self.cells, self.rm, self.cm, self.bm, self.empties(), limit, self.g, rng, out)


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
    """Number of solutions of ``puzzle`` ((n, n) array-like, 0 = blank), counting stops at ``limit``."""
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


def make_puzzle(n: int, n_givens: int, rng: random.Random, grids=None) -> tuple[list[int], list[int]]:
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
    raise RuntimeError(f"sudoku generator: no {n}x{n} puzzle with {n_givens} givens in 10000 attempts")


# --------------------------------------------------------------------------- streams and splits


def _puzzle_rng(seed: int, n: int, difficulty: str, split: str, index: int) -> random.Random:
    ss = np.random.SeedSequence(seed, spawn_key=(n, DIFFICULTIES.index(difficulty), SPLITS.index(split), index))
    return random.Random(int(ss.generate_state(1, dtype=np.uint64)[0]))


def grid_split_4x4(seed: int) -> dict[str, tuple]:
    """The 4x4 solution grids of each split: a seeded ~15% of the 288 grids are validation."""
    grids = all_grids(4)
    perm = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(4, 99))).permutation(len(grids))
    n_valid = round(VALID_GRID_FRAC_4X4 * len(grids))
    return {
        "valid": tuple(grids[i] for i in sorted(perm[:n_valid])),
        "train": tuple(grids[i] for i in sorted(perm[n_valid:])),
    }


def _gen_chunk(args) -> tuple[np.ndarray, np.ndarray]:
    """Worker: puzzles ``start..stop-1`` of one stream -> (puzzles, solutions) uint8 (k, n*n)."""
    n, difficulty, split, seed, start, stop = args
    grids = grid_split_4x4(seed)[split] if n == 4 else None
    k = givens_for(n, difficulty)
    pz = np.zeros((stop - start, n * n), np.uint8)
    sl = np.zeros((stop - start, n * n), np.uint8)
    for j, idx in enumerate(range(start, stop)):
        p, s = make_puzzle(n, k, _puzzle_rng(seed, n, difficulty, split, idx), grids)
        pz[j] = p
        sl[j] = s
    return pz, sl


def generate_stream(n: int, difficulty: str, split: str, seed: int, start: int, stop: int,
                    workers: int = 2, progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Puzzles ``start..stop-1`` of a stream as ((k, n, n), (k, n, n)) uint8 arrays.

    The result is a function of the arguments only, not of ``workers``.
    """
    total = stop - start
    if total <= 0:
        return np.zeros((0, n, n), np.uint8), np.zeros((0, n, n), np.uint8)
    workers = max(1, min(workers, total))
    size = max(1, min(250, math.ceil(total / (4 * workers))))
    chunks = [(n, difficulty, split, seed, a, min(a + size, stop)) for a in range(start, stop, size)]
    bar = tqdm(total=total, desc=f"sudoku {n}x{n} {difficulty} {split}", unit="puzzle",
               disable=not progress or total < 2000, leave=False)
    parts = []
    if workers == 1 or total < 2000:  # small sets: process start-up costs more than it saves
        for c in chunks:
            parts.append(_gen_chunk(c))
            bar.update(c[5] - c[4])
    else:
        # never plain fork: the caller may hold torch / OpenMP threads (a forked child then
        # deadlocks on their locks, seen under submitit). forkserver children fork from a clean
        # single-threaded server process.
        ctx = mp.get_context("forkserver" if sys.platform.startswith("linux") else "spawn")
        with ctx.Pool(workers) as pool:
            for c, part in zip(chunks, pool.imap(_gen_chunk, chunks)):
                parts.append(part)
                bar.update(c[5] - c[4])
    bar.close()
    pz = np.concatenate([p for p, _ in parts]).reshape(total, n, n)
    sl = np.concatenate([s for _, s in parts]).reshape(total, n, n)
    return pz, sl


def _select(n, difficulty, split, seed, need, exclude, workers, progress, dedup):
    """The first ``need`` puzzles of a stream whose solution is not excluded (nor, with
    ``dedup``, already taken). Deterministic: candidates are scanned in stream order."""
    seen = set(exclude)
    pz_out, sl_out = [], []
    start = 0
    while len(pz_out) < need:
        missing = need - len(pz_out)
        stop = start + (missing if start == 0 else max(missing + missing // 20, 64))
        pz, sl = generate_stream(n, difficulty, split, seed, start, stop, workers, progress)
        for p, s in zip(pz, sl):
            key = s.tobytes()
            if key in seen:
                continue
            if dedup:
                seen.add(key)
            pz_out.append(p)
            sl_out.append(s)
            if len(pz_out) == need:
                break
        start = stop
        if start > 20 * need + 1000:
            raise RuntimeError(f"sudoku {n}x{n} {difficulty} {split}: too many duplicate grids")
    return np.stack(pz_out), np.stack(sl_out)


# --------------------------------------------------------------------------- cache


def data_root(cfg_dir: str = "") -> Path:
    """Cache folder: ``cfg_dir``, else $SFLM_BENCH_DATA, else ~/.cache/sflm-bench."""
    root = cfg_dir or os.environ.get("SFLM_BENCH_DATA") or str(Path.home() / ".cache" / "sflm-bench")
    return Path(root).expanduser() / "sudoku"


def _cache_path(root: Path, key: dict) -> Path:
    k = key
    return root / (f"{k['split']}-{k['grid']}x{k['grid']}-{k['difficulty']}-n{k['n']}"
                   f"-valid{k['n_valid']}-seed{k['seed']}-v{k['v']}.npz")


def _load_cached(path: Path, key: dict):
    if not path.is_file():
        return None
    try:
        with np.load(path) as z:
            if json.loads(str(z["key"])) != key:
                log.warning("%s: cache key mismatch, regenerating", path)
                return None
            return z["puzzles"], z["solutions"]
    except Exception as e:  # noqa: BLE001 - an unreadable cache file is a miss
        log.warning("%s: unreadable cache file (%s), regenerating", path, e)
        return None


def _save(path: Path, key: dict, puzzles: np.ndarray, solutions: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, puzzles=puzzles, solutions=solutions, key=np.array(json.dumps(key)))
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the cache may be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_split(n: int, difficulty: str, split: str, *, n_train: int, n_valid: int, seed: int,
               data_dir: str = "", workers: int = 2, progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(puzzles, solutions), each (N, n, n) uint8, of one split; generated once, then cached.

    The training split depends on every difficulty's validation split (their solution grids
    are excluded), so ``n_valid`` is part of its key.
    """
    _check_grid(n)
    givens_for(n, difficulty)
    if split not in SPLITS:
        raise ValueError(f"split: must be one of {list(SPLITS)}, got {split!r}")
    size = n_train if split == "train" else n_valid
    key = {"split": split, "grid": n, "difficulty": difficulty, "n": size,
           "n_valid": n_valid if split == "train" else size, "seed": seed, "v": GENERATOR_VERSION}
    path = _cache_path(data_root(data_dir), key)
    hit = _load_cached(path, key)
    if hit is not None:
        return hit
    puzzles, solutions = _generate_split(n, difficulty, split, n_train=n_train, n_valid=n_valid,
                                         seed=seed, data_dir=data_dir, workers=workers, progress=progress)
    _save(path, key, puzzles, solutions)
    return puzzles, solutions


def _generate_split(n, difficulty, split, *, n_train, n_valid, seed, data_dir, workers, progress):
    if n == 4:  # the grid set is split; grids repeat within a split
        need = n_train if split == "train" else n_valid
        return generate_stream(n, difficulty, split, seed, 0, need, workers, progress)
    if split == "valid":
        return _select(n, difficulty, "valid", seed, n_valid, (), workers, progress, dedup=True)
    exclude = set()
    for d in DIFFICULTIES:
        _, vs = load_split(n, d, "valid", n_train=n_train, n_valid=n_valid, seed=seed,
                           data_dir=data_dir, workers=workers, progress=progress)
        exclude.update(s.tobytes() for s in vs)
    return _select(n, difficulty, "train", seed, n_train, exclude, workers, progress, dedup=True)


# --------------------------------------------------------------------------- tokens


def seq_len(n: int) -> int:
    """Tokens per example: 2 * (BOS + n*n cells + (n-1) separators); 180 for 9x9."""
    return 2 * (n * n + n)


def prompt_len(n: int) -> int:
    """Prompt length: BOS + puzzle + the second BOS (91 for 9x9)."""
    return n * n + n + 1


@cache
def cell_positions(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequence positions of the n*n cells (row-major) in the puzzle and the solution half."""
    half = n * n + n  # BOS + n rows of n cells + (n-1) separators
    within = np.array([1 + r * (n + 1) + c for r in range(n) for c in range(n)])
    return within, within + half


def encode(puzzles: np.ndarray, solutions: np.ndarray) -> tuple[Tensor, Tensor, Tensor]:
    """(x, clean_mask, loss_mask), each (N, L), from (N, n, n) puzzles and solutions."""
    puzzles = np.asarray(puzzles)
    solutions = np.asarray(solutions)
    N, n = puzzles.shape[0], puzzles.shape[1]
    L = seq_len(n)
    pp, sp = cell_positions(n)
    x = np.full((N, L), SEP, np.int64)
    x[:, 0] = BOS
    x[:, L // 2] = BOS
    x[:, pp] = puzzles.reshape(N, -1)
    x[:, sp] = solutions.reshape(N, -1)
    blank = puzzles.reshape(N, -1) == BLANK
    loss = np.zeros((N, L), bool)
    loss[:, sp] = blank  # only the blank cells of the solution are generated and scored
    clean = ~loss  # prompt, separators and the solution's given cells are never noised
    return torch.from_numpy(x), torch.from_numpy(clean), torch.from_numpy(loss)


def decode(seq, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(puzzle, solution) (n, n) grids from one (L,) token sequence (or (N, n, n) from (N, L))."""
    arr = seq.detach().cpu().numpy() if isinstance(seq, torch.Tensor) else np.asarray(seq)
    L = arr.shape[-1]
    if n is None:
        n = next((k for k in BOXES if seq_len(k) == L), None)
        if n is None:
            raise ValueError(f"decode: sequence length {L} is not a Sudoku layout ({[seq_len(k) for k in BOXES]})")
    if L != seq_len(n):
        raise ValueError(f"decode: expected length {seq_len(n)} for {n}x{n}, got {L}")
    pp, sp = cell_positions(n)
    shape = arr.shape[:-1] + (n, n)
    return arr[..., pp].reshape(shape), arr[..., sp].reshape(shape)


def format_grid(grid) -> str:
    """A grid as text, '.' for blanks, '|' and '-' between boxes; other ids shown as '?'."""
    g = np.asarray(grid)
    n = g.shape[0]
    br, bc = BOXES[n]
    lines = []
    for r in range(n):
        if r and r % br == 0:
            lines.append("+".join(["-" * (2 * bc + 1)] * (n // bc)))
        cells = ["." if v == 0 else str(int(v)) if 1 <= v <= n else "?" for v in g[r]]
        lines.append("|".join(" " + " ".join(cells[b:b + bc]) + " " for b in range(0, n, bc)))
    return "\n".join(lines)


def format_sequence(seq) -> str:
    """Puzzle and solution of one token sequence side by side."""
    p, s = decode(seq)
    left, right = format_grid(p).splitlines(), format_grid(s).splitlines()
    return "\n".join(f"{a}    {b}" for a, b in zip(left, right))


# --------------------------------------------------------------------------- task


class SudokuTask(Task):
    """Sudoku solving (paper, "Reasoning on Sudoku"): groups are difficulties; train 48k / valid 2k each."""

    name = "sudoku"
    vocab_size = VOCAB_SIZE

    def __init__(self, cfg: TaskConfig):
        super().__init__(cfg)
        if cfg.grid not in BOXES:
            raise ConfigError(f"task.grid: must be one of {sorted(BOXES)}, got {cfg.grid!r}")
        for i, d in enumerate(cfg.difficulties):
            if d not in DIFFICULTIES:
                raise ConfigError(f"task.difficulties[{i}]: must be one of {list(DIFFICULTIES)}, got {d!r}")
        for k in cfg.options:
            if k not in _KNOWN_OPTIONS:
                raise ConfigError(f"task.options.{k}: unknown key (known: {', '.join(sorted(_KNOWN_OPTIONS))})")
        workers = cfg.options.get("workers", _KNOWN_OPTIONS["workers"])
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"task.options.workers: must be an integer >= 1, got {workers!r}")
        self.n = cfg.grid
        self.workers = workers
        self.seq_len = seq_len(self.n)
        self.prompt_len = prompt_len(self.n)

    def groups(self) -> list[str]:
        return list(self.cfg.difficulties)

    def _split(self, group: str, split: str):
        if group not in DIFFICULTIES:
            raise ValueError(f"sudoku: unknown group {group!r} (known: {', '.join(DIFFICULTIES)})")
        c = self.cfg
        return load_split(self.n, group, split, n_train=c.n_train, n_valid=c.n_valid, seed=c.seed,
                          data_dir=c.data_dir, workers=self.workers)

    def _to_data(self, puzzles, solutions, group) -> TaskData:
        x, clean, loss = encode(puzzles, solutions)
        meta = {"puzzle": list(puzzles), "solution": list(solutions), "difficulty": [group] * len(puzzles)}
        return TaskData(x, clean, loss, meta)

    def train_data(self, groups: list[str]) -> TaskData:
        parts = [self._to_data(*self._split(g, "train"), g) for g in groups]
        if not parts:
            raise ValueError("sudoku: train_data needs at least one group")
        return TaskData(
            torch.cat([p.x for p in parts]),
            torch.cat([p.clean_mask for p in parts]),
            torch.cat([p.loss_mask for p in parts]),
            {k: [v for p in parts for v in p.meta[k]] for k in parts[0].meta},
        )

    def eval_data(self, group: str, n: int) -> TaskData:
        if not 0 < n <= self.cfg.n_valid:
            raise ValueError(f"sudoku: eval_data n must be in [1, task.n_valid={self.cfg.n_valid}], got {n}")
        puzzles, solutions = self._split(group, "valid")
        return self._to_data(puzzles[:n], solutions[:n], group)

    def evaluate(self, samples: Tensor, data: TaskData, group: str) -> list[MetricValue]:
        from bench.evaluate.sudoku import evaluate_sudoku

        if "solution" in data.meta and "puzzle" in data.meta:
            puzzles, solutions = np.stack(data.meta["puzzle"]), np.stack(data.meta["solution"])
        else:
            puzzles, solutions = decode(data.x, self.n)
        return evaluate_sudoku(samples, puzzles, solutions)
