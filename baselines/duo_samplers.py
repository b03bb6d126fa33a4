"""Duo's decodings (docs/methods/duo.md): the uniform-state posterior and the Psi-samplers' step,
their time profiles and kappa schedules, and :data:`DECODINGS`, the table :class:`Duo
<baselines.duo.Duo>` looks its decoding up in. Every decoding makes exactly ``nfe`` backbone
calls; each step draws x_s from the Psi-posterior (:func:`sample_psi_posterior`) with kappa from
its decoding's schedule (``ancestral`` / ``greedy``: kappa = 1 on linspace(1, 1e-5, nfe + 1),
the ancestral posterior to the last bit), the last step to alpha_s = 1 (the noise removal,
merged into the last call); the ``-greedy`` / ``greedy`` decodings take argmax p_theta there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bench.decoding import Decoding
from bench.method import categorical_draw

# --------------------------------------------------------------------------- the posterior


def uniform_posterior_probs(x_hat: Tensor, x_t: Tensor, alpha_s: Tensor, alpha_t: Tensor) -> Tensor:
    """Dense q(x_s | x_t, x_0 = x_hat) of the uniform-state process (Duo eq. 5 with x_0 -> x_hat;
    S-FLM `samplers.py::uniform_posterior_probs`). For tests and reference only: the sampler
    uses :func:`sample_uniform_posterior`, which never builds this (B, L, V) tensor.

    x_hat: (B, L, V) probabilities; x_t: (B, L); alpha_s, alpha_t broadcastable to (B, L),
    alpha_s > alpha_t.
    """
    V = x_hat.shape[-1]
    a_t, a_s = alpha_t[..., None], alpha_s[..., None]
    onehot = F.one_hot(x_t, V).to(x_hat.dtype)
    p_xt = x_hat.gather(-1, x_t[..., None])
    num = (
        V * a_t * x_hat * onehot
        + (a_t / a_s - a_t) * onehot
        + (a_s - a_t) * x_hat
        + (1 - a_t / a_s) * (1 - a_s) / V
    )
    return num / (V * a_t * p_xt + 1 - a_t)


def sample_uniform_posterior(
    log_p: Tensor,
    x_t: Tensor,
    alpha_s: Tensor,
    alpha_t: Tensor,
    generator: torch.Generator | None,
    float64: bool = True,
) -> Tensor:
    """Draw x_s ~ q(x_s | x_t, x_hat = softmax(log_p)) without forming the posterior.

    The posterior is the mixture (shared denominator den = V a_t x_hat[x_t] + 1 - a_t)
      uniform over V   with mass (1 - a_t/a_s)(1 - a_s) / den,
      x_t itself       with mass (V a_t x_hat[x_t] + a_t/a_s - a_t) / den,
      a draw of x_hat  with mass (a_s - a_t) / den,
    so one uniform threshold per position picks the component (S-FLM
    `samplers.py::sample_uniform_posterior`, priority uniform > x_t > x_hat). alpha_s = 1 gives
    the final (noise-removal) step: keep x_t with mass V a_t x_hat[x_t] / den, else draw x_hat.
    The only (B, L, V) work is x_hat[x_t]; x_hat is drawn where it is picked. The
    Psi-posterior at kappa = 1
    (:func:`sample_psi_posterior`, whose masses are these to the last bit).
    """
    return sample_psi_posterior(log_p, x_t, alpha_s, alpha_t, 1.0, generator, float64)


def _draw_unif_keep_or_xhat(
    log_p: Tensor,
    x_t: Tensor,
    m_unif: Tensor,
    m_keep: Tensor,
    generator: torch.Generator | None,
    float64: bool,
    free: Tensor | None = None,
) -> Tensor:
    """One draw per position from the mixture "uniform over V" (mass ``m_unif``), "x_t itself"
    (``m_keep``), "a draw of x_hat = softmax(log_p)" (the rest), by one uniform threshold u per
    position (priority uniform > x_t > x_hat). x_hat is drawn only where u picks it (and
    ``free``, (B, L) bool, allows: elsewhere x_t stays, for the caller to overwrite): the
    component is chosen before the token, the same law. Random draws, in order: the (B, L)
    thresholds, the (B, L) uniform ids, then one inverse-CDF uniform per x_hat draw
    (:func:`bench.method.categorical_draw`, float64 unless ``float64`` is off)."""
    V = log_p.shape[-1]
    u = torch.rand(x_t.shape, generator=generator, device=x_t.device, dtype=m_unif.dtype)
    unif = torch.randint(0, V, x_t.shape, generator=generator, device=x_t.device)
    take = u >= (m_unif + m_keep).clamp(max=1.0)
    if free is not None:
        take &= free
    out = x_t.clone()
    out[take] = categorical_draw(log_p[take], generator, float64)
    return torch.where(u < m_unif, unif, out)


def psi_step(m, raw, x_t, free, alpha_s, alpha_t, kappa, temperature, generator, float64):
    """One Psi-posterior step (:func:`sample_psi_posterior`) from the network's raw output
    ``raw`` (B, L, V): x_hat = softmax(raw / T) (after top-k / top-p, renormalised), its mass at
    x_t from one float32 logsumexp per position (the masses then in float64), and the draw of
    x_hat only at the positions ``free`` (B, L) bool whose threshold picks it. No (B, L, V)
    float64 table: the float64 is in the draws' cumulative sums (the float32 Gumbel bias)."""
    logits = raw.float()
    logits = logits / temperature if temperature != 1.0 else logits
    if m.filtering:
        # top-k / top-p on x_hat = p_theta (duo trainer_base.py:594-597, which does not
        # renormalise; here x_hat is renormalised over the kept classes)
        logits = m.filtered(logits)
    V = logits.shape[-1]
    dtype = torch.float64 if float64 else torch.float32
    lse = logits.logsumexp(-1)
    p_xt = (logits.gather(-1, x_t[..., None]).squeeze(-1) - lse).to(dtype).exp()
    m_unif, m_keep = psi_posterior_masses(p_xt, alpha_s.to(dtype), alpha_t.to(dtype), kappa, V)
    m_unif, m_keep = m_unif.clamp(0.0, 1.0), m_keep.clamp(0.0, 1.0)
    return _draw_unif_keep_or_xhat(logits, x_t, m_unif, m_keep, generator, float64, free)


