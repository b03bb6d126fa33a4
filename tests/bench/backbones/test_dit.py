"""The shared DiT (bench/backbones/dit.py) against the reference formulas.

References: S-FLM harness (first commit of FrankCCCCC/s-flm) `models/dit.py::DDiTBlock`,
`DDiTBlockCausal`, `TimestepEmbedder`, `DDiTFinalLayer`; rotary as flash-attn's non-interleaved
`apply_rotary_emb`. The reference block below is an independent transcription of those formulas.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench.backbones.dit import Block, DiT, DiTSize

torch.set_num_threads(1)


def _ref_rotary(x, base=1e4):
    """Reference rotary: emb = cat(freqs, freqs); x cos + rotate_half(x) sin (flash-attn
    non-interleaved `apply_rotary_emb`)."""
    L, dh = x.shape[-2], x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, dh, 2).float() / dh)
    emb = torch.cat([torch.outer(torch.arange(L).float(), inv)] * 2, dim=-1)
    x1, x2 = x[..., : dh // 2], x[..., dh // 2 :]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


def _ref_block(blk: Block, x, c, p):
    """s-flm `DDiTBlock.forward` / `DDiTBlockCausal.forward`: dropout ONLY on the residual
    branches (`bias_dropout_add_scale`); the attention kernel runs with dropout 0."""
    B, L, d = x.shape
    H = blk.n_heads
    ln = lambda y, w: F.layer_norm(y, (d,)) * w  # noqa: E731
    if blk.adaLN is not None:
        sh1, sc1, g1, sh2, sc2, g2 = blk.adaLN(c)[:, None].chunk(6, dim=2)
    else:
        sh1 = sc1 = sh2 = sc2 = torch.zeros(1)
        g1 = g2 = torch.ones(1)
    h = ln(x, blk.norm1.weight) * (1 + sc1) + sh1
    q, k, v = blk.qkv(h).view(B, L, 3, H, d // H).permute(2, 0, 3, 1, 4)
    o = F.scaled_dot_product_attention(_ref_rotary(q), _ref_rotary(k), v, is_causal=blk.causal)
    o = blk.attn_out(o.transpose(1, 2).reshape(B, L, d))
    x = x + g1 * F.dropout(o, p, True)
    m = blk.mlp(ln(x, blk.norm2.weight) * (1 + sc2) + sh2)
    return x + g2 * F.dropout(m, p, True)


@pytest.mark.parametrize("causal", [False, True])
def test_block_train_forward_matches_reference(causal):
    """With dropout active (the paper's 0.1; here 0.5 to make any difference large), the
    block must equal the reference: residual dropout only, none on the attention weights."""
    d, H, p = 16, 2, 0.5
    torch.manual_seed(0)
    blk = Block(d, H, None if causal else 8, p, causal)
    if blk.adaLN is not None:  # non-zero modulation so shift/scale/gate order matters
        nn.init.normal_(blk.adaLN.weight, std=0.3)
        nn.init.normal_(blk.adaLN.bias, std=0.3)
    blk.train()
    x, c = torch.randn(3, 7, d), torch.randn(3, 8)
    inv = 1.0 / 1e4 ** (torch.arange(0, d // H, 2).float() / (d // H))
    ang = torch.outer(torch.arange(7).float(), inv)
    torch.manual_seed(123)
    ours = blk(x, None if causal else c, ang.cos(), ang.sin())
    torch.manual_seed(123)
    ref = _ref_block(blk, x, c, p)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_dit_init_is_identity_and_uniform():
    """adaLN-Zero: zero modulation (gates 0) and zero head -> logits exactly 0 at init."""
    torch.manual_seed(0)
    net = DiT(11, 11, DiTSize(2, 32, 4, 16, 0.0)).eval()
    out = net(torch.randint(0, 11, (2, 9)), torch.rand(2))
    assert torch.equal(out, torch.zeros_like(out))
    for blk in net.blocks:
        assert (
            torch.count_nonzero(blk.adaLN.weight) == 0 and torch.count_nonzero(blk.adaLN.bias) == 0
        )


def test_time_embedding_is_sinusoidal_of_sigma():
    """TimestepEmbedder features: [cos(sigma f_j), sin(sigma f_j)], f_j = 1e4^(-j/128)."""
    torch.manual_seed(0)
    net = DiT(5, 5, DiTSize(1, 16, 2, 8, 0.0))
    seen = {}

    def grab(mod, inp, out):
        seen["x"] = inp[0]

    net.time.mlp[0].register_forward_hook(grab)
    sigma = torch.tensor([0.0, 0.7, 3.0])
    net(torch.zeros(3, 4, dtype=torch.long), sigma)
    f = torch.exp(-math.log(1e4) * torch.arange(128).float() / 128)
    want = torch.cat([torch.cos(sigma[:, None] * f), torch.sin(sigma[:, None] * f)], dim=-1)
    torch.testing.assert_close(seen["x"], want)


def test_causal_dit_ignores_future_tokens():
    """Causal variant (AR): changing tokens at positions >= 6 leaves the logits at positions < 6
    unchanged, and does change the later ones."""
    torch.manual_seed(0)
    net = DiT(7, 7, DiTSize(2, 32, 4, 16, 0.0), causal=True, zero_init_head=False).eval()
    x = torch.randint(0, 7, (2, 10))
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 1) % 7
    torch.testing.assert_close(net(x)[:, :6], net(y)[:, :6])
    assert not torch.allclose(net(x)[:, 6:], net(y)[:, 6:])
