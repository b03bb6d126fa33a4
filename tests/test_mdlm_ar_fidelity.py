"""Fidelity of the MDLM / AR baselines and the shared DiT against the reference formulas.

References: S-FLM harness (first commit of FrankCCCCC/s-flm) `models/dit.py::DDiTBlock`,
`DDiTBlockCausal`, `algo.py::MDLM`, `samplers.py::AncestralSampler`; MDLM paper eq. 10
(continuous-time NELBO) and the absorbing posterior q(z_s | z_t, x).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from baselines.ar import AR
from baselines.mdlm import MDLM
from bench.backbones.dit import Block, DiT, DiTSize
from bench.method import Batch

torch.set_num_threads(1)


# -- DiT block: an independent transcription of the reference block ---------------------
def _ref_rotary(x, base=1e4):
    """Reference rotary: emb = cat(freqs, freqs); x cos + rotate_half(x) sin (flash-attn
    non-interleaved `apply_rotary_emb`)."""
    L, dh = x.shape[-2], x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, dh, 2).float() / dh)
    emb = torch.cat([torch.outer(torch.arange(L).float(), inv)] * 2, dim=-1)
    x1, x2 = x[..., : dh // 2], x[..., dh // 2:]
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
        assert torch.count_nonzero(blk.adaLN.weight) == 0 and torch.count_nonzero(blk.adaLN.bias) == 0


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
    torch.manual_seed(0)
    net = DiT(7, 7, DiTSize(2, 32, 4, 16, 0.0), causal=True, zero_init_head=False).eval()
    x = torch.randint(0, 7, (2, 10))
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 1) % 7
    torch.testing.assert_close(net(x)[:, :6], net(y)[:, :6])
    assert not torch.allclose(net(x)[:, 6:], net(y)[:, 6:])


# -- MDLM -------------------------------------------------------------------------------
class Stub(nn.Module):
    """Backbone returning fixed per-position logits; records its inputs."""

    def __init__(self, logits):
        super().__init__()
        self.logits, self.inputs = logits, []

    def forward(self, x, sigma=None):
        self.inputs.append(x.clone())
        return self.logits.expand(x.shape[0], -1, -1).clone()


def test_mdlm_subs_and_temperature():
    V, L = 5, 4
    m = MDLM(None, V, L)
    logits = torch.randn(1, L, V + 1) * 3
    x_t = torch.tensor([[V, 2, V, 0]])
    T = 0.7
    logp = m.log_probs(Stub(logits), x_t, torch.tensor([0.5]), temperature=T)
    want = torch.log_softmax(logits[0, :, :V] / T, dim=-1)  # mask logit -inf, T on logits
    torch.testing.assert_close(logp[0, 0, :V], want[0])
    torch.testing.assert_close(logp[0, 2, :V], want[2])
    assert logp[0, [0, 2], V].max() < -1e4  # zero-masking
    for pos, tok in ((1, 2), (3, 0)):  # carry-over unmasking
        assert logp[0, pos, tok] == 0 and (logp[0, pos].exp().sum() - 1).abs() < 1e-6


@pytest.mark.parametrize("loss_type", ["elbo", "low_var"])
def test_mdlm_loss_is_weighted_masked_ce(loss_type):
    """MDLM eq. 10: -alpha'_t/(1-alpha_t) log p(x0|x_t) on masked positions, token-mean."""
    V, L, B, eps = 6, 12, 8, 1e-3
    m = MDLM(MDLM.Options(loss_type=loss_type), V, L)
    torch.manual_seed(1)
    logits = torch.randn(1, L, V + 1)
    stub = Stub(logits)
    x = torch.randint(0, V, (B, L))
    clean = torch.zeros(B, L, dtype=torch.bool)
    clean[:, :2] = True
    lmask = ~clean
    t = torch.linspace(0.05, 0.95, B)
    out = m.loss(stub, Batch(x, clean, lmask), t)
    masked = stub.inputs[0] == V
    assert not masked[:, :2].any()  # clean positions never noised
    nll = -torch.log_softmax(logits[0, :, :V], -1).expand(B, -1, -1).gather(-1, x[..., None])[..., 0]
    alpha = 1 - (1 - eps) * t
    w = (1 - eps) / (1 - alpha) if loss_type == "elbo" else torch.ones(B)
    want = (nll * w[:, None] * masked).sum() / lmask.sum()
    torch.testing.assert_close(out.loss, want)


