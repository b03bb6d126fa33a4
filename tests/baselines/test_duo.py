"""Fidelity tests for baselines/duo.py: the uniform-state posterior, the
closed-form NELBO against an exact discrete-time ELBO and a Monte-Carlo estimate, the
perfect-predictor bound, the threshold sampler against the dense posterior, and the sampler
contract (prompt untouched, every free position may change, greedy tail)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from torch import nn

from baselines.duo import (
    Duo,
    DuoOptions,
    sample_uniform_posterior,
    udlm_nelbo,
    uniform_posterior_probs,
)
from baselines.duo_curriculum import curriculum_gamma_range, duality_alpha, duality_table
from bench.config import ConfigError, build
from bench.method import Batch

torch.set_num_threads(1)
D = torch.float64


def forward_marginal(x0: torch.Tensor, alpha: torch.Tensor, V: int) -> torch.Tensor:
    """q(x_t | x_0) = alpha onehot + (1 - alpha) / V, as (..., V) probabilities."""
    return alpha[..., None] * torch.nn.functional.one_hot(x0, V).to(D) + (1 - alpha[..., None]) / V


# --------------------------------------------------------------------------- posterior


def test_posterior_is_a_distribution_for_every_alpha_s_above_alpha_t():
    g = torch.Generator().manual_seed(0)
    for V in (2, 5, 37):
        B, L = 64, 7
        x_hat = torch.distributions.Dirichlet(torch.full((V,), 0.3, dtype=D)).sample((B, L))
        x_hat[0] = torch.nn.functional.one_hot(torch.arange(L) % V, V).to(
            D
        )  # corner: one-hot x_hat
        x_t = torch.randint(0, V, (B, L), generator=g)
        a_t = torch.rand(B, 1, generator=g, dtype=D) * 0.999 + 1e-4
        a_s = a_t + (1 - a_t) * torch.rand(B, 1, generator=g, dtype=D)
        a_s[:8] = 1.0  # the final (noise-removal) step
        a_s[8:16] = a_t[8:16] + 1e-9  # a tiny step
        q = uniform_posterior_probs(x_hat, x_t, a_s.expand(B, L), a_t.expand(B, L))
        assert (q >= -1e-12).all(), float(q.min())
        torch.testing.assert_close(q.sum(-1), torch.ones(B, L, dtype=D), rtol=0, atol=1e-12)


def test_posterior_with_onehot_x0_is_bayes_rule():
    """q(x_s | x_t, x_0) = q(x_t | x_s) q(x_s | x_0) / q(x_t | x_0) with
    q(x_t | x_s) = (a_t/a_s) 1[x_t = x_s] + (1 - a_t/a_s)/V (the uniform process composes)."""
    V = 6
    x0 = torch.arange(V).repeat_interleave(V)
    x_t = torch.arange(V).repeat(V)
    for a_t, a_s in ((0.1, 0.4), (0.5, 0.9), (0.3, 1.0), (1e-3, 2e-3)):
        at, as_ = torch.tensor(a_t, dtype=D), torch.tensor(a_s, dtype=D)
        q = uniform_posterior_probs(
            torch.nn.functional.one_hot(x0, V).to(D), x_t, as_.expand(len(x0)), at.expand(len(x0))
        )
        r = at / as_
        trans = r * torch.eye(V, dtype=D) + (1 - r) / V  # trans[x_s, x_t] = q(x_t | x_s)
        prior_s = forward_marginal(x0, as_.expand(len(x0)), V)  # (N, V) over x_s
        joint = prior_s * trans[:, x_t].T  # q(x_s | x0) q(x_t | x_s)
        torch.testing.assert_close(q, joint / joint.sum(-1, keepdim=True), rtol=0, atol=1e-12)


@pytest.mark.parametrize("a_t,a_s", [(0.2, 0.5), (0.05, 1.0), (0.7, 0.71)])
def test_threshold_sampler_matches_dense_posterior(a_t, a_s):
    """The no-[B, L, V] sampler draws from exactly the dense posterior."""
    V, N = 5, 200_000
    g = torch.Generator().manual_seed(1)
    x_hat = torch.tensor([0.05, 0.5, 0.2, 0.15, 0.1], dtype=D)
    for xt_val in (0, 1):
        x_t = torch.full((1, N), xt_val)
        log_p = x_hat.log().expand(1, N, V)
        at, as_ = torch.full((1, 1), a_t, dtype=D), torch.full((1, 1), a_s, dtype=D)
        draws = sample_uniform_posterior(log_p, x_t, as_, at, g, float64=True)
        freq = torch.bincount(draws.flatten(), minlength=V).to(D) / N
        q = uniform_posterior_probs(x_hat.expand(1, 1, V), x_t[:, :1], as_, at)[0, 0]
        se = (q * (1 - q) / N).sqrt()
        assert ((freq - q).abs() <= 5 * se + 1e-4).all(), (freq, q)


# --------------------------------------------------------------------------- the NELBO


class TableModel(nn.Module):
    """A fixed 'network' for a single-position vocabulary: logits depend on (x_t, sigma)."""

    def __init__(self, V: int, seed: int = 0, time_scale: float = 0.3):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.W = torch.randn(V, V, generator=g, dtype=D)
        self.U = torch.randn(V, V, generator=g, dtype=D)
        self.time_scale = time_scale

    def logits(self, x_t: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        s = sigma.to(D).reshape(-1, *([1] * (x_t.ndim - 1)), 1)
        return self.W[x_t] + self.time_scale * torch.tanh(s) * self.U[x_t]

    def forward(self, x_t, sigma):  # the backbone interface the method calls
        return self.logits(x_t, sigma)


class MarginalModel(nn.Module):
    """x_hat = q0 for every input: the optimal mean-parameterised denoiser of one token."""

    def __init__(self, q0: torch.Tensor):
        super().__init__()
        self.q0 = q0

    def logits(self, x_t, sigma):
        return self.q0.log().expand(*x_t.shape, -1)


@functools.lru_cache(maxsize=4)
def leggauss(n: int):
    return np.polynomial.legendre.leggauss(n)


def continuous_nelbo(model, x0: int, V: int, t0: float, eps: float = 1e-3, n: int = 400) -> float:
    """int_{t0}^1 E_{x_t ~ q(.|x0)} [udlm_nelbo] dt, exact over x_t, Gauss-Legendre in log t."""
    u, w = leggauss(n)
    lo, hi = math.log(t0), 0.0
    t = torch.tensor(np.exp((hi - lo) / 2 * u + (hi + lo) / 2), dtype=D)
    wt = torch.tensor(w * (hi - lo) / 2, dtype=D) * t  # dt = t du
    alpha = 1 - (1 - eps) * t  # (n,)
    x_t = torch.arange(V).expand(n, V)  # enumerate x_t as the "L" axis
    x0s = torch.full((n, V), x0)
    log_p = torch.log_softmax(model.logits(x_t, -torch.log(alpha)), -1)
    per = udlm_nelbo(
        log_p, x_t, x0s, alpha[:, None].expand(n, V), torch.full((n, V), -(1 - eps), dtype=D), V
    )
    q_xt = forward_marginal(torch.tensor(x0), alpha, V)  # (n, V) over x_t
    return float(((per * q_xt).sum(-1) * wt).sum())


def discrete_elbo_terms(model, x0: int, V: int, t0: float, T: int, eps: float = 1e-3):
    """(diffusion, last, prior): sum over a T-step geometric grid on [t0, 1] of
    E_{x_t} KL(q(x_s | x_t, x_0) || q(x_s | x_t, x_hat)), the final step t0 -> 0 (alpha_s = 1),
    and KL(q(x_1 | x_0) || Uniform): the exact discrete-time NELBO of the chain, enumerated."""
    ts = torch.tensor(np.geomspace(t0, 1.0, T + 1), dtype=D)
    alpha = 1 - (1 - eps) * ts
    a_s, a_t = alpha[:-1], alpha[1:]
    K = len(a_t)
    x_t = torch.arange(V).expand(K, V)
    x0_oh = torch.nn.functional.one_hot(torch.full((K, V), x0), V).to(D)
    x_hat = torch.softmax(model.logits(x_t, -torch.log(a_t)), -1)
    q_true = uniform_posterior_probs(
        x0_oh, x_t, a_s[:, None].expand(K, V), a_t[:, None].expand(K, V)
    )
    q_model = uniform_posterior_probs(
        x_hat, x_t, a_s[:, None].expand(K, V), a_t[:, None].expand(K, V)
    )
    kl = torch.where(
        q_true > 0, q_true * (q_true.clamp_min(1e-300).log() - q_model.log()), 0.0
    ).sum(-1)
    diffusion = float((kl * forward_marginal(torch.tensor(x0), a_t, V)).sum())
    # last step t0 -> 0: q(x_0 | x_t0, x_0) is a point mass; KL = -log p(x_0 | x_t0)
    a0 = alpha[:1]
    xt1 = torch.arange(V)[None]
    xh = torch.softmax(model.logits(xt1, -torch.log(a0)), -1)
    q_last = uniform_posterior_probs(xh, xt1, torch.ones(1, V, dtype=D), a0[:, None].expand(1, V))[
        0, :, x0
    ]
    last = float(-(q_last.log() * forward_marginal(torch.tensor(x0), a0, V)[0]).sum())
    q1 = forward_marginal(torch.tensor(x0), alpha[-1:], V)[0]
    prior = float((q1 * (q1 * V).log()).sum())
    return diffusion, last, prior


def test_nelbo_equals_the_discrete_time_elbo_in_the_limit():
    """The closed-form integrand integrates to the T -> infinity limit of the exact discrete-time
    sum of posterior KLs (UDLM / Duo continuous-time derivation), for an arbitrary model."""
    V, t0 = 4, 1e-3
    model = TableModel(V, seed=3)
    for x0 in range(V):
        c = continuous_nelbo(model, x0, V, t0)
        d1 = discrete_elbo_terms(model, x0, V, t0, T=1000)[0]
        d2 = discrete_elbo_terms(model, x0, V, t0, T=4000)[0]
        assert abs(d2 - c) < abs(d1 - c) + 1e-9, (c, d1, d2)  # converges towards c
        assert abs(d2 - c) < 2e-3 * max(1.0, abs(c)), (x0, c, d2)
    # low_var drops a term that is not zero in expectation: it is no longer the ELBO
    n = 50
    t = torch.linspace(0.05, 1, n, dtype=D)
    alpha = 1 - (1 - 1e-3) * t
    x_t = torch.arange(V).expand(n, V)
    log_p = torch.log_softmax(model.logits(x_t, -torch.log(alpha)), -1)
    x0s = torch.zeros(n, V, dtype=torch.long)
    full = udlm_nelbo(
        log_p, x_t, x0s, alpha[:, None].expand(n, V), torch.full((n, V), -0.999, dtype=D), V
    )
    lv = udlm_nelbo(
        log_p,
        x_t,
        x0s,
        alpha[:, None].expand(n, V),
        torch.full((n, V), -0.999, dtype=D),
        V,
        low_var=True,
    )
    assert not torch.allclose(full, lv)


def test_method_loss_is_a_monte_carlo_estimate_of_the_nelbo():
    """Duo.loss (forward noising + network call + NELBO) averaged over t ~ U[t0, 1] and the
    uniform-state corruption matches the exact integral / (1 - t0)."""
    V, t0, B, L = 4, 1e-3, 4096, 8
    torch.manual_seed(0)
    model = TableModel(V, seed=5)
    method = Duo(DuoOptions(), V, L)
    x0 = torch.arange(V).repeat(B * L // V)[torch.randperm(B * L)].view(B, L)
    batch = Batch(x0, torch.zeros(B, L, dtype=torch.bool), torch.ones(B, L, dtype=torch.bool))
    t = torch.rand(B, dtype=D) * (1 - t0) + t0
    out = method.loss(model, batch, t.float())
    exact = np.mean([continuous_nelbo(model, v, V, t0) for v in range(V)]) / (1 - t0)
    se = float(out.per_sample.std()) / math.sqrt(B)
    assert abs(float(out.loss) - exact) < 5 * se, (float(out.loss), exact, se)


def test_nelbo_is_at_least_the_cross_entropy_of_a_perfect_predictor():
    """E_{x0 ~ q0}[NELBO] >= H(q0) (the CE of a perfect predictor of x0) for any denoiser, and
    the optimal mean-parameterised denoiser (x_hat = q0 for a single token) attains
    H(q0) + KL(q(x_1) || U) up to the time discretisation."""
    V, t0 = 4, 1e-3
    q0 = torch.tensor([0.55, 0.25, 0.15, 0.05], dtype=D)
    H = float(-(q0 * q0.log()).sum())

    def expected_nelbo(model):
        tot = 0.0
        for x0 in range(V):
            _, last, prior = discrete_elbo_terms(model, x0, V, t0, T=10)
            tot += float(q0[x0]) * (continuous_nelbo(model, x0, V, t0) + last + prior)
        return tot

    def expected_prior():
        a1 = torch.tensor([1e-3], dtype=D)
        qm = q0 * a1 + (1 - a1) / V  # q(x_1) marginal
        return float((qm * (qm * V).log()).sum())

    best = expected_nelbo(MarginalModel(q0))
    assert best >= H - 1e-6
    assert best - H - expected_prior() < 5e-3, (best, H)
    for seed in range(3):
        worse = expected_nelbo(TableModel(V, seed=seed))
        assert worse >= H and worse > best + 1e-3, (worse, best, H)


# --------------------------------------------------------------------------- sampler


class ConstantModel(nn.Module):
    """Predicts the fixed target sequence with probability ~1 everywhere; counts its calls."""

    def __init__(self, target: torch.Tensor, V: int, strength: float = 50.0):
        super().__init__()
        self.logit = strength * torch.nn.functional.one_hot(target, V).float()
        self.inputs = []

    def forward(self, x, sigma):
        self.inputs.append(x.clone())
        return self.logit.expand(x.shape[0], -1, -1)


@pytest.mark.parametrize("decoding", ["ancestral", "greedy"])
def test_sampler_keeps_prompt_and_every_free_position_reaches_the_target(decoding):
    """Exactly nfe calls; prompt positions (including givens inside the generated region) stay as
    given in the output and in every network input; every free position ends on the token a
    confident model predicts (different from the prompt's)."""
    V, L, n = 7, 12, 32
    g = torch.Generator().manual_seed(4)
    prompt = torch.randint(0, V, (n, L), generator=g)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    pmask[:, :4] = True
    pmask[::3, 8] = True  # a given inside the generated region
    target = (prompt[0] + 1) % V  # the model wants a token different from the prompt everywhere
    method = Duo(DuoOptions(), V, L)
    model = ConstantModel(target, V)
    method.nfe_counter = 0
    out = method.sample(model, prompt, pmask, nfe=6, decoding=decoding, generator=g)
    assert method.nfe_counter == 6 and len(model.inputs) == 6
    assert torch.equal(out[pmask], prompt[pmask])
    for x in model.inputs:  # the network never sees a changed prompt position
        assert torch.equal(x[pmask], prompt[pmask])
    free = ~pmask
    assert torch.equal(
        out[free], target.expand(n, L)[free]
    )  # all free positions reached the target


def test_ancestral_positions_are_not_frozen():
    """Unlike MDLM, a position that already holds a token can change again: with a model that
    always predicts uniform, a position moves at each step with probability
    (1 - 1/V)(1 - a_t/a_s)."""
    V, L, n = 10, 16, 64
    method = Duo(DuoOptions(), V, L)

    class Uniform(nn.Module):
        def __init__(self):
            super().__init__()
            self.inputs = []

        def forward(self, x, sigma):
            self.inputs.append(x.clone())
            return torch.zeros(*x.shape, V)

    model = Uniform()
    g = torch.Generator().manual_seed(0)
    method.sample(
        model,
        torch.zeros(n, L, dtype=torch.long),
        torch.zeros(n, L, dtype=torch.bool),
        nfe=8,
        generator=g,
    )
    ts = torch.linspace(1.0, 1e-5, 9, dtype=D)
    alpha = 1 - (1 - 1e-3) * ts
    for k, (a, b) in enumerate(zip(model.inputs[:-1], model.inputs[1:])):
        frac = float((a != b).to(D).mean())
        expect = float((1 - 1 / V) * (1 - alpha[k] / alpha[k + 1]))
        assert abs(frac - expect) < 5 * math.sqrt(expect * (1 - expect) / (n * L)) + 1e-3, (
            k,
            frac,
            expect,
        )


def test_greedy_tail_is_argmax_at_the_last_call():
    V, L, n = 5, 6, 8
    method = Duo(DuoOptions(), V, L)

    class Peaked(nn.Module):  # p_theta = [0.4, 0.15, 0.15, 0.15, 0.15] everywhere
        def forward(self, x, sigma):
            p = torch.tensor([0.4, 0.15, 0.15, 0.15, 0.15])
            return p.log().expand(*x.shape, V)

    g = torch.Generator().manual_seed(0)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    out = method.sample(
        Peaked(), torch.zeros(n, L, dtype=torch.long), pmask, nfe=3, decoding="greedy", generator=g
    )
    assert (out == 0).all()
    out = method.sample(
        Peaked(),
        torch.zeros(n, L, dtype=torch.long),
        pmask,
        nfe=3,
        decoding="ancestral",
        generator=g,
    )
    assert (out != 0).any()  # ancestral keeps sampling the last step


def test_sampler_feeds_sigma_minus_log_alpha():
    V, L = 4, 3
    method = Duo(DuoOptions(), V, L)
    seen = []

    class Spy(nn.Module):
        def forward(self, x, sigma):
            seen.append(sigma.clone())
            return torch.zeros(*x.shape, V)

    method.sample(
        Spy(), torch.zeros(2, L, dtype=torch.long), torch.zeros(2, L, dtype=torch.bool), nfe=4
    )
    ts = torch.linspace(1.0, 1e-5, 5, dtype=D)[:4]
    expect = -torch.log(1 - (1 - 1e-3) * ts)
    torch.testing.assert_close(
        torch.stack([s[0].to(D) for s in seen]), expect, rtol=1e-5, atol=1e-6
    )


# --------------------------------------------------------------------------- curriculum variant


def test_duality_table_matches_monte_carlo_of_the_gaussian_argmax():
    """alpha = T(gamma) = (V P[argmax w = x0] - 1)/(V - 1),
    w = sqrt(sig(-g)) e_x0 + sqrt(sig(g)) eps."""
    V = 10
    gam, alpha, dalpha = duality_table(V, -3.5, -1.75)
    assert (np.diff(alpha) < 0).all() and (dalpha < 0).all()  # more Gaussian noise -> smaller alpha
    g = torch.Generator().manual_seed(0)
    N = 200_000
    for i in (0, 500, 999):
        gm = torch.tensor(gam[i], dtype=D)
        w = torch.sigmoid(-gm).sqrt() * torch.nn.functional.one_hot(
            torch.zeros(N, dtype=torch.long), V
        ).to(D) + torch.sigmoid(gm).sqrt() * torch.randn(N, V, generator=g, dtype=D)
        p = float((w.argmax(-1) == 0).to(D).mean())
        a_mc = (V * p - 1) / (V - 1)
        se = V / (V - 1) * math.sqrt(p * (1 - p) / N)
        assert abs(a_mc - alpha[i]) < 5 * se, (gam[i], a_mc, alpha[i])


def test_curriculum_gamma_range_is_derived_for_the_vocabulary():
    """The default range reproduces Duo's [-3.5, -1.75] on GPT-2's vocabulary and spans the same
    alpha interval on a small vocabulary (where Duo's gammas would be almost noise-free)."""
    g_lo, g_hi = curriculum_gamma_range(50_257, 0.038, 0.928)
    assert abs(g_lo + 3.5) < 0.01 and abs(g_hi + 1.75) < 0.01
    g_lo, g_hi = curriculum_gamma_range(10, 0.038, 0.928)
    a = duality_alpha(np.array([g_lo, g_hi]), 10)
    np.testing.assert_allclose(a, [0.928, 0.038], atol=1e-8)
    assert duality_alpha(np.array(-1.75), 10) > 0.75  # Duo's own range would barely noise V = 10
    m = Duo(build(DuoOptions, {"curriculum_end": 5}), 10, 4)
    assert m.gamma_range() == (g_lo, g_hi)
    m = Duo(build(DuoOptions, {"curriculum_end": 5, "gamma_min": -3.5, "gamma_max": -1.75}), 10, 4)
    assert m.gamma_range() == (-3.5, -1.75)


def test_curriculum_options_validate():
    with pytest.raises(ConfigError, match="gamma_min"):
        build(
            DuoOptions,
            {"curriculum_end": 10, "gamma_min": -1.0, "gamma_max": -2.0},
            where="duo.options",
        )
    with pytest.raises(ConfigError, match="gamma_min"):
        build(DuoOptions, {"gamma_min": -1.0}, where="duo.options")
    with pytest.raises(ConfigError, match="curriculum_start"):
        build(DuoOptions, {"curriculum_end": 10, "curriculum_start": 20}, where="duo.options")


def test_curriculum_loss_is_used_only_during_the_curriculum():
    from bench.config import BackboneConfig

    V, L, B = 10, 8, 16
    method = Duo(build(DuoOptions, {"curriculum_end": 5}), V, L)
    net = method.build_backbone(BackboneConfig(size="cpu-mini"))
    seen = []
    net.register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    batch = Batch(
        torch.randint(0, V, (B, L)),
        torch.zeros(B, L, dtype=torch.bool),
        torch.ones(B, L, dtype=torch.bool),
    )
    t = torch.rand(B)
    method.loss(net, batch, t)
    assert seen[-1].is_floating_point  # relaxed (softmax @ E) input during the curriculum
    method.record_losses(t, torch.zeros(B), step=5)
    method.loss(net, batch, t)
    assert seen[-1] == torch.long  # plain duo_base NELBO on ids afterwards


def test_curriculum_clock_survives_a_checkpoint_round_trip():
    """The curriculum step travels in the method's state_dict (Lightning checkpoint / weights.pt),
    so a run resumed after the curriculum does not fall back to the curriculum loss for a step;
    a state_dict from before the clock existed still loads (strict)."""
    from bench.config import BackboneConfig

    V, L, B = 10, 8, 16
    opts = build(DuoOptions, {"curriculum_end": 5})
    method = Duo(opts, V, L)
    method.record_losses(torch.rand(B), torch.zeros(B), step=9)
    state = method.state_dict()
    resumed = Duo(opts, V, L)
    resumed.load_state_dict(state)
    assert resumed.train_step == 10
    net = resumed.build_backbone(BackboneConfig(size="cpu-mini"))
    seen = []
    net.register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    batch = Batch(
        torch.randint(0, V, (B, L)),
        torch.zeros(B, L, dtype=torch.bool),
        torch.ones(B, L, dtype=torch.bool),
    )
    resumed.loss(net, batch, torch.rand(B))
    assert seen[-1] == torch.long  # past the curriculum: plain duo_base NELBO on ids
    legacy = Duo(opts, V, L)
    legacy.load_state_dict({})
    assert legacy.train_step == 0