# --------------------------------------------------------------------------- Psi-samplers


def psi_posterior_masses(
    p_xt: Tensor, alpha_s: Tensor, alpha_t: Tensor, kappa: float, V: int
) -> tuple[Tensor, Tensor]:
    """(m_unif, m_keep): the masses of "uniform over V" and "x_t itself" in the Psi-posterior
    kappa q(x_s | x_t, x_hat) + (1 - kappa) [alpha_s q(x_0 | x_t, x_hat) + (1 - alpha_s) / V]
    (s-sahoo/duo `trainer_base.py::_psi_update`: q_xs, q_x0 = the posterior at alpha_s = 1,
    `UniformState._forward_process` noising it back to alpha_s); the rest, 1 - m_unif - m_keep,
    is the mass of "a draw of x_hat". Both parts are mixtures of the same three components
    (shared den = V a_t x_hat[x_t] + 1 - a_t):
      posterior (Duo eq. 5, x_0 -> x_hat): (1 - a_t/a_s)(1 - a_s)/den, (V a_t x_hat[x_t] + a_t/a_s
      - a_t)/den, (a_s - a_t)/den;
      q(x_0 | x_t, x_hat) (alpha_s = 1): 0, V a_t x_hat[x_t]/den, (1 - a_t)/den, so that its
      forward noising to a_s has 1 - a_s, a_s V a_t x_hat[x_t]/den, a_s (1 - a_t)/den;
    so the mixed categorical is that three-way mixture with the kappa-mixed masses (exact: a
    mixture of mixtures over the same components). kappa = 1 returns the posterior's masses to
    the last bit (1.0 m + 0.0 = m), so :func:`sample_psi_posterior` then draws what
    :func:`sample_uniform_posterior` draws. Unclamped; p_xt = x_hat[x_t]."""
    a_t, a_s = alpha_t, alpha_s
    den = V * a_t * p_xt + 1 - a_t
    post_unif = (1 - a_t / a_s) * (1 - a_s) / den
    post_keep = (V * a_t * p_xt + a_t / a_s - a_t) / den
    pc_unif = 1 - a_s  # forward process to a_s: duo trainer_base.py UniformState._forward_process
    pc_keep = a_s * (V * a_t * p_xt) / den
    return kappa * post_unif + (1 - kappa) * pc_unif, kappa * post_keep + (1 - kappa) * pc_keep


