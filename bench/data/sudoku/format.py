"""Sudoku token format (reference ``dataloader.py::SudokuTokenizer``) and the loss masks.

Vocabulary 12: 0 = blank cell, 1-9 digits, 10 = row separator, 11 = BOS. Sequence = [BOS]
puzzle rows joined by 10 [BOS] solution rows joined by 10; for 9x9 that is 1 + 89 + 1 + 89 =
180 tokens and the prompt is the first 91 positions. Methods that need a mask token append
their own id (12). There is no EOS: the reference tokenizer's ``eos_token_id`` is 10, the row
separator, so EOS-based early stopping must never be used on Sudoku.

Masks (a deliberate departure from the reference): the reference trains on all 89 solution
tokens (``attention_mask = [0]*91 + [1]*89``). Here the prompt is clean and out of the loss as
in the reference, and in the solution half the cells that are GIVEN in the puzzle and the row
separators are also clean (never noised) and out of the loss: they are copies of the prompt /
fixed layout. Only the blank cells of the solution are generated and scored by the loss.
``x`` holds the full reference sequence; samplers must read only its clean positions.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import torch
from torch import Tensor

from bench.data.sudoku.solver import BOXES

# Token ids (reference SudokuTokenizer).
BLANK = 0
SEP = 10  # row separator; the reference also calls it eos_token_id
BOS = 11
VOCAB_SIZE = 12


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
            raise ValueError(
                f"decode: sequence length {L} is not a Sudoku layout "
                f"({[seq_len(k) for k in BOXES]})"
            )
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
        lines.append("|".join(" " + " ".join(cells[b : b + bc]) + " " for b in range(0, n, bc)))
    return "\n".join(lines)


def format_sequence(seq) -> str:
    """Puzzle and solution of one token sequence side by side."""
    p, s = decode(seq)
    left, right = format_grid(p).splitlines(), format_grid(s).splitlines()
    return "\n".join(f"{a}    {b}" for a, b in zip(left, right))
