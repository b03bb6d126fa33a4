"""CANDI's decodings (docs/methods/candi.md): one object per name in :data:`DECODINGS`, which
:class:`CANDI <baselines.candi.CANDI>` looks its decoding up in. Each draws its prior and makes
one step per backbone call on the :class:`SamplerRun` of the request (t_k = linspace(0.999,
1e-5, nfe + 1), sigma_k = sigma(t_k)); the formulas and their sources: baselines/candi.py's
docstring, ``Samplers``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.decoding import Decoding
from bench.method import categorical_draw


@dataclass
class SamplerRun:
    """What every step of one sampler run reads: the backbone, the prompt, the embeddings, the
    (t_k, sigma_k) grid and the draw settings."""

    backbone: object
    prompt: Tensor
    prompt_mask: Tensor
    e_hat: Tensor
    m_hat: Tensor
    #: Ehat in the sampler's dtype
    e_hat_s: Tensor
    ts: Tensor
    sigmas: Tensor
    dt: float
    sigma_prior: Tensor
    temperature: float
    float64: bool
    dtype: torch.dtype
    generator: torch.Generator | None
    #: one-hot rows of the prompt in the sampler's dtype (the dense samplers' clean state)
    onehot_prompt: Tensor


# --------------------------------------------------------------------------- the decodings


@dataclass(frozen=True, kw_only=True)
class CachedDecoding(Decoding):
    """``cached`` (`generate_samples_cache`): the state is token ids, the clean mask and an
    (n, L, d) embedding cache; each step draws one sample x_hat, moves the cache towards
    Ehat[x_hat] and unmasks log-linearly."""

    pure_gaussian: bool = False

    def prior(self, m, r: SamplerRun, clean: Tensor) -> Tensor:
        """e_0 = z @ Ehat (:meth:`baselines.candi.CANDI._cached_prior`)."""
        return m._cached_prior(r)

    def step(self, m, r: SamplerRun, k: int, x: Tensor, clean: Tensor, cache: Tensor):
        """One sample x_hat, a continuous step of the embedding cache towards Ehat[x_hat],
        log-linear unmasking. Returns (x, clean, cache, tokens)."""
        t, s_hi, s_lo = r.ts[k], r.sigmas[k], r.sigmas[k + 1]
        n, L = x.shape
        sigma_c = s_lo.expand(n)  # the network sees the *next* level (`_continuous_step*`)
        h = m.net_input(r.e_hat, r.m_hat, x, cache, clean, sigma_c)
        raw = m.call(r.backbone, h, m.time_input(t).expand(n))
        # one-sample estimate x_hat ~ p_theta where not clean (a clean token keeps its id, so
        # only those positions draw: the same law; float64 inverse CDF, no (B, L, V) table)
        rows = raw[~clean].float()
        rows = rows / r.temperature if r.temperature != 1.0 else rows
        x_hat = x.clone()
        x_hat[~clean] = categorical_draw(m.filtered(rows), r.generator, r.float64)
        # `_continuous_step_cache`:
        #   e <- e - dt_sigma * (e - Ehat[x_hat]) / sigma_{k+1}^2 * step_size
        cache = cache - m.opts.step_size * (s_hi - s_lo) * (cache - r.e_hat_s[x_hat]) / s_lo**2
        # `_discrete_step_optimized`: unmask with prob (t - s)/t, s = t - dt (log-linear)
        u = torch.rand(n, L, generator=r.generator, device=x.device, dtype=torch.float64)
        clean = clean | (u < r.dt / t)
        return x_hat, clean, cache, x_hat


@dataclass(frozen=True, kw_only=True)
class ContinuousDecoding(Decoding):
    """pure Gaussian (`generate_samples_pure_cont`): x in R^V, the continuous step with the
    expectation p_theta only; nothing is revealed."""

    pure_gaussian: bool = False

    def prior(self, m, r: SamplerRun, clean: Tensor) -> Tensor:
        """z in R^V: N(0, sigma_prior^2 I_V), one-hot at the prompt."""
        n, L = r.prompt.shape
        z = r.sigma_prior * torch.randn(
            n, L, m.vocab_size, generator=r.generator, device=r.prompt.device, dtype=r.dtype
        )
        return torch.where(clean[..., None], r.onehot_prompt, z)

    @staticmethod
    def expected_step(m, r: SamplerRun, k: int, x: Tensor, clean: Tensor, z: Tensor):
        """The continuous step with the expectation p_theta on x in R^V (`_continuous_step`):
        x <- x - (sigma_k - sigma_{k+1}) (x - E[x_0]) / sigma_{k+1}^2. Returns (p, z)."""
        s_hi, s_lo = r.sigmas[k], r.sigmas[k + 1]
        n = x.shape[0]
        h = m.net_input(r.e_hat, r.m_hat, x, z @ r.e_hat_s, clean, s_lo.expand(n))
        p = m._log_probs(r.backbone, h, r.ts[k], n, r.temperature, r.float64).exp()
        p = torch.where(
            clean[..., None], F.one_hot(x, m.vocab_size).to(p.dtype), p
        )  # forced one-hot
        return p, z - (s_hi - s_lo) * (z - p.to(r.dtype)) / s_lo**2

    @staticmethod
    def read_dense(r: SamplerRun, x: Tensor, clean: Tensor, z: Tensor):
        """Restore the prompt's one-hot rows; tokens = argmax z; clean positions keep their id."""
        z = torch.where(r.prompt_mask[..., None], r.onehot_prompt, z)
        tokens = z.argmax(-1)
        return torch.where(clean, x, tokens), clean, z, tokens

    def step(self, m, r: SamplerRun, k: int, x: Tensor, clean: Tensor, z: Tensor):
        """The expectation step only. Returns (x, clean, z, tokens)."""
        _, z = self.expected_step(m, r, k, x, clean, z)
        return self.read_dense(r, x, clean, z)


