"""How a reference file becomes one of our models: the method, the options its sample script ran
with (and the choices the file allows), sizes and vocabulary (:func:`spec`), the EMA state dict
in our names (:func:`our_state`), the adaptive schedule's state (:func:`adaptive_state`) and what
``inspect`` prints (:func:`describe`). Facts per family: docs/checkpoints.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from bench.checkpoints.names import DROPPED, rename
from bench.checkpoints.reference import METHOD_OF, RefFile
from bench.checkpoints.source import CheckpointError


@dataclass
class Spec:
    """How a reference file becomes one of our models.

    ``options``: our method's options as the file implies (the reference's sampling behaviour by
    default); ``choices``: options the file allows other values for (name -> allowed values,
    the first the default); ``vocab_size``: our model's |V|."""

    family: str
    method: str
    options: dict
    choices: dict[str, list]
    backbone: dict
    vocab_size: int
    seq_len: int | None
    notes: list[str] = field(default_factory=list)


def _num(ref: RefFile, key: str, default: Any) -> Any:
    v = ref.cfg(key, default)
    if v is None:
        return default
    if isinstance(v, str):  # an interpolation such as ${eval:...}: never resolved
        raise CheckpointError(
            f"{ref.path}: config.{key} is {v!r}, which needs the reference's resolvers"
        )
    return v


def spec(ref: RefFile) -> Spec:
    """The method, options, backbone and vocabulary a reference file maps to."""
    from bench.backbones.dit import SIZES

    fam = ref.family
    V_in, V_out = ref.vocab_rows, ref.out_rows
    # vocabulary rows (reference dataloader.get_tokenizer + algo constructors): AR / MDLM carry a
    # mask row after the vocabulary, CANDI a mask input row and a dropped mask logit
    vocab = {"ar": V_in - 1, "mdlm": V_in - 1, "candi": V_in - 1}.get(fam, V_in)
    want_out = {"ar": vocab + 1, "mdlm": vocab + 1, "candi": vocab + 1}.get(fam, vocab)
    if V_out != want_out:
        raise CheckpointError(
            f"{ref.path}: a {fam} checkpoint with {V_in} input rows should have {want_out} output "
            f"rows, has {V_out}"
        )
    if ref.mlp_ratio != 4:
        raise CheckpointError(f"{ref.path}: MLP ratio {ref.mlp_ratio} (the shared backbone has 4)")
    if fam == "sfm_dit" and ref.cfg("model.learn_temperature_scaling"):
        raise CheckpointError(
            f"{ref.path}: model.learn_temperature_scaling=True (an extra output column) is not "
            "supported"
        )
    n_heads = ref.n_heads
    cond = ref.cond_dim or int(_num(ref, "model.cond_dim", 128))
    dropout = float(_num(ref, "model.dropout", 0.0))
    sizes = {"n_blocks": ref.n_blocks, "d_model": ref.d_model, "n_heads": n_heads,
             "cond_dim": cond, "dropout": dropout}  # fmt: skip
    preset = next(
        (name for name, s in SIZES.items()
         if (s.n_blocks, s.d_model, s.n_heads, s.cond_dim) ==
         (ref.n_blocks, ref.d_model, n_heads, cond)),
        "small",
    )  # fmt: skip
    backbone = {"size": preset, **sizes}
    opts: dict[str, Any] = {}
    choices: dict[str, list] = {}
    notes: list[str] = []
    eps = float(_num(ref, "noise.eps", 1e-3))
    if fam == "mdlm":
        opts = {"time_conditioning": bool(_num(ref, "algo.time_conditioning", False)), "eps": eps}
    elif fam == "duo":
        opts = {"time_conditioning": bool(_num(ref, "algo.time_conditioning", True)), "eps": eps}
    elif fam == "candi":
        temp = float(_num(ref, "algo.temp", 1.0))
        if temp != 1.0:  # reference CANDI divides its log-probs by algo.temp; ours has no such knob
            raise CheckpointError(f"{ref.path}: CANDI algo.temp={temp} (supported: 1.0)")
        opts = {
            "pure_gaussian": bool(_num(ref, "algo.pure_continuous", False)),
            "mixed_coeff": float(_num(ref, "algo.mixed_coeff", 0.5)),
            "min_percentile": float(_num(ref, "algo.min_percentile", 0.01)),
            "max_percentile": float(_num(ref, "algo.max_percentile", 0.25)),
            "sigma_min": float(_num(ref, "algo.sigma_min", 0.01)),
            "sigma_max": float(_num(ref, "algo.sigma_max", 2.0)),
            "eps": eps,
        }
    elif fam == "flm":
        cap = float(_num(ref, "algo.cap_value", 0.0) or 0.0)
        opts = {"output_cap": cap}
        if cap > 0:  # reference TrainerBase.forward: logits / T, then the cap
            opts["cap_order"] = "temperature_then_cap"
        if ref.repo == "flm":
            # david3684/flm DDiTBlock hard-codes softcap 50; the s-flm sample script
            # (scripts/sample/owt/flm.sh, model=small-flm) runs the file with 0
            opts["attn_softcap"] = 0.0
            choices["attn_softcap"] = [0.0, 50.0]
            notes.append(
                "FLM repository file: trained with attention softcap 50; attn_softcap=0 (default) "
                "is how the S-FLM harness sampled it, 50 is the model as trained"
            )
        else:
            opts["attn_softcap"] = float(_num(ref, "model.softcap", 0.0) or 0.0)
    elif fam in ("sfm_dit", "sfm_arch"):
        kind = ref.cfg("noise.type", "log-linear")  # s-flm configs/noise/*.yaml
        schedule = {"log-linear": "linear", "cosine-squared": "cos2"}.get(kind)
        if schedule is None:
            raise CheckpointError(
                f"{ref.path}: noise.type {kind!r} (supported: log-linear, cosine-squared)"
            )
        opts = {"backbone": "sarch" if fam == "sfm_arch" else "dit", "eps": eps,
                "schedule": schedule, "input_scale": "unit", "renorm": False}  # fmt: skip
        if fam == "sfm_arch":
            if not ref.cfg("model.use_time_alpha", True):
                raise CheckpointError(f"{ref.path}: S-arch without use_time_alpha is not supported")
            mlp = ref.cfg("model.mlp_type", "gelu")
            if mlp not in (None, "gelu"):
                raise CheckpointError(f"{ref.path}: S-arch mlp_type {mlp!r} (supported: gelu)")
            if ref.cfg("model.normalize_input_embed"):
                raise CheckpointError(f"{ref.path}: normalize_input_embed=True is not supported")
        inverted = bool(
            _num(ref, "algo.invert_time_convention", True)
        )  # configs/algo/sfm.yaml default
        if inverted:
            # s-flm algo.SFM: the schedule's alpha is 1 - clean weight; alpha_min = 1 - cap
            amin = float(_num(ref, "noise.alpha_min", 0.0))
            if not 0.0 < amin < 1.0:
                raise CheckpointError(
                    f"{ref.path}: inverted time convention needs 0 < noise.alpha_min < 1, "
                    f"got {amin}"
                )
            opts["alpha_trunc_inverted"] = amin
            opts["time_convention"] = "inverted"
        else:
            amax = _num(ref, "noise.alpha_max", None)
            opts["alpha_max"] = 1.0 if amax is None else float(amax)
        if ref.adaptive:
            # reference sampling rebuilt no spline on load: it ran the base truncated schedule
            opts["adaptive"] = False
            choices["adaptive"] = [False, True]
            has = bool(ref.noise.get("has_schedule", torch.tensor(False)).item())
            notes.append(
                "adaptive schedule in the file "
                f"(fitted: {has}, refits: {int(ref.noise.get('refit_count', torch.tensor(0)))}); "
                "adaptive=false (default) samples with the base truncated schedule as the "
                "reference harness did, adaptive=true with the fitted schedule (as trained)"
            )
    length = ref.cfg("model.length")
    if ref.ours is not None:  # exported here: our exact options and sizes
        o = ref.ours
        if o.get("method") != METHOD_OF[fam] or int(o.get("vocab_size", -1)) != vocab:
            raise CheckpointError(
                f"{ref.path}: its sflm_bench record ({o.get('method')}, |V| "
                f"{o.get('vocab_size')}) does not match the weights ({METHOD_OF[fam]}, |V| {vocab})"
            )
        opts, backbone, choices = dict(o["options"]), dict(o["backbone"]), {}
        length = o.get("seq_len", length)
    return Spec(
        family=fam,
        method=METHOD_OF[fam],
        options=opts,
        choices=choices,
        backbone=backbone,
        vocab_size=vocab,
        seq_len=length if isinstance(length, int) else None,
        notes=notes + list(ref.warnings),
    )


