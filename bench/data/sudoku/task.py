"""The Sudoku benchmark task (paper, "Reasoning on Sudoku").

The parts live in their own modules; this one holds the task and re-exports their public names
(``from bench.data.sudoku import task as S; S.encode(...)``):

- :mod:`bench.data.sudoku.solver`: the solver and the unique-solution puzzle generator.
- :mod:`bench.data.sudoku.splits`: seeded puzzle streams, the train / validation split rules
  and the on-disk cache.
- :mod:`bench.data.sudoku.format`: the token layout (reference ``SudokuTokenizer``) and the
  clean / loss masks.
- :mod:`bench.data.sudoku.reference`: the paper harness's own 9x9 puzzles, bit for bit.
- :mod:`bench.data.sudoku.score`: the scorer (exact match, cell / blank accuracy, validity).

Task options (``task.options``, :class:`SudokuOptions`): ``workers`` (processes used for
generation, default 2); ``generator``: "fast" (default; :mod:`bench.data.sudoku.splits`, any
grid) or "reference" (the paper harness's puzzles and its 48k / 2k split of
``n_train + n_valid`` puzzles seeded by ``task.seed``; 9x9 only; docs/sudoku-reference.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from bench.config import ConfigError, TaskConfig
from bench.data.base import Task, TaskData
from bench.data.sudoku.format import (
    BLANK,
    BOS,
    SEP,
    VOCAB_SIZE,
    cell_positions,
    decode,
    encode,
    format_grid,
    format_sequence,
    prompt_len,
    seq_len,
)
from bench.data.sudoku.solver import (
    BOXES,
    DIFFICULTIES,
    GIVENS_9X9,
    all_grids,
    count_solutions,
    givens_for,
    make_puzzle,
    random_grid,
    solve,
)
from bench.data.sudoku.splits import (
    GENERATOR_VERSION,
    SPLITS,
    data_root,
    generate_stream,
    grid_split_4x4,
    load_split,
)
from bench.evaluate.metrics import MetricValue
from bench.options import Options, option

__all__ = [
    "BLANK",
    "BOS",
    "BOXES",
    "DIFFICULTIES",
    "GENERATOR_VERSION",
    "GIVENS_9X9",
    "SEP",
    "SPLITS",
    "VOCAB_SIZE",
    "SudokuTask",
    "all_grids",
    "cell_positions",
    "count_solutions",
    "data_root",
    "decode",
    "encode",
    "format_grid",
    "format_sequence",
    "generate_stream",
    "givens_for",
    "grid_split_4x4",
    "load_split",
    "make_puzzle",
    "prompt_len",
    "random_grid",
    "seq_len",
    "solve",
]

GENERATORS = ("fast", "reference")


def check_eval_size(n: int, n_valid: int, *, key: str) -> None:
    """Evaluation reads the first ``n`` validation puzzles of a difficulty, of which there are
    ``task.n_valid`` (:meth:`SudokuTask.eval_data`; the planner checks ``sample.n_samples``)."""
    if not 0 < n <= n_valid:
        raise ConfigError(
            f"{key}: must be in [1, task.n_valid = {n_valid}] (the validation puzzles of a "
            f"difficulty), got {n}"
        )


@dataclass
class SudokuOptions(Options):
    """``task.options`` of the ``sudoku`` task."""

    workers: int = option(2, ge=1, help="processes used for puzzle generation")
    generator: str = option(
        "fast",
        choices=GENERATORS,
        help="fast: bench.data.sudoku.splits (any grid); reference: the paper "
        "harness's puzzles and split (9x9 only)",
    )


def grid_text(grid) -> str:
    """An (n, n) grid as one line: rows joined by ``/``, ``.`` for a blank (0), ``?`` for an id
    that is not a digit of the grid (a model may write a separator or a mask in a cell)."""
    n = len(grid)
    cell = lambda v: "." if v == 0 else str(int(v)) if 1 <= v <= n else "?"  # noqa: E731
    return "/".join("".join(cell(v) for v in row) for row in grid)


class SudokuTask(Task):
    """Sudoku solving (paper, "Reasoning on Sudoku"): groups are difficulties;
    train 48k / valid 2k each."""

    name = "sudoku"
    vocab_size = VOCAB_SIZE
    # the paper's Table "Exact match accuracy on Sudoku"; score.py's other metrics
    headline_metric = "exact_match"
    secondary_metrics = ("cell_accuracy", "blank_accuracy", "valid_grid")
    subset_order = DIFFICULTIES
    Options = SudokuOptions

    def __init__(self, cfg: TaskConfig):
        super().__init__(cfg)
        if cfg.grid not in BOXES:
            raise ConfigError(f"task.grid: must be one of {sorted(BOXES)}, got {cfg.grid!r}")
        for i, d in enumerate(cfg.difficulties):
            if d not in DIFFICULTIES:
                raise ConfigError(
                    f"task.difficulties[{i}]: must be one of {list(DIFFICULTIES)}, got {d!r}"
                )
        if self.opts.generator == "reference" and cfg.grid != 9:
            raise ConfigError(
                f"task.options.generator: the reference puzzles are 9x9, task.grid is {cfg.grid}"
            )
        self.generator = self.opts.generator
        self.n = cfg.grid
        self.workers = self.opts.workers
        self.seq_len = seq_len(self.n)
        self.prompt_len = prompt_len(self.n)

    def protocol(self) -> str:
        return f"generator={self.opts.generator}"

    def sweep_defaults(self) -> dict:
        """NFE = the sequence length (the paper's 180 for 9x9, one call per position; 40 for
        4x4) and every validation puzzle (``task.n_valid``; the paper's 2,000)."""
        return {"sample": {"nfe": [self.seq_len], "n_samples": self.cfg.n_valid}}

    def cost_profile(self) -> dict:
        """The puzzle half and the solution's BOS are given (an AR sampler's calls: the rest)."""
        return {"prompt_tokens": self.prompt_len}

    def validate_plan(self, *, backbone, train, sample) -> None:
        check_eval_size(sample.n_samples, self.cfg.n_valid, key="sample.n_samples")

    def groups(self) -> list[str]:
        return list(self.cfg.difficulties)

    def _split(self, group: str, split: str):
        if group not in DIFFICULTIES:
            raise ValueError(f"sudoku: unknown group {group!r} (known: {', '.join(DIFFICULTIES)})")
        c = self.cfg
        if self.generator == "reference":
            from bench.data.sudoku.reference import load_reference_split

            return load_reference_split(
                group,
                split,
                n_train=c.n_train,
                n_valid=c.n_valid,
                seed=c.seed,
                data_dir=c.data_dir,
                workers=self.workers,
            )
        return load_split(
            self.n,
            group,
            split,
            n_train=c.n_train,
            n_valid=c.n_valid,
            seed=c.seed,
            data_dir=c.data_dir,
            workers=self.workers,
        )

    def _to_data(self, puzzles, solutions, group) -> TaskData:
        x, clean, loss = encode(puzzles, solutions)
        meta = {
            "puzzle": list(puzzles),
            "solution": list(solutions),
            "difficulty": [group] * len(puzzles),
        }
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
        check_eval_size(n, self.cfg.n_valid, key="sudoku: eval_data n")
        puzzles, solutions = self._split(group, "valid")
        return self._to_data(puzzles[:n], solutions[:n], group)

    def heldout_data(self, groups: list[str], n: int) -> TaskData:
        """The first validation puzzles of each group, about ``n`` in all (the training format:
        the solution, the givens clean)."""
        each = min(self.cfg.n_valid, max(1, -(-n // len(groups))))
        parts = [self.eval_data(g, each) for g in groups]
        return TaskData(
            torch.cat([p.x for p in parts])[:n],
            torch.cat([p.clean_mask for p in parts])[:n],
            torch.cat([p.loss_mask for p in parts])[:n],
        )

    # -- text and records (bench.records, bench.generate) --------------------------------
    def decode_text(self, ids: list[int]) -> str:
        """Rows of cells joined by ``/`` (``.`` = blank; the BOS dropped; ``?`` = an id that is
        not a cell, e.g. a mask left in place)."""
        sym = {BLANK: ".", SEP: "/", BOS: ""}
        return "".join(sym.get(int(t), str(int(t)) if 1 <= int(t) <= self.n else "?") for t in ids)

    def encode_text(self, text: str) -> list[int]:
        """A puzzle's n x n cells in row order: digits, ``.`` or ``0`` for a blank; separators
        (``/ | - +``) and white space are ignored."""
        cells = [c for c in text if c not in "/|-+ \t\n"]
        bad = [c for c in cells if not (c == "." or c.isdigit() and int(c) <= self.n)]
        if bad or len(cells) != self.n * self.n:
            raise ValueError(
                f"sudoku: a {self.n}x{self.n} puzzle is {self.n * self.n} cells (digits "
                f"1-{self.n}, '.' or 0 for a blank), got {len(cells)} characters"
                + (f" with {bad[0]!r}" if bad else "")
            )
        return [0 if c == "." else int(c) for c in cells]

    def prompt_length(self, data: TaskData, i: int) -> int:
        return self.prompt_len  # the puzzle half and the solution's BOS (format.prompt_len)

    def text_canvas(self, prompt: str, suffix: str, length: int) -> TaskData:
        """The puzzle ``prompt`` as the task lays it out: the solution half to fill, its given
        cells and separators clean (``length`` is the layout's; a suffix has no place here)."""
        if suffix:
            raise ValueError(
                "sudoku: --suffix has no place in a Sudoku layout (the givens are the prompt)"
            )
        puzzle = np.array(self.encode_text(prompt), dtype=np.int64).reshape(1, self.n, self.n)
        # the solution half holds the givens (clean) and blanks to fill, as in the task's data
        return self._to_data(puzzle, puzzle.copy(), "prompt")

    def record_fields(self, samples: Tensor, data: TaskData, group: str) -> list[dict]:
        """``givens`` (the puzzle), ``solution``, ``grid`` (the model's; also its ``output``: read
        by cell position, not token by token), ``wrong_cells`` ([row, column] pairs, 0-based,
        where the grid differs from the solution) and ``valid_grid`` (every row, column and box
        holds each digit once)."""
        from bench.data.sudoku.score import valid_grids

        puzzles, solutions = self._grids(data)
        _, gen = decode(samples, self.n)
        valid = valid_grids(gen)
        return [
            {
                "givens": grid_text(puzzles[i]),
                "solution": grid_text(solutions[i]),
                "grid": grid_text(gen[i]),
                "output": grid_text(gen[i]),  # by cell position (a written separator is a "?")
                "wrong_cells": np.argwhere(gen[i] != solutions[i]).tolist(),
                "valid_grid": bool(valid[i]),
            }
            for i in range(len(data))
        ]

    def _grids(self, data: TaskData):
        if "solution" in data.meta and "puzzle" in data.meta:
            return np.stack(data.meta["puzzle"]), np.stack(data.meta["solution"])
        return decode(data.x, self.n)

    def evaluate(self, samples: Tensor, data: TaskData, group: str) -> list[MetricValue]:
        from bench.data.sudoku.score import evaluate_sudoku

        return evaluate_sudoku(samples, *self._grids(data))