def test_mdlm_ancestral_posterior_and_grid():
    """One step t -> s reveals each mask w.p. (alpha_s - alpha_t)/(1 - alpha_t) with
    t_k = linspace(1, 1e-5, nfe+1); the last step (alpha_s = 1) reveals every mask; draws
    follow softmax(logits / T)."""
    V, L, n, nfe, T = 4, 50, 400, 4, 0.5
    m = MDLM(None, V, L)
    logits = torch.tensor([0.0, 1.0, -1.0, 0.5, 0.0]).expand(1, L, V + 1)
    stub = Stub(logits)
    g = torch.Generator().manual_seed(0)
    pm = torch.zeros(n, L, dtype=torch.bool)
    out = m.sample(stub, torch.zeros(n, L, dtype=torch.long), pm, nfe=nfe, temperature=T, generator=g)
    assert len(stub.inputs) == nfe and (out < V).all()
    ts = torch.linspace(1.0, 1e-5, nfe + 1, dtype=torch.float64)
    alpha = 1 - (1 - 1e-3) * ts
    frac = [(x == V).double().mean().item() for x in stub.inputs]  # mask rate seen at step k
    for k in range(1, nfe):  # P(still masked at t_k) = (1 - alpha_k)/(1 - alpha_0)
        want = ((1 - alpha[k]) / (1 - alpha[0])).item()
        assert abs(frac[k] - want) < 0.01, (k, frac[k], want)
    p = torch.softmax(logits[0, 0, :V] / T, -1)
    emp = torch.bincount(out.flatten(), minlength=V).double() / out.numel()
    assert (emp - p).abs().max() < 0.01


def test_mdlm_greedy_last_step_argmax():
    V, L = 4, 6
    m = MDLM(None, V, L)
    logits = torch.tensor([0.0, 0.2, 3.0, 0.1, 0.0]).expand(1, L, V + 1)
    g = torch.Generator().manual_seed(0)
    out = m.sample(Stub(logits), torch.zeros(64, L, dtype=torch.long), torch.zeros(64, L, dtype=torch.bool),
                   nfe=1, decoding="greedy", generator=g)
    assert (out == 2).all()


# -- AR ---------------------------------------------------------------------------------
def test_ar_loss_is_shifted_teacher_forced_ce():
    V, L, B = 5, 8, 3
    ar = AR(None, V, L)
    torch.manual_seed(0)
    logits = torch.randn(1, L - 1, V)
    stub = Stub(logits)
    x = torch.randint(0, V, (B, L))
    lm = torch.ones(B, L, dtype=torch.bool)
    lm[:, :3] = False
    out = ar.loss(stub, Batch(x, ~lm, lm), None)
    assert torch.equal(stub.inputs[0], x[:, :-1])
    nll = -torch.log_softmax(logits, -1).expand(B, -1, -1).gather(-1, x[:, 1:, None])[..., 0]
    torch.testing.assert_close(out.loss, (nll * lm[:, 1:]).sum() / lm[:, 1:].sum())


def test_ar_sample_temperature_on_logits_and_prompt_kept():
    V, L, n, T = 3, 4, 3000, 2.0
    ar = AR(None, V, L)
    logits = torch.tensor([1.0, 0.0, -2.0]).expand(1, L, V)
    stub = Stub(logits)
    prompt = torch.full((n, L), 2)
    pm = torch.zeros(n, L, dtype=torch.bool)
    pm[:, :2] = True
    out = ar.sample(stub, prompt, pm, temperature=T, generator=torch.Generator().manual_seed(0))
    assert len(stub.inputs) == 2 and (out[:, :2] == 2).all()
    assert [x.shape[1] for x in stub.inputs] == [2, 3]  # prefix-only input, causal order
    emp = torch.bincount(out[:, 2:].flatten(), minlength=V).double() / (2 * n)
    assert (emp - torch.softmax(logits[0, 0] / T, -1)).abs().max() < 0.02
    greedy = ar.sample(Stub(logits), prompt, pm, decoding="greedy")
    assert (greedy[:, 2:] == 0).all()
