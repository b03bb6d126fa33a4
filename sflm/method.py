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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from bench.backbones.dit import DiT, resolve_size
from bench.config import BackboneConfig, ConfigError
from bench.decoding import flagged
from bench.method import LOSS_CE, Batch, LossOutput, Method, token_mean
from bench.options import Options, option
from bench.reference_format import ReferenceFamily, ReferenceFormat
from sflm.alpha_star import alpha_star
from sflm.decodings import DECODINGS
from sflm.geometry import normalize, slerp, uniform_sphere
from sflm.sampler import parse_decoding, sample_sphere_flow, topk_path
from sflm.sarch import SArch
from sflm.schedule import AdaptiveSchedule, Schedule, make_base_schedule

#: |V| above which the sampler runs in float32 even where float64 is asked for (the default
#: ``sample.float64: true``), unless ``velocity_dtype: sample``: float32 and float64 agreed on
#: all 16,384 generated tokens of a |V| = 50,258 model (nfe 16 / 32, T 0.8 / 1), as on the
#: Sudoku (|V| = 12) and arithmetic (|V| = 195) models, and a float32 exact-velocity step costs
#: about half a float64 one (docs/measurements/cpu_loss_fusion.md)
FLOAT32_ABOVE_VOCAB = 10_000


@dataclass
class SFLMOptions(Options):
    schedule: str = option(
        "linear",
        choices=("linear", "cos2"),
        help="base schedule: linear alpha = 1 - t, or cos2 alpha = sin^2(pi/2 (1 - t)) "
        "(paper tab:noise-schedules)",
    )
    alpha_max: float | str = option(
        "star",
        help="clean-weight cap of the truncated schedule: a number in (0, 1] "
        "(1 = untruncated) or 'star' = alpha*(delta) for this vocabulary and width "
        "(eq. alpha-crit)",
    )
    delta: float = option(
        0.1, gt=0.0, lt=1.0, help="delta of alpha*(delta) when alpha_max = 'star'"
    )
    alpha_trunc_inverted: float | None = option(
        None,
        ge=0.0,
        lt=1.0,
        help="the paper's inverted alpha_trunc (TinyGSM ablation; = 1 - clean-weight cap, "
        "e.g. 0.879 = 1 - alpha*(0.1)); sets alpha_max = 1 - value (leave alpha_max at 'star')",
    )
    eps: float = option(
        1e-3, gt=0.0, lt=1.0, help="schedule floor: alpha at t = 1 (reference noise.eps)"
    )
    adaptive: bool = option(
        False, help="adaptive noise schedule (paper Alg. 'Adaptive noise schedule refit')"
    )
    adaptive_refit_every: int = option(
        50, gt=0, help="R: refit every R optimiser steps (paper / scripts: 50)"
    )
    adaptive_buffer: int = option(
        0, ge=0, help="(t, loss) pairs kept; 0 = R x global batch (paper)"
    )
    adaptive_warmup: int = option(
        1000, ge=0, help="W: steps before pairs are recorded (paper: 1000)"
    )
    adaptive_ema: float = option(
        0.9, ge=0.0, lt=1.0, help="beta: EMA of successive schedules (paper / scripts: 0.9)"
    )
    adaptive_uniform_mix: float = option(
        1e-3, gt=0.0, le=1.0, help="mu: uniform mix of the importance (paper: 1e-3)"
    )
    adaptive_n_grid: int = option(1000, gt=2, help="grid points of the refit (reference: 1000)")
    adaptive_n_knots: int = option(20, gt=1, help="SplineTransformer knots (reference: 20)")
    adaptive_degree: int = option(3, gt=0, help="spline degree (reference: 3)")
    adaptive_ridge: float = option(1e-3, ge=0.0, help="Ridge alpha (reference: 1e-3)")
    renorm: bool = option(
        False,
        help="re-project the embedding table onto the sphere after each optimiser step "
        "(paper: worse; off)",
    )
    backbone: str = option(
        "dit",
        choices=("dit", "sarch"),
        help="denoiser: the shared DiT or the S-arch (paper sec. 3.3)",
    )
    input_scale: str = option(
        "unit",
        choices=("unit", "sqrt_d"),
        help="DiT input: unit-norm z_t (reference SphereDiT) or z_t sqrt(d) "
        "(unit variance per coordinate)",
    )
    time_conditioning: bool = option(
        True, help="feed sigma = -log alpha_t to the network (reference: true)"
    )
    time_convention: str = option(
        "clean",
        choices=("clean", "inverted"),
        omit_default=True,
        help="network time input: 'clean' sigma = -log(alpha) (alpha = clean weight; reference "
        "algo.invert_time_convention=false) or 'inverted' sigma = -log(1 - alpha) (reference "
        "invert_time_convention=true: the released TinyGSM 'fixed' S-FLM file); the schedule, "
        "SLERP and sampler steps are the same in both",
    )
    top_k: int = option(
        10, gt=0, help="k of the 'topk' decoding (paper appendix sweeps k; k >= 10 ~ exact)"
    )
    final_decode: str = option(
        "argmax",
        choices=("argmax", "sample"),
        help="last step: argmax (reference noise_removal=greedy) "
        "or a draw from softmax(logits / T)",
    )
    slerp_float64: bool = option(
        True, help="training SLERP in float64 (reference algo.slerp_precision)"
    )
    velocity_dtype: str = option(
        "auto",
        choices=("auto", "sample"),
        omit_default=True,
        help="sampler dtype: auto = float32 when |V| > FLOAT32_ABOVE_VOCAB (10,000; float32 and "
        "float64 agreed on every generated token at |V| = 50,258), else sample.float64's; "
        "sample = sample.float64's at every |V|",
    )

    def validate(self) -> None:
        if isinstance(self.alpha_max, str):
            if self.alpha_max != "star":
                raise ConfigError(
                    f"alpha_max: must be a number in (0, 1] or 'star', got {self.alpha_max!r}"
                )
        elif not 0.0 < self.alpha_max <= 1.0:
            raise ConfigError(f"alpha_max: must be in (0, 1], got {self.alpha_max!r}")
        if self.alpha_trunc_inverted is not None and self.alpha_max != "star":
            raise ConfigError(
                "alpha_trunc_inverted: set either alpha_max or alpha_trunc_inverted, not both"
            )
        if self.time_convention == "inverted" and self.adaptive:
            # as the reference (s-flm algo.py::SFM._validate_configuration)
            raise ConfigError(
                "time_convention: 'inverted' cannot be combined with adaptive: true "
                "(the reference requires invert_time_convention=false for the adaptive schedule)"
            )

    def clean_weight_cap(self, vocab_size: int, dim: int) -> float:
        """The canonical cap on alpha (clean weight) this configuration trains on."""
        if self.alpha_trunc_inverted is not None:
            return 1.0 - self.alpha_trunc_inverted  # inverted convention -> clean weight
        if self.alpha_max == "star":
            return alpha_star(vocab_size, dim, self.delta)
        return float(self.alpha_max)


