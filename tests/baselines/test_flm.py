"""Fidelity tests for baselines/flm.py: P_gamma against Monte Carlo for
several V, the alpha <-> gamma table (monotone, round-trips, matches an independent root
solve, built for the actual V), the Euler velocity driving z to the one-hot vertex, the
corruption / loss, the soft-caps and the sampler's NFE accounting."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from torch import nn

from baselines.flm import FLM, AlphaGammaTable, FLMOptions, SoftcapBlock, alpha_of_gamma, p_correct
from bench.backbones.dit import Block, rotary_cos_sin
from bench.config import BackboneConfig, build
from bench.method import Batch

torch.set_num_threads(1)
D = torch.float64


# --------------------------------------------------------------------------- P_gamma and the table


@pytest.mark.parametrize("V", [2, 10, 100, 1000])
def test_p_gamma_matches_monte_carlo(V):
    """P_gamma = P[argmax((1 - gamma) eps + gamma onehot(x)) = x], estimated by sampling."""
    g = torch.Generator().manual_seed(V)
    N = 40_000 if V <= 100 else 12_000
    for gamma in (0.1, 0.3, 0.5, 0.7, 0.9):
        eps = torch.randn(N, V, generator=g)
        z = (1 - gamma) * eps
        z[:, 0] += gamma
        p_mc = float((z.argmax(-1) == 0).float().mean())
        p = float(p_correct(np.array(gamma), V))
        se = np.sqrt(max(p * (1 - p), 1e-4) / N)
        assert abs(p_mc - p) < 5 * se, (V, gamma, p_mc, p)


def test_alpha_endpoints_and_monotonicity():
    """alpha(gamma) runs from 0 to 1 monotonically for several V, and P_gamma matches the closed
    form Phi(m / sqrt 2) at V = 2."""
    gam = np.linspace(0, 1, 2001)
    for V in (2, 10, 1000, 50_257):
        a = alpha_of_gamma(gam, V)
        tol = 1e-9 if V <= 10 else 2e-4  # 100-node Gauss-Hermite error grows with V (~1e-4 at 5e4)
        assert abs(a[0]) < tol and abs(a[-1] - 1) < tol  # P_0 = 1/V, P_1 = 1
        assert (np.diff(a) >= -tol).all()
    # V = 2 has a closed form: P = P[eps_0 - eps_1 > -m] = Phi(m / sqrt 2)
    from scipy.stats import norm

    m = gam[:-1] / (1 - gam[:-1])
    np.testing.assert_allclose(p_correct(gam[:-1], 2), norm.cdf(m / np.sqrt(2)), atol=1e-12)


@pytest.mark.parametrize("V", [10, 50_257])
def test_table_inverse_is_monotone_round_trips_and_matches_a_root_solve(V):
    tab = AlphaGammaTable(V)
    a = torch.linspace(0, 1, 5001, dtype=D)
    g = tab.a2g(a)
    assert (torch.diff(g) > 0).all(), "a2g must be strictly increasing"
    assert float(g[0]) == 0.0 and float(g[-1]) == 1.0
    torch.testing.assert_close(tab.g2a(g), a, rtol=0, atol=1e-9)
    gg = torch.linspace(0, 1, 3001, dtype=D)
    # gamma -> alpha -> gamma is well-posed where alpha still moves (alpha is flat to 1e-16 near 1)
    slope = (tab.g2a(gg + 1e-4) - tab.g2a(gg - 1e-4)) / 2e-4
    ok = slope > 1e-3
    assert ok.float().mean() > 0.5
    torch.testing.assert_close(tab.a2g(tab.g2a(gg))[ok], gg[ok], rtol=0, atol=1e-9)
    # the interpolated inverse agrees with solving alpha(gamma) = a directly
    for a0 in (0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99):
        root = brentq(
            lambda x, a0=a0: float(alpha_of_gamma(np.array(x), V)) - a0,
            0.0,
            1.0 - 1e-12,
            xtol=1e-13,
        )
        assert abs(float(tab.a2g(torch.tensor(a0, dtype=D))) - root) < 2e-5, (V, a0)


def test_method_table_is_built_for_its_vocabulary():
    s = torch.tensor([0.5], dtype=D)
    g10 = float(FLM(FLMOptions(), 10, 4).table.a2g(s))
    g1k = float(FLM(FLMOptions(), 1000, 4).table.a2g(s))
    assert g1k > g10 + 0.05  # a larger vocabulary needs more signal for the same alpha
    assert abs(float(alpha_of_gamma(np.array(g10), 10)) - 0.5) < 1e-6
    assert abs(float(alpha_of_gamma(np.array(g1k), 1000)) - 0.5) < 1e-6


# --------------------------------------------------------------------------- velocity / sampler


def test_euler_velocity_drives_z_to_the_vertex_for_a_confident_model():
    """With x_hat = onehot(x) the Euler map in gamma is exact: z_k = (1 - g_k) z_0 + g_k onehot(x),
    so z reaches the vertex as gamma -> 1."""
    V, n, L = 7, 3, 5
    g = torch.Generator().manual_seed(0)
    z0 = torch.randn(n, L, V, generator=g, dtype=D)
    x = torch.randint(0, V, (n, L), generator=g)
    oh = torch.nn.functional.one_hot(x, V).to(D)
    gam = FLM(FLMOptions(), V, L).table.a2g(torch.linspace(0, 1, 21, dtype=D))
    z = z0.clone()
    for k in range(20):
        z = FLM.euler_step(z, oh, gam[k].expand(n), gam[k + 1].expand(n), eps=0.0)
        torch.testing.assert_close(z, (1 - gam[k + 1]) * z0 + gam[k + 1] * oh, rtol=0, atol=1e-10)
    assert float((z - oh).abs().max()) < 1e-10
    # with the reference's + 1e-5 it still lands within 1e-4 of the vertex
    z = z0.clone()
    for k in range(20):
        z = FLM.euler_step(z, oh, gam[k].expand(n), gam[k + 1].expand(n), eps=1e-5)
    assert float((z - oh).abs().max()) < 1e-3


class ConfidentSpy(nn.Module):
    """Identity embedding (so the DiT input is z itself) and logits strongly on a fixed target."""

    def __init__(self, target: torch.Tensor, V: int, strength: float = 60.0):
        super().__init__()
        self.embed = nn.Embedding(V, V)
        with torch.no_grad():
            self.embed.weight.copy_(torch.eye(V))
        self.logit = strength * torch.nn.functional.one_hot(target, V).float()
        self.inputs, self.times = [], []

    def forward(self, h, sigma):
        self.inputs.append(h.clone())
        self.times.append(sigma.clone())
        return self.logit.expand(h.shape[0], -1, -1)


def test_sampler_state_follows_the_interpolant_and_keeps_the_prompt():
    V, L, n, nfe = 6, 10, 8, 7
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, V, (n, L), generator=g)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    pmask[:, :3] = True
    pmask[::2, 6] = True
    target = (prompt[0] + 2) % V
    method = FLM(FLMOptions(velocity_eps=0.0), V, L)
    spy = ConfidentSpy(target, V)
    method.nfe_counter = 0
    out = method.sample(spy, prompt, pmask, nfe=nfe, generator=g)
    assert method.nfe_counter == nfe == len(spy.inputs)
    s = torch.linspace(0, 1, nfe + 1, dtype=D)
    torch.testing.assert_close(
        torch.stack([t[0].to(D) for t in spy.times]), s[:nfe], rtol=0, atol=1e-6
    )
    gam = method.table.a2g(s)
    z0 = spy.inputs[0].to(D)
    oh_t = torch.nn.functional.one_hot(target, V).to(D).expand(n, L, V)
    oh_p = torch.nn.functional.one_hot(prompt, V).to(D)
    free = ~pmask
    for k, h in enumerate(spy.inputs):
        h = h.to(D)
        assert torch.equal(h[pmask], oh_p[pmask])  # prompt positions sit on their vertex
        # p_theta is (numerically) onehot(target), so z_k = (1 - g_k) z_0 + g_k onehot(target)
        expect = (1 - gam[k]) * z0 + gam[k] * oh_t
        torch.testing.assert_close(h[free], expect[free], rtol=0, atol=1e-5)
    dist = [float((h.to(D) - oh_t)[free].norm()) for h in spy.inputs]
    assert all(b < a for a, b in zip(dist, dist[1:]))  # monotonically closer to the vertex
    assert torch.equal(out[pmask], prompt[pmask]) and torch.equal(
        out[free], target.expand(n, L)[free]
    )


def test_one_step_is_the_argmax_at_pure_noise():
    V, L, n = 5, 4, 3
    target = torch.tensor([4, 0, 2, 1])
    method = FLM(FLMOptions(), V, L)
    spy = ConfidentSpy(target, V)
    out = method.sample(
        spy, torch.zeros(n, L, dtype=torch.long), torch.zeros(n, L, dtype=torch.bool), nfe=1
    )
    assert len(spy.inputs) == 1 and float(spy.times[0][0]) == 0.0
    assert torch.equal(out, target.expand(n, L))


# --------------------------------------------------------------------------- loss


class InputSpy(nn.Module):
    def __init__(self, V: int):
        super().__init__()
        self.embed = nn.Embedding(V, V)
        with torch.no_grad():
            self.embed.weight.copy_(torch.eye(V))
        self.bias = nn.Parameter(torch.linspace(-1, 1, V))
        self.inputs, self.times = [], []

    def forward(self, h, sigma):
        self.inputs.append(h.detach().clone())
        self.times.append(sigma.detach().clone())
        return self.bias.expand(*h.shape[:2], -1) + 0 * h.sum(-1, keepdim=True)


def test_corruption_is_the_gaussian_interpolant_and_the_ce_is_unweighted():
    V, B, L = 8, 512, 16
    torch.manual_seed(0)
    method = FLM(FLMOptions(), V, L)
    x = torch.randint(0, V, (B, L))
    clean = torch.zeros(B, L, dtype=torch.bool)
    clean[:, :4] = True
    batch = Batch(x, clean, ~clean)
    losses = []
    for t_harness in (0.8, 0.3):
        spy = InputSpy(V)
        out = method.loss(spy, batch, torch.full((B,), t_harness))
        losses.append(float(out.loss.detach()))
        s = 1 - t_harness  # FLM time: 1 = clean
        assert torch.allclose(spy.times[0], torch.full((B,), s))
        gamma = float(method.table.a2g(torch.tensor([s], dtype=D)))
        z = spy.inputs[0]
        oh = torch.nn.functional.one_hot(x, V).float()
        assert torch.equal(z[clean], oh[clean])  # clean positions stay on their vertex
        zf, ohf = z[~clean], oh[~clean].bool()
        assert abs(float(zf[ohf].mean()) - gamma) < 0.02
        assert abs(float(zf[~ohf].mean())) < 0.01
        assert abs(float((zf - gamma * oh[~clean]).std()) - (1 - gamma)) < 0.01
    # no time weighting: the spy's logits ignore z, so the CE is the same at both times
    assert abs(losses[0] - losses[1]) < 1e-6
    logp = torch.log_softmax(torch.linspace(-1, 1, V), -1)
    assert abs(losses[0] - float(-logp[x[~clean]].mean())) < 1e-5


def test_output_cap_bounds_logits():
    V, L = 6, 4

    class Loud(InputSpy):
        def forward(self, h, sigma):
            return 1e3 * torch.randn(*h.shape[:2], V)

    m = FLM(build(FLMOptions, {"output_cap": 30.0}), V, L)
    z = torch.randn(2, L, V)
    logits = m._logits(Loud(V), z, torch.zeros(2))
    assert float(logits.abs().max()) <= 30.0 and float(logits.abs().max()) > 29.0
    logits = FLM(FLMOptions(), V, L)._logits(Loud(V), z, torch.zeros(2))
    assert float(logits.abs().max()) > 100.0  # off by default


def _inactive_cap_equals_block(blk: Block, h: torch.Tensor):
    """A SoftcapBlock with ``blk``'s weights and an inactive cap (c = 1e9) has the plain Block's
    attention on ``h``; returns (that SoftcapBlock, cos, sin, the Block's output)."""
    cos, sin = rotary_cos_sin(h.shape[1], h.shape[-1] // blk.n_heads, "cpu")
    ref = blk.attention(h, cos, sin)
    cond = None if blk.adaLN is None else blk.adaLN.in_features
    capped = SoftcapBlock(h.shape[-1], blk.n_heads, cond, blk.dropout, blk.causal, attn_softcap=1e9)
    capped.load_state_dict(blk.state_dict())
    capped.train(blk.training)
    torch.testing.assert_close(capped.attention(h, cos, sin), ref, rtol=1e-4, atol=1e-5)
    return capped, cos, sin, ref


def test_attention_softcap_path():
    """The manual attention equals SDPA when the cap is inactive and changes it when active; FLM's
    backbone is built with soft-capped blocks (``DiT(block_cls=...)``) only when ``attn_softcap``
    is set, with the same parameters, drawn in the same order, as the plain DiT."""
    torch.manual_seed(0)
    blk = Block(32, 4, 16, 0.0, causal=False)
    with torch.no_grad():
        blk.qkv.weight.mul_(8.0)  # large attention logits
    h = torch.randn(2, 9, 32)
    capped, cos, sin, ref = _inactive_cap_equals_block(blk, h)
    capped.attn_softcap = 1.0
    assert not torch.allclose(capped.attention(h, cos, sin), ref, atol=1e-3)
    torch.manual_seed(1)
    net = FLM(build(FLMOptions, {"attn_softcap": 50.0}), 10, 8).build_backbone(
        BackboneConfig(size="cpu-mini")
    )
    assert all(type(b) is SoftcapBlock and b.attn_softcap == 50.0 for b in net.blocks)
    torch.manual_seed(1)
    plain = FLM(FLMOptions(), 10, 8).build_backbone(BackboneConfig(size="cpu-mini"))
    assert all(type(b) is Block for b in plain.blocks)
    a, b = net.state_dict(), plain.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="attn_softcap"):
        SoftcapBlock(32, 4, 16, 0.0, causal=False, attn_softcap=0.0)


def test_softcap_block_has_no_attention_weight_dropout():
    """In training with dropout on, an inactive cap (c -> inf) must give the shared Block's output
    exactly: dropout belongs to the residual branches only (reference: flash-attn dropout 0)."""
    torch.manual_seed(0)
    blk = Block(16, 2, None, 0.5, False).train()
    _inactive_cap_equals_block(blk, torch.randn(2, 9, 16))
