"""Duo's Psi-samplers (decodings ``psi`` / ``psi-greedy``, baselines/duo.py) against an independent
transcription of the reference, s-sahoo/duo ``trainer_base.py`` (``_psi_update``,
``_get_sampling_time_profile``, ``_mode_to_psi_kappas``, ``_get_kappas``, ``generate_samples``)
and ``algo.py::DUO_BASE._posterior_from_x0``: the Psi-posterior's probabilities, the sampler's
draws, the time grids and kappa schedules of every mode and profile, the defaults reducing to the
ancestral sampler draw for draw, the NFE and prompt contract, the options' validation, and a
sort-8 learnability check at the settings of ``scripts/psi_samplers``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import LEARN_TARGET, make_method, make_model, sort8_accuracy
from torch import nn

from baselines.duo import psi_kappas, psi_posterior_probs, psi_times, sample_psi_posterior
from bench.config import BackboneConfig, ConfigError, SampleConfig, TrainConfig

torch.set_num_threads(1)
D = torch.float64
EPS = 1e-3  # the log-linear schedule's eps (Duo's default, configs/noise/log-linear.yaml)


# --------------------------------------------------------------------------- the reference


def ref_alpha(t):
    """duo trainer_base.py::LogLinear.forward: alpha_t = 1 - (1 - eps) t."""
    return 1 - (1 - EPS) * t


def ref_posterior(x0, xt, alpha_s, alpha_t):
    """duo algo.py::DUO_BASE._posterior_from_x0, line by line (alpha_s, alpha_t: (B, L, 1))."""
    V = x0.shape[-1]
    alpha_ts = alpha_t / alpha_s
    d_alpha = alpha_s - alpha_t
    xt_one_hot = F.one_hot(xt, V).to(x0.dtype)
    return (
        alpha_t * V * x0 * xt_one_hot
        + (alpha_ts - alpha_t) * xt_one_hot
        + d_alpha * x0
        + (1 - alpha_ts) * (1 - alpha_s) / V
    ) / (alpha_t * V * torch.gather(x0, -1, xt[..., None]) + (1 - alpha_t))


def ref_forward_process(x0, alpha_s):
    """duo trainer_base.py::UniformState._forward_process (alpha_s: (B, L, 1))."""
    return alpha_s * x0 + (1 - alpha_s) / x0.shape[-1]


def ref_psi(p_x0, xt, alpha_s, alpha_t, kappa):
    """duo trainer_base.py::_psi_update: q_xs, q_x0 (the posterior at alpha_0 = 1), the PC
    part (q_x0 forward-noised to s), q_sample = kappa q_xs + (1 - kappa) pc_q_xs."""
    q_xs = ref_posterior(p_x0, xt, alpha_s, alpha_t)
    q_x0 = ref_posterior(p_x0, xt, torch.ones_like(alpha_t), alpha_t)
    pc_q_xs = ref_forward_process(q_x0, alpha_s)
    return kappa * q_xs + (1 - kappa) * pc_q_xs


def ref_time_profile(profile, num_steps, high_frac, middle_frac, eps=1e-5):
    """duo trainer_base.py::_get_sampling_time_profile (float64 here; get_t_for_alpha of
    LogLinear: t = 1 - alpha)."""
    num_steps += 1
    if profile == "linear":
        return torch.linspace(1, eps, num_steps, dtype=D)
    assert profile.startswith("linear-constant-linear")
    c = float(profile.split("-")[3])
    if "inv" in profile:
        c = 1 - c
    n_hi = round(high_frac * num_steps)
    n_mid = round(middle_frac * num_steps)
    return torch.cat(
        [
            torch.linspace(1, c, n_hi, dtype=D),
            torch.full((n_mid,), c, dtype=D),
            torch.linspace(c, eps, num_steps - n_hi - n_mid, dtype=D),
        ]
    )


def ref_mode_kappas(mode, timesteps, one_point=False):
    """duo trainer_base.py::_mode_to_psi_kappas. ``one_point``: our documented extension where
    the reference fails (a ReMDM-like mode on a one-point segment returns no kappa there, and
    _get_kappas's length assertion fails): kappa 1, as at the last point of a longer segment."""
    n = len(timesteps)
    if mode == "pure-posterior":
        return torch.ones(n, dtype=D)
    if mode == "pure-pc":
        return torch.zeros(n, dtype=D)
    eta = float(mode.split("-")[-1])
    if mode.startswith("constant-") and not mode.startswith("constant-remdm"):
        return torch.full((n,), eta, dtype=D)
    if one_point and n == 1:
        return torch.ones(1, dtype=D)
    all_alphas = ref_alpha(timesteps)
    alpha_t, alpha_s = all_alphas[:-1], all_alphas[1:]
    eta_t = torch.tensor([eta], dtype=D)
    if mode.startswith("max-capped-"):
        sigma = torch.minimum(eta_t.expand_as(alpha_t), (1 - alpha_s) / alpha_t)
        sigma = torch.where(alpha_t == 0, eta, sigma)
    elif mode.startswith("max-rescale-"):
        sigma_max = torch.minimum(eta_t.expand_as(alpha_t), (1 - alpha_s) / alpha_t)
        sigma = torch.where(alpha_t > 0, sigma_max, 1) * eta
    elif mode.startswith("constant-remdm"):
        sigma = eta_t
    else:
        raise ValueError(mode)
    kappas = torch.clip(1 - sigma / (1 - alpha_s), 0, 1)
    if len(kappas) > 0:
        kappas = torch.cat([kappas, torch.ones(1, dtype=D)])
    return kappas


def ref_kappas(
    timesteps, high_mode, middle_mode, low_mode, high_frac, middle_frac, one_point=False
):
    """duo trainer_base.py::_get_kappas (``one_point``: see :func:`ref_mode_kappas`)."""
    n = len(timesteps)
    n_hi = round(high_frac * n)
    n_mid = round(middle_frac * n)
    kappas = torch.cat(
        [
            ref_mode_kappas(high_mode, timesteps[:n_hi], one_point),
            ref_mode_kappas(middle_mode, timesteps[n_hi : n_hi + n_mid], one_point),
            ref_mode_kappas(low_mode, timesteps[n_hi + n_mid :], one_point),
        ]
    )
    assert len(kappas) == n
    return kappas


def psi_options(profile, high, middle, low, high_frac, middle_frac):
    return {
        "psi_time_profile": profile,
        "psi_high_mode": high,
        "psi_middle_mode": middle,
        "psi_low_mode": low,
        "psi_high_frac": high_frac,
        "psi_middle_frac": middle_frac,
    }


#: the Duo settings of s-sahoo/duo scripts/psi_samplers (owt and cifar10; the cifar10 ones ran a
#: cosine schedule, here the log-linear one), with their top-p where the script sets one, and the
#: config.yaml defaults
SCRIPTS = {
    "defaults": (psi_options("linear", *["pure-posterior"] * 3, 0.2, 0.6), {}),
    "owt/duo_loop_remdm": (
        psi_options(
            "linear-constant-linear-0.9-inv",
            "pure-posterior",
            "constant-remdm-0.01",
            "pure-posterior",
            0.45,
            0.5,
        ),
        {"top_p": 0.95},
    ),
    "owt/duo_max_capped_remdm": (
        psi_options("linear", *["max-capped-0.01"] * 3, 0.0, 0.0),
        {"top_p": 0.9},
    ),
    "owt/duo_max_rescale_eta": (
        psi_options("linear", *["max-rescale-0.05"] * 3, 0.0, 0.0),
        {"top_p": 0.9},
    ),
    "cifar10/duo_psi_pc": (
        psi_options("linear", "pure-posterior", "constant-0.95", "pure-posterior", 0.5, 0.4),
        {},
    ),
    "cifar10/duo_max_capped_remdm": (
        psi_options("linear", *["max-capped-0.005"] * 3, 0.0, 0.0),
        {},
    ),
}

#: more profiles and modes than the scripts use: every mode in every segment, a non-inv profile,
#: pure-pc, fractions that round half to even
EXTRA = {
    "lcl-0.5-mixed": psi_options(
        "linear-constant-linear-0.5", "max-rescale-0.3", "pure-pc", "max-capped-0.2", 0.3, 0.3
    ),
    "lcl-0.6-inv-half": psi_options(
        "linear-constant-linear-0.6-inv",
        "constant-0.4",
        "constant-remdm-0.05",
        "pure-pc",
        0.25,
        0.5,
    ),
    "linear-all-modes": psi_options(
        "linear", "constant-remdm-0.2", "max-rescale-0.5", "constant-0.7", 0.5, 0.25
    ),
}
ALL_SETTINGS = {**{k: v[0] for k, v in SCRIPTS.items()}, **EXTRA}


# --------------------------------------------------------------------------- the Psi-posterior


@pytest.mark.parametrize("kappa", [0.0, 0.3, 0.9, 1.0])
@pytest.mark.parametrize("a_t,a_s", [(1e-3, 0.2), (0.2, 0.5), (0.7, 0.71), (0.9, 0.9), (0.4, 1.0)])
def test_psi_probabilities_are_the_reference_mixture(kappa, a_t, a_s):
    """psi_posterior_probs (built from the masses the sampler draws with) equals the reference's
    dense kappa q_xs + (1 - kappa) forward(q_x0, alpha_s), position by position; a_s = a_t is the
    corrector loop's step (q_xs keeps x_t), a_s = 1 the noise-removal step."""
    B, L, V = 3, 5, 7
    g = torch.Generator().manual_seed(0)
    x_hat = torch.softmax(3 * torch.randn(B, L, V, generator=g, dtype=D), -1)
    x_hat[0, 0] = F.one_hot(torch.tensor(2), V).to(D)  # a confident prediction
    x_t = torch.randint(0, V, (B, L), generator=g)
    x_t[0, 0] = 2
    at, as_ = torch.full((B, L), a_t, dtype=D), torch.full((B, L), a_s, dtype=D)
    want = ref_psi(x_hat, x_t, as_[..., None], at[..., None], kappa)
    got = psi_posterior_probs(x_hat, x_t, as_, at, kappa)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)
    torch.testing.assert_close(got.sum(-1), torch.ones(B, L, dtype=D), rtol=0, atol=1e-13)