class SFLMReference(ReferenceFormat):
    """S-FLM files (s-flm ``algo.SFM``): on the sphere-DiT (``SphereDiT``: the DiT's keys with
    ``sphere_embed``) or the S-arch (``SphereArch``: its own keys, ``sz``); no mask class, the
    reference's [PAD] is a class (OWT: 50,258). The schedule from ``noise.*`` (type, cap, the
    inverted time convention of ``algo.invert_time_convention``); an adaptive file's ``noise.*``
    buffers hold the fitted schedule (``adaptive`` is a choice: the reference sampled with the
    base schedule, ``true`` samples with the fitted one)."""

    families = (
        ReferenceFamily(
            "sfm_dit",
            model_type="sphere-dit",
            algo="sfm",
            algo_names=("sfm",),
            requires=("backbone.sphere_embed.weight",),
            embed="sphere_embed.weight",
        ),
        ReferenceFamily(
            "sfm_arch",
            model_type="sphere-arch",
            algo="sfm",
            algo_names=("sfm",),
            requires=("backbone.sphere_embed.weight", "backbone.sz"),
            layout="sarch",
            embed="sphere_embed.weight",
        ),
    )
    pad_is_class = True

    def family_for(self, options) -> ReferenceFamily:
        return self.families[1] if options.backbone == "sarch" else self.families[0]

    def options_from(self, ref, family):
        arch = family.layout == "sarch"
        if not arch and ref.cfg("model.learn_temperature_scaling"):
            raise ref.error(
                "model.learn_temperature_scaling=True (an extra output column) is not supported"
            )
        kind = ref.cfg("noise.type", "log-linear")  # s-flm configs/noise/*.yaml
        schedule = {"log-linear": "linear", "cosine-squared": "cos2"}.get(kind)
        if schedule is None:
            raise ref.error(f"noise.type {kind!r} (supported: log-linear, cosine-squared)")
        opts = {
            "backbone": "sarch" if arch else "dit",
            "eps": float(ref.num("noise.eps", 1e-3)),
            "schedule": schedule,
            "input_scale": "unit",
            "renorm": False,
        }
        choices, notes = {}, []
        if arch:
            if not ref.cfg("model.use_time_alpha", True):
                raise ref.error("S-arch without use_time_alpha is not supported")
            mlp = ref.cfg("model.mlp_type", "gelu")
            if mlp not in (None, "gelu"):
                raise ref.error(f"S-arch mlp_type {mlp!r} (supported: gelu)")
            if ref.cfg("model.normalize_input_embed"):
                raise ref.error("normalize_input_embed=True is not supported")
        # configs/algo/sfm.yaml default: the inverted convention
        if bool(ref.num("algo.invert_time_convention", True)):
            # s-flm algo.SFM: the schedule's alpha is 1 - clean weight; alpha_min = 1 - cap
            amin = float(ref.num("noise.alpha_min", 0.0))
            if not 0.0 < amin < 1.0:
                raise ref.error(
                    f"inverted time convention needs 0 < noise.alpha_min < 1, got {amin}"
                )
            opts["alpha_trunc_inverted"] = amin
            opts["time_convention"] = "inverted"
        else:
            amax = ref.num("noise.alpha_max", None)
            opts["alpha_max"] = 1.0 if amax is None else float(amax)
        if ref.adaptive:
            # reference sampling rebuilt no spline on load: it ran the base truncated schedule
            opts["adaptive"] = False
            choices["adaptive"] = [False, True]
            n = ref.noise
            has = bool(n.get("has_schedule", torch.tensor(False)).item())
            notes.append(
                "adaptive schedule in the file "
                f"(fitted: {has}, refits: {int(n.get('refit_count', torch.tensor(0)))}); "
                "adaptive=false (default) samples with the base truncated schedule as the "
                "reference harness did, adaptive=true with the fitted schedule (as trained)"
            )
        return opts, choices, notes

    @staticmethod
    def adaptive_state(ref) -> dict:
        """The file's adaptive-schedule buffers as :class:`sflm.schedule.AdaptiveSchedule` state
        (reference noise_schedules.AdaptiveSchedule buffers; ``has_schedule`` -> fitted)."""
        n = ref.noise

        def arr(name):
            return n[name].detach().to(torch.float64).clone() if name in n else None

        fitted = bool(n["has_schedule"].item()) if "has_schedule" in n else False
        alpha = arr("alpha_vals")
        return {
            "t_buf": arr("t_buf"),
            "loss_buf": arr("loss_buf"),
            "buf_pos": int(n["buf_pos"].item()) if "buf_pos" in n else 0,
            "buf_filled": fitted,
            "ema_vals": arr("ema_alpha_vals") if "ema_alpha_vals" in n else torch.zeros_like(alpha),
            "alpha_vals": alpha if fitted else None,
            "refit_count": int(n["refit_count"].item()) if "refit_count" in n else 0,
            "n_grid": int(alpha.numel()),
        }

    def load_state(self, method, ref) -> None:
        if method.adaptive is not None and ref.adaptive:  # "as trained": the fitted schedule
            method.adaptive.set_extra_state(self.adaptive_state(ref))

    def describe(self, ref) -> dict:
        if not ref.adaptive:
            return {}
        n = ref.noise
        a = n["alpha_vals"].double()
        return {
            "adaptive_schedule": {
                "fitted": bool(n.get("has_schedule", torch.tensor(False)).item()),
                "refit_count": int(n.get("refit_count", torch.tensor(0)).item()),
                "alpha_range": [float(a.min()), float(a.max())],
                "buffer": int(n["t_buf"].numel()) if "t_buf" in n else None,
            }
        }

    def export_config(self, family, method) -> dict:
        o = method.opts
        arch = family.layout == "sarch"
        model = {"init": "ngpt", "eps": 1e-6, "pretrained_ckpt_path": None}
        if arch:
            model.update(
                use_time_alpha=True,
                use_time_token=False,
                mlp_type="gelu",
                normalize_input_embed=False,
            )
        else:
            model["learn_temperature_scaling"] = False
        inverted = o.time_convention == "inverted"
        noise: dict = {
            "type": "cosine-squared" if o.schedule == "cos2" else "log-linear",
            "eps": o.eps,
            "adaptive": bool(o.adaptive),
        }
        if inverted:
            noise["alpha_min"] = 1.0 - method.alpha_cap
        else:
            noise["alpha_max"] = method.alpha_cap
        if method.adaptive is not None:
            ad, st = method.adaptive, method.adaptive.get_extra_state()
            buf = st["t_buf"]
            noise.update(
                adaptive_refit_every=ad.refit_every,
                adaptive_buffer_size=int(len(buf)) if buf is not None else ad.buffer_size or None,
                adaptive_ema=ad.ema,
                adaptive_uniform_mix=ad.uniform_mix,
                adaptive_warmup_steps=ad.warmup,
                adaptive_n_grid=ad.n_grid,
                adaptive_n_knots=ad.n_knots,
                adaptive_spline_degree=ad.degree,
                adaptive_ridge_alpha=ad.ridge,
            )
        return {
            "model": model,
            "algo": {
                "diffusion_type": "sphere",
                "backbone": "sphere-dit",
                "time_conditioning": o.time_conditioning,
                "invert_time_convention": inverted,
                # SphereArch: its matrices are re-projected every step (mandatory); the
                # SphereDiT re-projects its embedding table (our renorm)
                "renormalize_weights": arch or bool(o.renorm),
                "slerp_precision": "float64" if o.slerp_float64 else "float32",
                "eps": 1e-6,
                "loss_type": "ce",
                "self_conditioning": False,
                "p_self_cond": 0.25,  # configs/algo/sfm.yaml (read even when self-cond is off)
            },
            "noise": noise,
            "sampler": {
                "predictor": "sfm",
                "noise_removal": "greedy" if o.final_decode == "argmax" else "ancestral",
            },
        }

    def export_state(self, family, method) -> dict:
        if method.adaptive is None:
            return {}
        st = method.adaptive.get_extra_state()
        zeros = torch.zeros(st["n_grid"], dtype=torch.float64)
        return {
            "noise.t_buf": st["t_buf"] if st["t_buf"] is not None else zeros.clone(),
            "noise.loss_buf": st["loss_buf"] if st["loss_buf"] is not None else zeros.clone(),
            "noise.buf_pos": torch.tensor(st["buf_pos"]),
            "noise.alpha_vals": st["alpha_vals"] if st["alpha_vals"] is not None else zeros,
            "noise.has_schedule": torch.tensor(st["alpha_vals"] is not None),
            "noise.ema_alpha_vals": st["ema_vals"],
            "noise.refit_count": torch.tensor(st["refit_count"]),
        }


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
    #: the sampler's exact velocity (sflm.sampler) runs between backbone calls (bench.perf)
    exact_velocity = True
    #: the schedule's constants and its refit's settings: scalars and a (n_grid,) table, no
    #: tensor of the batch changes shape with them (bench.rehearse measures batch 2 once)
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
        if o.final_decode == "sample":  # a sampled last step depends on T even for top-1
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
        if self.opts.backbone == "sarch":
            net = SArch(self.vocab_size, size)
        else:
            net = DiT(self.vocab_size, self.vocab_size, size)
            torch.nn.init.normal_(
                net.embed.weight, std=1.0 / math.sqrt(size.d_model)
            )  # reference model.init=ngpt
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
        if self.opts.time_convention == "inverted":
            return (-torch.log1p(-alpha_t)).float()
        return (-torch.log(alpha_t)).float()

    def net_input(self, z: Tensor, backbone) -> Tensor:
        """What the denoiser is fed: z (unit norm), or z sqrt(d) for the DiT with input_scale=sqrt_d
        (the S-arch normalises its input, so the scale would be a no-op there)."""
        if self.opts.input_scale == "sqrt_d" and self.opts.backbone == "dit":
            return z * math.sqrt(z.shape[-1])
        return z

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
        with k; k = 1 (an argmax) is its own. Needs the built backbone's width."""
        d = parse_decoding(self.resolve_decoding(decoding), self.opts.top_k)
        if d.velocity != "topk" or self.dim is None:
            return decoding, 0
        path = topk_path(d.k, self.vocab_size, self.dim)
        return (f"topk-{path}", d.k) if path in ("gather", "dense") else (decoding, 0)

    def resolve_decoding(self, decoding: str) -> str:
        if decoding == "default":
            return self.decodings[0]
        parse_decoding(decoding, self.opts.top_k)  # raises a clear error on unknown names
        return decoding

    def float32_by_size(self) -> bool:
        """True when the sampler runs in float32 whatever ``float64`` asks: ``velocity_dtype``
        ``auto`` and |V| > :data:`FLOAT32_ABOVE_VOCAB`."""
        return self.opts.velocity_dtype == "auto" and self.vocab_size > FLOAT32_ABOVE_VOCAB

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
