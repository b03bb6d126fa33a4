"""Likelihood bounds (``Method.nll_bound``): AR's chain rule against a prefix-by-prefix
recomputation, MDLM's and Duo's Monte-Carlo NELBO against a deterministic quadrature of the same
integrand (t by Gauss-Legendre on [1e-3, 1], x_t by exact enumeration), their value for an
untrained model, determinism, a transcription of the reference evaluation on reference-format
checkpoints, and the methods that declare no bound."""

from __future__ import annotations

import itertools

import checkpoints_ref as R
import numpy as np
import pytest
import torch
from helpers import make_model

from baselines.duo_loss import udlm_nelbo
from bench import registry
from bench.checkpoints import load
from bench.method import BOUND_ELBO, BOUND_EXACT, Batch

torch.set_num_threads(1)
D = torch.float64
EPS = 1e-3  # the reference's training.sampling_eps and noise.eps


def _perturb(net, seed=1, scale=0.3):
    """Move every weight (the head is zero-initialised) so the outputs depend on the inputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return net.eval()


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- AR


@pytest.mark.parametrize("prompt", [0, 4])
def test_ar_is_the_chain_rule(prompt):
    """Exact: one row, equal to -sum log softmax(logits)[gold] recomputed one prefix at a time
    (the sampler's way) over loss_mask positions off the prompt, position 0 never counted; a
    position outside loss_mask (row 2's tail) is not counted but still conditions later ones."""
    V, L = 10, 12
    m, net = make_model("ar", vocab=V, seq_len=L)
    _perturb(net)
    x = torch.randint(0, V, (3, L), generator=_gen(3))
    clean = torch.zeros(3, L, dtype=torch.bool)
    clean[:, :prompt] = True
    loss = ~clean
    loss[2, 6:9] = False
    out = m.nll_bound(net, Batch(x, clean, loss), n_draws=7, generator=_gen())
    assert out.shape == (1, 3) and out.dtype == D
    want = torch.zeros(3, dtype=D)
    with torch.no_grad():
        for i in range(1, L):
            logp = net(x[:, :i])[:, -1].double().log_softmax(-1)
            gold = logp.gather(-1, x[:, i, None]).squeeze(-1)
            want -= torch.where(loss[:, i] & ~clean[:, i], gold, 0.0)
    torch.testing.assert_close(out[0], want, rtol=0, atol=1e-5)
    assert (want > 0).all()
    assert m.bound_kind == BOUND_EXACT
    counted = m.bound_positions(Batch(x, clean, loss))
    assert not counted[:, 0].any() and int(counted[2].sum()) == L - max(prompt, 1) - 3


# --------------------------------------------------------------------------- MDLM / Duo


def _gl_nodes(n=12, edges=(EPS, 1e-2, 1e-1, 1.0)):
    """Composite Gauss-Legendre on geometric panels of [eps, 1] (Duo's integrand is log-singular
    at t = 0, just outside the interval)."""
    x, w = np.polynomial.legendre.leggauss(n)
    ts, ws = [], []
    for a, b in itertools.pairwise(edges):
        ts.append((b - a) / 2 * x + (a + b) / 2)
        ws.append((b - a) / 2 * w)
    return torch.tensor(np.concatenate(ts)), torch.tensor(np.concatenate(ws))


def _quadrature(name, m, net, x0, counted):
    """E_{t ~ U[eps, 1]} E_{x_t ~ q(. | x_0)} [sum of the integrand over the counted positions],
    t by quadrature and x_t by enumerating every state of the counted positions (the others stay
    clean): what the Monte-Carlo rows estimate."""
    ts, ws = _gl_nodes()
    alpha = 1 - (1 - EPS) * ts  # log-linear, alpha'_t = -(1 - eps)
    idx = counted.nonzero().flatten()
    n, V = len(idx), m.vocab_size
    states = list(itertools.product(*[range(V if name == "duo" else 2)] * n))
    xt = x0.repeat(len(ts) * len(states), 1)
    a = alpha.repeat_interleave(len(states))
    for s, st in enumerate(states):
        rows = slice(s, None, len(states))
        if name == "mdlm":  # st[j] = 1: position idx[j] masked
            xt[rows, idx] = torch.where(torch.tensor(st, dtype=torch.bool), m.mask_id, x0[idx])
        else:
            xt[rows, idx] = torch.tensor(st)
    with torch.no_grad():
        logits = net(xt, m.sigma(a).float()).double()
    x0r = x0.expand_as(xt)
    if name == "mdlm":
        logits[..., m.mask_id] = -1e6
        logp = logits.log_softmax(-1).gather(-1, x0r[..., None]).squeeze(-1)
        masked = xt == m.mask_id
        f = torch.where(masked, -logp * ((1 - EPS) / (1 - a))[:, None], 0.0)[:, idx].sum(-1)
        q = torch.where(masked, (1 - a)[:, None], a[:, None])[:, idx].prod(-1)
    else:
        dalpha = torch.full_like(a, -(1 - EPS))[:, None]
        per = udlm_nelbo(logits.log_softmax(-1), xt, x0r, a[:, None], dalpha, V)
        f = per[:, idx].sum(-1)
        q = torch.where(xt == x0r, a[:, None] + (1 - a[:, None]) / V, (1 - a[:, None]) / V)
        q = q[:, idx].prod(-1)
    expect = (q * f).view(len(ts), len(states)).sum(-1)
    assert torch.allclose(q.view(len(ts), len(states)).sum(-1), torch.ones_like(ts))
    return float((ws * expect).sum()) / (1 - EPS)


def _two_sequences(V, L, n_clean):
    x = torch.randint(0, V, (2, L), generator=_gen(11))
    clean = torch.zeros(2, L, dtype=torch.bool)
    clean[:, :n_clean] = True
    return x, clean


@pytest.mark.parametrize(
    "name,options,V",
    [("mdlm", {}, 10), ("mdlm", {"time_conditioning": True}, 10), ("duo", {}, 5)],
)
def test_monte_carlo_converges_to_the_quadrature(name, options, V):
    """Each sequence's draws average to its own bound (within 4 standard errors): the strata of
    the antithetic times are dealt to the sequences at random, so every sequence's t is
    U[eps, 1]. 48 copies of each of 2 sequences share a batch; the rows are independent draws."""
    L, n_clean, C, n_draws = 7, 3, 48, 128
    m, net = make_model(name, options, vocab=V, seq_len=L)
    _perturb(net)
    x, clean = _two_sequences(V, L, n_clean)
    X, Cl = x.repeat_interleave(C, 0), clean.repeat_interleave(C, 0)
    loss = ~Cl
    loss[:, -1] = False  # counted: positions 3..5; the last is neither clean nor counted
    out = m.nll_bound(net, Batch(X, Cl, loss), n_draws=n_draws, generator=_gen(5))
    assert out.shape == (n_draws, 2 * C) and out.dtype == D and torch.isfinite(out).all()
    assert m.bound_kind == BOUND_ELBO
    per_row = out.view(n_draws, 2, C).mean(-1)  # (draws, sequence): i.i.d. over draws
    est, se = per_row.mean(0), per_row.std(0) / n_draws**0.5
    counted = loss[0] & ~Cl[0]
    for b in range(2):
        quad = _quadrature(name, m, net, x[b], counted)
        assert abs(float(est[b]) - quad) < 4 * float(se[b]), (b, float(est[b]), quad, float(se[b]))
        assert float(se[b]) < 0.05 * quad  # the check has teeth


def _uniform_per_token(name, V):
    """The bound's expectation per counted token under the uniform denoiser (one position; the
    network plays no part): MDLM (1 - eps) log |V|; Duo the NELBO integrand at
    log p = -log |V|, x_t enumerated, t by quadrature on [eps, 1]."""
    if name == "mdlm":
        return (1 - EPS) * np.log(V)
    ts, ws = _gl_nodes()
    a = (1 - (1 - EPS) * ts)[:, None].expand(-1, V)  # (t, x_t): x_0 = 0, x_t = 0 .. V - 1
    xt = torch.arange(V).expand(len(ts), V)
    x0 = torch.zeros_like(xt)
    log_p = torch.full((len(ts), V, V), -np.log(V), dtype=D)
    f = udlm_nelbo(log_p, xt, x0, a, torch.full_like(a, -(1 - EPS)), V)
    q = torch.where(xt == x0, a + (1 - a) / V, (1 - a) / V)
    return float((ws * (q * f).sum(-1)).sum()) / (1 - EPS)


@pytest.mark.parametrize("name", ["mdlm", "duo"])
def test_untrained_model_bound_is_about_log_v(name):
    """The zero-initialised head predicts the uniform distribution: the bound's expectation per
    counted token is about log |V| (MDLM: (1 - eps) log |V|; Duo: log |V| less the integral over
    [0, eps] that the reference's t-range drops, 0.3 % at |V| = 10), and the draws average to it
    (Duo's are heavy-tailed: the integrand is log-singular at small t)."""
    V, L, n_draws = 10, 16, 32
    expected = _uniform_per_token(name, V)
    assert abs(expected - np.log(V)) < 0.005 * np.log(V)
    m, net = make_model(name, vocab=V, seq_len=L)
    net.eval()
    x = torch.randint(0, V, (64, L), generator=_gen(2))
    clean = torch.zeros_like(x, dtype=torch.bool)
    clean[:, :4] = True
    b = Batch(x, clean, ~clean)
    out = m.nll_bound(net, b, n_draws=n_draws, generator=_gen(9))
    rows = out.sum(-1) / float(m.bound_positions(b).sum())  # per token, i.i.d. over rows
    mean, se = float(rows.mean()), float(rows.std()) / n_draws**0.5
    assert abs(mean - expected) < 4 * se and se < 0.05 * expected, (mean, se, expected)


@pytest.mark.parametrize("name", ["ar", "mdlm", "duo"])
def test_deterministic_given_the_generator(name):
    m, net = make_model(name, vocab=10, seq_len=12)
    _perturb(net)
    x, clean = _two_sequences(10, 12, 3)
    b = Batch(x, clean, ~clean)
    a = m.nll_bound(net, b, n_draws=4, generator=_gen(21))
    assert torch.equal(a, m.nll_bound(net, b, n_draws=4, generator=_gen(21)))
    if name != "ar":
        assert not torch.equal(a, m.nll_bound(net, b, n_draws=4, generator=_gen(22)))
        assert not torch.equal(a[0], a[1])  # each row is a new draw
    # counted positions only: nothing at all without them
    none = Batch(x, clean, torch.zeros_like(clean))
    assert (m.nll_bound(net, none, n_draws=2, generator=_gen(21)) == 0).all()


# ------------------------------------------------------- reference-format checkpoints


def _ref_times(g, n):
    """The reference evaluation's t (mdlm diffusion.py:800-808 / duo trainer_base.py:465-482
    ``_sample_t`` with antithetic_sampling, sampling_eps 1e-3), its offsets i / n dealt by a
    permutation (the documented departure of ``bench.method.bound_times``), float64."""
    _eps_t = torch.rand(n, generator=g, dtype=D)
    offset = torch.randperm(n, generator=g).to(D) / n
    _eps_t = (_eps_t / n + offset) % 1
    return (1 - EPS) * _eps_t + EPS


def _ref_mdlm_nll_per_token(log_x_theta, x0, alpha_t, dalpha_t):
    # s-flm @ 18d586f algo.py:114-126 MDLM.nll_per_token (elbo: coefficient dalpha / (1 - alpha))
    log_p_theta = torch.gather(input=log_x_theta, dim=-1, index=x0[:, :, None]).squeeze(-1)
    loss_coefficient = dalpha_t / (1 - alpha_t)
    return loss_coefficient * log_p_theta


def _ref_duo_nll_per_token(log_x_theta, xt, x0, alpha_t, dalpha_t, vocab_size):
    # duo @ 7c9b498 algo.py:337-372 DUO_BASE.nll_per_token (= s-flm @ 18d586f algo.py:166-206)
    x_reconst = log_x_theta.exp()
    x_bar_theta = vocab_size * alpha_t[:, :, None] * x_reconst + 1 - alpha_t[:, :, None]
    coeff = dalpha_t / (vocab_size * alpha_t)
    x_eq_xt = (x0 == xt).to(D)
    x_neq_xt = 1 - x_eq_xt
    xbar_xt = (1 - alpha_t) + vocab_size * alpha_t * x_eq_xt
    xbar_theta_xt = torch.gather(x_bar_theta, -1, xt.unsqueeze(-1)).squeeze(-1)
    xbar_theta_x = torch.gather(x_bar_theta, -1, x0.unsqueeze(-1)).squeeze(-1)
    term1 = vocab_size * (1 / xbar_xt - 1 / xbar_theta_xt)
    const = (1 - alpha_t) / (vocab_size * alpha_t + 1 - alpha_t)
    term2_coefs = x_eq_xt * const + x_neq_xt
    term2_offset = ((vocab_size - 1) * const * x_eq_xt - (1 / const) * x_neq_xt) * const.log()
    term2_theta = -term2_coefs * (x_bar_theta.log().sum(-1) - vocab_size * xbar_theta_xt.log())
    term2_theta = (
        term2_theta
        - vocab_size
        * alpha_t
        / (1 - alpha_t)
        * (xbar_theta_x.log() - xbar_theta_xt.log())
        * x_neq_xt
    )
    term2 = term2_theta + term2_offset
    return coeff * (term1 - term2)


@pytest.mark.parametrize("kind", ["mdlm", "duo"])
@pytest.mark.parametrize("vocab", ["tinygsm", "owt"])
def test_reference_checkpoint_equals_the_reference_evaluation(tmp_path, kind, vocab):
    """An imported reference-format file: our bound equals the reference evaluation written out
    here on the same draws (``_sample_t``, ``q_xt``, the reference's forward pass and
    post-processing from ``checkpoints_ref``, ``nll_per_token``, summed over the valid tokens as
    ``TrainerBase._loss``), in float64 from the reference's float32 log-probabilities. ``owt``:
    MDLM's mask is the [PAD] id; Duo's [PAD] is a class (|V| = task vocabulary + 1)."""
    info = R.write_reference_checkpoint(tmp_path / f"{kind}.ckpt", kind, vocab=vocab)
    m = load(info["path"])
    x0 = R.make_inputs(info, batch=3, length=8, seed=4)["tokens"]
    B, L = x0.shape
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[:, :2] = False  # a prompt: clean, not counted
    valid[1, 6:] = False
    batch = Batch(x0, ~valid & (torch.arange(L) < 2), valid)
    n_draws = 3
    ours = m.method.nll_bound(m.backbone, batch, n_draws=n_draws, generator=_gen(13))
    g = _gen(13)
    want = torch.empty(n_draws, B, dtype=D)
    for k in range(n_draws):
        t = _ref_times(g, B)
        alpha_t = (EPS + (1 - EPS) * (1 - t))[:, None]  # noise_schedules.py:53-62 LogLinear
        dalpha_t = torch.full_like(alpha_t, -(1 - EPS))
        if kind == "mdlm":  # trainer_base.py:596-617 AbsorbingState.q_xt
            move = torch.rand(B, L, generator=g, dtype=D) < 1 - alpha_t
            xt = torch.where(move, info["mask_id"], x0)
        else:  # trainer_base.py:636-660 UniformState.q_xt
            uniform_tensor = torch.randint(0, info["n_logits"], (B, L), generator=g)
            move = torch.rand(B, L, generator=g, dtype=D) < 1 - alpha_t
            xt = torch.where(move, uniform_tensor, x0)
        xt = torch.where(valid, xt, x0)
        time = R.reference_time_input(kind, info, t=t)
        log_x_theta = R.reference_logits(kind, info["ema_sd"], xt, time, info).double()
        if kind == "mdlm":
            loss = _ref_mdlm_nll_per_token(log_x_theta, x0, alpha_t, dalpha_t)
        else:
            V = info["n_logits"]
            loss = _ref_duo_nll_per_token(log_x_theta, xt, x0, alpha_t, dalpha_t, V)
        want[k] = (loss * valid).sum(-1)  # trainer_base.py:432-470 _loss
    torch.testing.assert_close(ours, want, rtol=2e-5, atol=1e-4)
    assert (want > 0).all()


# --------------------------------------------------------------------------- no bound


@pytest.mark.parametrize("name", ["candi", "flm", "sflm"])
def test_methods_without_a_bound_say_so(name):
    cls = registry.METHODS[name]
    assert cls.bound_kind == ""
    m, net = make_model(name, vocab=10, seq_len=12)
    x, clean = _two_sequences(10, 12, 3)
    with pytest.raises(NotImplementedError, match=f"^{name}: no likelihood bound"):
        m.nll_bound(net, Batch(x, clean, ~clean), n_draws=1, generator=_gen())
