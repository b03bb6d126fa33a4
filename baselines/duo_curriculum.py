"""Duo's Gaussian curriculum (Sahoo et al. 2025, "The Diffusion Duality", sec. 4; s-sahoo/duo
`algo.py::DUO`), the variant of :class:`baselines.duo.Duo` switched on by ``curriculum_end > 0``:
the diffusion-duality table alpha = T(gamma) for the vocabulary in use (:func:`duality_table`,
not the Duo repo's tokenizer-specific pickle), the gamma range derived for that vocabulary
(:func:`curriculum_gamma_range`, :func:`gamma_range`) and the curriculum's training loss
(:func:`curriculum_loss`).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bench.config import ConfigError
from bench.method import Batch, LossOutput, token_mean
from bench.numerics import gaussian_argmax_probability, interp


def duality_alpha(gamma: np.ndarray, vocab_size: int, n_gh: int = 100) -> np.ndarray:
    """alpha = T(gamma) = (V I(gamma) - 1) / (V - 1) (Duo eq. 10), where
    I(gamma) = P[argmax w = x_0] for w = sqrt(sigmoid(-gamma)) onehot(x_0)
    + sqrt(sigmoid(gamma)) eps
    = E_z[Phi(z + mu)^(V-1)], mu = sqrt(sigmoid(-gamma) / sigmoid(gamma)) = exp(-gamma / 2),
    by Gauss-Hermite quadrature (the Duo repo ships this as a per-tokenizer pickle)."""
    mu = np.exp(-np.asarray(gamma, dtype=np.float64) / 2)
    I = gaussian_argmax_probability(mu, vocab_size, n_gh)
    return (vocab_size * I - 1) / (vocab_size - 1)


@functools.lru_cache(maxsize=8)
def curriculum_gamma_range(
    vocab_size: int, alpha_min: float, alpha_max: float
) -> tuple[float, float]:
    """(gamma_min, gamma_max) with T(gamma_min) = alpha_max and T(gamma_max) = alpha_min.

    Duo's gamma range [-3.5, -1.75] was chosen for GPT-2 (V = 50257), where it spans
    alpha in [0.038, 0.928]; for a small vocabulary the same gammas are almost noise-free
    (V = 10: alpha in [0.76, 0.9998]), so by default the range is re-derived for the
    vocabulary in use from that alpha span."""
    from scipy.optimize import brentq

    def solve(a: float) -> float:
        return brentq(
            lambda g: float(duality_alpha(np.array(g), vocab_size)) - a, -40.0, 40.0, xtol=1e-10
        )

    return solve(alpha_max), solve(alpha_min)


@functools.lru_cache(maxsize=8)
def duality_table(
    vocab_size: int, gamma_min: float, gamma_max: float, n: int = 1000, n_gh: int = 100
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gamma, alpha, dalpha/dgamma) on ``n`` points of [gamma_min, gamma_max], read by linear
    interpolation; dalpha/dgamma by central finite differences on the grid. (The Duo repo reads
    a 10^5-point table on [-5, -1] (`integral/gpt2.pkl`) by nearest neighbour, `algo.py::Integral`,
    and takes a forward difference with step 1/T = 1e-3, `DUO._gamma_to_alpha_dalpha_cached`.)"""
    gamma = np.linspace(gamma_min, gamma_max, n)
    alpha = np.clip(duality_alpha(gamma, vocab_size, n_gh), 1e-12, 1.0)
    dalpha = np.gradient(alpha, gamma)
    return gamma, alpha, dalpha


def gamma_range(o, vocab_size: int) -> tuple[float, float]:
    """(gamma_min, gamma_max) of options ``o`` for a vocabulary of ``vocab_size``: the explicit
    ones, else :func:`curriculum_gamma_range` of the alpha span; an unreachable span is a
    ConfigError naming the options."""
    if o.gamma_min is not None:
        return o.gamma_min, o.gamma_max
    try:
        return curriculum_gamma_range(vocab_size, o.curriculum_alpha_min, o.curriculum_alpha_max)
    except ValueError as e:  # brentq: an alpha that no gamma in [-40, 40] reaches
        raise ConfigError(
            f"options.curriculum_alpha_min / curriculum_alpha_max: [{o.curriculum_alpha_min}, "
            f"{o.curriculum_alpha_max}] is not reachable by T(gamma) for |V| = "
            f"{vocab_size} ({e}); move them inward, or set gamma_min and gamma_max"
        ) from None


def curriculum_loss(m, backbone, batch: Batch, t: Tensor) -> LossOutput:
    """Duo Gaussian curriculum (duo `algo.py::DUO.nll` with `_process_model_input`):
    gamma = gamma_min + t (gamma_max - gamma_min); w = sqrt(sigmoid(-gamma)) onehot(x_0)
    + sqrt(sigmoid(gamma)) eps; network input softmax(w / tau) @ E (tau = tau_start until
    curriculum_start, then log-linear to tau_end at curriculum_end:
    `DUO._compute_gumbel_tau_inverse`);
    NELBO (never low_var) at x_t = argmax w with alpha_t = T(gamma) and
    alpha'_t = T'(gamma) (gamma_max - gamma_min) (`DUO._gamma_to_alpha_dalpha_cached`)."""
    o = m.opts
    dev = batch.x.device
    g_min, g_max = m.gamma_range()
    g_tab, a_tab, da_tab = (
        torch.as_tensor(a, device=dev, dtype=torch.float32)
        for a in duality_table(m.vocab_size, g_min, g_max)
    )
    gamma = g_min + t.float() * (g_max - g_min)  # (B,)
    alpha_t = interp(gamma, g_tab, a_tab)
    dalpha_t = interp(gamma, g_tab, da_tab) * (g_max - g_min)
    onehot = F.one_hot(batch.x, m.vocab_size).float()
    w = torch.sigmoid(-gamma).sqrt()[:, None, None] * onehot + torch.sigmoid(gamma).sqrt()[
        :, None, None
    ] * torch.randn_like(onehot)
    w = torch.where(
        batch.clean_mask[..., None], onehot * 1e3, w
    )  # clean positions: a sharp one-hot
    x_t = w.argmax(-1)
    span = max(o.curriculum_end - o.curriculum_start, 1)
    frac = min(max(m.train_step - o.curriculum_start, 0) / span, 1.0)
    tau = float(np.exp((1 - frac) * np.log(o.tau_start) + frac * np.log(o.tau_end)))
    emb = backbone.embed.weight
    h = torch.softmax(w / tau, -1) @ emb.float()
    logits = backbone(h.to(emb.dtype), m.sigma(alpha_t)).float()
    per_token = m.nelbo(logits, x_t, batch.x, alpha_t[:, None], dalpha_t[:, None])
    return token_mean(per_token * ~batch.clean_mask, batch.loss_mask)
