"""MDLM's block KV caches (options ``block_cache``, ``cache_refresh``; baselines/mdlm_cache.py):
refreshed at every step they are no cache, bit for bit; on a one-layer network (whose keys and
values depend on their own position's token only) they are exact; the block-only calls are
counted as partial, per row, and a fixed-call decoding still makes nfe calls."""

import pytest
import torch
from helpers import make_model

from bench.config import ConfigError
from bench.measure import CallTimer

V, L = 9, 24


def prompts(n=6, seed=0):
    """Prompts of different lengths per row (3 to 8 tokens), the rest of the row generated."""
    g = torch.Generator().manual_seed(seed)
    plen = torch.randint(3, 9, (n,), generator=g)
    pmask = torch.arange(L)[None] < plen[:, None]
    return torch.randint(0, V, (n, L), generator=g), pmask


def model(options, n_blocks=2, time_conditioning=True):
    """MDLM on a cpu-mini DiT (``n_blocks`` layers) with every parameter perturbed."""
    from bench.config import BackboneConfig

    opts = {"time_conditioning": time_conditioning, **options}
    m, net = make_model("mdlm", opts, V, L, BackboneConfig(size="cpu-mini", n_blocks=n_blocks))
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return m, net.eval()


def sample(options, decoding, nfe=10, **kw):
    m, net = model(options, **kw)
    prompt, pmask = prompts()
    m.call_timer = CallTimer()
    g = torch.Generator().manual_seed(3)
    x = m.sample(net, prompt, pmask, nfe=nfe, decoding=decoding, temperature=0.7, generator=g)
    return x, m


@pytest.mark.parametrize("mode", ["prefix", "dual"])
@pytest.mark.parametrize("decoding", ["ancestral", "threshold"])
def test_refreshed_every_step_is_no_cache_bit_for_bit(mode, decoding):
    plain, m0 = sample({"block_length": 5}, decoding)
    cached, m1 = sample({"block_length": 5, "block_cache": mode, "cache_refresh": 1}, decoding)
    assert torch.equal(plain, cached)
    assert m1.call_timer.part_calls == 0 and torch.equal(m0.row_calls, m1.row_calls)


@pytest.mark.parametrize("mode", ["prefix", "dual"])
@pytest.mark.parametrize("decoding", ["ancestral", "confidence"])
def test_one_layer_cache_is_exact(mode, decoding):
    """One layer, no time input: the cached keys / values (of positions outside the active set,
    whose tokens do not change within a block) are what a full call computes, so the samples
    are no cache's while most calls are partial."""
    opts = {"block_length": 5}
    plain, _ = sample(opts, decoding, n_blocks=1, time_conditioning=False)
    cached, m = sample({**opts, "block_cache": mode}, decoding, n_blocks=1, time_conditioning=False)
    assert torch.equal(plain, cached)
    assert m.call_timer.part_calls > 0


@pytest.mark.parametrize("mode", ["prefix", "dual"])
@pytest.mark.parametrize("refresh,full_per_block", [(0, 1), (2, 3), (3, 2)])
def test_calls_are_counted_as_partial(mode, refresh, full_per_block):
    """ancestral, nfe 10 over 2 blocks of 5 calls: the full calls are each block's first step and
    every refresh-th; the rest partial; nfe calls in all, for every row."""
    opts = {"block_length": 11, "block_cache": mode, "cache_refresh": refresh}
    x, m = sample(opts, "ancestral", nfe=10)  # 16-21 generated positions: 2 blocks of 11
    full = 2 * full_per_block
    assert m.nfe_counter == m.call_timer.calls == 10
    assert m.call_timer.part_calls == 10 - full
    assert m.row_calls.tolist() == [[full, 10 - full]] * x.shape[0]
    assert (x < V).all()


def test_threshold_rows_count_their_partial_calls():
    """threshold stops a row's block when it has no mask left: its partial calls are counted
    only while its block holds a mask, the batch's calls are at most nfe."""
    x, m = sample({"block_length": 6, "block_cache": "dual"}, "threshold", nfe=24)
    rc = m.row_calls
    assert m.call_timer.calls <= 24 and m.call_timer.calls == m.nfe_counter
    _, pmask = prompts()
    blocks = ((~pmask).sum(-1) + 5) // 6  # a row's non-empty blocks (16-21 generated: 3 or 4)
    assert torch.equal(rc[:, 0], blocks) and len(set(blocks.tolist())) == 2  # one full call each
    assert int(rc.sum(-1).max()) <= m.call_timer.calls
    assert m.call_timer.part_calls == m.call_timer.calls - 4  # the batch's: 4 blocks
    assert (rc[:, 1] < m.call_timer.part_calls).any()  # a row done early counts fewer
    assert (x < V).all()


def test_the_sampler_rejects_what_the_plan_rejects():
    prompt, pmask = prompts()
    for opts, decoding, needle in (
        ({"block_cache": "dual"}, "ancestral", "needs block_length"),
        ({"block_cache": "prefix", "block_length": 4}, "remdm-cap", "no blocks"),
        ({"block_cache": "dual", "block_length": 4}, "cached", "its own cache"),
    ):
        m, net = model(opts)
        with pytest.raises(ConfigError, match=f"options.block_cache: .*{needle}"):
            m.sample(net, prompt, pmask, nfe=8, decoding=decoding)
