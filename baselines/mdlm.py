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

Samplers: the decodings of :mod:`baselines.mdlm_samplers` (one object each, in its table
``DECODINGS``; docs/methods/mdlm.md lists each with its source, cost and options), all with
exactly ``nfe`` backbone calls except ``cached``, ``threshold``, ``factor`` (at most
``nfe``; the decodings count each row's calls in :attr:`Method.row_calls`). ``block_length`` (an
option; 0 = off): semi-autoregressive decoding (LLaDA's ``block_length``): the generated
positions, in order, split into blocks decoded left to right, the calls split over the blocks
as evenly as possible (:meth:`MDLM.blocks`); for every decoding but ReMDM's. With blocks,
``sample.eos_stop`` (:attr:`Method.eos_id` set) stops a row after the block that holds its EOS
(bd3lms ``var_length``): its later blocks are not decoded nor counted, then hold the EOS.
``block_cache`` (``prefix`` / ``dual``, with ``cache_refresh``; :mod:`baselines.mdlm_cache`):
Fast-dLLM's block KV caches (NVlabs/Fast-dLLM ``llada/generate.py::generate_with_prefix_cache`` and
``generate_with_dual_cache``): a block's first step is a full call that records every layer's
keys and values (:mod:`bench.backbones.block_cache`), its later steps partial calls that compute
the block only (dual) or the block and everything after it (prefix) against them, counted as
partial (``Method.call(partial=True)``, per row); approximate (the cached keys and values are
the recording step's; time conditioning too), ``cache_refresh: 1`` being no cache bit for bit.
Every blocked decoding but ``cached`` (MDLM's cache of p_theta) takes it.
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

from baselines.mdlm_cache import MODES
from baselines.mdlm_samplers import DECODINGS, ConfidenceOrder, ReMDM
from bench.backbones.dit import build_dit
from bench.config import BackboneConfig, ConfigError
from bench.decoding import flagged
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
    eos_reached,
    fill_after_eos,
    gold_log_probs,
    token_mean,
)
from bench.numerics import log_linear_alpha, log_linear_dalpha, sigma_of_alpha
from bench.options import option
from bench.reference_format import HubFormat, ReferenceFamily, ReferenceFormat

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
    block_cache: str = option(
        "none",
        choices=MODES,
        omit_default=True,
        help="block KV cache under block_length (Fast-dLLM llada/generate.py): prefix = "
        "generate_with_prefix_cache (a block's later steps recompute the block and the whole "
        "suffix, the keys/values before it cached), dual = generate_with_dual_cache (they "
        "recompute the block only); recorded by a full call at each block's first step; all "
        "blocked decodings but cached; none = off",
    )
    cache_refresh: int = option(
        0,
        ge=0,
        omit_default=True,
        help="block_cache: also record the cache by a full call every k-th step of a block "
        "(0: at the block's first step only, as Fast-dLLM; 1: every step = no cache)",
    )
    tau: float = option(
        0.9,
        gt=0.0,
        le=1.0,
        omit_default=True,
        help="threshold decoding: reveal every masked position of the block whose confidence "
        "p_theta(draw) is >= tau, at least one (Fast-dLLM threshold, its default 0.9)",
    )
    factor: float = option(
        1.0,
        gt=0.0,
        omit_default=True,
        help="factor decoding: reveal the n most confident, n the most ranks r with confidence "
        ">= 1 - factor/(r + 1) (ZHZisZZ/dllm fastdllm factor, its default 1.0)",
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
        """remdm-loop's phases in order: 1 > t_on >= t_off >= 0; no ``cache_refresh`` without
        a ``block_cache``."""
        if self.cache_refresh and self.block_cache == "none":
            raise ConfigError(
                f"cache_refresh: {self.cache_refresh} refreshes a block cache, and block_cache "
                "is none (set block_cache: prefix or dual, or leave cache_refresh out)"
            )
        if self.remdm_t_off > self.remdm_t_on:
            raise ConfigError(
                f"remdm_t_off: {self.remdm_t_off} is after remdm_t_on = {self.remdm_t_on} "
                "(remdm-loop: 1 > t_on >= t_off >= 0)"
            )


#: loss_type -> the weight of -log p_theta(x_0 | x_t) at the masked positions, from (alpha_t, eps)
LOSS_WEIGHTS = {
    # MDLM eq. 10: alpha'_t / (1 - alpha_t) * log p, alpha'_t = -(1 - eps)
    "elbo": lambda alpha_t, eps: -log_linear_dalpha(eps) / (1 - alpha_t),
    "low_var": lambda alpha_t, eps: torch.ones_like(alpha_t),  # the masked CE
}
#: loss_type -> what the loss is (bench.method.Method.loss_kind)
LOSS_KINDS = {"elbo": LOSS_NELBO, "low_var": LOSS_CE}
#: the ReMDM decodings (kuleshov-group/remdm ``sampling.sampler``)
REMDM = tuple(n for n, d in DECODINGS.items() if isinstance(d, ReMDM))
#: the confidence-ordered decodings: LLaDA low_confidence, Dream topk_margin and entropy
CONFIDENCE_ORDERS = tuple(
    n for n, d in DECODINGS.items() if isinstance(d, ConfidenceOrder) and not d.call_skipping
)
#: the parallel (confidence-threshold) decodings: Fast-dLLM threshold, dllm factor
PARALLEL = tuple(
    n for n, d in DECODINGS.items() if isinstance(d, ConfidenceOrder) and d.call_skipping
)


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
    #: kuleshov-group/mdlm-owt (hub config.json: model_type "mdlm", auto_map to
    #: configuration_mdlm.MDLMConfig / modeling_mdlm.MDLM; the DIT's keys under ``backbone.``;
    #: mdlm diffusion.py zeroes sigma unless time_conditioning)
    hub_formats = (
        HubFormat(
            "mdlm",
            family="mdlm",
            classes=(("AutoConfig", "MDLMConfig"), ("AutoModelForMaskedLM", "MDLM")),
            fields=("time_conditioning",),
            algo=(("name", "mdlm"), ("time_conditioning", False)),
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
    #: name -> sampler object (baselines.mdlm_samplers; docs and ``--list`` are drawn from it)
    DECODINGS = DECODINGS
    decodings = tuple(DECODINGS)
    #: ``cached`` skips the calls of steps that changed nothing: at most ``nfe_for`` calls
    call_skipping = flagged(DECODINGS, "call_skipping")
    #: the blocked decodings stop a row after the block that holds its EOS, with
    #: ``block_length`` > 0 only (:meth:`eos_stopping`, :meth:`sample_canvas`)
    stops_at_eos = flagged(DECODINGS, "eos_stop")
    #: the draws' filters (top-p / top-k), the blocks and ReMDM's schedule: they reuse the
    #: trained model
    sampling_options = (
        *CATEGORICAL_SAMPLING,
        "block_length",
        "block_cache",
        "cache_refresh",
        "tau",
        "factor",
        "remdm_eta",
        "remdm_t_on",
        "remdm_t_off",
        "remdm_alpha_on",
    )
    #: the ``block_cache`` values beside none (baselines.mdlm_cache): a capability the benchmarks
    #: read (bench.perf.capabilities: blockcache)
    block_caches = MODES[1:]
    loss_kind = LOSS_NELBO
    #: the continuous-time NELBO, by Monte Carlo over t (:meth:`nll_bound`; whatever loss_type)
    bound_kind = BOUND_ELBO
    #: reference checkpoint format (bench.reference_format; docs/checkpoints.md)
    reference = MDLMReference()

    @classmethod
    def loss_kind_for(cls, options) -> str:
        """The NELBO; ``low_var``: the masked CE without its 1/t weight (no bound)."""
        return LOSS_KINDS[options.loss_type]

    def __init__(self, options, vocab_size: int, seq_len: int):
        super().__init__(options, vocab_size, seq_len)
        self.mask_id = vocab_size

    def build_backbone(self, cfg: BackboneConfig):
        return build_dit(cfg, self.vocab_size + 1, self.vocab_size + 1)

    def validate_plan(self, *, backbone, train, sample) -> None:
        """The backbone (the base class), no ReMDM decoding with ``block_length``, and a
        ``block_cache`` only with blocks on a decoding that takes it (the sampler's own checks,
        made at plan time instead of at the job's first batch)."""
        super().validate_plan(backbone=backbone, train=train, sample=sample)
        for decoding in sample.decoding:
            self._check_blocks(self.resolve_decoding(decoding))

    def _check_blocks(self, name: str) -> None:
        d, o = self.DECODINGS[name], self.opts
        if o.block_cache != "none" and not d.block_cacheable:
            takes = [n for n, e in self.DECODINGS.items() if e.block_cacheable]
            why = "no blocks" if not d.blocks else "its own cache of p_theta"
            raise ConfigError(
                f"options.block_cache: {name} takes no block cache ({why}); block_cache "
                f"applies to {', '.join(takes)}"
            )
        if not d.blocks and o.block_length:
            blockwise = [n for n, e in self.DECODINGS.items() if e.blocks]
            raise ConfigError(
                f"options.block_length: {name} decodes the whole canvas (ReMDM defines "
                f"no blocks); block_length applies to {', '.join(blockwise)}"
            )
        if o.block_cache != "none" and not o.block_length:
            raise ConfigError(
                f"options.block_cache: {o.block_cache} caches the blocks outside the current "
                "one and needs block_length > 0 (semi-autoregressive blocks)"
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
        weight = LOSS_WEIGHTS[self.opts.loss_type](alpha_t, self.opts.eps)
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
        name = self.resolve_decoding(decoding)
        x = torch.where(prompt_mask, prompt, torch.full_like(prompt, self.mask_id))
        self._check_blocks(name)  # ReMDM: one block, the whole canvas
        self.begin_rows(x.shape[0])  # a row's calls: those while its current block held a mask
        gen, eos = ~prompt_mask, self.eos_id if self.eos_stopping(name) else None
        done = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)
        for block, calls in self.blocks(gen, nfe):  # checked before the first call
            if eos is not None:  # sample.eos_stop: a done row's later blocks are not decoded
                block = block & ~done[:, None]
                if not bool(block.any()):
                    break  # every row done (bd3lms diffusion.py var_length: stop at the EOS)
            x = self.DECODINGS[name].run(
                self, backbone, x, block, calls, temperature, float64, generator
            )
            if eos is not None:  # bd3lms _check_stop_conds: an EOS in the finished blocks
                done = eos_reached(x, gen, eos)
        # an EOS-stopped row: its positions after the EOS (undecoded blocks included) hold it
        return x if eos is None else fill_after_eos(x, gen, eos)

    def eos_stopping(self, decoding: str) -> bool:
        """A blocked decoding with ``block_length`` > 0 (without blocks the one block is the
        whole canvas: no row is done before the last call)."""
        return bool(self.opts.block_length) and super().eos_stopping(decoding)

    def remdm_step(self, name: str, t: float, s: float, last: bool) -> tuple:
        """(alpha_t, alpha_s, sigma) of one step from t to s of the ReMDM decoding ``name``
        (:meth:`baselines.mdlm_samplers.ReMDM.step`)."""
        return self.DECODINGS[name].step(self, t, s, last)

    def min_nfe(self, prompt_mask: Tensor) -> int:
        """One call per block of ``block_length`` (:meth:`blocks`); 1 without blocks. The
        rehearsal's capability (bench.rehearse.Rehearsable): it samples at no fewer calls."""
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
