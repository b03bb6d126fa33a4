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

Samplers (``decodings``; docs/methods/mdlm.md lists each with its source, cost and options), all
with exactly ``nfe`` backbone calls except ``cached`` (at most ``nfe``):
- ``ancestral`` (default) over t_k = linspace(1, 1e-5, nfe + 1): each masked token is revealed
  with probability (alpha_s - alpha_t) / (1 - alpha_t) and drawn from p_theta (float64
  Gumbel-max); revealed tokens are frozen. The last step has alpha_s = 1: ``ancestral`` samples
  every remaining mask, ``greedy`` takes the argmax. No extra noise-removal pass.
- ``cached``: ``ancestral`` with MDLM's cache (kuleshov-group/mdlm ``diffusion.py::_sample``,
  ``ddpm_cache``): after a step that changed no token of the batch the next step reuses p_theta
  instead of calling the network (not when time-conditioned). Same samples as ``ancestral``.
- ``confidence`` / ``margin`` / ``entropy``: LLaDA's low-confidence remasking (ML-GSAI/LLaDA
  ``generate.py``): every step draws all masked positions, then keeps the k most confident, k
  the even split of the masked count over the steps (``get_num_transfer_tokens``); confidence =
  p(drawn token) (LLaDA), top-1 minus top-2 probability or the negative entropy (Dream
  ``generation_utils.py::sample_tokens``, ``topk_margin`` / ``entropy``).
