"""S-FLM's options (:class:`SFLMOptions`, the ``options:`` of an ``sflm`` sweep entry) and the
tables their values are looked up in: the named clean-weight caps (:data:`NAMED_CAPS`) and the
network's time conventions (:data:`TIME_CONVENTIONS`). The method is :mod:`sflm.method`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from bench.config import ConfigError
from bench.options import Options, option
from sflm.alpha_star import alpha_star

#: the named clean-weight caps ``alpha_max`` takes beside a number: name -> cap(options, |V|, d)
NAMED_CAPS: dict[str, Callable[..., float]] = {
    "star": lambda o, vocab, dim: alpha_star(vocab, dim, o.delta),  # paper eq. alpha-crit
}


@dataclass(frozen=True)
class TimeConvention:
    """What the network is fed as its time input for clean weight alpha_t (``time_convention``).

    Attributes:
        sigma: alpha_t -> the time input (before the float32 cast of ``SFLM.sigma``).
        inverted: the reference's ``algo.invert_time_convention`` (files read and written).
        adaptive: may be combined with the adaptive schedule (the reference requires
            ``invert_time_convention=false`` for it: s-flm algo.py::SFM._validate_configuration).
    """

    sigma: Callable[[Tensor], Tensor]
    inverted: bool
    adaptive: bool


def _sigma_clean(alpha_t: Tensor) -> Tensor:
    # reference _sigma_from_alphat, invert_time_convention=false: sigma = -log(alpha)
    return -torch.log(alpha_t)


def _sigma_inverted(alpha_t: Tensor) -> Tensor:
    # reference invert_time_convention=true: sigma = -log(1 - alpha) (log1p: exact for small alpha)
    return -torch.log1p(-alpha_t)


#: ``time_convention`` -> its :class:`TimeConvention`
TIME_CONVENTIONS = {
    "clean": TimeConvention(_sigma_clean, inverted=False, adaptive=True),
    "inverted": TimeConvention(_sigma_inverted, inverted=True, adaptive=False),
}


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
        choices=tuple(TIME_CONVENTIONS),
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
            if self.alpha_max not in NAMED_CAPS:
                raise ConfigError(
                    f"alpha_max: must be a number in (0, 1] or 'star', got {self.alpha_max!r}"
                )
        elif not 0.0 < self.alpha_max <= 1.0:
            raise ConfigError(f"alpha_max: must be in (0, 1], got {self.alpha_max!r}")
        if self.alpha_trunc_inverted is not None and self.alpha_max != _default("alpha_max"):
            raise ConfigError(
                "alpha_trunc_inverted: set either alpha_max or alpha_trunc_inverted, not both"
            )
        if self.adaptive and not TIME_CONVENTIONS[self.time_convention].adaptive:
            # as the reference (s-flm algo.py::SFM._validate_configuration)
            raise ConfigError(
                f"time_convention: {self.time_convention!r} cannot be combined with adaptive: true "
                "(the reference requires invert_time_convention=false for the adaptive schedule)"
            )

    def clean_weight_cap(self, vocab_size: int, dim: int) -> float:
        """The canonical cap on alpha (clean weight) this configuration trains on."""
        if self.alpha_trunc_inverted is not None:
            return 1.0 - self.alpha_trunc_inverted  # inverted convention -> clean weight
        if isinstance(self.alpha_max, str):
            return NAMED_CAPS[self.alpha_max](self, vocab_size, dim)
        return float(self.alpha_max)


def _default(name: str):
    """The default of the :class:`SFLMOptions` field ``name``."""
    return next(f.default for f in fields(SFLMOptions) if f.name == name)