def psi_posterior_probs(
    x_hat: Tensor, x_t: Tensor, alpha_s: Tensor, alpha_t: Tensor, kappa: float
) -> Tensor:
    """Dense (B, L, V) Psi-posterior built from :func:`psi_posterior_masses` (the masses the
    sampler draws with): m_unif / V + m_keep onehot(x_t) + (1 - m_unif - m_keep) x_hat. For tests
    only; the sampler (:func:`sample_psi_posterior`) never builds it. x_hat: (B, L, V)
    probabilities; x_t: (B, L); alpha_s, alpha_t broadcastable to (B, L)."""
    V = x_hat.shape[-1]
    p_xt = x_hat.gather(-1, x_t[..., None]).squeeze(-1)
    m_unif, m_keep = psi_posterior_masses(p_xt, alpha_s, alpha_t, kappa, V)
    onehot = F.one_hot(x_t, V).to(x_hat.dtype)
    m_unif, m_keep = m_unif[..., None], m_keep[..., None]
    return m_unif / V + m_keep * onehot + (1 - m_unif - m_keep) * x_hat


def sample_psi_posterior(
    log_p: Tensor,
    x_t: Tensor,
    alpha_s: Tensor,
    alpha_t: Tensor,
    kappa: float,
    generator: torch.Generator | None,
    float64: bool = True,
) -> Tensor:
    """Draw x_s from the Psi-posterior (:func:`psi_posterior_masses`) with x_hat =
    softmax(log_p), without forming it: the same threshold draw as
    :func:`sample_uniform_posterior` (and the same random draws, in the same order) with the
    kappa-mixed masses. kappa = 1: the ancestral step; kappa = 0: predict x_0, then re-noise it
    to alpha_s (pure predictor-corrector)."""
    dtype = torch.float64 if float64 else torch.float32
    log_p = log_p.to(dtype)
    V = log_p.shape[-1]
    a_t, a_s = alpha_t.to(dtype), alpha_s.to(dtype)
    p_xt = log_p.gather(-1, x_t[..., None]).squeeze(-1).exp()
    m_unif, m_keep = psi_posterior_masses(p_xt, a_s, a_t, kappa, V)
    m_unif, m_keep = m_unif.clamp(0.0, 1.0), m_keep.clamp(0.0, 1.0)
    return _draw_unif_keep_or_xhat(log_p, x_t, m_unif, m_keep, generator, float64)


# --------------------------------------------------------------------------- kappa schedules


def _pure(kappa: float) -> Callable:
    def kappas(value: float, times: Tensor, alpha) -> Tensor:
        return torch.full((len(times),), kappa, dtype=torch.float64, device=times.device)

    return kappas


def _constant(value: float, times: Tensor, alpha) -> Tensor:
    return torch.full((len(times),), value, dtype=torch.float64, device=times.device)


def _remdm_like(sigma: Callable[[float, Tensor, Tensor], Tensor]) -> Callable:
    """kappa = clip(1 - sigma / (1 - alpha_s), 0, 1) over consecutive pairs (alpha_t, alpha_s) of
    the segment with ReMDM's ``sigma(eta, alpha_t, min(eta, (1 - alpha_s)/alpha_t))``, and kappa
    1 at the segment's last time (s-sahoo/duo `trainer_base.py::_mode_to_psi_kappas`)."""

    def kappas(eta: float, times: Tensor, alpha) -> Tensor:
        alphas = alpha(times)
        a_t, a_s = alphas[:-1], alphas[1:]
        cap = torch.minimum(torch.full_like(a_t, eta), (1 - a_s) / a_t)
        out = torch.clip(1 - sigma(eta, a_t, cap) / (1 - a_s), 0.0, 1.0)
        # the segment's last time: kappa 1. Departure: a one-point segment gets that 1 too; the
        # reference appends it only after a non-empty pair list and then fails its length assertion
        if len(times) > 0:
            out = torch.cat([out, torch.ones_like(alphas[:1])])
        return out

    return kappas