@pytest.mark.parametrize("kappa", [0.0, 0.45, 1.0])
@pytest.mark.parametrize("a_t,a_s", [(0.05, 0.3), (0.6, 0.6), (0.5, 1.0)])
def test_psi_sampler_draws_the_reference_distribution(kappa, a_t, a_s):
    """The threshold sampler (no (B, L, V) posterior) draws from the reference's mixed
    categorical: frequencies over N = 200k draws per x_t within 5 binomial standard errors
    (+1e-4) of the reference probabilities."""
    V, N = 5, 200_000
    g = torch.Generator().manual_seed(1)
    x_hat = torch.tensor([0.05, 0.5, 0.2, 0.15, 0.1], dtype=D)
    for xt_val in (0, 1):
        x_t = torch.full((1, N), xt_val)
        at, as_ = torch.full((1, 1), a_t, dtype=D), torch.full((1, 1), a_s, dtype=D)
        draws = sample_psi_posterior(x_hat.log().expand(1, N, V), x_t, as_, at, kappa, g)
        freq = torch.bincount(draws.flatten(), minlength=V).to(D) / N
        q = ref_psi(x_hat.expand(1, 1, V), x_t[:, :1], as_[..., None], at[..., None], kappa)[0, 0]
        se = (q * (1 - q) / N).sqrt()
        assert ((freq - q).abs() <= 5 * se + 1e-4).all(), (xt_val, freq, q)


