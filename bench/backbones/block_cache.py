"""Block KV caches for the bidirectional DiT under semi-autoregressive decoding: Fast-dLLM's
prefix and dual caches (Wu et al. 2025; NVlabs/Fast-dLLM ``llada/generate.py``,
``generate_with_prefix_cache`` and ``generate_with_dual_cache``).

A :class:`BlockCache` is passed as ``cache=`` to :meth:`bench.backbones.dit.DiT.forward`:

- after :meth:`BlockCache.full`, the call is an ordinary full call over the (B, L) canvas that
  also records every block's keys and values at all positions (its logits are those of a call
  without the cache, bit for bit: the attention reads the very tensors it records);
- after :meth:`BlockCache.layout` (once per block) and :meth:`BlockCache.partial`, the call
  computes only the **active** positions of each row (a (B, L) bool mask; rows may differ:
  prompts differ in length, Sudoku's givens sit inside the generated region): their queries
  attend to the recorded keys and values of every other position and to the freshly computed
  ones of the active positions, rotary at the active positions' true indices, adaLN from the
  call's own time input. It returns the logits of the **read** positions only (a subset of the
  active ones), (B, R, V), which :meth:`BlockCache.logits` wraps so that ``raw[where]`` works as
  on (B, L, V) logits for any ``where`` inside the read positions (and raises outside them: no
  sampler reads garbage).

Fast-dLLM's dual cache is the active set = the current block (``replace_position``), its prefix
cache the active set = every position from the block's first to the end of the row (it keeps
the keys and values before the block, ``past_key_values[..][:, :, :start]``, and recomputes the
block and the whole suffix). Both recompute the active positions on every call, so what a
partial call writes into the cache at the active positions is overwritten by the next one.

Approximation: the recorded keys and values are those of the canvas (and of the time input) at
the recording call; a partial call later in the block sees them as they were. They would be
recomputed the same only for a one-layer network with a fixed time input (its keys and values
depend on their own position's token, which does not change outside the active set); in a
deeper network those of every position depend, through attention, on the tokens the block's
steps reveal, and with time conditioning the adaLN of the recorded positions is the recording
call's time's. That is the approximation Fast-dLLM makes (adjacent steps' keys and values are
close); re-recording more often (MDLM's ``cache_refresh``) narrows it.

Padding: a row with fewer active (read) positions than the most active row is padded; its
padded slots write to one extra cache slot that no query attends to, and its padded rows of the
output are never returned by ``raw[where]``.
"""

from __future__ import annotations

import torch
from torch import Tensor


