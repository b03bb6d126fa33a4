"""The paper harness's 9x9 Sudoku puzzles, bit for bit (task option ``generator: reference``).

The released harness (first commit of FrankCCCCC/s-flm, ``sudoku_generator.py`` with the
``configs/data/sudoku.yaml`` defaults ``num_train 48000``, ``num_valid 2000``, ``data_seed 42``)
builds its data set as follows; this module reproduces each step with its own code:

1. Puzzle ``k`` of the candidate stream uses ``random.Random(seed + k)`` for everything
   (``_generate_one``). The solution is filled by plain backtracking over the cells in
   row-major order; each time a cell is entered, a fresh ``[1..9]`` is shuffled with that
   generator and the digits are tried in that order (``_fill_grid``).
2. The same generator then shuffles the 81 cells (``_remove_cells``); in that order a cell is
   emptied and kept empty iff the puzzle still has exactly one solution, until ``81 - clues``
   cells are empty (easy 40, medium 35, hard 30 clues). There is no restart: when the pass
   ends early the puzzle keeps more clues. "Exactly one solution" is a property of the
   puzzle, so the solution counter used here (the fast bitmask solver) gives the reference's
   verdict at a fraction of the cost of its naive counter.
3. Candidates are taken in stream order, skipping any whose SOLUTION grid was already taken,
   until ``num_train + num_valid`` are kept (``_generate_raw_grids``; its batches cover
   consecutive seeds, so batching does not change the result).
4. ``random.Random(seed).shuffle`` of the indices ``0..total-1``; the first ``num_train`` are
   the training set, the rest the validation set, in that order (``generate_sudoku_dataset``).

The solution grid depends only on the seed (step 1 runs before any removal), so the
de-duplication of step 3 is the same for every difficulty: it is computed once from the
solutions alone (:func:`kept_seeds`, cached), and a split's puzzles are then generated only
for its own seeds. Everything is cached on disk (atomic writes) under the Sudoku data folder,
keyed by the parameters and :data:`VERSION`.

Token form (reference ``_tokenize_grids``): ``[11] puzzle [11] solution`` with rows joined by
10, 180 ids; :func:`split_sha256` hashes these ids (uint8, in split order).

CLI: ``python -m bench.data.sudoku.reference --difficulty easy [--split valid] [--workers N]``
builds (or loads) a split and prints its SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import multiprocessing as mp
import random
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.data.sudoku.solver import count_solutions
from bench.data.sudoku.splits import read_npz_cache, write_npz_cache

log = logging.getLogger(__name__)

VERSION = 1  # bump when the cached arrays would change
CLUES = {"easy": 40, "medium": 35, "hard": 30}  # reference DIFFICULTY_TO_CLUES
PAPER_SEED = 42  # reference configs/data/sudoku.yaml: data_seed
PAPER_N_TRAIN = 48_000  # num_train
PAPER_N_VALID = 2_000  # num_valid
SPLITS = ("train", "valid")
BOS, SEP = 11, 10  # reference SudokuTokenizer: bos_token_id, row_separator_id

_ROW = [i // 9 for i in range(81)]
_COL = [i % 9 for i in range(81)]
_BOX = [(i // 27) * 3 + (i % 9) // 3 for i in range(81)]


# --------------------------------------------------------------------------- one puzzle


def _fill(rng: random.Random) -> list[int]:
    """The reference's randomized backtracking fill (``_fill_grid``) as an explicit stack.

    Same visiting order, same random draws: entering cell ``k`` (row-major) shuffles a fresh
    ``[1..9]``; the digits are tried in that order; when none fits, the previous cell moves
    on to its next digit. Returns the flat 81-cell solution.
    """
    cells = [0] * 81
    rows, cols, boxes = [0] * 9, [0] * 9, [0] * 9  # bit d-1 set = digit d used
    order: list[list[int]] = [[]] * 81
    pos = [0] * 81
    k = 0
    nums = list(range(1, 10))
    rng.shuffle(nums)
    order[0] = nums
    while k < 81:
        r, c, b = _ROW[k], _COL[k], _BOX[k]
        used = rows[r] | cols[c] | boxes[b]
        tried = order[k]
        p = pos[k]
        while p < 9 and used >> (tried[p] - 1) & 1:
            p += 1
        if p < 9:  # place and enter the next cell
            d = tried[p]
            pos[k] = p + 1
            cells[k] = d
            bit = 1 << (d - 1)
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            k += 1
            if k < 81:
                nums = list(range(1, 10))
                rng.shuffle(nums)
                order[k] = nums
                pos[k] = 0
            continue
        k -= 1  # dead end: undo the previous cell, which then tries its next digit
        if k < 0:
            raise RuntimeError("sudoku reference fill: no grid (cannot happen on an empty board)")
        bit = ~(1 << (cells[k] - 1))
        rows[_ROW[k]] &= bit
        cols[_COL[k]] &= bit
        boxes[_BOX[k]] &= bit
        cells[k] = 0
    return cells


def reference_solution(seed: int) -> list[int]:
    """The solution grid (flat, 81 digits) of candidate seed ``seed``."""
    return _fill(random.Random(seed))


def reference_puzzle(seed: int, clues: int) -> tuple[list[int], list[int]]:
    """(puzzle, solution), flat 81-cell lists (0 = blank), exactly as the reference's
    ``_generate_one((seed, clues))`` makes them."""
    if not 0 <= clues <= 81:
        raise ValueError(f"clues: must be in [0, 81], got {clues}")
    rng = random.Random(seed)
    solution = _fill(rng)
    cells = list(solution)
    order = list(range(81))  # the reference shuffles (row, col) pairs: same permutation
    rng.shuffle(order)
    to_remove, removed = 81 - clues, 0
    for i in order:
        if removed >= to_remove:
            break
        cells[i] = 0
        if count_solutions(np.reshape(cells, (9, 9)), limit=2) == 1:
            removed += 1
        else:
            cells[i] = solution[i]
    return cells, solution


# --------------------------------------------------------------------------- workers


def _pool(workers: int):
    # forkserver: the caller may hold torch / OpenMP threads (see bench.data.sudoku.splits)
    return mp.get_context("forkserver" if sys.platform.startswith("linux") else "spawn").Pool(
        workers
    )


def _solutions_chunk(args) -> np.ndarray:
    start, stop = args
    return np.array([reference_solution(s) for s in range(start, stop)], np.uint8)


def _puzzles_chunk(args) -> tuple[np.ndarray, np.ndarray]:
    seeds, clues = args
    out = [reference_puzzle(int(s), clues) for s in seeds]
    return np.array([p for p, _ in out], np.uint8), np.array([s for _, s in out], np.uint8)


def _run_chunks(fn, chunks: list, sizes: list[int], workers: int, desc: str, progress: bool):
    bar = tqdm(total=sum(sizes), desc=desc, unit="puzzle", disable=not progress, leave=False)
    out = []
    try:
        if workers <= 1 or len(chunks) <= 1:
            for c, n in zip(chunks, sizes):
                out.append(fn(c))
                bar.update(n)
        else:
            with _pool(workers) as pool:
                for part, n in zip(pool.imap(fn, chunks), sizes):
                    out.append(part)
                    bar.update(n)
    finally:
        bar.close()
    return out


def _chunked(n: int, workers: int, cap: int) -> list[tuple[int, int]]:
    size = max(1, min(cap, -(-n // (4 * max(workers, 1)))))
    return [(a, min(a + size, n)) for a in range(0, n, size)]


# --------------------------------------------------------------------------- cache


def cache_dir(data_dir: str = "") -> Path:
    """``<Sudoku data folder>/reference`` (see :func:`bench.data.sudoku.splits.data_root`)."""
    from bench.data.sudoku.splits import data_root

    return data_root(data_dir) / "reference"


# --------------------------------------------------------------------------- the data set


def kept_seeds(
    seed: int = PAPER_SEED,
    total: int = PAPER_N_TRAIN + PAPER_N_VALID,
    *,
    data_dir: str = "",
    workers: int = 2,
    progress: bool = True,
) -> np.ndarray:
    """Seeds of the ``total`` kept candidates, in the reference's order (step 3): the first
    candidates from ``seed`` upward with a solution grid not seen before. Cached."""
    if total < 1:
        raise ValueError(f"total: must be >= 1, got {total}")
    key = {"what": "kept_seeds", "seed": seed, "total": total, "v": VERSION}
    path = cache_dir(data_dir) / f"kept-seed{seed}-total{total}-v{VERSION}.npz"
    hit = read_npz_cache(path, key, ("seeds",))
    if hit is not None:
        return hit[0]
    seen: set[bytes] = set()
    kept: list[int] = []
    start = seed
    while len(kept) < total:
        batch = total - len(kept)  # seeds are scanned in order: the batch size does not matter
        chunks = [(start + a, start + b) for a, b in _chunked(batch, workers, 2000)]
        parts = _run_chunks(
            _solutions_chunk,
            chunks,
            [b - a for a, b in chunks],
            workers,
            f"sudoku reference: solutions from seed {start}",
            progress,
        )
        for s, grid in enumerate(np.concatenate(parts), start):
            k = grid.tobytes()
            if k in seen:
                log.info("sudoku reference: seed %d repeats an earlier solution, skipped", s)
                continue
            seen.add(k)
            kept.append(s)
            if len(kept) == total:
                break
        start += batch
    arr = np.array(kept, np.int64)
    write_npz_cache(path, key, seeds=arr)
    return arr


def split_positions(seed: int, n_train: int, n_valid: int, split: str) -> list[int]:
    """Positions in the kept list of the puzzles of ``split``, in split order (step 4)."""
    if split not in SPLITS:
        raise ValueError(f"split: must be one of {list(SPLITS)}, got {split!r}")
    idx = list(range(n_train + n_valid))
    random.Random(seed).shuffle(idx)
    return idx[:n_train] if split == "train" else idx[n_train:]


def load_reference_split(
    difficulty: str,
    split: str,
    *,
    n_train: int = PAPER_N_TRAIN,
    n_valid: int = PAPER_N_VALID,
    seed: int = PAPER_SEED,
    data_dir: str = "",
    workers: int = 2,
    progress: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(puzzles, solutions), each (N, 9, 9) uint8, of the reference's ``split`` ("train" or
    "valid") for ``difficulty``; generated once, then cached."""
    if difficulty not in CLUES:
        raise ValueError(f"difficulty: must be one of {list(CLUES)}, got {difficulty!r}")
    if n_train < 0 or n_valid < 0 or n_train + n_valid < 1:
        raise ValueError(
            f"n_train, n_valid: must be >= 0 with a positive sum, got {n_train}, {n_valid}"
        )
    positions = split_positions(seed, n_train, n_valid, split)
    key = {
        "what": "split",
        "difficulty": difficulty,
        "split": split,
        "n_train": n_train,
        "n_valid": n_valid,
        "seed": seed,
        "v": VERSION,
    }
    path = cache_dir(data_dir) / (
        f"{split}-{difficulty}-train{n_train}-valid{n_valid}-seed{seed}-v{VERSION}.npz"
    )
    hit = read_npz_cache(path, key, ("puzzles", "solutions"))
    if hit is not None:
        return hit
    if not positions:
        empty = np.zeros((0, 9, 9), np.uint8)
        return empty, empty.copy()
    kept = kept_seeds(
        seed, n_train + n_valid, data_dir=data_dir, workers=workers, progress=progress
    )
    seeds = kept[positions]
    spans = _chunked(len(seeds), workers, 100)
    parts = _run_chunks(
        _puzzles_chunk,
        [(seeds[a:b], CLUES[difficulty]) for a, b in spans],
        [b - a for a, b in spans],
        workers,
        f"sudoku reference {difficulty} {split}",
        progress,
    )
    puzzles = np.concatenate([p for p, _ in parts]).reshape(-1, 9, 9)
    solutions = np.concatenate([s for _, s in parts]).reshape(-1, 9, 9)
    write_npz_cache(path, key, puzzles=puzzles, solutions=solutions)
    return puzzles, solutions


