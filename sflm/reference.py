"""S-FLM's reference checkpoint format (:class:`SFLMReference`, the class attribute
``SFLM.reference``; bench.reference_format, docs/checkpoints.md): the files of s-flm ``algo.SFM``
on its sphere-DiT or S-arch, read into options and written back, with the tables the option values
map through (:data:`NOISE_TYPES`, :data:`NOISE_REMOVALS`, :data:`FILE_BACKBONES`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from bench.reference_format import ReferenceFamily, ReferenceFormat
from sflm.options import TIME_CONVENTIONS

#: ``schedule`` -> the reference's ``noise.type`` (s-flm configs/noise/*.yaml)
NOISE_TYPES = {"linear": "log-linear", "cos2": "cosine-squared"}
#: ``final_decode`` -> the reference's ``sampler.noise_removal``
NOISE_REMOVALS = {"argmax": "greedy", "sample": "ancestral"}


def _check_dit_file(ref) -> None:
    if ref.cfg("model.learn_temperature_scaling"):
        raise ref.error(
            "model.learn_temperature_scaling=True (an extra output column) is not supported"
        )


def _check_sarch_file(ref) -> None:
    if not ref.cfg("model.use_time_alpha", True):
        raise ref.error("S-arch without use_time_alpha is not supported")
    mlp = ref.cfg("model.mlp_type", "gelu")
    if mlp not in (None, "gelu"):
        raise ref.error(f"S-arch mlp_type {mlp!r} (supported: gelu)")
    if ref.cfg("model.normalize_input_embed"):
        raise ref.error("normalize_input_embed=True is not supported")


@dataclass(frozen=True)
class FileBackbone:
    """What a reference file of one backbone (a family's ``layout``, the ``backbone`` option)
    says beyond the shared keys.

    Attributes:
        check: ``check(ref)`` raises ``ref.error`` for a file this harness cannot represent.
        model: the ``config.model`` keys an exported file carries for it.
        renormalizes: the reference re-projects its matrices after every step (mandatory).
    """

    check: Callable[..., None]
    model: dict = field(default_factory=dict)
    renormalizes: bool = False


#: family layout (= ``backbone`` option) -> :class:`FileBackbone`
FILE_BACKBONES = {
    "dit": FileBackbone(_check_dit_file, {"learn_temperature_scaling": False}),
    "sarch": FileBackbone(
        _check_sarch_file,
        {
            "use_time_alpha": True,
            "use_time_token": False,
            "mlp_type": "gelu",
            "normalize_input_embed": False,
        },
        renormalizes=True,
    ),
}


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
        return {f.layout: f for f in self.families}[options.backbone]

    def options_from(self, ref, family):
        FILE_BACKBONES[family.layout].check(ref)
        kind = ref.cfg("noise.type", "log-linear")  # s-flm configs/noise/*.yaml
        schedule = {t: name for name, t in NOISE_TYPES.items()}.get(kind)
        if schedule is None:
            raise ref.error(f"noise.type {kind!r} (supported: log-linear, cosine-squared)")
        opts = {
            "backbone": family.layout,
            "eps": float(ref.num("noise.eps", 1e-3)),
            "schedule": schedule,
            "input_scale": "unit",
            "renorm": False,
        }
        choices, notes = {}, []
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
        backbone = FILE_BACKBONES[family.layout]
        model = {"init": "ngpt", "eps": 1e-6, "pretrained_ckpt_path": None, **backbone.model}
        inverted = TIME_CONVENTIONS[o.time_convention].inverted
        noise: dict = {
            "type": NOISE_TYPES[o.schedule],
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
                "renormalize_weights": backbone.renormalizes or bool(o.renorm),
                "slerp_precision": "float64" if o.slerp_float64 else "float32",
                "eps": 1e-6,
                "loss_type": "ce",
                "self_conditioning": False,
                "p_self_cond": 0.25,  # configs/algo/sfm.yaml (read even when self-cond is off)
            },
            "noise": noise,
            "sampler": {
                "predictor": "sfm",
                "noise_removal": NOISE_REMOVALS[o.final_decode],
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