class LayerKV:
    """One transformer block's recorded keys and values, (B, H, L + 1, Dh) each: slot L takes
    the partial calls' padding and is never attended to."""

    def __init__(self, owner: BlockCache):
        self.owner = owner
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def keys_values(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """The keys and values the block's queries attend to: a full call's own (recorded), or
        the recorded ones with this partial call's fresh ones at the active positions."""
        slots = self.owner.slots
        if slots is None:  # recording full call
            pad = k.new_zeros(*k.shape[:2], 1, k.shape[3])
            self.k, self.v = torch.cat([k, pad], 2), torch.cat([v, pad], 2)
            return k, v
        if self.k is None:
            raise ValueError("block cache: a partial call before any recording full call")
        idx = slots[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
        self.k.scatter_(2, idx, k.to(self.k.dtype))
        self.v.scatter_(2, idx, v.to(self.v.dtype))
        L = self.k.shape[2] - 1
        return self.k[:, :, :L], self.v[:, :, :L]


class BlockCache:
    """Every block's :class:`LayerKV` of one canvas, and the layout of its partial calls (module
    docstring). ``n_layers``: the DiT's ``len(blocks)``."""

    def __init__(self, n_layers: int):
        self.layers = [LayerKV(self) for _ in range(n_layers)]
        self.recording = True  # the next call is a full one
        #: the canvas length L (DiT.forward's rotary table)
        self.length = 0
        self._slots: Tensor | None = None  # (B, La) cache slot of each active row (padding: L)
        self._positions: Tensor | None = None  # the same, padding clamped to L - 1
        self._take: Tensor | None = None  # (B, R) rows of the active axis read out (None: all)
        self._valid: Tensor | None = None  # (B, R) bool: a real read position (not padding)
        self._read: Tensor | None = None  # (B, L) bool: the read positions

    def __getitem__(self, i: int) -> LayerKV:
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def positions(self) -> Tensor | None:
        """A partial call's (B, La) true positions of its rows (DiT.forward's rotary); None on a
        full call."""
        return None if self.recording else self._positions

    @property
    def slots(self) -> Tensor | None:
        """A partial call's (B, La) cache slots of its rows (padding: slot L); None on a full
        call (LayerKV records)."""
        return None if self.recording else self._slots

    @property
    def laid_out(self) -> bool:
        """Whether :meth:`layout` has set the partial calls' positions."""
        return self._positions is not None

    def full(self) -> BlockCache:
        """The next call is a full call that records (``cache=cache.full()``)."""
        self.recording = True
        return self

    def layout(self, active: Tensor, read: Tensor) -> BlockCache:
        """Set the partial calls' positions: ``active`` (B, L) bool, the positions they compute;
        ``read`` (B, L) bool, inside ``active``, those whose logits they return. Kept until the
        next layout (a block's calls share one)."""
        if bool((read & ~active).any()):
            raise ValueError("block cache: a read position outside the active ones")
        B, L = active.shape
        order = torch.arange(L, device=active.device).expand(B, L)
        la = max(1, int(active.sum(-1).max()))
        self._slots = torch.where(active, order, L).sort(-1).values[:, :la]  # padding: slot L
        self._positions = self._slots.clamp_max(L - 1)
        self.length = L
        real = self._slots < L
        rmask = read.gather(1, self._positions) & real
        if torch.equal(rmask, real):  # every active position is read (the dual cache)
            self._take, self._valid = None, rmask
        else:
            r = max(1, int(rmask.sum(-1).max()))
            pos = torch.arange(la, device=active.device).expand(B, la)
            take = torch.where(rmask, pos, la).sort(-1).values[:, :r]
            self._take, self._valid = take.clamp_max(la - 1), take < la
        self._read = read
        return self

    def partial(self, x: Tensor) -> Tensor:
        """The next call is a partial one (:meth:`layout`); its input: the (B, La) ids (or
        (B, La, d) features) of the canvas ``x`` at the active positions, in order."""
        if self._positions is None:
            raise ValueError("block cache: a partial call needs a layout first")
        self.recording = False
        idx = self._positions
        return x.gather(1, idx if x.dim() == 2 else idx[..., None].expand(-1, -1, x.shape[2]))

    def readout(self, h: Tensor) -> Tensor:
        """(B, La, d) hidden states of the active rows -> those of the read rows (DiT.forward,
        before its final layer: the head runs on the read positions only)."""
        if self._take is None:
            return h
        return h.gather(1, self._take[..., None].expand(-1, -1, h.shape[2]))

    def logits(self, out: Tensor) -> BlockLogits:
        """The partial call's output (B, R, V) as logits indexed by (B, L) masks."""
        return BlockLogits(out, self._valid, self._read)


class BlockLogits:
    """A partial call's logits at the read positions, indexed as (B, L, V) logits are:
    ``raw[where]`` for a (B, L) bool ``where`` inside the read positions gives the (N, V) rows
    of its positions in row-major order (as ``logits[where]``)."""

    def __init__(self, out: Tensor, valid: Tensor, read: Tensor):
        self.out, self.valid, self.read = out, valid, read

    def __getitem__(self, where: Tensor) -> Tensor:
        if where.dtype != torch.bool or where.shape != self.read.shape:
            raise TypeError("block cache logits: index with a (B, L) bool mask")
        if bool((where & ~self.read).any()):
            raise ValueError("block cache logits: a position outside the block was read")
        return self.out[self.valid][where[self.read]]
