"""MDLM: masked (absorbing-state) discrete diffusion (Sahoo et al. 2024).

- Forward: q(x_t | x_0) = alpha_t onehot(x_0) + (1 - alpha_t) onehot([MASK]) per position
  (MDLM eq. 2; reference `trainer_base.py::AbsorbingState.q_xt`); the mask id is the
  task vocabulary size (one extra input/output class).
- Log-linear schedule alpha_t = 1 - (1 - eps) t, alpha'_t = -(1 - eps), eps = 1e-3
  (`noise_schedules.py::LogLinear`).
- SUBS parameterisation (MDLM sec. 3.2.3): zero-masking (the [MASK] logit is -inf) and
  carry-over unmasking (unmasked positions keep their token, loss 0 there).
- Continuous-time NELBO (MDLM eq. 10): L = alpha'_t / (1 - alpha_t) log p_theta(x_0 | x_t)
  on masked positions; ``loss_type="low_var"`` uses the plain masked CE (weight 1).
- Not time-conditioned by default (MDLM finding: the masked model does not need t).

Likelihood (``nll_bound``, ``bound_kind`` upper bound): that NELBO (always the ``elbo``
weight) summed over the counted positions, one Monte-Carlo draw of (t, x_t) per sequence and
row, the reference evaluation's antithetic t on [1e-3, 1], float64.

Sampler: ancestral over t_k = linspace(1, 1e-5, nfe + 1) with exactly ``nfe`` backbone
calls; each masked token is revealed with probability (alpha_s - alpha_t) / (1 - alpha_t)
and drawn from p_theta (float64 Gumbel-max); revealed tokens are frozen. The last step has
alpha_s = 1: ``ancestral`` samples every remaining mask, ``greedy`` takes the argmax.
Equal-NFE accounting: no extra noise-removal pass and no caching of unchanged steps (the
original MDLM repo does both; with caching its NFE is <= nfe + 1).
Departures: the time grid and alpha_t, alpha_s are float64 (reference: model dtype), so the
reveal probabilities are exact; ``loss_type="low_var"`` applies whenever ``loss`` runs (the
reference switches back to the NELBO outside training; here ``loss`` is only the training
objective).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.backbones.dit import build_dit
from bench.config import BackboneConfig
from bench.method import (
    BOUND_ELBO,
    CATEGORICAL_SAMPLING,
    LOSS_CE,
    LOSS_NELBO,
    Batch,
    CategoricalSampling,
    LossOutput,
    Method,
    bound_times,
    gold_log_probs,
    gumbel_argmax,
    token_mean,
)
from bench.numerics import log_linear_alpha, log_linear_dalpha, sigma_of_alpha
from bench.options import option
from bench.reference_format import ReferenceFamily, ReferenceFormat

NEG_INF = -1e6


@dataclass
class MDLMOptions(CategoricalSampling):
    eps: float = option(1e-3, gt=0.0, lt=1.0, help="log-linear schedule floor: alpha_1 = eps")
    loss_type: str = option(
        "elbo", choices=("elbo", "low_var"), help="elbo = 1/t-weighted NELBO; low_var = masked CE"
    )
    time_conditioning: bool = option(False, help="feed sigma = -log alpha_t to the network")


class MDLMReference(ReferenceFormat):
    """MDLM files (s-flm ``algo.MDLM`` on the ``DIT``): the mask class after the vocabulary, in
    the input table and the head, as here; ``time_conditioning`` and the schedule floor
    ``noise.eps`` from the config."""

    families = (
        ReferenceFamily(
            "mdlm",
            model_type="dit",
            algo="mdlm",
            algo_names=("mdlm",),
            requires=("backbone.vocab_embed.embedding", "backbone.sigma_map.mlp.0.weight"),
            mask_rows=1,
            kept_mask_rows=(1, 1),
            vocab_in_hparams=True,
        ),
    )

    def options_from(self, ref, family):
        tc = bool(ref.num("algo.time_conditioning", False))
        return {"time_conditioning": tc, "eps": float(ref.num("noise.eps", 1e-3))}, {}, []

    def export_config(self, family, method) -> dict:
        o = method.opts
        return {
            "algo": {
                "diffusion_type": "absorbing",
                "parameterization": "subs",
                "time_conditioning": o.time_conditioning,
                "post_process_mode": "log_probs",
                "loss_type": o.loss_type,
            },
            "noise": {"eps": o.eps},
        }


class MDLM(Method):
    name = "mdlm"
    Options = MDLMOptions
    decodings = ("ancestral", "greedy")
    #: the draws' filters (top-p / top-k): a filter reuses the trained model
    sampling_options = CATEGORICAL_SAMPLING
    loss_kind = LOSS_NELBO
    #: the continuous-time NELBO, by Monte Carlo over t (:meth:`nll_bound`; whatever loss_type)
    bound_kind = BOUND_ELBO
    #: reference checkpoint format (bench.reference_format; docs/checkpoints.md)
    reference = MDLMReference()

    @classmethod
    def loss_kind_for(cls, options) -> str:
        """The NELBO; ``low_var``: the masked CE without its 1/t weight (no bound)."""
        return LOSS_CE if options.loss_type == "low_var" else LOSS_NELBO

    def __init__(self, options, vocab_size: int, seq_len: int):
        super().__init__(options, vocab_size, seq_len)
        self.mask_id = vocab_size

    def build_backbone(self, cfg: BackboneConfig):
        return build_dit(cfg, self.vocab_size + 1, self.vocab_size + 1)

    # -- schedule -----------------------------------------------------------------
    def alpha(self, t: Tensor) -> Tensor:
        """Log-linear alpha_t = 1 - (1 - eps) t (`noise_schedules.py::LogLinear`)."""
        return log_linear_alpha(t, self.opts.eps)

    def sigma(self, alpha_t: Tensor) -> Tensor:
        """Network time input sigma = -log alpha_t (`Diffusion._sigma_from_alphat`)."""
        return sigma_of_alpha(alpha_t, self.opts.time_conditioning)

    def log_probs(
        self, backbone, x_t: Tensor, alpha_t: Tensor, temperature: float = 1.0, count: bool = False
    ) -> Tensor:
        """SUBS log p_theta(x_0 | x_t): (B, L, V+1); mask column -inf, carry-over on unmasked."""
        fn = self.call if count else (lambda b, *a: b(*a))
        # temperature on the raw logits, before SUBS masking (reference `TrainerBase.forward`)
        logits = fn(backbone, x_t, self.sigma(alpha_t)).float() / temperature
        logits[..., self.mask_id] = NEG_INF  # zero masking
        logp = torch.log_softmax(logits, dim=-1)
        unmasked = x_t != self.mask_id  # carry-over unmasking
        carry = torch.full_like(logp, NEG_INF).scatter_(-1, x_t[..., None], 0.0)
        return torch.where(unmasked[..., None], carry, logp)

    # -- training -----------------------------------------------------------------
    def loss(self, backbone, batch: Batch, t: Tensor | None) -> LossOutput:
        alpha_t = self.alpha(t)  # (B,)
        u = torch.rand(batch.x.shape, device=batch.x.device)
        masked = (u < (1 - alpha_t)[:, None]) & ~batch.clean_mask
        x_t = torch.where(masked, torch.full_like(batch.x, self.mask_id), batch.x)
        # = log_probs(...).gather(x_0) without its (B, L, V) carry-over buffers: carry-over gives
        # log p = 0 at unmasked positions (x_t = x_0), which ``masked`` zeroes below anyway, and
        # at masked ones -log p(x_0) is the cross-entropy of the zero-masked logits (fused kernel)
        logits = backbone(x_t, self.sigma(alpha_t)).float()
        # zero masking outside autograd: the masked column is a constant of the loss, and its
        # softmax weight exp(NEG_INF - lse) is exactly 0, so its gradient is the 0 that
        # autograd's set-item backward (a (B, L, V) clone + fill) would write
        with torch.no_grad():
            logits[..., self.mask_id] = NEG_INF
        logp_x0 = -F.cross_entropy(
            logits.flatten(0, 1), batch.x.flatten(), reduction="none"
        ).view_as(batch.x)
        if self.opts.loss_type == "elbo":
            # MDLM eq. 10: alpha'_t / (1 - alpha_t) * log p, alpha'_t = -(1 - eps)
            weight = -log_linear_dalpha(self.opts.eps) / (1 - alpha_t)
        else:
            weight = torch.ones_like(alpha_t)
        per_token = -logp_x0 * weight[:, None] * masked
        return token_mean(per_token, batch.loss_mask)

    # -- likelihood ---------------------------------------------------------------
    @torch.no_grad()
    def nll_bound(self, backbone, batch: Batch, *, n_draws: int, generator) -> Tensor:
        """The continuous-time NELBO (MDLM eq. 10) of each sequence's counted positions
        (:meth:`bound_positions`; every other position stays clean), one Monte-Carlo draw per
        row: per draw one t per sequence (:func:`bench.method.bound_times`: the reference's
        antithetic draws on [1e-3, 1]), then x_t masks each counted position with probability
        1 - alpha_t, and the row is sum_i alpha'_t / (1 - alpha_t) log p_theta(x_0^i | x_t) over
        the masked counted positions, in float64. The full NELBO whatever ``loss_type`` (the
        reference evaluates ``elbo``: ``low_var = train_mode and ...``). As in the reference
        the prior term (alpha_1 = eps > 0) is not added and t is drawn on [1e-3, 1].
        Random draws, in order, per row: ``bound_times`` (B uniforms, a permutation), then a
        (B, L) float64 uniform for the masks, all on ``generator``'s device."""
        x0 = batch.x
        dev, gdev = x0.device, generator.device
        counted = self.bound_positions(batch)
        out = torch.empty(n_draws, x0.shape[0], dtype=torch.float64, device=dev)
        for k in range(n_draws):
            # antithetic t: mdlm diffusion.py:800-808 _sample_t (sampling_eps 1e-3)
            t = bound_times(x0.shape[0], generator=generator, device=dev)
            alpha_t = self.alpha(t)  # float64
            u = torch.rand(x0.shape, generator=generator, device=gdev, dtype=torch.float64)
            # absorbing forward q(x_t | x_0), MDLM eq. 2; s-flm trainer_base.py:596-617 q_xt
            # (only the valid tokens are noised)
            masked = (u.to(dev) < (1 - alpha_t)[:, None]) & counted
            x_t = torch.where(masked, torch.full_like(x0, self.mask_id), x0)
            logits = backbone(x_t, self.sigma(alpha_t).float())
            logits[..., self.mask_id] = NEG_INF  # SUBS zero masking (carry-over: masked only)
            logp = gold_log_probs(logits, x0)
            # MDLM eq. 10: alpha'_t / (1 - alpha_t) log p_theta(x_0 | x_t); s-flm algo.py:114-126
            # MDLM.nll_per_token, mdlm diffusion.py:884-894 (dsigma / expm1(sigma) = 1 / t)
            weight = -log_linear_dalpha(self.opts.eps) / (1 - alpha_t)
            out[k] = torch.where(masked, -logp * weight[:, None], 0.0).sum(-1)
        return out

    # -- sampling -----------------------------------------------------------------
    @torch.no_grad()
    def sample(
        self,
        backbone,
        prompt,
        prompt_mask,
        *,
        nfe,
        temperature=1.0,
        decoding="default",
        float64=True,
        generator=None,
    ):
        decoding = self.resolve_decoding(decoding)
        n, _ = prompt.shape
        dev = prompt.device
        x = torch.where(prompt_mask, prompt, torch.full_like(prompt, self.mask_id))
        ts = torch.linspace(1.0, 1e-5, nfe + 1, device=dev, dtype=torch.float64)
        for k in range(nfe):
            last = k == nfe - 1
            alpha_t = self.alpha(ts[k]).expand(n)
            alpha_s = torch.ones_like(alpha_t) if last else self.alpha(ts[k + 1]).expand(n)
            logp = self.log_probs(backbone, x, alpha_t.float(), temperature, count=True)
            is_mask = x == self.mask_id
            if last and decoding == "greedy":
                draw = logp.argmax(-1)
            else:
                # top-k / top-p on p_theta (duo trainer_base.py:594-597, there without
                # renormalising; here the draw is from p_theta renormalised over the kept classes)
                draw = gumbel_argmax(self.filtered(logp), generator, float64)
            # absorbing posterior q(z_s | z_t = m, x): reveal w.p.
            # (alpha_s - alpha_t) / (1 - alpha_t)
            p_reveal = ((alpha_s - alpha_t) / (1 - alpha_t))[:, None]
            u = torch.rand(x.shape, generator=generator, device=dev, dtype=torch.float64)
            reveal = is_mask & (u < p_reveal)
            x = torch.where(reveal, draw, x)
        x = torch.where(x == self.mask_id, torch.zeros_like(x), x)  # only possible if nfe misuse
        return torch.where(prompt_mask, prompt, x)