@pytest.mark.parametrize("kappa", [0.0, 0.5, 1.0])
def test_psi_posterior_preserves_the_forward_marginals(kappa):
    """The Psi-samplers' defining property (paper sec. 3): with the true x_0 as x_hat, x_t ~
    q_t(. | x_0) moved by the Psi-posterior is distributed as q_s(. | x_0), for every kappa."""
    V = 6
    for a_t, a_s in ((0.1, 0.4), (0.3, 0.3), (0.5, 0.95)):
        x0 = F.one_hot(torch.tensor(3), V).to(D)
        q_t = a_t * x0 + (1 - a_t) / V
        xt = torch.arange(V)[None]  # every x_t
        trans = psi_posterior_probs(
            x0.expand(1, V, V),
            xt,
            torch.full((1, V), a_s, dtype=D),
            torch.full((1, V), a_t, dtype=D),
            kappa,
        )[0]  # (x_t, x_s)
        torch.testing.assert_close(q_t @ trans, a_s * x0 + (1 - a_s) / V, rtol=0, atol=1e-14)


# --------------------------------------------------------------------------- schedules


@pytest.mark.parametrize("name", sorted(ALL_SETTINGS))
@pytest.mark.parametrize("nfe", [1, 2, 3, 4, 8, 16, 64, 255, 256])
def test_time_profile_and_kappas_are_the_reference_formulas(name, nfe):
    """psi_schedule's nfe + 1 times and kappas equal the reference's _get_sampling_time_profile
    and _get_kappas (transcribed above; float64) for each script's setting and more mode /
    profile / fraction combinations; where the reference fails (a ReMDM-like mode on a one-point
    segment, e.g. the ReMDM loop at nfe 1), the documented extension: kappa 1 there."""
    o = ALL_SETTINGS[name]
    want_t = ref_time_profile(o["psi_time_profile"], nfe, o["psi_high_frac"], o["psi_middle_frac"])
    modes = (o["psi_high_mode"], o["psi_middle_mode"], o["psi_low_mode"])
    fracs = (o["psi_high_frac"], o["psi_middle_frac"])
    try:
        want_k = ref_kappas(want_t, *modes, *fracs)
    except AssertionError:  # the reference fails: only for a one-point ReMDM-like segment
        n_hi, n_mid = round(fracs[0] * (nfe + 1)), round(fracs[1] * (nfe + 1))
        sizes = (n_hi, n_mid, nfe + 1 - n_hi - n_mid)
        assert any(s == 1 and not m.startswith(("pure", "constant-0", "constant-1"))
                   for s, m in zip(sizes, modes)), (sizes, modes)  # fmt: skip
        want_k = ref_kappas(want_t, *modes, *fracs, one_point=True)
    times, kappas = make_method("duo", o).psi_schedule(nfe)
    assert times.dtype == D and len(times) == nfe + 1 and len(kappas) == nfe + 1
    torch.testing.assert_close(times, want_t, rtol=0, atol=1e-15)
    torch.testing.assert_close(torch.tensor(kappas, dtype=D), want_k, rtol=0, atol=1e-15)