@dataclass(frozen=True)
class KappaMode:
    """One kappa mode of ``sampling.psi.*_mode``: ``kappas(value, times, alpha)`` -> kappa at each
    of ``times``; ``number``: the name of its number (``<kind>-<number>``; "" for none) and
    ``upper`` its largest value (the reference asserts kappa in [0, 1]; an eta is >= 0)."""

    kappas: Callable[[float, Tensor, Callable], Tensor]
    number: str = ""
    upper: float = math.inf


#: the kappa modes of s-sahoo/duo ``sampling.psi.*_mode`` (``trainer_base.py::_mode_to_psi_kappas``)
KAPPA_MODES = {
    "pure-posterior": KappaMode(_pure(1.0)),
    "pure-pc": KappaMode(_pure(0.0)),
    "constant": KappaMode(_constant, "kappa", 1.0),
    # sigma = eta
    "constant-remdm": KappaMode(
        _remdm_like(lambda eta, a_t, cap: torch.full_like(a_t, eta)), "eta"
    ),
    # sigma = min(eta, (1 - alpha_s)/alpha_t); eta where alpha_t = 0
    "max-capped": KappaMode(
        _remdm_like(lambda eta, a_t, cap: torch.where(a_t == 0, eta, cap)), "eta"
    ),
    # min(eta, .) eta, as the reference (ReMDM: min(1, .) eta); 1 eta where alpha_t = 0
    "max-rescale": KappaMode(
        _remdm_like(lambda eta, a_t, cap: torch.where(a_t > 0, cap, 1.0) * eta), "eta"
    ),
}
#: the mode strings, for messages
PSI_MODES = tuple(f"{k}-<{m.number}>" if m.number else k for k, m in KAPPA_MODES.items())


def psi_mode(mode: str) -> tuple[str, float]:
    """(kind, value) of a kappa mode string (:data:`KAPPA_MODES`): kind is the mode without its
    number, value the number (nan for the pure modes). The reference reads the number as
    ``float(mode.split('-')[-1])``; here it must be a plain decimal (no '-', finite), in [0, 1]
    for ``constant-<kappa>`` (the reference asserts kappa in [0, 1]) and >= 0 for an eta."""
    spec = KAPPA_MODES.get(mode)
    if spec is not None and not spec.number:
        return mode, float("nan")
    kinds = [k for k, m in KAPPA_MODES.items() if m.number and mode.startswith(k + "-")]
    if not kinds:
        raise ValueError(f"unknown mode {mode!r} (known: {', '.join(PSI_MODES)})")
    kind = max(kinds, key=len)  # constant-remdm-<eta>, not constant-<kappa>
    text = mode[len(kind) + 1 :]
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if "-" in text or not np.isfinite(value):
        raise ValueError(f"{mode!r}: {text!r} is not a plain decimal number")
    upper = KAPPA_MODES[kind].upper
    if value < 0 or value > upper:
        bound = f"in [0, {upper:g}]" if upper < math.inf else ">= 0"
        raise ValueError(f"{mode!r}: the number must be {bound}")
    return kind, value


def _mode_kappas(mode: str, times: Tensor, alpha) -> Tensor:
    """kappa for each of ``times`` under one mode (s-sahoo/duo
    `trainer_base.py::_mode_to_psi_kappas`; :data:`KAPPA_MODES`): pure-posterior 1, pure-pc 0,
    constant-<k> k; the ReMDM-like modes, over consecutive pairs (alpha_t, alpha_s) of the
    segment, kappa = clip(1 - sigma / (1 - alpha_s), 0, 1) with sigma = eta (constant-remdm),
    min(eta, (1 - alpha_s)/alpha_t) (max-capped; eta where alpha_t = 0) or
    min(eta, (1 - alpha_s)/alpha_t) eta (max-rescale, the reference's formula; 1 eta where
    alpha_t = 0), and kappa 1 at the segment's last time (also when it is the only one, where
    the reference fails)."""
    kind, value = psi_mode(mode)
    return KAPPA_MODES[kind].kappas(value, times, alpha)