def reference_tokens(puzzles: np.ndarray, solutions: np.ndarray) -> np.ndarray:
    """The reference's ``input_ids`` (``_tokenize_grids``): (N, 180) uint8,
    ``[BOS] puzzle rows joined by SEP [BOS] solution rows joined by SEP``."""
    p = np.asarray(puzzles, np.uint8).reshape(-1, 9, 9)
    s = np.asarray(solutions, np.uint8).reshape(-1, 9, 9)
    n = p.shape[0]

    def half(g: np.ndarray) -> np.ndarray:
        rows = np.concatenate([g, np.full((n, 9, 1), SEP, np.uint8)], axis=2).reshape(n, 90)
        return np.concatenate([np.full((n, 1), BOS, np.uint8), rows[:, :89]], axis=1)

    return np.concatenate([half(p), half(s)], axis=1)


def split_sha256(puzzles: np.ndarray, solutions: np.ndarray) -> str:
    """SHA-256 of the split's reference token ids, uint8, row after row (hashes in
    docs/sudoku-reference.md)."""
    return hashlib.sha256(reference_tokens(puzzles, solutions).tobytes()).hexdigest()


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.data.sudoku.reference",
        description=(
            "Build (or load) a split of the paper harness's Sudoku data; print its SHA-256."
        ),
    )
    p.add_argument("--difficulty", choices=list(CLUES), required=True)
    p.add_argument("--split", choices=list(SPLITS), default="valid")
    p.add_argument("--n-train", type=int, default=PAPER_N_TRAIN)
    p.add_argument("--n-valid", type=int, default=PAPER_N_VALID)
    p.add_argument("--seed", type=int, default=PAPER_SEED)
    p.add_argument(
        "--data-dir", default="", help="cache root (default $SFLM_BENCH_DATA or ~/.cache)"
    )
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args(argv)
    if a.workers < 1 or a.n_train < 0 or a.n_valid < 0:
        print(f"{p.prog}: error: --workers must be >= 1, --n-train/--n-valid >= 0", file=sys.stderr)
        return 2
    pz, sl = load_reference_split(
        a.difficulty,
        a.split,
        n_train=a.n_train,
        n_valid=a.n_valid,
        seed=a.seed,
        data_dir=a.data_dir,
        workers=a.workers,
    )
    print(f"{a.difficulty} {a.split}: {len(pz)} puzzles, sha256 {split_sha256(pz, sl)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
