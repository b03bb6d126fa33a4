"""Fidelity of the MDLM / AR baselines against the reference formulas (the shared DiT's
tests are in test_dit.py).

References: S-FLM harness (first commit of FrankCCCCC/s-flm) `algo.py::MDLM`, `algo.py::AR`,
`samplers.py::AncestralSampler`; MDLM paper eq. 10 (continuous-time NELBO) and the absorbing
posterior q(z_s | z_t, x).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from baselines.ar import AR
from baselines.mdlm import MDLM
from bench.method import Batch

torch.set_num_threads(1)


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
    nll = (
        -torch.log_softmax(logits[0, :, :V], -1).expand(B, -1, -1).gather(-1, x[..., None])[..., 0]
    )
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
    out = m.sample(
        stub, torch.zeros(n, L, dtype=torch.long), pm, nfe=nfe, temperature=T, generator=g
    )
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
    out = m.sample(
        Stub(logits),
        torch.zeros(64, L, dtype=torch.long),
        torch.zeros(64, L, dtype=torch.bool),
        nfe=1,
        decoding="greedy",
        generator=g,
    )
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