@dataclass(frozen=True, kw_only=True)
class NoCacheDecoding(ContinuousDecoding):
    """``nocache`` (`generate_samples_nocache`): the expectation step, then the categorical
    unmasking step over [p (t - s), s]."""

    def step(self, m, r: SamplerRun, k: int, x: Tensor, clean: Tensor, z: Tensor):
        """Returns (x, clean, z, tokens)."""
        p, z = self.expected_step(m, r, k, x, clean, z)
        if m.filtering:  # the draw's p_theta, not the expectation
            p = torch.softmax(m.filtered(torch.log(p)), dim=-1)
        z, clean, x = self.discrete_step(m, z, p, r.ts[k], r.dt, clean, r.generator, r.float64)
        return self.read_dense(r, x, clean, z)

    @staticmethod
    def discrete_step(
        m,
        z: Tensor,
        p: Tensor,
        t: Tensor,
        dt: float,
        clean: Tensor,
        generator: torch.Generator | None,
        float64: bool,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """`_discrete_step`: draw from [p (t - s), s] over V + 1 classes (last = stay masked);
        a non-mask draw reveals the position with that token; clean positions keep theirs."""
        s = (t - dt).clamp_min(0.0)  # s < 0 on the last step when nfe < 100: unmask everything
        # the class of [p (t - s), s] (p sums to 1): [MASK] w.p. s / t, else a token of p; so
        # the hit is drawn first and the token only where a position not clean is hit (the
        # same law; a clean position keeps its token whatever it draws)
        u = torch.rand(p.shape[:-1], generator=generator, device=p.device, dtype=torch.float64)
        hit = u < float((t - s) / t)
        old = z.argmax(-1)
        draw = old.clone()
        where = hit & ~clean
        draw[where] = categorical_draw(torch.log(p[where]), generator, float64)
        tokens = torch.where(clean, old, draw)
        new_clean = clean | hit
        z = torch.where(new_clean[..., None], F.one_hot(tokens, m.vocab_size).to(z.dtype), z)
        return z, new_clean, tokens


#: the options of the hybrid samplers' sigma grid (:meth:`CANDI.sampler_grid`)
_GRID = ("use_percentile_scheduling", "sigma_min", "sigma_max")
#: CANDI's decodings: the hybrid model's (the first the default), then the pure-Gaussian one's
DECODINGS: dict[str, Decoding] = {
    "cached": CachedDecoding(
        summary="one categorical sample x_hat ~ p_theta (float64 inverse CDF); the embedding "
        "cache e <- e - step_size (sigma_k - sigma_{k+1}) (e - Ehat[x_hat]) / sigma_{k+1}^2; "
        "every non-clean token set to x_hat, clean w.p. (t - s)/t, s = t - dt (log-linear "
        "unmasking), clean tokens frozen; output: the tokens after nfe steps",
        reference="CANDI (Pynadath et al. 2025), the paper's default; candi-diffusion "
        "`algo.py::generate_samples_cache`, `_continuous_step_cache`, `_discrete_step_optimized`",
        cost="a float64 inverse-CDF draw over the (R, V) positions not clean, a (B, L, d) cache "
        "update",
        options=("step_size", *_GRID, "top_k", "top_p"),
    ),
    "nocache": NoCacheDecoding(
        summary="x in R^V: the continuous step with the expectation p_theta, then a categorical "
        "draw over [p (t - s), s] (a non-mask draw reveals the position); output: argmax of x",
        reference="candi-diffusion `algo.py::generate_samples_nocache`, `_continuous_step`, "
        "`_discrete_step`",
        cost="(B, L, V) softmax, x @ Ehat, the continuous step; a (B, L) uniform and a draw "
        "over (R, V) at the R positions it hits",
        options=(*_GRID, "top_k", "top_p"),
    ),
    "continuous": ContinuousDecoding(
        pure_gaussian=True,
        summary="pure Gaussian only: the continuous step on x in R^V with the expectation "
        "p_theta, nothing revealed; output: argmax of x (no call)",
        reference="CANDI pure Gaussian; candi-diffusion `algo.py::generate_samples_pure_cont`",
        cost="(B, L, V) softmax, x @ Ehat and the continuous step",
        options=(),
    ),
}
