"""Fidelity tests for CANDI (baselines/candi.py) beyond the shared conformance suite."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import make_method
from scipy.stats import norm
from torch import nn

from baselines.candi import CANDI, CANDIOptions, error_rate
from bench.config import BackboneConfig, ConfigError, build
from bench.method import Batch

torch.set_num_threads(1)


class Oracle(nn.Module):
    """Stand-in backbone: logits ``scale`` on a fixed target sequence; records its inputs.
    Its embedding table has orthonormal rows (V + 1 <= d), so Ehat = E."""

    def __init__(self, target, vocab, d=32, scale=60.0):
        super().__init__()
        self.embed = nn.Embedding(vocab + 1, d)
        with torch.no_grad():
            self.embed.weight.copy_(torch.eye(d)[: vocab + 1])
        self.target, self.vocab, self.scale = target, vocab, scale
        self.inputs, self.sigmas = [], []

    def forward(self, h, sigma):
        self.inputs.append(h.clone())
        self.sigmas.append(sigma.clone())
        n = h.shape[0]
        return self.scale * nn.functional.one_hot(self.target[:n], self.vocab).float()


# --------------------------------------------------------------------------- noise coupling


@pytest.mark.parametrize("vocab", [10, 50])
@pytest.mark.parametrize("sigma", [0.3, 0.8, 2.0])
def test_error_rate_matches_monte_carlo(vocab, sigma):
    """r(sigma) = expected fraction of the V coordinates of onehot + sigma*eps that are wrong
    and beat the true one."""
    g = torch.Generator().manual_seed(0)
    n = 40_000
    z = sigma * torch.randn(n, vocab, generator=g, dtype=torch.float64)
    z[:, 0] += 1.0  # true class 0
    frac = (z[:, 1:] > z[:, :1]).double().sum(-1) / vocab
    mc, se = float(frac.mean()), float(frac.std()) / math.sqrt(n)
    r = float(error_rate(torch.tensor(sigma), vocab))
    assert abs(mc - r) < 4 * se + 1e-4, (mc, r, se)


@pytest.mark.parametrize("vocab", [10, 12, 1000])
def test_sigma_map_inverts_error_rate(vocab):
    """The interpolated inverse is strictly increasing, round-trips r, and equals the closed form
    sigma = -1 / (sqrt2 * Phi^-1(q V / (V - 1))) on the percentile range."""
    m = make_method(CANDI, vocab=vocab)
    q = torch.linspace(0.01, 0.25, 200, dtype=torch.float64)
    s = m.sigma_of_rate(q)
    assert (s.diff() > 0).all()
    assert torch.allclose(error_rate(s, vocab), q, atol=2e-5)
    closed = -1.0 / (math.sqrt(2) * norm.ppf(q.numpy() * vocab / (vocab - 1)))
    assert torch.allclose(s, torch.from_numpy(closed), rtol=1e-3)
    # percentile map: tau = 0 -> r = min_percentile, tau = 1 -> r = max_percentile
    tau = torch.linspace(0, 1, 50, dtype=torch.float64)
    st = m.sigma_of_noise(tau)
    assert (st.diff() > 0).all()
    assert torch.allclose(
        error_rate(st[[0, -1]], vocab), torch.tensor([0.01, 0.25], dtype=torch.float64), atol=2e-5
    )


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="min_percentile"):
        make_method(CANDI, {"min_percentile": 0.3, "max_percentile": 0.2})
    with pytest.raises(ConfigError, match="max_percentile"):
        make_method(CANDI, vocab=2)  # r(sigma) <= 0.5 * Phi(-0.18) ~ 0.21 < 0.25 on the sigma grid
    with pytest.raises(ConfigError, match="mixed_coeff"):
        build(CANDIOptions, {"mixed_coeff": 1.5}, where="candi.options")


# --------------------------------------------------------------------------- training


def test_hybrid_corruption_statistics():
    """Revealed fraction = alpha_t + (1 - alpha_t)/(V + 1) off the prompt (uniform draw over V + 1
    ids); prompt positions always revealed; pure Gaussian reveals only the prompt."""
    V, m = 10, make_method(CANDI, vocab=10)
    x0 = torch.randint(0, V, (4000, 16), generator=torch.Generator().manual_seed(0))
    clean = torch.zeros_like(x0, dtype=torch.bool)
    clean[:, :4] = True
    for t in (0.1, 0.5, 0.9):
        torch.manual_seed(1)
        rev, _ = m.corrupt(x0, clean, torch.full((len(x0),), t))
        a = 1 - (1 - 1e-3) * t
        expect = a + (1 - a) / (V + 1)
        got = rev[:, 4:].float().mean().item()
        assert abs(got - expect) < 4 * math.sqrt(expect * (1 - expect) / rev[:, 4:].numel())
        assert rev[:, :4].all()
    rev, _ = make_method(CANDI, {"pure_gaussian": True}, 10).corrupt(
        x0, clean, torch.full((len(x0),), 0.01)
    )
    assert torch.equal(rev, clean)


def test_training_input_is_mixed_coefficient_noisy_onehot():
    """With orthonormal embeddings the input can be decoded: corrupted positions are
    a*m_hat + (1-a) c_in (onehot(x0) + sigma eps) @ E with c_in = 1/sqrt(1+sigma^2) and sigma the
    percentile map of 1 - alpha_t; revealed positions are E[x0]."""
    V, a, d = 10, 0.3, 32
    m = make_method(CANDI, {"mixed_coeff": a}, V)
    net = Oracle(torch.zeros(1, 16, dtype=torch.long), V, d)
    E = net.embed.weight
    x0 = torch.randint(0, V, (3000, 16), generator=torch.Generator().manual_seed(2))
    t = torch.full((len(x0),), 0.6)
    torch.manual_seed(3)
    rev, sigma = m.corrupt(x0, torch.zeros_like(x0, dtype=torch.bool), t)
    assert torch.allclose(
        sigma.double(), m.sigma_of_noise(1 - m.alpha(t.double())).float().double()
    )
    h = m.training_input(net, x0, rev, sigma).detach()
    assert torch.allclose(h[rev], E[x0[rev]])
    c_in = 1 / math.sqrt(1 + float(sigma[0]) ** 2)
    y = (h[~rev] - a * E[V]) / ((1 - a) * c_in) @ E[:V].T  # = onehot + sigma eps
    noise = y - nn.functional.one_hot(x0[~rev], V).float()
    assert abs(noise.mean().item()) < 0.01
    assert abs(noise.std().item() - float(sigma[0])) < 0.01 * float(sigma[0])
    # nothing outside span(E[:V]) except the mask direction
    resid = h[~rev] - a * E[V] - ((1 - a) * c_in) * (y @ E[:V])
    assert resid.abs().max() < 1e-5


def test_loss_weighting_with_uniform_model():
    """A model with uniform logits has CE log V per scored token. Pure Gaussian: plain CE on every
    non-prompt token -> exactly log V. Hybrid: MDLM weight 1/t on the corrupted fraction
    (1 - eps) t V/(V+1) -> expected loss log V * V/(V+1) whatever t."""
    V = 10
    x0 = torch.randint(0, V, (512, 16), generator=torch.Generator().manual_seed(4))
    clean = torch.zeros_like(x0, dtype=torch.bool)
    clean[:, :8] = True
    batch = Batch(x0, clean, ~clean)
    for pure in (True, False):
        m = make_method(CANDI, {"pure_gaussian": pure}, V)
        net = m.build_backbone(BackboneConfig(size="cpu-mini"))  # zero-init head: uniform logits
        torch.manual_seed(5)
        for t in (0.2, 0.7):
            loss = float(m.loss(net, batch, torch.full((512,), t)).loss.detach())
            if pure:
                assert loss == pytest.approx(math.log(V), rel=1e-5)
            else:
                assert loss == pytest.approx(math.log(V) * V / (V + 1), rel=0.03)


# --------------------------------------------------------------------------- sampling


def _prompt(n=64, L=16, V=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, V, (n, L), generator=g)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    pmask[:, :5] = True
    prompt = torch.where(pmask, target, torch.zeros_like(target))
    return target, prompt, pmask


@pytest.mark.parametrize("decoding", ["cached", "nocache"])
def test_hybrid_sampler_with_oracle(decoding):
    """A confident model is reproduced; clean positions only grow and their tokens freeze; the
    network gets time input -log alpha(t_k) on t_k = linspace(0.999, 1e-5, nfe + 1)."""
    V, nfe = 10, 12
    target, prompt, pmask = _prompt(V=V)
    m, net = make_method(CANDI, vocab=V), Oracle(target, V)
    states = list(
        m.iter_sample(
            net,
            prompt,
            pmask,
            nfe=nfe,
            decoding=decoding,
            generator=torch.Generator().manual_seed(0),
        )
    )
    assert len(states) == nfe == len(net.sigmas)
    prev = None
    for st in states:
        assert st.clean[pmask].all()
        assert torch.equal(st.tokens[pmask], prompt[pmask])
        if prev is not None:
            assert (st.clean >= prev.clean).all()
            assert torch.equal(st.tokens[prev.clean], prev.tokens[prev.clean])
        prev = st
    assert states[-1].clean.all()  # nfe < 100: the last step's (t - s)/t >= 1 unmasks everything
    assert torch.equal(m.sample(net, prompt, pmask, nfe=nfe, decoding=decoding), target)
    ts = torch.linspace(0.999, 1e-5, nfe + 1, dtype=torch.float64)[:-1]
    expect = -torch.log(1 - (1 - 1e-3) * ts)
    assert torch.allclose(torch.stack([s[0] for s in net.sigmas[:nfe]]).double(), expect, atol=1e-5)


def test_cached_unmasking_is_log_linear():
    """P(a position is still not clean after step k) = prod_{j<=k} (1 - dt/t_j)."""
    V, nfe, n, L = 10, 10, 400, 16
    target = torch.randint(0, V, (n, L), generator=torch.Generator().manual_seed(1))
    pmask = torch.zeros(n, L, dtype=torch.bool)
    m, net = make_method(CANDI, vocab=V), Oracle(target, V)
    ts = torch.linspace(0.999, 1e-5, nfe + 1, dtype=torch.float64)
    dt = (1 - 1e-5) / nfe
    surv = 1.0
    for k, st in enumerate(
        m.iter_sample(net, target, pmask, nfe=nfe, generator=torch.Generator().manual_seed(2))
    ):
        surv *= max(0.0, 1 - dt / float(ts[k]))
        got = 1 - st.clean.float().mean().item()
        assert abs(got - surv) < 4 * math.sqrt(max(surv * (1 - surv), 1e-4) / (n * L)) + 1e-3, (
            k,
            got,
            surv,
        )


def test_cached_continuous_step_contracts_to_the_sampled_embedding():
    """With an oracle, every step moves the cache towards Ehat[target]:
    e_{k+1} - Ehat[y] = (1 - c_k)(e_k - Ehat[y]),
    c_k = step_size (sigma_k - sigma_{k+1}) / sigma_{k+1}^2."""
    V, nfe, step = 10, 6, 0.7
    target, prompt, pmask = _prompt(V=V)
    m, net = make_method(CANDI, {"step_size": step}, V), Oracle(target, V)
    _, sig, _ = m.sampler_grid(nfe, "cpu")
    E = net.embed.weight.detach().double()
    states = list(
        m.iter_sample(net, prompt, pmask, nfe=nfe, generator=torch.Generator().manual_seed(0))
    )
    free = ~pmask
    prev = None
    for k, st in enumerate(states):
        r = (st.cont - E[target])[free]
        if prev is not None:
            c = step * (sig[k] - sig[k + 1]) / sig[k + 1] ** 2
            assert torch.allclose(r, (1 - c) * prev, atol=1e-9)
        prev = r


def test_pure_gaussian_never_reveals_and_follows_the_reference_step():
    """Pure Gaussian: no position but the prompt is ever clean, every network input off the prompt
    carries the mask component, and x moves by x - (s_k - s_{k+1})(x - p)/s_{k+1}^2; the output is
    the argmax of x."""
    V, nfe, a = 10, 8, 0.5
    target, prompt, pmask = _prompt(V=V)
    m, net = make_method(CANDI, {"pure_gaussian": True}, V), Oracle(target, V)
    assert m.decodings == ("continuous",)
    _, sig, _ = m.sampler_grid(nfe, "cpu")
    states = list(
        m.iter_sample(net, prompt, pmask, nfe=nfe, generator=torch.Generator().manual_seed(0))
    )
    E = net.embed.weight.detach()
    for h in net.inputs:  # h = a*m_hat + (1-a) c_in x @ E off the prompt
        assert torch.allclose(h[~pmask] @ E[V], torch.full(((~pmask).sum(),), a), atol=1e-5)
        assert torch.allclose(h[pmask], E[prompt[pmask]])
    onehot = nn.functional.one_hot(target, V).double()
    prev = None
    for k, st in enumerate(states):
        assert torch.equal(st.clean, pmask)
        if prev is not None:
            c = (sig[k] - sig[k + 1]) / sig[k + 1] ** 2
            assert torch.allclose((st.cont - onehot)[~pmask], (1 - c) * prev, atol=1e-9)
        prev = (st.cont - onehot)[~pmask]
    out = m.sample(net, prompt, pmask, nfe=nfe, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, torch.where(pmask, prompt, states[-1].cont.argmax(-1)))


@pytest.mark.parametrize("chunk", [1 << 26, 16 * 10 * 7])
def test_prior_scale_and_float32_path(chunk, monkeypatch):
    """The prior is N(0, sigma(0.999)^2 I_V): with a zero network the first cache is z @ Ehat whose
    per-coordinate std (orthonormal E) is sigma(0.999), also when drawn in row chunks;
    float64=False runs and gives valid ids."""
    monkeypatch.setattr("baselines.candi.PRIOR_CHUNK", chunk)
    V = 10
    target, prompt, pmask = _prompt(n=256, V=V)
    m, net = make_method(CANDI, vocab=V), Oracle(target, V, scale=0.0)
    st = next(m.iter_sample(net, prompt, pmask, nfe=3, generator=torch.Generator().manual_seed(0)))
    h0 = net.inputs[0][~pmask] @ net.embed.weight[:V].T  # (1-a) c_in(sigma_1) z
    _, sig, _ = m.sampler_grid(3, "cpu")
    z_std = h0.std().item() / (0.5 / math.sqrt(1 + float(sig[1]) ** 2))
    assert z_std == pytest.approx(float(m.sigma_of_noise(torch.tensor(0.999))), rel=0.03)
    assert st.tokens.shape == prompt.shape
    out = m.sample(
        net, prompt, pmask, nfe=3, float64=False, generator=torch.Generator().manual_seed(0)
    )
    assert out.dtype == torch.long and int(out.max()) < V and torch.equal(out[pmask], prompt[pmask])


# --------------------------------------------------------------------------- reference replay
# Independent re-statement of the S-FLM port (first commit of FrankCCCCC/s-flm):
# `algo.py::CANDI.q_xt`, `nll_per_token`, `_continuous_step(_cache)`, `_discrete_step(_optimized)`,
# `models/candi_dit.py::ContDIT.forward`, `samplers.py::CANDISampler`, written here from those
# formulas, on a real random DiT.


def _ref_sigma(tau, vocab, lo=0.01, hi=0.25):
    """`sigma_from_time_vectorized` on the `expected_rank` table (with its +1e-8 guard)."""
    sig = torch.linspace(0.2, 4.0, 1000, dtype=torch.float64)
    err = error_rate(sig, vocab)
    r = tau * (hi - lo) + lo
    i = torch.searchsorted(err, r, right=True).clamp(1, len(err) - 1)
    return sig[i - 1] + (r - err[i - 1]) / (err[i] - err[i - 1] + 1e-8) * (sig[i] - sig[i - 1])


def _random_dit(m):
    torch.manual_seed(0)
    net = m.build_backbone(BackboneConfig(size="cpu-mini"))
    with torch.no_grad():  # the DiT zero-initialises its head and adaLN (time) layers: perturb all
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
        net.head.weight.normal_(0, 0.5)
    return net.eval()


def _ref_logp(net, cont_emb, tokens, reveal, sigma_next, t, temperature, a, n):
    """ContDIT input mix + `_process_model_output` (temperature, log-softmax, forced one-hot)."""
    W = net.embed.weight.detach()
    e_hat, mask_row = nn.functional.normalize(W[:-1], dim=-1), nn.functional.normalize(W[-1], dim=0)
    c_in = 1 / (1 + sigma_next**2) ** 0.5
    r = reveal[..., None].float()
    h = e_hat[tokens] * r + (1 - r) * (a * mask_row + (1 - a) * cont_emb.float() * float(c_in))
    alpha = 1e-3 + (1 - 1e-3) * (1 - t)
    logits = net(h, (-torch.log(alpha)).float().expand(n)).double() / temperature
    lp = logits - torch.logsumexp(logits, -1, keepdim=True)
    forced = torch.where(nn.functional.one_hot(tokens, W.shape[0] - 1).bool(), 0.0, -torch.inf)
    return torch.where(reveal[..., None], forced, lp), e_hat


@pytest.mark.parametrize("pure", [False, True])
def test_loss_equals_reference_replay(pure):
    """Same RNG stream -> the loss equals the reference's q_xt + ContDIT + MDLM-weighted (hybrid) or
    plain (pure Gaussian) CE, token-mean over non-prompt positions, to float32 round-off."""
    V, L, B, a = 12, 16, 8, 0.3
    m = make_method(CANDI, {"pure_gaussian": pure, "mixed_coeff": a}, V, seq_len=L)
    net = _random_dit(m)
    g = torch.Generator().manual_seed(1)
    x0 = torch.randint(0, V, (B, L), generator=g)
    clean = torch.zeros(B, L, dtype=torch.bool)
    clean[:, :5] = True
    t = torch.rand(B, generator=g) * 0.999 + 1e-3
    torch.manual_seed(11)
    ours = float(m.loss(net, Batch(x0, clean, ~clean), t).loss.detach())
    torch.manual_seed(11)
    alpha = 1e-3 + (1 - 1e-3) * (1 - t)
    if pure:  # the reference also draws the (unused) discrete corruption; here it is skipped
        reveal = clean
    else:
        move = torch.rand(B, L) < (1 - alpha)[:, None]
        reveal = (torch.where(move, torch.randint(0, V + 1, (B, L)), x0) == x0) | clean
    sigma = _ref_sigma((1 - alpha).double(), V).float()
    onehot = nn.functional.one_hot(x0, V).float()
    xt = torch.where(
        reveal[..., None], onehot, onehot + sigma[:, None, None] * torch.randn_like(onehot)
    )
    W = net.embed.weight.detach()
    e_hat, mask_row = nn.functional.normalize(W[:-1], dim=-1), nn.functional.normalize(W[-1], dim=0)
    emb = xt @ e_hat
    c_in = (1 / (1 + sigma**2) ** 0.5)[:, None, None]
    r = reveal[..., None].float()
    with torch.no_grad():
        logits = net(emb * r + (1 - r) * (a * mask_row + (1 - a) * emb * c_in), -torch.log(alpha))
    lp = (
        torch.log_softmax(logits, -1).gather(-1, x0[..., None]).squeeze(-1).masked_fill(reveal, 0.0)
    )
    nll = -lp if pure else lp * -(1 - 1e-3) / (1 - alpha)[:, None]
    ref = float((nll * ~clean).sum() / (~clean).sum())
    assert ours == pytest.approx(ref, rel=1e-5)


def _inverse_cdf(lp, g):
    """One draw per row of softmax(lp): a float64 uniform against the float64 cumulative sum."""
    cdf = (lp - lp.amax(-1, keepdim=True)).exp().cumsum(-1, dtype=torch.float64)
    u = torch.rand((len(cdf), 1), generator=g, dtype=torch.float64) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)


@pytest.mark.parametrize(
    "decoding,nfe,temperature",
    [("cached", 7, 1.0), ("cached", 120, 0.7), ("nocache", 7, 0.7), ("continuous", 7, 1.0)],
)
def test_sampler_equals_reference_replay(decoding, nfe, temperature):
    """Replaying the reference sampler with the same random draws (Gaussian prior, inverse-CDF
    categorical draws, unmasking uniforms, in this order) reproduces every step's state."""
    V, L, n = 12, 16, 4
    m = make_method(CANDI, {"pure_gaussian": decoding == "continuous"}, V, seq_len=L)
    net = _random_dit(m)
    prompt = torch.randint(0, V, (n, L), generator=torch.Generator().manual_seed(3))
    pm = torch.zeros(n, L, dtype=torch.bool)
    pm[:, :4] = True
    prompt = torch.where(pm, prompt, 0)
    states = list(
        m.iter_sample(
            net,
            prompt,
            pm,
            nfe=nfe,
            decoding=decoding,
            temperature=temperature,
            generator=torch.Generator().manual_seed(5),
        )
    )
    g = torch.Generator().manual_seed(5)
    ts = torch.linspace(0.999, 1e-5, nfe + 1, dtype=torch.float64)
    sig, dt = _ref_sigma(ts, V), (1 - 1e-5) / nfe
    z = _ref_sigma(torch.tensor(0.999, dtype=torch.float64), V) * torch.randn(
        n, L, V, generator=g, dtype=torch.float64
    )
    onehot_p = nn.functional.one_hot(prompt, V).double()
    clean = pm.clone()
    e_hat = nn.functional.normalize(net.embed.weight.detach()[:-1], dim=-1).double()
    if decoding == "cached":
        cache, x = z @ e_hat, torch.where(pm, prompt, z.argmax(-1))
    else:
        x = torch.where(pm[..., None], onehot_p, z)
    with torch.no_grad():
        for k in range(nfe):
            t = ts[k]
            if decoding == "cached":
                lp, _ = _ref_logp(net, cache, x, clean, sig[k + 1], t, temperature, 0.5, n)
                # x0_hat ~ p_theta where not clean (the clean keep x below), by the sampler's
                # inverse-CDF draw (its law: tests/baselines/test_sampler_laws.py)
                x0_hat = x.clone()
                x0_hat[~clean] = _inverse_cdf(lp[~clean], g)
                cache = cache - (sig[k] - sig[k + 1]) * (cache - e_hat[x0_hat]) / sig[k + 1] ** 2
                unmask = torch.rand(n, L, generator=g, dtype=torch.float64) < dt / t
                x, clean = torch.where(clean, x, x0_hat), clean | unmask
                assert torch.equal(x, states[k].tokens) and torch.equal(clean, states[k].clean), k
                assert torch.allclose(cache, states[k].cont, atol=1e-5), k
                continue
            lp, _ = _ref_logp(
                net, x @ e_hat, x.argmax(-1), clean, sig[k + 1], t, temperature, 0.5, n
            )
            p = lp.exp()
            x = x - (sig[k] - sig[k + 1]) * (x - p) / sig[k + 1] ** 2
            if decoding == "nocache":
                s = (t - dt).clamp_min(0)
                # the class of [p (t - s), s]: not [MASK] w.p. (t - s) / t, then a token of p
                hit = torch.rand(n, L, generator=g, dtype=torch.float64) < (t - s) / t
                draw = torch.full((n, L), V)
                draw[hit & ~clean] = _inverse_cdf(torch.log(p[hit & ~clean]), g)
                old = x.argmax(-1)
                tok = torch.where(clean | (draw == V), old, draw)
                clean = clean | hit
                x = torch.where(clean[..., None], nn.functional.one_hot(tok, V).double(), x)
            x = torch.where(pm[..., None], onehot_p, x)
            assert torch.equal(clean, states[k].clean), k
            assert torch.allclose(x, states[k].cont, atol=1e-5), k
    out = m.sample(
        net,
        prompt,
        pm,
        nfe=nfe,
        decoding=decoding,
        temperature=temperature,
        generator=torch.Generator().manual_seed(5),
    )
    assert torch.equal(out, x if decoding == "cached" else x.argmax(-1))