- ``block_length`` (an option; 0 = off): semi-autoregressive decoding (LLaDA's ``block_length``):
  the generated positions, in order, split into blocks decoded left to right, the calls split
  over the blocks as evenly as possible; for ``ancestral``, ``greedy``, ``cached`` and the
  confidence orders.
- ``remdm-cap`` / ``remdm-rescale`` / ``remdm-conf`` / ``remdm-loop``: ReMDM remasking (Wang et
  al. 2025; kuleshov-group/remdm ``diffusion.py::_ddpm_caching_update``): a decoded token is
  remasked with probability sigma_t, a masked one follows the ReMDM posterior.
Departures: the time grid and alpha_t, alpha_s are float64 (reference: model dtype), so the
reveal probabilities are exact; ``loss_type="low_var"`` applies whenever ``loss`` runs (the
reference switches back to the NELBO outside training; here ``loss`` is only the training
objective).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.backbones.dit import build_dit
from bench.config import BackboneConfig, ConfigError
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
    # -- sampling-only options (MDLM.sampling_options: they reuse the trained model) --------
    block_length: int = option(
        0,
        ge=0,
        omit_default=True,
        help="semi-autoregressive decoding (LLaDA generate.py block_length): the generated "
        "positions, in order, split into blocks of this many, decoded left to right with the "
        "NFE split over the blocks as evenly as possible (nfe >= blocks); ancestral, greedy, "
        "cached and the confidence orders; 0 = off (one block: the whole canvas)",
    )
    remdm_eta: float | None = option(
        None,
        ge=0.0,
        le=1.0,
        omit_default=True,
        help="ReMDM remasking scale eta (remdm sampling.eta); unset: the reference script's "
        "value for the decoding (remdm-cap 0.008, remdm-rescale 0.015, remdm-loop 0.02)",
    )
    remdm_t_on: float = option(
        0.55,
        gt=0.0,
        lt=1.0,
        omit_default=True,
        help="remdm-loop: the loop phase starts at t = t_on (scripts/remdm-loop.sh)",
    )
    remdm_t_off: float = option(
        0.05,
        ge=0.0,
        lt=1.0,
        omit_default=True,
        help="remdm-loop: the loop phase ends at t = t_off (scripts/remdm-loop.sh)",
    )
    remdm_alpha_on: float = option(
        0.9,
        gt=0.0,
        lt=1.0,
        omit_default=True,
        help="remdm-loop: alpha held during the loop phase (scripts/remdm-loop.sh)",
    )

    def validate(self) -> None:
        """remdm-loop's phases in order: 1 > t_on >= t_off >= 0."""
        if self.remdm_t_off > self.remdm_t_on:
            raise ConfigError(
                f"remdm_t_off: {self.remdm_t_off} is after remdm_t_on = {self.remdm_t_on} "
                "(remdm-loop: 1 > t_on >= t_off >= 0)"
            )


#: ReMDM's eta per sampler when ``remdm_eta`` is unset: kuleshov-group/remdm scripts/remdm-cap.sh,
#: remdm-rescale.sh, remdm-loop.sh (remdm-conf takes none: its sigma comes from confidences)
REMDM_ETA = {"remdm-cap": 0.008, "remdm-rescale": 0.015, "remdm-loop": 0.02}
#: the ReMDM decodings (kuleshov-group/remdm ``sampling.sampler``)
REMDM = ("remdm-cap", "remdm-rescale", "remdm-conf", "remdm-loop")
#: the confidence-ordered decodings: LLaDA low_confidence, Dream topk_margin and entropy
CONFIDENCE_ORDERS = ("confidence", "margin", "entropy")


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
    decodings = ("ancestral", "greedy", "cached", *CONFIDENCE_ORDERS, *REMDM)
    #: ``cached`` skips the calls of steps that changed nothing: at most ``nfe_for`` calls
    call_skipping = ("cached",)
    #: the draws' filters (top-p / top-k), the blocks and ReMDM's schedule: they reuse the
    #: trained model
    sampling_options = (
        *CATEGORICAL_SAMPLING,
        "block_length",
        "remdm_eta",
        "remdm_t_on",
        "remdm_t_off",
        "remdm_alpha_on",
    )
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

    def validate_plan(self, *, backbone, train, sample) -> None:
        """The backbone (the base class), and no ReMDM decoding with ``block_length`` (the
        sampler's own check, made at plan time instead of at the job's first batch)."""
        super().validate_plan(backbone=backbone, train=train, sample=sample)
        for decoding in sample.decoding:
            self._check_blocks(self.resolve_decoding(decoding))

    def _check_blocks(self, decoding: str) -> None:
        if decoding in REMDM and self.opts.block_length:
            raise ConfigError(
                f"options.block_length: {decoding} decodes the whole canvas (ReMDM defines "
                "no blocks); block_length applies to ancestral, greedy, cached and "
                f"{', '.join(CONFIDENCE_ORDERS)}"
            )

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
        return self.subs_log_probs(fn(backbone, x_t, self.sigma(alpha_t)), x_t, temperature)

    def subs_log_probs(self, raw: Tensor, x_t: Tensor, temperature: float = 1.0) -> Tensor:
        """:meth:`log_probs` from the network's raw output ``raw`` (B, L, V+1)."""
        # temperature on the raw logits, before SUBS masking (reference `TrainerBase.forward`)
        logits = raw.float() / temperature
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
        x = self.sample_canvas(
            backbone,
            prompt,
            prompt_mask,
            nfe=nfe,
            temperature=temperature,
            decoding=decoding,
            float64=float64,
            generator=generator,
        )
        x = torch.where(x == self.mask_id, torch.zeros_like(x), x)  # no decoding leaves a mask
        return torch.where(prompt_mask, prompt, x)

    @torch.no_grad()
    def sample_canvas(
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
    ) -> Tensor:
        """:meth:`sample` before its last guard: the canvas the decoding leaves, which holds no
        [MASK] id (every decoding's last step reveals what is left; the tests check it)."""
        decoding = self.resolve_decoding(decoding)
        x = torch.where(prompt_mask, prompt, torch.full_like(prompt, self.mask_id))
        generated = ~prompt_mask
        self._check_blocks(decoding)
        if decoding in REMDM:
            return self._remdm(
                backbone, x, generated, nfe, decoding, temperature, float64, generator
            )
        steps = self._confidence_steps if decoding in CONFIDENCE_ORDERS else self._ancestral
        for block, calls in self.blocks(generated, nfe):  # checked before the first call
            x = steps(backbone, x, block, calls, decoding, temperature, float64, generator)
        return x

    def min_nfe(self, prompt_mask: Tensor) -> int:
        """One call per block of ``block_length`` (:meth:`blocks`); 1 without blocks."""
        bl = self.opts.block_length
        if not bl:
            return 1
        count = int((~prompt_mask).sum(-1).max()) if prompt_mask.numel() else 0
        return max(1, math.ceil(count / bl))

    def blocks(self, generated: Tensor, nfe: int) -> list[tuple[Tensor, int]]:
        """The semi-autoregressive plan: per block, left to right, (its positions: (n, L) bool,
        its backbone calls). ``block_length`` 0: one block, every generated position, all nfe
        calls. Otherwise each row's generated positions, in order, split into consecutive blocks
        of ``block_length`` (LLaDA generate.py::generate: block b = the b-th ``block_length``
        positions after the prompt), as many blocks as the row with the most generated positions
        needs (a shorter row's last blocks are empty), and the nfe calls split over them as
        evenly as possible, the first ``nfe % blocks`` blocks one call more (LLaDA asserts
        ``steps % num_blocks == 0`` and gives each block ``steps // num_blocks``). A ValueError
        naming ``block_length`` when nfe < the number of blocks (each needs a call)."""
        bl = self.opts.block_length
        if not bl:
            return [(generated, nfe)]
        count = int(generated.sum(-1).max()) if generated.numel() else 0
        n_blocks = max(1, math.ceil(count / bl))
        if nfe < n_blocks:
            raise ValueError(
                f"options.block_length: {bl} splits {count} generated positions into {n_blocks} "
                f"blocks, more than nfe = {nfe} backbone calls (a block takes one call at least): "
                "raise nfe or block_length"
            )
        rank = generated.long().cumsum(-1) - 1  # each generated position's place in its row
        base, extra = divmod(nfe, n_blocks)
        return [(generated & (rank // bl == b), base + (b < extra)) for b in range(n_blocks)]

    def _ancestral(self, backbone, x, block, nfe, decoding, temperature, float64, generator):
        """``nfe`` ancestral steps (``ancestral``, ``greedy``, ``cached``) over the masked
        positions of ``block`` (the others stay as they are) on t_k = linspace(1, 1e-5, nfe + 1),
        the last step to alpha_s = 1."""
        n, dev = x.shape[0], x.device
        ts = torch.linspace(1.0, 1e-5, nfe + 1, device=dev, dtype=torch.float64)
        cached = None
        for k in range(nfe):
            last = k == nfe - 1
            alpha_t = self.alpha(ts[k]).expand(n)
            alpha_s = torch.ones_like(alpha_t) if last else self.alpha(ts[k + 1]).expand(n)
            if cached is None:
                logp = self.log_probs(backbone, x, alpha_t.float(), temperature, count=True)
            else:
                logp = cached
            is_mask = (x == self.mask_id) & block
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
            # MDLM's cache (kuleshov-group/mdlm diffusion.py::_sample, ddpm_cache): p_theta is
            # reused while no token of the batch changed, unless the network sees t
            keep = decoding == "cached" and not self.opts.time_conditioning
            cached = logp if keep and not bool(reveal.any()) else None
        return x

    def _confidence_steps(self, backbone, x, block, nfe, decoding, temperature, float64, generator):
        """``nfe`` steps of confidence-ordered unmasking over the masked positions of ``block``
        (ML-GSAI/LLaDA generate.py::generate, ``remasking='low_confidence'``): each step draws
        every position from p_theta at the temperature (float64 Gumbel-max, LLaDA's
        ``add_gumbel_noise``) and reveals the k masked positions of the block with the highest
        confidence (:meth:`confidence`), k the block's masked count split evenly over the steps.
        The network's time input (used only when time-conditioned) follows t_k = linspace(1,
        1e-5, nfe + 1), the expected masked fraction of the even split."""
        n, L = x.shape
        dev = x.device
        # LLaDA generate.py::get_num_transfer_tokens: base = masked // steps per step, the first
        # (masked % steps) steps one more
        masked = ((x == self.mask_id) & block).sum(-1)
        base, extra = masked // nfe, masked % nfe
        ts = torch.linspace(1.0, 1e-5, nfe + 1, device=dev, dtype=torch.float64)
        places = torch.arange(L, device=dev).expand(n, L)
        for k in range(nfe):
            n_reveal = base + (k < extra)
            alpha_t = self.alpha(ts[k]).expand(n)
            raw = self.call(backbone, x, self.sigma(alpha_t.float()))
            logp = self.subs_log_probs(raw, x, temperature)
            draw = gumbel_argmax(self.filtered(logp), generator, float64)
            conf = self.confidence(decoding, raw, x, logp, draw, temperature)
            # LLaDA: confidence -inf off the masked positions of the current block
            conf = torch.where((x == self.mask_id) & block, conf, -torch.inf)
            # LLaDA: topk(confidence[j], k=num_transfer_tokens[j, i]) per row
            order = conf.argsort(dim=-1, descending=True, stable=True)
            rank = torch.empty_like(order).scatter_(-1, order, places)
            x = torch.where(rank < n_reveal[:, None], draw, x)
        return x

    def confidence(self, decoding, raw, x, logp, draw, temperature=1.0) -> Tensor:
        """(n, L) float64 confidence of each position's draw (higher: revealed first).
        ``confidence``: LLaDA's low_confidence, p_theta(draw) at T = 1 without filters
        (generate.py: ``p = F.softmax(logits)``, ``x0_p = p[x0]``). ``margin`` / ``entropy``:
        Dream ``generation_utils.py::sample_tokens`` (``margin_confidence`` / ``neg_entropy``) on
        the distribution the draw uses (temperature, then top-k / top-p): top-1 minus top-2
        probability, and sum p log(p + 1e-10), the negative entropy."""
        if decoding == "confidence":
            logp1 = logp if temperature == 1.0 else self.subs_log_probs(raw, x, 1.0)
            return logp1.double().gather(-1, draw[..., None]).squeeze(-1).exp()
        probs = torch.softmax(self.filtered(logp).double(), -1)
        if decoding == "margin":
            top = probs.topk(2, dim=-1).values  # Dream: sorted_probs[:, 0] - sorted_probs[:, 1]
            return top[..., 0] - top[..., 1]
        return (probs * torch.log(probs + 1e-10)).sum(-1)  # Dream neg_entropy, epsilon 1e-10

    def remdm_step(self, decoding: str, t: float, s: float, last: bool) -> tuple:
        """(alpha_t, alpha_s, sigma) of one ReMDM step from t to s (floats; kuleshov-group/remdm
        diffusion.py::_ddpm_caching_update). ``remdm-conf``: sigma is sigma_max, scaled per
        position by the confidence weights (:meth:`_remdm`). The last step goes to alpha_s = 1
        with sigma = 0 (cap, rescale and conf give sigma = 0 there by their formula; the loop's
        phases are forced), so every token ends revealed with no noise-removal call."""
        o = self.opts
        eta = REMDM_ETA.get(decoding, 0.0) if o.remdm_eta is None else o.remdm_eta
        if decoding == "remdm-loop":
            a_on, t_on, t_off = o.remdm_alpha_on, o.remdm_t_on, o.remdm_t_off
            if t > t_on:  # remdm-loop, t > t_on: MDLM with alpha = (1 - t) alpha_on / (1 - t_on)
                a_t, a_s, sigma = (1 - t) * a_on / (1 - t_on), (1 - s) * a_on / (1 - t_on), 0.0
                # a coarse grid's step past t_on can give alpha_s > 1: the reference's [MASK]
                # weight is then negative and never drawn, i.e. alpha_s = 1
                a_s = min(a_s, 1.0)
            elif t <= t_off:  # t <= t_off: MDLM with alpha = 1 - t (1 - alpha_on) / t_off
                a_t, a_s, sigma = 1 - t * (1 - a_on) / t_off, 1 - s * (1 - a_on) / t_off, 0.0
            else:  # the loop: ReMDM at alpha_t = alpha_s = alpha_on, sigma = eta
                a_t, a_s, sigma = a_on, a_on, eta
            return (a_t, 1.0, 0.0) if last else (a_t, a_s, sigma)
        a_t = float(self.alpha(torch.tensor(t, dtype=torch.float64)))
        a_s = 1.0 if last else float(self.alpha(torch.tensor(s, dtype=torch.float64)))
        ratio = (1 - a_s) / a_t  # alpha_t >= eps > 0 on this schedule (reference: else eta)
        if decoding == "remdm-cap":  # sigma = min(eta_cap, (1 - alpha_s) / alpha_t)
            return a_t, a_s, min(eta, ratio)
        if decoding == "remdm-rescale":  # sigma = eta_rescale * sigma_max
            return a_t, a_s, eta * min(1.0, ratio)
        return a_t, a_s, min(1.0, ratio)  # remdm-conf: sigma_max = min(1, (1 - a_s) / a_t)

    def _remdm(self, backbone, x, generated, nfe, decoding, temperature, float64, generator):
        """ReMDM sampling (Wang et al. 2025; kuleshov-group/remdm diffusion.py::_sample with
        ``_ddpm_caching_update``) on t_k = linspace(1, 1e-5, nfe + 1), one call per step: each
        position draws z_s from the ReMDM posterior q_sigma over the V tokens and [MASK]; a
        decoded token is kept w.p. 1 - sigma and remasked w.p. sigma, a masked one becomes token
        v w.p. p_theta(v) (alpha_s - (1 - sigma) alpha_t) / (1 - alpha_t) and stays masked
        otherwise. Prompt positions are never remasked (the reference has no prompts)."""
        n, L = x.shape
        dev = x.device
        o = self.opts
        eta, a = REMDM_ETA["remdm-loop"] if o.remdm_eta is None else o.remdm_eta, o.remdm_alpha_on
        if decoding == "remdm-loop" and 1 - a - a * eta < 0:
            # the loop phase's q_xs_2 [MASK] probability (1 - a - a eta) / (1 - a) must be >= 0
            raise ValueError(
                f"options.remdm_eta: {eta} with remdm_alpha_on = {a} makes remdm-loop's [MASK] "
                f"probability (1 - a - a eta) / (1 - a) negative: need eta <= (1 - a) / a = "
                f"{(1 - a) / a:.4g}"
            )
        ts = torch.linspace(1.0, 1e-5, nfe + 1, device=dev, dtype=torch.float64)
        # remdm-conf's state: diffusion.py::_sample confident_score, -inf = none (masked)
        conf = torch.full((n, L), -torch.inf, device=dev, dtype=torch.float64)
        for k in range(nfe):
            last = k == nfe - 1
            a_t, a_s, sigma = self.remdm_step(decoding, float(ts[k]), float(ts[k + 1]), last)
            alpha_in = self.alpha(ts[k]).expand(n).float()  # the network's t: the grid's
            logp = self.log_probs(backbone, x, alpha_in, temperature, count=True)
            p = torch.softmax(self.filtered(logp).double(), -1)  # p_x0 (after top-k / top-p)
            is_mask = x == self.mask_id
            if decoding == "remdm-conf":
                # eta_conf = softmax(confident_score) over the row; 0 on masked positions
                weight = torch.nan_to_num(torch.softmax(conf, -1), nan=0.0)
                sig = torch.where(is_mask, 0.0, weight) * sigma
            else:
                sig = torch.full((n, L), sigma, device=dev, dtype=torch.float64)
            sig = torch.where(generated, sig, 0.0)[..., None]  # the prompt stays
            # q_xs (decoded): p_x0 (1 - sigma), [MASK] sigma; q_xs_2 (masked): p_x0 (alpha_s -
            # (1 - sigma) alpha_t) / (1 - alpha_t), [MASK] (1 - alpha_s - sigma alpha_t) /
            # (1 - alpha_t); as one (n, L, V + 1) buffer: p_x0 times a per-position coefficient
            masked = is_mask[..., None]
            coef = torch.where(masked, (a_s - (1 - sig) * a_t) / (1 - a_t), 1 - sig)
            q = p * coef
            q_mask = torch.where(masked, (1 - a_s - sig * a_t) / (1 - a_t), sig)
            q[..., self.mask_id] = q_mask[..., 0]
            xs = gumbel_argmax(q.clamp_min_(0.0).log_(), generator, float64)
            if decoding == "remdm-conf":
                # conf of a newly decoded token = -p_x0(token); a remasked one gets -inf
                drawn = p.gather(-1, xs[..., None]).squeeze(-1)
                conf = torch.where(is_mask & (xs != self.mask_id), -drawn, conf)
                conf = torch.where(~is_mask & (xs == self.mask_id), -torch.inf, conf)
            x = xs
        return x
