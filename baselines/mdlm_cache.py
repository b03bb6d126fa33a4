"""The backbone calls of one block of MDLM's semi-autoregressive decodings, with or without a
block KV cache (options ``block_cache``, ``cache_refresh``; docs/methods/mdlm.md "Block caches").

:func:`block_calls` gives a decoding's ``run`` the callable it makes its calls with: ``calls(k,
x, sigma, live)`` for the block's step k (0-based). Without a cache (``block_cache: none``) every
step is one full call, as before. With one (Fast-dLLM, NVlabs/Fast-dLLM ``llada/generate.py``):

- a **full call** that records every DiT block's keys and values
  (:class:`bench.backbones.block_cache.BlockCache`) at the block's first step
  (``generate_with_prefix_cache`` / ``generate_with_dual_cache``: ``model(x, use_cache=True)``
  once per block, its logits used for that step), and, with ``cache_refresh`` k > 0, at every
  k-th step of the block too (1: every step, which is no cache at all, bit for bit);
- a **partial call** at the other steps (``Method.call(..., partial=True)``, counted per row as
  partial): ``dual`` computes the block's positions only (``replace_position``), ``prefix`` every
  position from the block's first to the end of the row (the block and the whole suffix,
  ``model(x[:, start:], past_key_values=...)``); either returns the logits of the block's
  positions only, so no (B, L, |V|) tensor is made and the samplers read only the block.

Rows: the block's positions differ per row (prompt lengths; Sudoku's givens), so the active set
is a (B, L) mask (:meth:`baselines.mdlm.MDLM.blocks`); a row with an empty block is padded.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from bench.backbones.block_cache import BlockCache

#: the ``block_cache`` values: none, Fast-dLLM's prefix cache, its dual cache
MODES = ("none", "prefix", "dual")


def active_positions(mode: str, block: Tensor) -> Tensor:
    """(n, L) bool: the positions a partial call computes for ``block`` (n, L) bool. ``dual``:
    the block; ``prefix``: from each row's first block position to the end of the row (nothing
    for a row whose block is empty)."""
    if mode == "dual":
        return block
    L = block.shape[1]
    at = torch.arange(L, device=block.device)
    first = torch.where(block, at, L).min(-1, keepdim=True).values
    return at >= first  # first = L on an empty block: no position


def is_full_step(k: int, refresh: int) -> bool:
    """Whether step k of a block is a (recording) full call: its first step, and every
    ``refresh``-th one when ``refresh`` > 0."""
    return k == 0 or (refresh > 0 and k % refresh == 0)


def block_calls(m, backbone, block: Tensor) -> Callable[..., object]:
    """``calls(k, x, sigma, live)``: the backbone's output for step k of the block ``block``
    (module docstring), counted for the rows ``live`` (``Method.count_row_calls``); (n, L, V)
    logits on a full call, :class:`bench.backbones.block_cache.BlockLogits` (indexed as they
    are, inside the block) on a partial one."""
    mode, refresh = m.opts.block_cache, m.opts.cache_refresh
    if mode == "none":

        def uncached(k: int, x: Tensor, sigma: Tensor, live: Tensor):
            raw = m.call(backbone, x, sigma)
            m.count_row_calls(live)
            return raw

        return uncached
    cache = BlockCache(len(backbone.blocks))

    def cached(k: int, x: Tensor, sigma: Tensor, live: Tensor):
        if is_full_step(k, refresh):
            raw = m.call(backbone, x, sigma, cache=cache.full())
            m.count_row_calls(live)
            return raw
        if not cache.laid_out:  # the block's first partial call: its positions
            cache.layout(active_positions(mode, block), block)
        out = m.call(backbone, cache.partial(x), sigma, cache=cache, partial=True)
        m.count_row_calls(live, partial=True)
        return cache.logits(out)

    return cached
