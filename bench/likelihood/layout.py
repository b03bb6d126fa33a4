"""Documents (lists of token ids) -> fixed-length blocks, as MDLM / Duo lay out text.

- **Wrapped** (:func:`wrap`; kuleshov-group/mdlm ``dataloader.py::_group_texts``): each document
  followed by the end-of-text id, concatenated within batches of 1,000 documents (``datasets.map``'s
  default batch), cut into pieces; with BOS and EOS ids each block is ``[BOS] + piece + [EOS]``
  (piece = L - 2 tokens), without them a block is a piece of L tokens. The tail of each batch is
  dropped. Every position counts; none is given.
- **Padded** (:func:`pad`; ``preprocess_and_tokenize`` with ``wrap=False``): one document per
  block, ``[BOS] + ids + [EOS]`` cut to L (specials kept), then padding. Pad positions are out of
  the loss but given: the bounds noise only the counted positions, so pads stay clean in x_t, as
  in s-flm@18d586f (``q_xt(valid_tokens)``); kuleshov-group/mdlm noises them too.

Special ids come from the task's tokenizer (:func:`special_ids`); a task without one (sort,
Sudoku) has none: plain concatenation, pad id 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bench.data.base import TaskData

MAP_BATCH = 1000  # datasets.Dataset.map's default batch: MDLM wraps within each


@dataclass(frozen=True)
class Specials:
    """BOS / EOS ids (None: the task has none) and the id padding is written with."""

    bos: int | None
    eos: int | None
    pad: int


def special_ids(task) -> Specials:
    """The task tokenizer's BOS / EOS ids and a pad id below the task's vocabulary (its PAD, else
    EOS, else 0: pad positions are not scored but are given, clean, so the id must embed)."""
    tok = getattr(task, "tokenizer", None)
    if tok is None:
        return Specials(None, None, 0)

    def ok(i):
        return i if isinstance(i, int) and 0 <= i < task.vocab_size else None

    bos, eos = ok(tok.bos_token_id), ok(tok.eos_token_id)
    pad = ok(tok.pad_token_id)
    return Specials(bos, eos, pad if pad is not None else eos if eos is not None else 0)


def wrap(docs: list[list[int]], L: int, sp: Specials, *, batch: int = MAP_BATCH) -> np.ndarray:
    """The wrapped layout (module docstring): (n, L) int64."""
    framed = sp.bos is not None and sp.eos is not None
    w = L - 2 if framed else L
    if w < 1:
        raise ValueError(f"likelihood: block {L} leaves no room between BOS and EOS")
    sep = [] if sp.eos is None else [sp.eos]
    out = []
    for i in range(0, len(docs), batch):
        flat = np.fromiter((t for d in docs[i : i + batch] for t in (*d, *sep)), dtype=np.int64)
        n = len(flat) // w
        pieces = flat[: n * w].reshape(n, w)
        if framed:
            bos, eos = np.full((n, 1), sp.bos), np.full((n, 1), sp.eos)
            pieces = np.concatenate([bos, pieces, eos], axis=1)
        out.append(pieces)
    return np.concatenate(out) if out else np.zeros((0, L), np.int64)


def pad(docs: list[list[int]], L: int, sp: Specials) -> tuple[np.ndarray, np.ndarray]:
    """The padded layout (module docstring): (n, L) int64 ids and (n, L) bool counted positions."""
    framed = sp.bos is not None and sp.eos is not None
    x = np.full((len(docs), L), sp.pad, dtype=np.int64)
    counted = np.zeros((len(docs), L), dtype=bool)
    for i, d in enumerate(docs):
        ids = [sp.bos, *d[: L - 2], sp.eos] if framed else list(d[:L])
        x[i, : len(ids)] = ids
        counted[i, : len(ids)] = True
    return x, counted


def as_task_data(x: np.ndarray, counted: np.ndarray | None = None) -> TaskData:
    """Blocks as :class:`TaskData`: no prompt (``clean_mask`` False), ``counted`` (default: every
    position) in the loss; the bounds keep the rest (pads) clean in x_t."""
    xt = torch.as_tensor(np.ascontiguousarray(x), dtype=torch.long)
    loss = (
        torch.ones_like(xt, dtype=torch.bool)
        if counted is None
        else torch.as_tensor(np.ascontiguousarray(counted), dtype=torch.bool)
    )
    return TaskData(xt, torch.zeros_like(loss), loss, meta={})