def psi_profile(profile: str) -> tuple[float | None, bool]:
    """(c, inv) of a time profile: ``linear`` -> (None, False); ``linear-constant-linear-<c>``
    -> (c, False), c a time; ``linear-constant-linear-<c>-inv`` -> (c, True), c an alpha
    (s-sahoo/duo ``trainer_base.py::_get_sampling_time_profile``). c must be in (0, 1) (t = 0 or
    alpha = 1 would make kappa's 1 - alpha_s vanish)."""
    if profile == "linear":
        return None, False
    parts = profile.split("-")
    if (
        parts[:3] != ["linear", "constant", "linear"]
        or len(parts) not in (4, 5)
        or (len(parts) == 5 and parts[4] != "inv")
    ):
        raise ValueError(
            f"{profile!r}: expected linear, linear-constant-linear-<c> or "
            "linear-constant-linear-<c>-inv"
        )
    try:
        c = float(parts[3])
    except ValueError:
        raise ValueError(f"{profile!r}: {parts[3]!r} is not a number") from None
    if not 0.0 < c < 1.0:
        raise ValueError(f"{profile!r}: c must be in (0, 1)")
    return c, len(parts) == 5


def _fraction_counts(n: int, high_frac: float, middle_frac: float) -> tuple[int, int]:
    """(n_hi, n_mid) = (round(high_frac n), round(middle_frac n)) with Python's round (half to
    even), as the reference (`_get_sampling_time_profile`, `_get_kappas`)."""
    return round(high_frac * n), round(middle_frac * n)


def psi_times(
    profile: str,
    num_steps: int,
    high_frac: float,
    middle_frac: float,
    eps: float = 1e-5,
    device=None,
) -> Tensor:
    """The num_steps + 1 float64 times t_0 = 1 > ... of a Psi-sampler run
    (s-sahoo/duo `trainer_base.py::_get_sampling_time_profile`): ``linear``: linspace(1, eps,
    n); ``linear-constant-linear-<c>[-inv]``: linspace(1, c, n_hi), then c n_mid times, then
    linspace(c, eps, n - n_hi - n_mid), with n = num_steps + 1, n_hi = round(high_frac n),
    n_mid = round(middle_frac n); ``-inv``: c is an alpha and t = 1 - c (the reference's
    `LogLinear.get_t_for_alpha`, which ignores the schedule's eps). Repeated times are the
    corrector loop: a step from t to s = t keeps x_t under the posterior (alpha_s = alpha_t)."""
    n = num_steps + 1
    c, inv = psi_profile(profile)
    if c is None:
        return torch.linspace(1.0, eps, n, device=device, dtype=torch.float64)
    if inv:
        c = 1.0 - c  # duo trainer_base.py LogLinear.get_t_for_alpha: t = 1 - alpha
    n_hi, n_mid = _fraction_counts(n, high_frac, middle_frac)
    if n_hi + n_mid > n:
        raise ValueError(
            f"psi_time_profile {profile!r} at nfe {num_steps}: round(psi_high_frac * {n}) + "
            f"round(psi_middle_frac * {n}) = {n_hi} + {n_mid} > {n} time points (the reference "
            "fails here too); lower psi_high_frac or psi_middle_frac"
        )
    kw = dict(device=device, dtype=torch.float64)
    return torch.cat(
        [
            torch.linspace(1.0, c, n_hi, **kw),
            torch.full((n_mid,), c, **kw),
            torch.linspace(c, eps, n - n_hi - n_mid, **kw),
        ]
    )


def psi_kappas(
    times: Tensor, alpha, modes: tuple[str, str, str], high_frac: float, middle_frac: float
) -> Tensor:
    """kappa at each of ``times`` (len n; the step from times[k] uses kappas[k]): the first
    round(high_frac n) times under modes[0], the next round(middle_frac n) under modes[1], the
    rest under modes[2] (s-sahoo/duo `trainer_base.py::_get_kappas`); ``alpha``: t -> alpha_t."""
    n = len(times)
    n_hi, n_mid = _fraction_counts(n, high_frac, middle_frac)
    segments = (times[:n_hi], times[n_hi : n_hi + n_mid], times[n_hi + n_mid :])
    kappas = torch.cat([_mode_kappas(m, seg, alpha) for m, seg in zip(modes, segments)])
    assert len(kappas) == n and bool(((kappas >= 0) & (kappas <= 1)).all()), kappas
    return kappas