def test_schedules_by_hand():
    """A few values worked out by hand (they catch an error shared by the code and the
    transcription): the ReMDM loop at nfe 8 (9 points: round(4.05) = 4 linear to t = 1 - 0.9,
    round(4.5) = 4 (half to even) constant, 1 more), its kappa 1 - 0.01 / (1 - alpha(0.1)); the
    max-capped and max-rescale kappas of one step."""
    loop = SCRIPTS["owt/duo_loop_remdm"][0]
    times, kappas = make_method("duo", loop).psi_schedule(8)
    torch.testing.assert_close(
        times, torch.tensor([1.0, 0.7, 0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], dtype=D)
    )
    k = 1 - 0.01 / (1 - (1 - 0.999 * 0.1))
    assert kappas == pytest.approx([1, 1, 1, 1, k, k, k, 1, 1], abs=1e-15)
    # linear grid, nfe 4: t = 1, 0.75, ...; step 0: alpha_t = 1e-3, alpha_s = 1 - 0.999 * 0.75
    a_t, a_s = 1e-3, 1 - 0.999 * (1 - (1 - 1e-5) / 4)
    capped = psi_options("linear", *["max-capped-0.3"] * 3, 0.0, 0.0)
    assert make_method("duo", capped).psi_schedule(4)[1][0] == pytest.approx(
        1 - 0.3 / (1 - a_s), abs=1e-15
    )  # (1 - a_s) / a_t = 250 > 0.3: the cap is eta
    rescale = psi_options("linear", *["max-rescale-0.3"] * 3, 0.0, 0.0)
    assert make_method("duo", rescale).psi_schedule(4)[1][0] == pytest.approx(
        1 - 0.3 * 0.3 / (1 - a_s), abs=1e-15
    )
    assert a_t < 1 - a_s  # (the case above)
    pc = psi_options("linear", "pure-pc", "pure-pc", "pure-pc", 0.2, 0.6)
    assert make_method("duo", pc).psi_schedule(5)[1] == [0.0] * 6


