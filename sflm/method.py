"""S-FLM: the hyperspherical flow language model (Deschenaux & Gulcehre 2026, "Language Modeling
with Hyperspherical Flows", arXiv:2605.11125; reference code FrankCCCCC/s-flm @ 18d586f).

Training (paper sec. 3, Alg. Training; reference ``algo.py::SFM``):
- token v -> e_hat_v = E[v] / |E[v]| from a learned table E (the backbone's ``embed``, "ngpt"
  init N(0, 1/d)); z_0 uniform on S^{d-1} per position; z_t = SLERP(z_0, e_hat_x, alpha_t) in
  float64 (reference ``algo.slerp_precision=float64``); gradients reach E through the SLERP;
- prompt / given positions (``clean_mask``) carry their clean embedding;
- the denoiser sees (z_t, sigma = -log alpha_t) and is trained with plain cross-entropy
  -log p_theta(x | z_t) (paper eq. ce-loss), token-mean over ``loss_mask``; with
  ``time_convention="inverted"`` it sees sigma = -log(1 - alpha_t) instead (the reference's
  ``invert_time_convention=true``, needed by the released TinyGSM "fixed" file; :meth:`SFLM.sigma`
  is the one place the time input is computed, for training, validation and sampling);
- optional re-projection of E onto the sphere after each optimiser step (``renorm``, off by
  default: the paper's table "Effect of embedding renormalization" finds it worse);
- the S-arch's matrices are re-projected after every optimiser step (mandatory, as in the
  reference).

Time convention: t in [0, 1], t = 0 clean, t = 1 noise (the harness's); alpha_t is the weight
on the CLEAN embedding. The paper's inverted notation alpha_trunc (= 1 - clean-weight cap;
0.879 = 1 - alpha*(0.1) on TinyGSM) is accepted as ``alpha_trunc_inverted`` and converted here.

Schedules (:mod:`sflm.schedule`): linear or cos^2, truncated to clean weights <= ``alpha_max``
(a number, or ``"star"`` = alpha*(delta) for this vocabulary and backbone width, paper eq.
alpha-crit), optionally adaptive (paper Alg. "Adaptive noise schedule refit"; state in the
checkpoint; the same schedule drives the sampler).

Sampling (:mod:`sflm.sampler`): geodesic Euler on t_k = linspace(1, 1e-5, nfe + 1) (reference
``SFMSampler``), alpha_k = schedule(t_k), s_k = (alpha_{k+1} - alpha_k) / (1 - alpha_k); exactly
``nfe`` backbone calls, the last one only decodes (argmax, reference ``noise_removal=greedy``; or
a draw with ``final_decode="sample"``). Decodings: ``exact`` (posterior-weighted velocity),
``stochastic`` (one posterior draw per step), ``top1`` (top-1 velocity, temperature-free),
``topk`` (top-``top_k``), and any ``top<k>``. Temperature divides the logits for every velocity
and for a sampled final decode. Precision: float64 when asked (``sample.float64``), except above
:data:`FLOAT32_ABOVE_VOCAB` tokens, where float32 is the default (``velocity_dtype``).

Backbones: the shared DiT fed the unit-norm latents (reference ``models/sphere_dit.py::SphereDiT``
feeds z_t unscaled; ``input_scale="sqrt_d"`` feeds z_t sqrt(d), unit variance per coordinate like
a token embedding, a departure kept as an option), or the S-arch (:mod:`sflm.sarch`).

The options and their tables are :mod:`sflm.options`'; the reference checkpoint format
:mod:`sflm.reference`'s; the decodings :mod:`sflm.decodings`'.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.backbones.dit import DiT, resolve_size
from bench.config import BackboneConfig, ConfigError
from bench.decoding import flagged
from bench.method import LOSS_CE, Batch, LossOutput, Method, token_mean
from sflm.decodings import DECODINGS
from sflm.geometry import normalize, slerp, uniform_sphere
from sflm.options import TIME_CONVENTIONS, SFLMOptions
from sflm.reference import SFLMReference
from sflm.sampler import FINAL_READS_TEMPERATURE, parse_decoding, sample_sphere_flow, topk_path
from sflm.sarch import SArch
from sflm.schedule import AdaptiveSchedule, Schedule, make_base_schedule

__all__ = ["FLOAT32_ABOVE_VOCAB", "SFLM", "SFLMOptions", "SFLMReference"]

#: |V| above which the sampler runs in float32 even where float64 is asked for (the default
#: ``sample.float64: true``), unless ``velocity_dtype: sample``: float32 and float64 agreed on
#: all 16,384 generated tokens of a |V| = 50,258 model (nfe 16 / 32, T 0.8 / 1), as on the
#: Sudoku (|V| = 12) and arithmetic (|V| = 195) models, and a float32 exact-velocity step costs
#: about half a float64 one (docs/measurements/cpu_loss_fusion.md)
FLOAT32_ABOVE_VOCAB = 10_000

#: ``velocity_dtype`` -> whether a vocabulary of |V| classes samples in float32 whatever
#: ``float64`` asks (read at call time, so FLOAT32_ABOVE_VOCAB can be changed)
VELOCITY_DTYPES: dict[str, Callable[[int], bool]] = {
    "auto": lambda vocab: vocab > FLOAT32_ABOVE_VOCAB,
    "sample": lambda vocab: False,
}


def _sphere_dit(vocab: int, size) -> nn.Module:
    net = DiT(vocab, vocab, size)
    torch.nn.init.normal_(net.embed.weight, std=1.0 / math.sqrt(size.d_model))  # model.init=ngpt
    return net


@dataclass(frozen=True)
class SphereBackbone:
    """A denoiser the ``backbone`` option names: ``build(vocab, size)`` and whether
    ``input_scale`` applies to its input (the S-arch normalises its input: a scale is a no-op)."""

    build: Callable[..., nn.Module]
    scaled_input: bool


#: ``backbone`` -> :class:`SphereBackbone`
BACKBONES = {
    "dit": SphereBackbone(_sphere_dit, scaled_input=True),
    "sarch": SphereBackbone(SArch, scaled_input=False),
}
#: ``input_scale`` -> the factor of z for width d (None: z as it is, unit norm)
INPUT_SCALES: dict[str, Callable[[int], float] | None] = {"unit": None, "sqrt_d": math.sqrt}
#: velocities whose memory grows with k, and the :func:`sflm.sampler.topk_path` paths on which
#: it does (one family per path: :meth:`SFLM.decoding_family`)
SIZED_PATHS = {"topk": ("gather", "dense")}


class SFLM(Method):
    name = "sflm"
    Options = SFLMOptions
    #: name -> sampler object (sflm.decodings; docs and ``--list`` are drawn from it)
    DECODINGS = DECODINGS
    decodings = tuple(DECODINGS)
    temperature_free = flagged(DECODINGS, "temperature_free")
    #: plain cross-entropy -log p_theta(x | z_t) (paper eq. ce-loss)
    loss_kind = LOSS_CE
    #: options of the sampler only: a new k or final decode reuses the trained model
    sampling_options = ("top_k", "final_decode")
    #: the sampler's exact velocity (sflm.sampler) runs between backbone calls: the benchmarks'
    #: capability (bench.perf.capabilities: velocity, agreement)
    exact_velocity = True
    #: the schedule's constants and its refit's settings: scalars and a (n_grid,) table, no
    #: tensor of the batch changes shape with them (the rehearsal's capability,
    #: bench.rehearse.Rehearsable: it measures batch 2 once)
    memory_neutral_options = (
        "schedule",
        "alpha_max",
        "delta",
        "alpha_trunc_inverted",
        "eps",
        "adaptive",
        "adaptive_refit_every",
        "adaptive_buffer",
        "adaptive_warmup",
        "adaptive_ema",
        "adaptive_uniform_mix",
        "adaptive_n_grid",
        "adaptive_n_knots",
        "adaptive_degree",
        "adaptive_ridge",
        "renorm",
    )
    #: reference checkpoint format (bench.reference_format; docs/checkpoints.md)
    reference = SFLMReference()
    #: extra option sets the shared conformance suite runs (tests/bench/test_conformance.py)
    conformance_variants = [
        {},
        {"backbone": "sarch"},
        {"adaptive": True, "adaptive_warmup": 200, "adaptive_refit_every": 25},
    ]
    #: sort-8 at d = 64: alpha*(0.1) = 0.264; caps of ~0.15-0.26 learned fastest in CPU trial runs
    learnability_options = {"alpha_max": 0.2}

    def __init__(self, options, vocab_size: int, seq_len: int):
        super().__init__(options, vocab_size, seq_len)
        o = self.opts
        if FINAL_READS_TEMPERATURE[o.final_decode]:  # a sampled last step: T counts for top-1
            self.temperature_free = ()
        self.adaptive = None
        if o.adaptive:
            self.adaptive = AdaptiveSchedule(
                buffer_size=o.adaptive_buffer,
                refit_every=o.adaptive_refit_every,
                warmup=o.adaptive_warmup,
                ema=o.adaptive_ema,
                uniform_mix=o.adaptive_uniform_mix,
                n_grid=o.adaptive_n_grid,
                n_knots=o.adaptive_n_knots,
                degree=o.adaptive_degree,
                ridge=o.adaptive_ridge,
            )
        self.dim: int | None = None
        self.alpha_cap: float | None = None
        self.base_schedule: Schedule | None = None

    # -- construction -----------------------------------------------------------------
    def build_backbone(self, cfg: BackboneConfig):
        size = resolve_size(cfg)
        net = BACKBONES[self.opts.backbone].build(self.vocab_size, size)
        self.setup_schedule(size.d_model)
        return net

    def validate_plan(self, *, backbone, train, sample) -> None:
        """The backbone's size (the base class) and the schedule its width gives
        (:meth:`base_schedule_for`), as :meth:`build_backbone` resolves them."""
        super().validate_plan(backbone=backbone, train=train, sample=sample)
        self.base_schedule_for(resolve_size(backbone).d_model)

    def base_schedule_for(self, dim: int) -> tuple[float, Schedule]:
        """(the clean-weight cap, the truncated base schedule) for backbone width ``dim``; a cap
        at or below the schedule's floor ``eps`` is a ConfigError naming the option that set it."""
        o = self.opts
        cap = o.clean_weight_cap(self.vocab_size, dim)
        try:
            return cap, make_base_schedule(o.schedule, o.eps, None, cap)
        except ValueError as e:  # TruncatedSchedule: the cap must lie above alpha at t = 1
            key = "alpha_trunc_inverted" if o.alpha_trunc_inverted is not None else "alpha_max"
            raise ConfigError(
                f"options.{key}: clean-weight cap {cap:.4g} (|V| = {self.vocab_size}, d = {dim}) "
                f"is not above the schedule floor eps = {o.eps} ({e})"
            ) from None

    def setup_schedule(self, dim: int) -> None:
        """Resolve alpha_max for width ``dim`` and build the schedule (idempotent)."""
        if self.dim == dim and self.base_schedule is not None:
            return
        self.dim = dim
        self.alpha_cap, self.base_schedule = self.base_schedule_for(dim)
        if self.adaptive is not None:
            self.adaptive.base = self.base_schedule

    @property
    def schedule(self) -> Schedule | AdaptiveSchedule | None:
        """The schedule training and sampling use: the adaptive one when enabled, else the
        (truncated) base; None before :meth:`setup_schedule`."""
        if self.base_schedule is None:
            return None
        return self.adaptive if self.adaptive is not None else self.base_schedule

    def _ensure(self, backbone) -> Tensor:
        table = backbone.embed.weight
        if self.schedule is None:
            self.setup_schedule(table.shape[-1])
        return table

    def describe(self) -> dict:
        out = super().describe()
        if self.alpha_cap is not None:
            out["alpha_cap"] = self.alpha_cap
        return out

    # -- schedule ---------------------------------------------------------------------
    def alpha(self, t: Tensor) -> Tensor:
        """Clean weight alpha_t of the (truncated / adaptive) schedule."""
        if self.schedule is None:
            raise RuntimeError(
                "sflm: schedule not set up (call build_backbone or setup_schedule first)"
            )
        return self.schedule.alpha(t)

    def sigma(self, alpha_t: Tensor) -> Tensor:
        """The network's time input for clean weight ``alpha_t``: the one place it is computed
        (training loss, validation, sampler). 0 without time conditioning.

        - ``time_convention="clean"``: -log(alpha_t) (reference ``_sigma_from_alphat`` with
          ``invert_time_convention=false``, where the schedule's alpha is the clean weight);
        - ``"inverted"``: -log(1 - alpha_t). s-flm algo.py::SFM / trainer_base.py
          ``_sigma_from_alphat`` with ``invert_time_convention=true``: the schedule's alpha_ref is
          the noise weight (slerp parameter), alpha_ref = 1 - clean weight, and sigma =
          -log(alpha_ref) (s-flm algo.py::SFM, samplers.py: sigma in [0, 0.14] for a
          0.131 cap). log1p keeps it exact for small alpha_t.
        """
        if not self.opts.time_conditioning:
            return torch.zeros_like(alpha_t, dtype=torch.float32)
        return TIME_CONVENTIONS[self.opts.time_convention].sigma(alpha_t).float()

    def net_input(self, z: Tensor, backbone) -> Tensor:
        """What the denoiser is fed: z (unit norm), or z sqrt(d) for the DiT with input_scale=sqrt_d
        (the S-arch normalises its input, so the scale would be a no-op there)."""
        scale = INPUT_SCALES[self.opts.input_scale]
        if scale is None or not BACKBONES[self.opts.backbone].scaled_input:
            return z
        return z * scale(z.shape[-1])

    # -- training -------------------------------------------------------------------
    def loss(self, backbone, batch: Batch, t: Tensor | None) -> LossOutput:
        table = self._ensure(backbone)
        x = batch.x
        e_hat = normalize(table[x])  # (B, L, d); gradients flow into the table rows
        alpha_t = self.alpha(t.double()).to(x.device)  # (B,)
        dtype = torch.float64 if self.opts.slerp_float64 else e_hat.dtype
        z0 = uniform_sphere(e_hat.shape, device=x.device, dtype=dtype)
        z_t = slerp(z0, e_hat.to(dtype), alpha_t.to(dtype)[:, None]).to(
            e_hat.dtype
        )  # eq. spherical-conditional-flow
        z_t = torch.where(batch.clean_mask[..., None], e_hat, z_t)
        logits = backbone(self.net_input(z_t, backbone), self.sigma(alpha_t)).float()
        nll = F.cross_entropy(logits.flatten(0, 1), x.flatten(), reduction="none").view_as(
            x
        )  # eq. ce-loss
        return token_mean(nll, batch.loss_mask)

    @torch.no_grad()
    def on_after_optimizer_step(self, backbone) -> None:
        if self.opts.renorm:  # paper appendix "Re-Normalizing Embeddings"
            w = backbone.embed.weight
            w.copy_(normalize(w))
        if isinstance(backbone, SArch):
            backbone.renormalize_weights()

    def record_losses(self, t: Tensor, per_sample: Tensor, step: int) -> None:
        if self.adaptive is not None:
            self.adaptive.record(t, per_sample, step)

    # -- sampling ---------------------------------------------------------------------
    def decoding_family(self, decoding: str) -> tuple[str, int]:
        """Top-k decodings that take the same path of :func:`sflm.sampler.topk_velocity` (its
        gather over (B, L, k, d) or its dense (B, L, V) scatter) are one family, memory growing
        with k; k = 1 (an argmax) is its own. Needs the built backbone's width. The rehearsal's
        capability (bench.rehearse.Rehearsable): it runs the largest k of each family."""
        d = parse_decoding(self.resolve_decoding(decoding), self.opts.top_k)
        paths = SIZED_PATHS.get(d.velocity, ())
        if not paths or self.dim is None:
            return decoding, 0
        path = topk_path(d.k, self.vocab_size, self.dim)
        return (f"{d.velocity}-{path}", d.k) if path in paths else (decoding, 0)

    def resolve_decoding(self, decoding: str) -> str:
        decoding = {"default": self.decodings[0]}.get(decoding, decoding)
        parse_decoding(decoding, self.opts.top_k)  # raises a clear error on unknown names
        return decoding

    def float32_by_size(self) -> bool:
        """True when the sampler runs in float32 whatever ``float64`` asks: ``velocity_dtype``
        ``auto`` and |V| > :data:`FLOAT32_ABOVE_VOCAB`."""
        return VELOCITY_DTYPES[self.opts.velocity_dtype](self.vocab_size)

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
        table = self._ensure(backbone)
        n = prompt.shape[0]
        float64 = float64 and not self.float32_by_size()
        ts = torch.linspace(1.0, 1e-5, nfe + 1, dtype=torch.float64, device=prompt.device)
        alphas = self.alpha(ts)

        def call(z: Tensor, a: Tensor) -> Tensor:
            sigma = self.sigma(a.reshape(1).expand(n))
            return self.call(backbone, self.net_input(z.to(table.dtype), backbone), sigma)

        return sample_sphere_flow(
            call,
            table,
            alphas,
            prompt,
            prompt_mask,
            decoding=parse_decoding(decoding, self.opts.top_k),
            temperature=temperature,
            final=self.opts.final_decode,
            float64=float64,
            generator=generator,
        )
