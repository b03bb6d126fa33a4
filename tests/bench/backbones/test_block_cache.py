"""The DiT's block KV cache (bench/backbones/block_cache.py): a recording full call gives the
plain call's logits, and a partial call right after it gives the full call's logits at the read
positions (prefix and dual layouts, rows of different prompt lengths); the AR KV cache still
refuses a block cache and vice versa."""

import pytest
import torch

from bench.backbones.block_cache import BlockCache
from bench.backbones.dit import DiT, DiTSize

V, L = 11, 20


def random_dit(causal=False, n_blocks=2):
    """A small DiT with every parameter drawn (the zero-initialised adaLN and head too, so the
    blocks are not the identity and the logits not constant)."""
    torch.manual_seed(0)
    net = DiT(V, V, DiTSize(n_blocks, 32, 4, 16, 0.0), causal=causal).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0.0, 0.3)
    return net


def layout(plen, bl, b):
    """(block, prefix-active) (n, L) masks of block b for rows with prompts of ``plen``."""
    at = torch.arange(L)
    gen = at[None] >= torch.tensor(plen)[:, None]
    rank = gen.long().cumsum(-1) - 1
    block = gen & (rank // bl == b)
    first = torch.where(block, at, L).min(-1, keepdim=True).values
    return block, at >= first


@pytest.mark.parametrize("mode", ["dual", "prefix"])
@pytest.mark.parametrize("b", [0, 2])
def test_partial_call_after_recording_gives_the_full_logits(mode, b):
    net = random_dit()
    plen = [3, 6, 9, 14]  # the last row's block 2 is empty (6 generated positions, blocks of 4)
    block, prefix = layout(plen, 4, b)
    active = block if mode == "dual" else prefix
    x = torch.randint(0, V, (len(plen), L), generator=torch.Generator().manual_seed(1))
    sigma = torch.rand(len(plen), generator=torch.Generator().manual_seed(2))
    cache = BlockCache(len(net.blocks))
    with torch.no_grad():
        plain = net(x, sigma)
        full = net(x, sigma, cache=cache.full())
        out = net(cache.layout(active, block).partial(x), sigma, cache=cache)
    assert torch.equal(full, plain)  # recording changes nothing
    assert out.shape[1] == int(block.sum(-1).max())  # the head ran on the block's rows only
    got = cache.logits(out)[block]
    assert got.shape == (int(block.sum()), V)
    torch.testing.assert_close(got, full[block], rtol=1e-5, atol=1e-5)
    # a partial call differs from a full call when the positions outside the block change
    x2 = torch.where(block | (torch.arange(L) < 3), x, (x + 1) % V)
    with torch.no_grad():
        stale = cache.logits(net(cache.partial(x2), sigma, cache=cache))[block]
        fresh = net(x2, sigma)[block]
    assert not torch.allclose(stale, fresh, atol=1e-3)


def test_reading_outside_the_block_is_an_error():
    net = random_dit()
    block, prefix = layout([3, 5], 4, 0)
    x = torch.randint(0, V, (2, L))
    cache = BlockCache(len(net.blocks))
    with torch.no_grad():
        net(x, None, cache=cache.full())
        raw = cache.logits(net(cache.layout(prefix, block).partial(x), None, cache=cache))
    with pytest.raises(ValueError, match="outside the block"):
        raw[prefix]
    with pytest.raises(ValueError, match="outside the active"):
        cache.layout(block, prefix)


def test_cache_kinds_do_not_mix():
    """The causal DiT takes AR's per-block dicts, the bidirectional one a BlockCache."""
    x = torch.randint(0, V, (2, 6))
    with pytest.raises(ValueError, match="KV cache"):
        random_dit(causal=True)(x, cache=BlockCache(2))
    with pytest.raises(ValueError, match="KV cache"):
        random_dit()(x, cache=[{}, {}])