def our_state(ref: RefFile, vocab: int) -> dict[str, torch.Tensor]:
    """The backbone state dict in our names (EMA weights; mask rows sliced where ours has no
    mask class)."""
    fam = ref.family
    out = {}
    for k, v in ref.weights.items():
        if DROPPED.search(k):
            continue
        name = rename(k, fam)
        t = v
        if fam == "ar" and name in ("embed.weight", "head.weight", "head.bias"):
            # reference AR: mask row last, its logit forced to -1e6 (algo.AR._process_model_output)
            t = v[:vocab]
        elif fam == "candi" and name in ("head.weight", "head.bias"):
            t = v[:vocab]  # reference ContDIT.forward drops the mask logit column
        out[name] = t.detach().to(torch.float32).clone()
    return out


def adaptive_state(ref: RefFile) -> dict:
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


def describe(ref: RefFile, sp: Spec) -> dict:
    """What ``inspect`` prints."""
    out = {
        "file": str(ref.path),
        "family": ref.family,
        "written_by": {"s-flm": "S-FLM harness", "flm": "FLM repository"}[ref.repo],
        "method": sp.method,
        "backbone": sp.backbone,
        "parameters": sum(v.numel() for k, v in ref.weights.items() if not DROPPED.search(k)),
        "vocab_rows": {"input": ref.vocab_rows, "output": ref.out_rows, "our_vocab": sp.vocab_size},
        "seq_len": sp.seq_len,
        "global_step": ref.global_step,
        "epoch": ref.epoch,
        "ema": ref.has_ema,
        "options": sp.options,
        "choices": sp.choices,
        "notes": sp.notes,
    }
    if ref.adaptive:
        n = ref.noise
        a = n["alpha_vals"].double()
        out["adaptive_schedule"] = {
            "fitted": bool(n.get("has_schedule", torch.tensor(False)).item()),
            "refit_count": int(n.get("refit_count", torch.tensor(0)).item()),
            "alpha_range": [float(a.min()), float(a.max())],
            "buffer": int(n["t_buf"].numel()) if "t_buf" in n else None,
        }
    if ref.replaced:
        out["placeholders"] = ref.replaced
    return out
