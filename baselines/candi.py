"""CANDI: hybrid discrete-continuous diffusion (Pynadath et al. 2025) and its pure-Gaussian variant.

References (facts read, code written here): candi-diffusion `algo.py::CANDI`,
`models/dit_cont.py::ContDIT`, `configs/algo/candi.yaml` (commit cd57ae9) and its port in the
S-FLM harness (first commit of FrankCCCCC/s-flm: `algo.py::CANDI`, `candi_utils.py`,
`models/candi_dit.py`, `samplers.py::CANDISampler`), which is what the S-FLM paper ran.

Noise coupling. The error rate of a Gaussian-corrupted one-hot over d = V classes,
    r(sigma) = (d - 1)/d * Phi(-1 / (sigma sqrt 2))     (`candi_utils.py::expected_rank`, a = 1)
(the expected fraction of the d coordinates that are wrong and beat the true one), is tabulated
on sigma in linspace(0.2, 4.0, 1000) and inverted by linear interpolation. A discrete noise
level tau in [0, 1] maps to the target rate tau (max_p - min_p) + min_p and then to sigma(tau)
(`get_continuous_from_discrete_noise`, `sigma_from_time_vectorized`).

Training (hybrid). Log-linear alpha_t = 1 - (1 - eps) t. A position is "moved" with probability
1 - alpha_t and replaced by a uniform draw over the V + 1 ids; it stays *revealed* when the draw
equals x_0 (`discrete_noising`, `q_xt`). Corrupted positions carry onehot(x_0) + sigma(1 - alpha_t)
eps in R^V. Network input (`ContDIT.forward`): with row-normalised embeddings Ehat (the mask row
excluded) revealed positions get Ehat[x_0], corrupted ones
    mixed_coeff * Ehat_mask + (1 - mixed_coeff) * c_in * (x_t @ Ehat),  c_in = 1/sqrt(1 + sigma^2);
time input -log alpha_t. Loss: MDLM-weighted CE alpha'_t/(1 - alpha_t) log p_theta(x_0) on corrupted
positions (revealed positions are forced to one-hot and give 0; `nll_per_token`).

Pure-Gaussian variant (``pure_gaussian=True``; reference `pure_continuous=True, is_embed=False`):
no discrete corruption (every non-prompt position is corrupted, nothing is ever revealed), plain CE.

Samplers (the objects of :mod:`baselines.candi_samplers`; t_k = linspace(0.999, 1e-5, nfe + 1),
sigma_k = sigma(t_k), dt = (1 - 1e-5)/nfe; one backbone call per step, NFE = nfe exactly;
`samplers.py::CANDISampler`):
- ``cached`` (paper default, `generate_samples_cache`): state = token ids + clean mask + an
  embedding cache e in R^d, e_0 = z @ Ehat, z ~ N(0, sigma(0.999)^2 I_V). Each step: one forward
  with reveal mask = clean mask, continuous noise sigma_{k+1}, time input -log alpha(t_k); a single
  categorical sample x_hat ~ p_theta (the one-sample estimate); continuous step
  e <- e - step_size (sigma_k - sigma_{k+1}) (e - Ehat[x_hat]) / sigma_{k+1}^2; every non-clean
  token is set to x_hat and becomes clean with probability (t - s)/t, s = t - dt (log-linear
  unmasking). Output: the tokens after nfe steps.
- ``nocache`` (`generate_samples_nocache`): state x in R^V; continuous step with the expectation
  p_theta in place of a sample, then the categorical unmasking step over [p (t - s), s].
- pure-Gaussian (decoding ``continuous``, `generate_samples_pure_cont`): only the continuous step on
  x in R^V with the expectation, argmax of x at the end (the argmax costs no call).
Prompt positions are revealed and clean throughout and restored after every step.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from baselines.candi_samplers import DECODINGS, SamplerRun
from bench.backbones.dit import build_dit
from bench.config import BackboneConfig, ConfigError
from bench.method import (
    CATEGORICAL_SAMPLING,
    LOSS_CE,
    Batch,
    CategoricalSampling,
    LossOutput,
    Method,
    token_mean,
)
from bench.numerics import interp, log_linear_alpha, log_linear_dalpha, sigma_of_alpha
from bench.options import option
from bench.reference_format import ReferenceFamily, ReferenceFormat

#: sigma grid of the error-rate table (`algo.py::CANDI.__init__`: torch.linspace(0.2, 4.0, 1000))
SIGMA_GRID = (0.2, 4.0, 1000)
#: sampler grid t_k = linspace(T_START, T_END, nfe + 1) (`CANDISampler.init_state`, eps = 1e-5)
T_START, T_END = 0.999, 1e-5
#: elements of the (rows, L, V) Gaussian prior drawn at once by the cached sampler
PRIOR_CHUNK = 1 << 26


def error_rate(sigma: Tensor, vocab: int) -> Tensor:
    """r(sigma) = (d - 1)/d * Phi(-1/(sigma sqrt 2)), d = ``vocab``
    (`candi_utils.py::expected_rank`).

    Expected fraction of the d coordinates of onehot + sigma * eps that are wrong and exceed the
    true coordinate (each wrong one does with probability Phi(-1/(sigma sqrt 2)))."""
    sigma = torch.as_tensor(sigma, dtype=torch.float64)
    return (vocab - 1) / vocab * torch.special.ndtr(-1.0 / (sigma * math.sqrt(2.0)))


def inference_sigmas(n: int, sigma_min: float, sigma_max: float) -> Tensor:
    """Log-linear sigma_max -> sigma_min over n points (`candi_utils.py::inference_sigmas`)."""
    k = torch.linspace(0.0, 1.0, n, dtype=torch.float64)
    return sigma_max * (sigma_min / sigma_max) ** k


@dataclass
class CANDIOptions(CategoricalSampling):
    pure_gaussian: bool = option(
        False,
        help="paper's 'CANDI pure Gaussian': no discrete corruption, plain CE, "
        "continuous steps only, argmax at the end",
    )
    mixed_coeff: float = option(
        0.5, ge=0.0, le=1.0, help="weight of the mask embedding in a corrupted input"
    )
    min_percentile: float = option(
        0.01, gt=0.0, lt=1.0, help="error rate r at discrete noise tau = 0"
    )
    max_percentile: float = option(
        0.25, gt=0.0, lt=1.0, help="error rate r at discrete noise tau = 1"
    )
    use_percentile_scheduling: bool = option(
        True,
        help="sampler sigmas via the percentile map (False: log-linear sigma_max -> sigma_min)",
    )
    sigma_min: float = option(
        0.01, gt=0.0, help="last sampler sigma when percentile scheduling is off"
    )
    sigma_max: float = option(
        2.0, gt=0.0, help="first sampler sigma when percentile scheduling is off"
    )
    step_size: float = option(1.0, gt=0.0, help="scale of the cached sampler's continuous step")
    eps: float = option(1e-3, gt=0.0, lt=1.0, help="log-linear schedule floor: alpha_1 = eps")


@dataclass
class CANDIState:
    """Sampler state after a step: ``tokens`` (n, L) current ids (argmax of the continuous state
    where there is no discrete one), ``clean`` (n, L) positions that are revealed for good."""

    step: int
    tokens: Tensor
    clean: Tensor
    #: continuous state: the (n, L, d) embedding cache (cached) or x in R^V (nocache, continuous)
    cont: Tensor


class CANDIReference(ReferenceFormat):
    """CANDI files (s-flm ``algo.CANDI`` on ``ContDIT``, the DIT's keys): the mask row after the
    vocabulary in the input table (as here) and in the head, whose mask column the reference's
    forward drops (ours has none); the sigma grid and the error rate on it as top-level
    buffers (``cont_noise_table`` / ``disc_noise_table``); the options from ``algo.*``."""

    families = (
        ReferenceFamily(
            "candi",
            model_type="candi-dit",
            algo="candi",
            algo_names=("candi",),
            requires=(
                "backbone.vocab_embed.embedding",
                "backbone.sigma_map.mlp.0.weight",
                "cont_noise_table",
            ),
            mask_rows=1,
            kept_mask_rows=(1, 0),
            vocab_in_hparams=True,
        ),
    )

    def options_from(self, ref, family):
        temp = float(ref.num("algo.temp", 1.0))
        if temp != 1.0:  # reference CANDI divides its log-probs by algo.temp; ours has no such knob
            raise ref.error(f"CANDI algo.temp={temp} (supported: 1.0)")
        opts = {
            "pure_gaussian": bool(ref.num("algo.pure_continuous", False)),
            "mixed_coeff": float(ref.num("algo.mixed_coeff", 0.5)),
            "min_percentile": float(ref.num("algo.min_percentile", 0.01)),
            "max_percentile": float(ref.num("algo.max_percentile", 0.25)),
            "sigma_min": float(ref.num("algo.sigma_min", 0.01)),
            "sigma_max": float(ref.num("algo.sigma_max", 2.0)),
            "eps": float(ref.num("noise.eps", 1e-3)),
        }
        return opts, {}, []

    def export_config(self, family, method) -> dict:
        o = method.opts
        return {
            # ContDIT: the original candi-diffusion rotary path (same parameters as DDiTBlock)
            "model": {"softcap": 0.0, "use_original_rope": True},
            "algo": {
                "backbone": "candi-dit",
                "mixed_coeff": o.mixed_coeff,
                "temp": 1.0,
                "sigma_min": o.sigma_min,
                "sigma_max": o.sigma_max,
                "min_percentile": o.min_percentile,
                "max_percentile": o.max_percentile,
                "pure_continuous": o.pure_gaussian,
                "is_embed": False,
                "sampler": "cached",
                "step_size": o.step_size,
                "use_percentile_scheduling": o.use_percentile_scheduling,
                "ignore_bos": False,
            },
            "noise": {"eps": o.eps},
            "sampler": {"predictor": "candi"},
        }

    def export_state(self, family, method) -> dict:
        # reference algo.CANDI: the sigma grid and the error rate r(sigma) on it
        return {
            "cont_noise_table": method.sigma_table.float().clone(),
            "disc_noise_table": method.rate_table.float().clone(),
        }


class CANDI(Method):
    name = "candi"
    Options = CANDIOptions
    #: name -> sampler object (docs and ``--list`` are drawn from it); ``decodings``: the hybrid
    #: model's, the pure-Gaussian variant's set in ``__init__``
    DECODINGS = DECODINGS
    decodings = tuple(n for n, d in DECODINGS.items() if not d.pure_gaussian)
    #: the discrete draws' filters (top-p / top-k): a filter reuses the trained model
    sampling_options = CATEGORICAL_SAMPLING
    #: variants the shared conformance suite runs (tests/bench/test_conformance.py)
    conformance_variants = [{}, {"pure_gaussian": True}]
    #: reference checkpoint format (bench.reference_format; docs/checkpoints.md)
    reference = CANDIReference()
    #: MDLM's NELBO weights, but the corrupted positions' inputs also carry a Gaussian-noised
    #: one-hot of the clean token, and no term accounts for it: not a bound on the NLL
    loss_kind = (
        "cross-entropy weighted as MDLM's NELBO, inputs with Gaussian noise: not a likelihood "
        "bound (nats/token)"
    )
    #: none: neither the paper nor its code defines an evaluation likelihood, and the loss is not
    #: one (docs/methods/candi.md, "Likelihood"); nll_bound raises NotImplementedError
    bound_kind = ""

    @classmethod
    def loss_kind_for(cls, options) -> str:
        """Hybrid: :attr:`loss_kind`; pure Gaussian: the plain CE."""
        return LOSS_CE if options.pure_gaussian else cls.loss_kind

    def __init__(self, options, vocab_size: int, seq_len: int):
        super().__init__(options, vocab_size, seq_len)
        o = self.opts
        if o.min_percentile >= o.max_percentile:
            raise ConfigError(
                f"candi.options: min_percentile ({o.min_percentile}) must be < "
                f"max_percentile ({o.max_percentile})"
            )
        if vocab_size < 2:
            raise ConfigError(f"candi: vocabulary size must be >= 2, got {vocab_size}")
        self.mask_id = vocab_size  # extra embedding row (`mask_index = len(tokenizer)`)
        sig = torch.linspace(*SIGMA_GRID, dtype=torch.float64)
        rate = error_rate(sig, vocab_size)
        lo, hi = float(rate[0]), float(rate[-1])
        if not (lo <= o.min_percentile and o.max_percentile <= hi):
            raise ConfigError(
                "candi.options: [min_percentile, max_percentile] = "
                f"[{o.min_percentile}, {o.max_percentile}] leaves the error rates "
                f"[{lo:.3g}, {hi:.3g}] reachable for V={vocab_size} on sigma in "
                f"[{SIGMA_GRID[0]}, {SIGMA_GRID[1]}]"
            )
        self.register_buffer("sigma_table", sig, persistent=False)
        self.register_buffer("rate_table", rate, persistent=False)
        if o.pure_gaussian:
            self.decodings = tuple(n for n, d in DECODINGS.items() if d.pure_gaussian)

    def build_backbone(self, cfg: BackboneConfig):
        # embedding table V + 1 rows (last = mask); the reference head has V + 1 outputs and drops
        # the mask column (`ContDIT.forward`: logits[:, :, :-1]); V outputs is the same function.
        return build_dit(cfg, self.vocab_size + 1, self.vocab_size)

    # -- schedules ------------------------------------------------------------------
    def alpha(self, t: Tensor) -> Tensor:
        return log_linear_alpha(t, self.opts.eps)  # `noise_schedules.py::LogLinear`

    def sigma_of_rate(self, rate: Tensor) -> Tensor:
        """Inverse of r(sigma) by linear interpolation on the table (float64; as
        `sigma_from_time_vectorized`, with searchsorted)."""
        return interp(
            rate.to(self.rate_table.device), self.rate_table, self.sigma_table, right=True
        ).to(rate.device)

    def sigma_of_noise(self, tau: Tensor) -> Tensor:
        """sigma(tau) = r^-1(tau (max_p - min_p) + min_p) (`get_continuous_from_discrete_noise`)."""
        o = self.opts
        return self.sigma_of_rate(
            tau.double() * (o.max_percentile - o.min_percentile) + o.min_percentile
        )

    # -- network input / output ---------------------------------------------------------
    def embeddings(self, backbone) -> tuple[Tensor, Tensor]:
        """Row-normalised embeddings Ehat (V, d) and the normalised mask row (d,)
        (`ContDITEmbeddingLayer`: F.normalize over all rows but the last)."""
        w = backbone.embed.weight
        return F.normalize(w[: self.vocab_size], dim=-1), F.normalize(w[self.vocab_size], dim=0)

    def net_input(
        self,
        e_hat: Tensor,
        m_hat: Tensor,
        tokens: Tensor,
        cont: Tensor,
        revealed: Tensor,
        sigma_c: Tensor,
    ) -> Tensor:
        """(B, L, d): Ehat[tokens] where revealed, else mixed * m_hat + (1 - mixed) c_in cont with
        c_in = 1/sqrt(1 + sigma_c^2) (`ContDIT.forward`). ``cont``: (B, L, d) embedding of the
        continuous state; ``sigma_c``: (B,) continuous noise level."""
        a = self.opts.mixed_coeff
        c_in = (1.0 / torch.sqrt(1.0 + sigma_c.double() ** 2)).to(e_hat.dtype)
        corrupted = a * m_hat + (1 - a) * c_in[:, None, None] * cont.to(e_hat.dtype)
        return torch.where(revealed[..., None], e_hat[tokens], corrupted)

    def time_input(self, t: Tensor) -> Tensor:
        return sigma_of_alpha(self.alpha(t.double())).float()  # `_sigma_from_alphat`

    # -- training ---------------------------------------------------------------------
    def corrupt(self, x0: Tensor, clean_mask: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """Discrete part of `q_xt`: (B, L) bool revealed mask and the (B,) continuous noise sigma.

        Hybrid: a position moves with probability 1 - alpha_t to a uniform id in [0, V] (the mask
        id included) and stays revealed when the draw equals x_0 (`discrete_noising`); pure
        Gaussian: nothing is revealed. Clean (prompt) positions are always revealed."""
        alpha_t = self.alpha(t)
        if self.opts.pure_gaussian:
            revealed = clean_mask.clone()
        else:
            B, L = x0.shape
            move = torch.rand(B, L, device=x0.device) < (1 - alpha_t)[:, None]
            repl = torch.randint(0, self.vocab_size + 1, (B, L), device=x0.device)
            revealed = ~move | (repl == x0) | clean_mask
        return revealed, self.sigma_of_noise(1 - alpha_t).to(torch.float32)

    def training_input(self, backbone, x0: Tensor, revealed: Tensor, sigma_c: Tensor) -> Tensor:
        """(B, L, d) network input of the hybrid / Gaussian corruption
        (`q_xt` + `ContDIT.forward`)."""
        e_hat, m_hat = self.embeddings(backbone)
        # (onehot(x0) + sigma eps) @ Ehat = Ehat[x0] + sigma (eps @ Ehat), eps ~ N(0, I_V)
        eps = torch.randn(*x0.shape, self.vocab_size, device=x0.device, dtype=e_hat.dtype)
        if x0.device.type == "cpu" and bool(revealed.any()):
            # net_input reads cont only where not revealed: the (N x V x d) product (and its
            # gradient) over those rows, the same eps; equal up to float rounding (on GPU every
            # row: no host sync)
            B, L = x0.shape
            rows = (~revealed).flatten().nonzero().squeeze(1)
            prod = eps.view(B * L, -1).index_select(0, rows) @ e_hat
            noise = prod.new_zeros(B * L, prod.shape[-1]).index_copy(0, rows, prod).view(B, L, -1)
        else:
            noise = eps @ e_hat
        cont = e_hat[x0] + sigma_c[:, None, None].to(e_hat.dtype) * noise
        return self.net_input(e_hat, m_hat, x0, cont, revealed, sigma_c)

    def loss(self, backbone, batch: Batch, t: Tensor | None) -> LossOutput:
        x0 = batch.x
        alpha_t = self.alpha(t)
        revealed, sigma_c = self.corrupt(x0, batch.clean_mask, t)
        h = self.training_input(backbone, x0, revealed, sigma_c)
        logits = backbone(h, self.time_input(t)).float()
        # log_softmax + gather as one fused cross-entropy
        # (same kernel, no (B, L, V) log-prob buffer)
        logp_x0 = -F.cross_entropy(logits.flatten(0, 1), x0.flatten(), reduction="none").view_as(x0)
        if self.opts.pure_gaussian:
            weight = torch.ones_like(alpha_t)  # plain CE (`nll_per_token`, pure_continuous)
        else:  # -alpha'_t / (1 - alpha_t) (MDLM eq. 10)
            weight = -log_linear_dalpha(self.opts.eps) / (1 - alpha_t)
        per_token = -logp_x0 * weight[:, None] * ~revealed  # revealed: forced one-hot, loss 0
        return token_mean(per_token, batch.loss_mask)

    # -- sampling ---------------------------------------------------------------------
    def sampler_grid(self, nfe: int, device) -> tuple[Tensor, Tensor, float]:
        """(t_k, sigma_k) for k = 0..nfe (float64) and dt (`CANDISampler.init_state`)."""
        ts = torch.linspace(T_START, T_END, nfe + 1, dtype=torch.float64, device=device)
        if self.opts.use_percentile_scheduling or self.opts.pure_gaussian:
            sigmas = self.sigma_of_noise(ts)
        else:
            sigmas = inference_sigmas(nfe + 1, self.opts.sigma_min, self.opts.sigma_max).to(device)
        return ts, sigmas, (1 - T_END) / nfe

    def _log_probs(
        self, backbone, h: Tensor, t: Tensor, n: int, temperature: float, float64: bool
    ) -> Tensor:
        logits = self.call(backbone, h, self.time_input(t).expand(n)).float()
        dtype = torch.float64 if float64 else torch.float32
        return torch.log_softmax(logits.to(dtype) / temperature, dim=-1)

    @torch.no_grad()
    def iter_sample(
        self,
        backbone,
        prompt: Tensor,
        prompt_mask: Tensor,
        *,
        nfe: int,
        temperature: float = 1.0,
        decoding: str = "default",
        float64: bool = True,
        generator: torch.Generator | None = None,
    ) -> Iterator[CANDIState]:
        """Run the sampler, yielding the state after each of the ``nfe`` steps.

        The decoding's object (baselines.candi_samplers.DECODINGS) draws the prior and makes each
        step; this loop only restores the prompt."""
        dec = self.DECODINGS[self.resolve_decoding(decoding)]
        if nfe < 1:
            raise ValueError(f"candi: nfe must be >= 1, got {nfe}")
        if temperature <= 0:
            raise ValueError(f"candi: temperature must be > 0, got {temperature}")
        run = self._sampler_run(backbone, prompt, prompt_mask, nfe, temperature, float64, generator)
        clean = prompt_mask.clone()
        x = torch.where(clean, prompt, torch.zeros_like(prompt))
        cont = dec.prior(self, run, clean)
        for k in range(nfe):
            x, clean, cont, tokens = dec.step(self, run, k, x, clean, cont)
            tokens = torch.where(prompt_mask, prompt, tokens)
            x = torch.where(prompt_mask, prompt, x)
            yield CANDIState(k, tokens, clean, cont)

    def _sampler_run(
        self, backbone, prompt, prompt_mask, nfe, temperature, float64, generator
    ) -> SamplerRun:
        dtype = torch.float64 if float64 else torch.float32
        e_hat, m_hat = self.embeddings(backbone)
        ts, sigmas, dt = self.sampler_grid(nfe, prompt.device)
        # prior z ~ N(0, sigma(0.999)^2 I_V)
        # (`prior_sample`; also when percentile scheduling is off)
        sigma_prior = self.sigma_of_noise(
            torch.tensor(T_START, dtype=torch.float64, device=prompt.device)
        ).to(dtype)
        onehot_prompt = F.one_hot(prompt, self.vocab_size).to(dtype)
        return SamplerRun(
            backbone,
            prompt,
            prompt_mask,
            e_hat,
            m_hat,
            e_hat.to(dtype),
            ts,
            sigmas,
            dt,
            sigma_prior,
            temperature,
            float64,
            dtype,
            generator,
            onehot_prompt,
        )

    def _cached_prior(self, r: SamplerRun) -> Tensor:
        """e_0 = z @ Ehat, drawn a few rows at a time so only the (n, L, d) cache stays (prompt
        positions use Ehat[prompt] directly): ``cached``'s prior (baselines.candi_samplers)."""
        n, L = r.prompt.shape
        rows = max(1, PRIOR_CHUNK // (L * self.vocab_size))
        return torch.cat(
            [
                (
                    r.sigma_prior
                    * torch.randn(
                        min(rows, n - i),
                        L,
                        self.vocab_size,
                        generator=r.generator,
                        device=r.prompt.device,
                        dtype=r.dtype,
                    )
                )
                @ r.e_hat_s
                for i in range(0, n, rows)
            ]
        )

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
        states = self.iter_sample(
            backbone,
            prompt,
            prompt_mask,
            nfe=nfe,
            temperature=temperature,
            decoding=decoding,
            float64=float64,
            generator=generator,
        )
        last = collections.deque(states, maxlen=1)[0]
        return torch.where(prompt_mask, prompt, last.tokens)