# --------------------------------------------------------------------------- the sampler


class FixedLogits(nn.Module):
    """Logits fixed per position (L, V), whatever x and sigma; records inputs and sigmas."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits
        self.inputs, self.sigmas = [], []

    def forward(self, x, sigma):
        self.inputs.append(x.clone())
        self.sigmas.append(sigma.clone())
        return self.logits.expand(x.shape[0], -1, -1)


def test_first_steps_draw_the_reference_psi_posterior():
    """Duo.sample with decoding psi, step by step: the move from each call's input to the next
    is drawn from the reference's Psi-posterior at the reference's (t, s, kappa) of that step
    (the schedule computed here from the transcribed formulas: kappa 0.333, 0 (clipped), 1, then
    the noise-removal step): per position and x_t value, frequencies over 20k sequences within 5
    binomial standard errors (+2e-3)."""
    V, L, n, nfe = 5, 3, 20_000, 4
    opts = psi_options("linear", "max-capped-0.5", "pure-pc", "constant-0.3", 0.6, 0.2)
    method = make_method("duo", opts, vocab=V, seq_len=L)
    g = torch.Generator().manual_seed(3)
    logits = 2 * torch.randn(L, V, generator=g)
    model = FixedLogits(logits)
    x_prompt = torch.zeros(n, L, dtype=torch.long)
    out = method.sample(
        model, x_prompt, torch.zeros(n, L, dtype=torch.bool), nfe=nfe, decoding="psi", generator=g
    )
    steps = model.inputs[1:] + [out]
    times = ref_time_profile("linear", nfe, 0.6, 0.2)
    kappas = ref_kappas(times, "max-capped-0.5", "pure-pc", "constant-0.3", 0.6, 0.2)
    assert float(kappas[0]) == pytest.approx(0.3327, abs=1e-4) and float(kappas[1]) == 0.0
    p_x0 = torch.softmax(logits.to(D), -1)
    for k in range(nfe):
        a_t = ref_alpha(times[k])
        a_s = torch.tensor(1.0, dtype=D) if k == nfe - 1 else ref_alpha(times[k + 1])
        kappa = 1.0 if k == nfe - 1 else float(kappas[k])  # the noise-removal call: ancestral
        torch.testing.assert_close(model.sigmas[k][0].to(D), -torch.log(a_t), rtol=1e-6, atol=0)
        x_t, x_s = model.inputs[k], steps[k]
        for pos in range(L):
            for v in range(V):
                sel = x_t[:, pos] == v
                m = int(sel.sum())
                q = ref_psi(
                    p_x0[pos].expand(1, 1, V),
                    torch.tensor([[v]]),
                    a_s.reshape(1, 1, 1),
                    a_t.reshape(1, 1, 1),
                    kappa,
                )[0, 0]
                freq = torch.bincount(x_s[sel, pos], minlength=V).to(D) / m
                se = (q * (1 - q) / m).sqrt()
                assert ((freq - q).abs() <= 5 * se + 2e-3).all(), (k, pos, v, freq, q)


def _perturbed_dit(options: dict, V: int = 10, L: int = 16):
    method, net = make_model("duo", options, vocab=V, seq_len=L)
    net.eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return method, net


@pytest.mark.parametrize("float64", [True, False])
def test_psi_with_the_defaults_is_the_ancestral_sampler(float64):
    """The reference's defaults (linear grid, pure-posterior everywhere: kappa = 1) give exactly
    the ancestral samples for the same generator (psi-greedy: the greedy ones), with a prompt,
    temperature and top-p; so do other kappa-1 settings (constant-1, pure-posterior segments of
    other sizes); a kappa < 1 setting does not."""
    torch.manual_seed(0)
    base, net = _perturbed_dit({"top_p": 0.9})
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 10, (24, 16), generator=g)
    pmask = torch.zeros(24, 16, dtype=torch.bool)
    pmask[:, :5] = True
    kappa_one = [
        {"top_p": 0.9},
        {
            "top_p": 0.9,
            **psi_options("linear", "constant-1", "pure-posterior", "constant-1.0", 0.5, 0.1),
        },
    ]

    def run(method, decoding, nfe):
        gen = torch.Generator().manual_seed(11)
        return method.sample(
            net, prompt, pmask, nfe=nfe, temperature=0.8, decoding=decoding, float64=float64,
            generator=gen,
        )  # fmt: skip

    for nfe in (1, 2, 5, 9):
        want = {d: run(base, d, nfe) for d in ("ancestral", "greedy")}
        for opts in kappa_one:
            m = make_method("duo", opts, vocab=10, seq_len=16)
            assert torch.equal(run(m, "psi", nfe), want["ancestral"]), (opts, nfe)
            assert torch.equal(run(m, "psi-greedy", nfe), want["greedy"]), (opts, nfe)
    pc = make_method("duo", {"top_p": 0.9, **EXTRA["lcl-0.5-mixed"]}, vocab=10, seq_len=16)
    assert not torch.equal(run(pc, "psi", 9), run(base, "ancestral", 9))


@pytest.mark.parametrize("decoding", ["psi", "psi-greedy"])
@pytest.mark.parametrize("name", sorted(ALL_SETTINGS))
def test_psi_makes_exactly_nfe_calls_and_keeps_the_prompt(name, decoding):
    """For each setting: exactly nfe calls (the reference's noise-removal call is the last
    step), sigma = -log alpha at the reference's times (the corrector loop's repeated times
    included), prompt positions (givens inside the generated region too) unchanged in every
    network input and in the output, ids inside the vocabulary."""
    V, L, n = 7, 12, 16
    method = make_method("duo", ALL_SETTINGS[name], vocab=V, seq_len=L)
    g = torch.Generator().manual_seed(4)
    prompt = torch.randint(0, V, (n, L), generator=g)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    pmask[:, :4] = True
    pmask[::3, 8] = True
    o = ALL_SETTINGS[name]
    for nfe in (1, 2, 5, 8, 16):
        model = FixedLogits(torch.randn(L, V, generator=g))
        method.nfe_counter = 0
        out = method.sample(model, prompt, pmask, nfe=nfe, decoding=decoding, generator=g)
        assert method.nfe_counter == nfe == len(model.inputs)
        assert out.dtype == torch.long and 0 <= int(out.min()) and int(out.max()) < V
        assert torch.equal(out[pmask], prompt[pmask])
        for x in model.inputs:
            assert torch.equal(x[pmask], prompt[pmask])
        times = ref_time_profile(
            o["psi_time_profile"], nfe, o["psi_high_frac"], o["psi_middle_frac"]
        )
        sig = torch.stack([s[0].to(D) for s in model.sigmas])
        torch.testing.assert_close(sig, -torch.log(ref_alpha(times[:nfe])), rtol=1e-6, atol=1e-7)


def test_psi_greedy_takes_the_argmax_at_the_last_call():
    """psi-greedy (noise_removal = greedy): the last call's output is argmax p_theta at every
    free position, whatever the draw; psi keeps sampling there."""
    V, L, n = 5, 6, 64
    p = torch.tensor([0.4, 0.15, 0.15, 0.15, 0.15])
    model = FixedLogits(p.log().expand(L, V))
    method = make_method("duo", SCRIPTS["owt/duo_loop_remdm"][0], vocab=V, seq_len=L)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    x = torch.zeros(n, L, dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    assert (method.sample(model, x, pmask, nfe=6, decoding="psi-greedy", generator=g) == 0).all()
    assert (method.sample(model, x, pmask, nfe=6, decoding="psi", generator=g) != 0).any()


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "key,value",
    [
        ("psi_high_mode", "posterior"),
        ("psi_middle_mode", "constant-1.5"),
        ("psi_low_mode", "max-capped-1e-3"),  # the reference would read 3.0
        ("psi_low_mode", "max-rescale--0.1"),
        ("psi_high_mode", "constant-remdm-x"),
        ("psi_time_profile", "cosine"),
        ("psi_time_profile", "linear-constant-linear-0.9-alpha"),
        ("psi_time_profile", "linear-constant-linear-1.0"),
        ("psi_time_profile", "linear-constant-linear-alpha-inv"),
        ("psi_middle_frac", 0.9),  # with psi_high_frac 0.2: more than all the points
    ],
)
def test_psi_options_reject_what_the_reference_cannot_run(key, value):
    with pytest.raises(ConfigError, match=key):
        make_method("duo", {key: value})


def test_plan_rejects_fractions_that_round_past_the_grid():
    """high_frac = middle_frac = 0.5 is accepted, but at nfe 2 (3 points) both round to 2 (half
    to even) and a linear-constant-linear grid has no room: the planner stops the sweep (the
    reference would fail in torch.linspace); the linear profile has no such limit."""
    opts = psi_options("linear-constant-linear-0.5", *["pure-posterior"] * 3, 0.5, 0.5)
    method = make_method("duo", opts)
    kw = {"backbone": BackboneConfig(size="cpu-mini"), "train": TrainConfig()}
    method.validate_plan(sample=SampleConfig(nfe=[1, 3, 4]), **kw)
    with pytest.raises(ConfigError, match="options.psi_middle_frac"):
        method.validate_plan(sample=SampleConfig(nfe=[4, 2]), **kw)
    with pytest.raises(ValueError, match="psi_high_frac"):
        method.sample(
            FixedLogits(torch.zeros(16, 10)),
            torch.zeros(2, 16, dtype=torch.long),
            torch.zeros(2, 16, dtype=torch.bool),
            nfe=2,
            decoding="psi",
        )
    linear = make_method("duo", {**opts, "psi_time_profile": "linear"})
    linear.validate_plan(sample=SampleConfig(nfe=[2]), **kw)


def test_psi_options_are_sampling_options_left_out_of_ids_at_their_defaults():
    from baselines.duo import PSI_OPTIONS, Duo, DuoOptions

    fields = {f.name: f for f in DuoOptions.__dataclass_fields__.values()}
    assert set(PSI_OPTIONS) <= set(Duo.sampling_options)
    for name in PSI_OPTIONS:
        assert fields[name].metadata.get("omit_default") is True, name
    o = DuoOptions()
    times = psi_times(o.psi_time_profile, 7, o.psi_high_frac, o.psi_middle_frac)
    assert torch.equal(times, torch.linspace(1.0, 1e-5, 8, dtype=D))
    modes = (o.psi_high_mode, o.psi_middle_mode, o.psi_low_mode)
    assert psi_kappas(times, lambda t: 1 - t, modes, 0.2, 0.6).eq(1).all()


# --------------------------------------------------------------------------- learnability

#: the ReMDM-like settings users run (scripts/psi_samplers/owt), with their top-p
LEARN_SETTINGS = ["owt/duo_loop_remdm", "owt/duo_max_capped_remdm"]


@pytest.mark.slow
@pytest.mark.learns_sort8("duo", {})
def test_learned_duo_sorts_with_the_psi_samplers(learned_sort8):
    """The session's Duo sort-8 model (tests/bench/test_conformance.py::test_learns_sort8[duo],
    its ancestral decoding >= LEARN_TARGET) sampled with psi at the ReMDM loop and the
    max-capped settings of scripts/psi_samplers/owt (with their top-p) at the learnability NFE
    reaches the same target. Measured (n = 256, binomial sd ~0.019): loop 0.945, max-capped
    0.945, the model's ancestral 0.902; without the scripts' top-p 0.898 and 0.891."""
    _, net = learned_sort8.model()
    got = {}
    for name in LEARN_SETTINGS:
        opts, extra = SCRIPTS[name]
        method = make_method("duo", {**opts, **extra})
        got[name] = sort8_accuracy(method, net, "psi", temperature=1.0)
    assert all(acc >= LEARN_TARGET for acc in got.values()), (got, learned_sort8.best)
