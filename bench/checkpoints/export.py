"""A model trained here, written in the reference harness's checkpoint format (so the S-FLM
paper's harness, FrankCCCCC/s-flm, can load and sample it).

The file has the reference's container keys (``state_dict`` with ``backbone.*`` names,
``ema.shadow_params`` by position, ``hyper_parameters.config`` with the model / algo / noise keys
its sample scripts read, ``global_step``...). Our EMA weights fill both ``state_dict`` and the EMA
list (only the averaged weights are kept here). Rows the reference has and we do not (AR / MDLM
mask class: already ours for MDLM; AR and CANDI's mask logit) are added as zeros: the reference
forces those logits to -1e6 / drops them. Our own method, options and sizes ride along under
``hyper_parameters["sflm_bench"]`` so that converting the file back gives the same model.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench.checkpoints.names import reference_order, unrename
from bench.checkpoints.source import CheckpointError

#: reference ``algo.name`` per family (s-flm configs/algo)
_ALGO = {"ar": "ar", "mdlm": "mdlm", "duo": "duo_base", "candi": "candi", "flm": "flm",
         "sfm_dit": "sfm", "sfm_arch": "sfm"}  # fmt: skip


def _progress(n: int) -> dict:
    return {"ready": n, "started": n, "processed": n, "completed": n}


def _family(method: str, options: dict) -> str:
    if method == "sflm":
        return "sfm_arch" if options.get("backbone") == "sarch" else "sfm_dit"
    return method


def read_run(run_dir: Path) -> dict:
    """method, options, backbone, vocab_size, seq_len of a run folder (a train cell's
    ``cell.json``) or of a model folder (``model.json``)."""
    from bench import registry
    from bench.checkpoints import MODEL_JSON

    if (run_dir / MODEL_JSON).is_file():
        m = json.loads((run_dir / MODEL_JSON).read_text())
        return {k: m[k] for k in ("method", "options", "backbone", "vocab_size", "seq_len")}
    cell = run_dir / "cell.json"
    if not cell.is_file():
        raise CheckpointError(f"{run_dir}: not a run folder (no cell.json or {MODEL_JSON})")
    c = json.loads(cell.read_text())
    from bench.config import TaskConfig

    task = registry.make_task(TaskConfig(**c["task"]))
    return {
        "method": c["method"],
        "options": c["options"],
        "backbone": c["backbone"],
        "vocab_size": c.get("vocab_size") or task.vocab_size,
        "seq_len": task.seq_len,
    }


def _config(family: str, method, facts: dict, size) -> dict:
    o = facts["options"]
    model = {
        "hidden_size": size.d_model,
        "cond_dim": size.cond_dim,
        "n_blocks": size.n_blocks,
        "n_heads": size.n_heads,
        "dropout": size.dropout,
        "length": facts["seq_len"],
        "softcap": float(o.get("attn_softcap", 0.0)) if family == "flm" else 0.0,
        "learn_temperature_scaling": False,
        "use_time_alpha": True,
        "mlp_type": "gelu",
        "normalize_input_embed": False,
        "init": "ngpt" if family.startswith("sfm") else "default",
    }
    algo: dict = {"name": _ALGO[family], "causal_attention": family == "ar",
                  "adaLN": family != "ar"}  # fmt: skip
    noise: dict = {"type": "log-linear", "eps": float(o.get("eps", 1e-3))}
    if family in ("mdlm", "duo"):
        algo["time_conditioning"] = bool(o.get("time_conditioning"))
    elif family == "candi":
        algo.update(
            pure_continuous=bool(o["pure_gaussian"]),
            mixed_coeff=o["mixed_coeff"],
            min_percentile=o["min_percentile"],
            max_percentile=o["max_percentile"],
            sigma_min=o["sigma_min"],
            sigma_max=o["sigma_max"],
        )
    elif family == "flm":
        algo["cap_value"] = float(o["output_cap"]) if o.get("output_cap") else None
    elif family.startswith("sfm"):
        inverted = o.get("time_convention") == "inverted"
        algo["invert_time_convention"] = inverted
        algo["renormalize_weights"] = family == "sfm_arch"
        cap = method.alpha_cap
        if inverted:
            noise["alpha_min"] = 1.0 - cap
        else:
            noise["alpha_max"] = cap
        noise["adaptive"] = bool(o.get("adaptive"))
        if o.get("schedule") == "cos2":
            noise["type"] = "cosine-squared"
    return {"model": model, "algo": algo, "noise": noise, "training": {"ema": 0.9999}}


def export(run_dir: str | Path, out: str | Path) -> Path:
    """Write the model of ``run_dir`` (a run or model folder with ``weights.pt``) to ``out`` in
    the reference format. Returns ``out``."""
    from bench import atomic
    from bench.backbones.dit import resolve_size
    from bench.checkpoints import build_model
    from bench.config import BackboneConfig
    from bench.train import load_weights

    run_dir, out = Path(run_dir), Path(out)
    weights = run_dir / "weights.pt"
    if not weights.is_file():
        raise CheckpointError(f"{run_dir}: no weights.pt (is training finished?)")
    facts = read_run(run_dir)
    family = _family(facts["method"], facts["options"])
    method, backbone = build_model(
        facts["method"], facts["options"], facts["backbone"], facts["vocab_size"],
        facts["seq_len"] or 1024,
    )  # fmt: skip
    meta = load_weights(method, backbone, weights)
    size = resolve_size(BackboneConfig(**facts["backbone"]))
    V = facts["vocab_size"]
    embed_name = "sphere_embed.weight" if family.startswith("sfm") else "vocab_embed.embedding"
    sd: dict[str, torch.Tensor] = {}
    for k, v in backbone.state_dict().items():
        t = v.detach().float().clone()
        if family in ("ar", "candi") and k in ("head.weight", "head.bias"):
            t = torch.cat([t, torch.zeros((1, *t.shape[1:]), dtype=t.dtype)])  # mask logit row
        if family == "ar" and k == "embed.weight":
            t = torch.cat([t, torch.zeros(1, t.shape[1])])  # mask input row (never fed)
        sd[unrename(k, family, embed_name)] = t
    head_dim = size.d_model // size.n_heads
    sd["rotary_emb.inv_freq"] = 1.0 / (10_000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    # the reference module's order: its EMA list is matched to its parameters by position
    state_dict = {
        f"backbone.{k}": sd[k] for k in sorted(sd, key=lambda k: reference_order(k, family))
    }
    ordered = {k: v for k, v in state_dict.items() if not k.endswith("rotary_emb.inv_freq")}
    if family == "sfm_dit" or family == "sfm_arch":
        ad = getattr(method, "adaptive", None)
        if ad is not None:
            st = ad.get_extra_state()
            n = st["n_grid"]
            zeros = torch.zeros(n, dtype=torch.float64)
            state_dict.update({
                "noise.t_buf": st["t_buf"] if st["t_buf"] is not None else zeros.clone(),
                "noise.loss_buf": st["loss_buf"] if st["loss_buf"] is not None else zeros.clone(),
                "noise.buf_pos": torch.tensor(st["buf_pos"]),
                "noise.alpha_vals": st["alpha_vals"] if st["alpha_vals"] is not None else zeros,
                "noise.has_schedule": torch.tensor(st["alpha_vals"] is not None),
                "noise.ema_alpha_vals": st["ema_vals"],
                "noise.refit_count": torch.tensor(st["refit_count"]),
            })  # fmt: skip
    if family == "candi":  # reference algo.CANDI: sigma grid and the error rate r(sigma) on it
        state_dict["cont_noise_table"] = method.sigma_table.float().clone()
        state_dict["disc_noise_table"] = method.rate_table.float().clone()
    shadow = [v.clone() for v in ordered.values()]
    steps = int(meta.get("steps", 0))
    ckpt = {
        "epoch": 0,
        "global_step": steps,
        "pytorch-lightning_version": "2.4.0",
        "state_dict": state_dict,
        "ema": {"decay": 0.9999, "num_updates": steps, "shadow_params": shadow},
        # reference TrainerBase.on_load_checkpoint reads these two progress counters
        "loops": {
            "fit_loop": {
                "epoch_progress": {"total": _progress(0), "current": _progress(0)},
                "epoch_loop.batch_progress": {
                    "total": _progress(steps),
                    "current": _progress(steps),
                },
            }
        },  # fmt: skip
        "callbacks": {},
        "optimizer_states": [],
        "lr_schedulers": [],
        "hparams_name": "kwargs",
        "hyper_parameters": {
            "config": _config(family, method, facts, size),
            "tokenizer": None,
            "vocab_size": V if family in ("ar", "mdlm", "candi") else None,
            "sflm_bench": {
                k: facts[k] for k in ("method", "options", "backbone", "vocab_size", "seq_len")
            },  # fmt: skip
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_with(out, lambda tmp: torch.save(ckpt, tmp))
    return out
