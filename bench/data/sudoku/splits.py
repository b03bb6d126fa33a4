"""Sudoku data splits: seeded puzzle streams, the train / validation split rules and the cache.

Every puzzle has its own seed, ``SeedSequence(seed, spawn_key=(n, difficulty, split, i))``,
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

Cache: each split is generated once (across processes: :func:`bench.atomic.build_once`) and
stored as ``.npz`` (written atomically) under ``cfg.data_dir``, else ``$SFLM_BENCH_DATA``, else
``~/.cache/sflm-bench`` (subfolder ``sudoku``), keyed by (grid, difficulty, split sizes, seed,
``GENERATOR_VERSION``).
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing as mp
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.atomic import build_once, write_with
from bench.data.sudoku.solver import DIFFICULTIES, all_grids, check_grid, givens_for, make_puzzle
from bench.text.locate import data_cache_root

log = logging.getLogger(__name__)

GENERATOR_VERSION = 1
SPLITS = ("train", "valid")
VALID_GRID_FRAC_4X4 = 0.15  # share of the 288 4x4 solution grids held out for validation


def _puzzle_rng(seed: int, n: int, difficulty: str, split: str, index: int) -> random.Random:
    ss = np.random.SeedSequence(
        seed, spawn_key=(n, DIFFICULTIES.index(difficulty), SPLITS.index(split), index)
    )
    return random.Random(int(ss.generate_state(1, dtype=np.uint64)[0]))


def grid_split_4x4(seed: int) -> dict[str, tuple]:
    """The 4x4 solution grids of each split: a seeded ~15% of the 288 grids are validation."""
    grids = all_grids(4)
    perm = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(4, 99))).permutation(
        len(grids)
    )
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


def generate_stream(
    n: int,
    difficulty: str,
    split: str,
    seed: int,
    start: int,
    stop: int,
    workers: int = 2,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Puzzles ``start..stop-1`` of a stream as ((k, n, n), (k, n, n)) uint8 arrays.

    The result is a function of the arguments only, not of ``workers``.
    """
    total = stop - start
    if total <= 0:
        return np.zeros((0, n, n), np.uint8), np.zeros((0, n, n), np.uint8)
    workers = max(1, min(workers, total))
    size = max(1, min(250, math.ceil(total / (4 * workers))))
    chunks = [
        (n, difficulty, split, seed, a, min(a + size, stop)) for a in range(start, stop, size)
    ]
    bar = tqdm(
        total=total,
        desc=f"sudoku {n}x{n} {difficulty} {split}",
        unit="puzzle",
        disable=not progress or total < 2000,
        leave=False,
    )
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
    """The Sudoku cache folder: ``sudoku`` under :func:`bench.text.locate.data_cache_root`."""
    return data_cache_root(cfg_dir) / "sudoku"


def _cache_path(root: Path, key: dict) -> Path:
    k = key
    return root / (
        f"{k['split']}-{k['grid']}x{k['grid']}-{k['difficulty']}-n{k['n']}"
        f"-valid{k['n_valid']}-seed{k['seed']}-v{k['v']}.npz"
    )


def read_npz_cache(path: Path, key: dict, names: tuple[str, ...]) -> tuple[np.ndarray, ...] | None:
    """The arrays ``names`` of a cache file written by :func:`write_npz_cache` with the same
    ``key``; None (a miss, logged) when it is absent, unreadable or has another key."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as z:
            if json.loads(str(z["key"])) != key:
                log.warning("%s: cache key mismatch, regenerating", path)
                return None
            return tuple(z[n] for n in names)
    except Exception as e:  # noqa: BLE001 - an unreadable cache file is a miss
        log.warning("%s: unreadable cache file (%s), regenerating", path, e)
        return None


def _save_npz(path: Path, key: dict, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` and ``key`` (JSON) as a compressed ``.npz`` at ``path``, readable by everyone
    (the cache may be shared)."""
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays, key=np.array(json.dumps(key)))
    os.chmod(path, 0o644)


def write_npz_cache(path: Path, key: dict, **arrays: np.ndarray) -> None:
    """Atomically write ``arrays`` and ``key`` (JSON) as a compressed ``.npz`` (bench.atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_with(path, lambda tmp: _save_npz(tmp, key, arrays))


def cached_npz(
    path: Path, key: dict, names: tuple[str, ...], make: Callable[[], dict[str, np.ndarray]]
) -> tuple[np.ndarray, ...]:
    """The arrays ``names`` of the cache file ``path`` for ``key`` (:func:`read_npz_cache`);
    when it is missing or stale, ``make()`` (name -> array) computes them and they are written
    once across processes (:func:`bench.atomic.build_once`: concurrent callers wait for the
    first one and read its file)."""
    return build_once(
        path,
        lambda tmp: _save_npz(tmp, key, make()),
        check=lambda p: read_npz_cache(p, key, names),
        folder=False,
    )


def load_split(
    n: int,
    difficulty: str,
    split: str,
    *,
    n_train: int,
    n_valid: int,
    seed: int,
    data_dir: str = "",
    workers: int = 2,
    progress: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(puzzles, solutions), each (N, n, n) uint8, of one split; generated once, then cached.

    The training split depends on every difficulty's validation split (their solution grids
    are excluded), so ``n_valid`` is part of its key.
    """
    check_grid(n)
    givens_for(n, difficulty)
    if split not in SPLITS:
        raise ValueError(f"split: must be one of {list(SPLITS)}, got {split!r}")
    size = n_train if split == "train" else n_valid
    key = {
        "split": split,
        "grid": n,
        "difficulty": difficulty,
        "n": size,
        "n_valid": n_valid if split == "train" else size,
        "seed": seed,
        "v": GENERATOR_VERSION,
    }
    path = _cache_path(data_root(data_dir), key)

    def make() -> dict[str, np.ndarray]:
        puzzles, solutions = _generate_split(
            n,
            difficulty,
            split,
            n_train=n_train,
            n_valid=n_valid,
            seed=seed,
            data_dir=data_dir,
            workers=workers,
            progress=progress,
        )
        return {"puzzles": puzzles, "solutions": solutions}

    return cached_npz(path, key, ("puzzles", "solutions"), make)


def _generate_split(n, difficulty, split, *, n_train, n_valid, seed, data_dir, workers, progress):
    if n == 4:  # the grid set is split; grids repeat within a split
        need = n_train if split == "train" else n_valid
        return generate_stream(n, difficulty, split, seed, 0, need, workers, progress)
    if split == "valid":
        return _select(n, difficulty, "valid", seed, n_valid, (), workers, progress, dedup=True)
    exclude = set()
    for d in DIFFICULTIES:
        _, vs = load_split(
            n,
            d,
            "valid",
            n_train=n_train,
            n_valid=n_valid,
            seed=seed,
            data_dir=data_dir,
            workers=workers,
            progress=progress,
        )
        exclude.update(s.tobytes() for s in vs)
    return _select(n, difficulty, "train", seed, n_train, exclude, workers, progress, dedup=True)