# --------------------------------------------------------------------------- the decodings


def linear_schedule(m, nfe: int, device=None) -> tuple[Tensor, list[float]]:
    """t_k = linspace(1, 1e-5, nfe + 1), kappa 1 at every step (the ancestral posterior)."""
    ts = torch.linspace(1.0, 1e-5, nfe + 1, device=device, dtype=torch.float64)
    return ts, [1.0] * (nfe + 1)


def psi_schedule(m, nfe: int, device=None) -> tuple[Tensor, list[float]]:
    """The Psi-samplers' times and kappas (duo trainer_base.py::generate_samples: time profile
    and kappas; :meth:`baselines.duo.Duo.psi_schedule`)."""
    return m.psi_schedule(nfe, device)


@dataclass(frozen=True, kw_only=True)
class Posterior(Decoding):
    """``nfe`` steps on ``schedule(m, nfe, device)`` -> (nfe + 1 times, kappas): step k draws
    x_s from the Psi-posterior with kappas[k] (kappa 1 at the last step, alpha_s = 1);
    ``greedy_tail``: argmax p_theta at the last step instead."""

    schedule: Callable[..., tuple[Tensor, list[float]]]
    greedy_tail: bool = False


#: the Psi-samplers' options (s-sahoo/duo ``sampling.psi``), sampling-only
PSI_OPTIONS = (
    "psi_time_profile",
    "psi_high_mode",
    "psi_middle_mode",
    "psi_low_mode",
    "psi_high_frac",
    "psi_middle_frac",
)
_DRAW = (
    "a float32 logsumexp over (B, L, V) (x_hat at x_t), two (B, L) uniforms; at the R positions "
    "that draw x_hat, a float64 inverse-CDF draw over (R, V)"
)

#: Duo's decodings, the first the default
DECODINGS: dict[str, Decoding] = {
    "ancestral": Posterior(
        schedule=linear_schedule,
        summary="every non-prompt position draws x_s from the uniform-state posterior "
        "q(x_s | x_t, x_hat = p_theta) (uniform token / keep x_t / draw of p_theta by one "
        "threshold); t_k = linspace(1, 1e-5, nfe + 1), last step alpha_s = 1",
        reference="Duo (Sahoo et al. 2025) eq. 5; s-flm `samplers.py::sample_uniform_posterior`, "
        "s-sahoo/duo `trainer_base.py::generate_samples`",
        cost=_DRAW,
        options=("top_k", "top_p"),
    ),
    "greedy": Posterior(
        schedule=linear_schedule,
        greedy_tail=True,
        summary="`ancestral`, the last step takes argmax p_theta (greedy tail)",
        reference="Duo sec. 4.2; s-sahoo/duo `generate_samples` (`noise_removal=greedy`)",
        cost="as `ancestral`, an argmax at the last step",
        options=("top_k", "top_p"),
    ),
    "psi": Posterior(
        schedule=psi_schedule,
        summary="x_s from kappa q(x_s | x_t, x_hat) + (1 - kappa) [alpha_s q(x_0 | x_t, x_hat) + "
        "(1 - alpha_s)/V] on the `psi_*` time profile and kappa schedule (defaults: `ancestral`)",
        reference="Psi-samplers (Deschenaux, Gulcehre, Sahoo 2026); s-sahoo/duo "
        "`trainer_base.py::_psi_update`, `_get_sampling_time_profile`, `_get_kappas`",
        cost="as `ancestral`, O(B L) for the kappa-mixed masses",
        options=(*PSI_OPTIONS, "top_k", "top_p"),
    ),
    "psi-greedy": Posterior(
        schedule=psi_schedule,
        greedy_tail=True,
        summary="`psi`, the last step takes argmax p_theta",
        reference="as `psi`, `sampling.noise_removal=greedy`",
        cost="as `psi`, an argmax at the last step",
        options=(*PSI_OPTIONS, "top_k", "top_p"),
    ),
}
