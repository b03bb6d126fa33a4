"""A model trained here, written in the reference harness's checkpoint format (so the S-FLM
paper's harness, FrankCCCCC/s-flm, can load and sample it).

The file has the reference's container keys (``state_dict`` with ``backbone.*`` names,
``ema.shadow_params`` by position, ``hyper_parameters.config``, ``global_step``...). Our EMA
weights fill both ``state_dict`` and the EMA list (only the averaged weights are kept here). Rows
the reference has and we do not (a mask class our backbone lacks: AR's input row and logit,
CANDI's logit) are added as zeros: the reference forces those logits to -1e6 / drops them. Our
own method, options and sizes ride along under ``hyper_parameters["sflm_bench"]`` so that
converting the file back gives the same model.

The config (:func:`reference_config`) is one the reference builds the model from on its own:
every key its backbone constructors read (``model.type`` picks the class) and those its
algorithm classes read in the released files' schema, stored as an omegaconf ``DictConfig``
(the reference reads it by attribute, ``config.model.type``), as the released files store it.
What differs per family comes from the model's method (``Method.reference``,
:mod:`bench.reference_format`): the family, its config sections and extra buffers.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch

from bench.checkpoints import families
from bench.checkpoints.names import layout, reference_order, unrename
from bench.checkpoints.source import CheckpointError


def _progress(n: int) -> dict:
    return {"ready": n, "started": n, "processed": n, "completed": n}


def read_run(run_dir: Path) -> dict:
    """method, options, backbone, vocab_size, seq_len (and ``train``, the training recipe, for a
    run folder) of a run folder (a train cell's ``cell.json``) or of a model folder
    (``model.json``)."""
    from bench import registry
    from bench.checkpoints import MODEL_JSON

    if (run_dir / MODEL_JSON).is_file():
        m = json.loads((run_dir / MODEL_JSON).read_text())
        facts = {k: m[k] for k in ("method", "options", "backbone", "vocab_size", "seq_len")}
        return {**facts, "train": {}}
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
        "train": dict(c.get("train") or {}),
    }


# --------------------------------------------------------------------------- the config


def reference_config(family, fmt, method, facts: dict, size) -> dict:
    """The config an exported file carries: the generic sections (sizes, ``model.type`` and
    ``algo.name`` of ``family``, the training recipe, the reference's evaluation defaults) with
    the method's own sections (``fmt.export_config``) merged over them key by key."""
    from bench.config import TrainConfig

    recipe = TrainConfig()
    train = facts.get("train") or {}
    cfg: dict[str, dict | Any] = {
        "neg_infinity_mode": "large-finite",  # reference TrainerBase: masked logits at -1e6
        "model": {
            "type": family.model_type,
            "hidden_size": size.d_model,
            "cond_dim": size.cond_dim,
            "length": facts["seq_len"],
            "n_blocks": size.n_blocks,
            "n_heads": size.n_heads,
            "dropout": size.dropout,
        },
        "algo": {
            "name": family.algo,
            "parameterization": "mean",
            "time_conditioning": True,
            "causal_attention": False,
            "adaLN": True,
            "T": 0,
        },
        "noise": {
            "type": "log-linear",
            "eps": 1e-3,
            "alpha_min": None,
            "alpha_max": None,
            "adaptive": False,
        },
        "sampler": {"predictor": "ancestral", "noise_removal": "ancestral", "p_nucleus": 1.0},
        "training": {
            "ema": float(train.get("ema", recipe.ema)),
            "antithetic_sampling": bool(train.get("antithetic", recipe.antithetic)),
            "sampling_eps": 1e-3,
        },
        "prior": {"type": "none"},
        "optim": {
            "lr": float(train.get("lr", recipe.lr)),
            "weight_decay": float(train.get("weight_decay", recipe.weight_decay)),
            "beta1": float(train.get("betas", recipe.betas)[0]),
            "beta2": float(train.get("betas", recipe.betas)[1]),
            "eps": 1e-8,
        },
        "eval": {
            "strict_loading": True,
            "disable_ema": False,
            "generate_samples": False,
            "compute_generative_perplexity": False,
            "compute_perplexity_on_sanity": False,
            "gen_ppl_eval_model_name_or_path": "gpt2-large",
            "perplexity_batch_size": 8,
        },
    }
    for section, values in fmt.export_config(family, method).items():
        if isinstance(values, dict) and isinstance(cfg.get(section), dict):
            cfg[section] = {**cfg[section], **values}
        else:
            cfg[section] = values
    return cfg


class _DictConfigClass:
    """Stands for ``omegaconf.dictconfig.DictConfig`` in the pickle (:class:`_Pickler` writes
    that name for it); never instantiated, and omegaconf is never imported here."""


class DictConfigPickle(dict):
    """A config that unpickles as ``omegaconf.dictconfig.DictConfig(<this dict>)``: the
    reference (which has omegaconf) reads it by attribute (``config.model.type``), nested
    sections included, as it reads the released files' configs. Written with
    :data:`pickle_module` (``torch.save(..., pickle_module=pickle_module)``), whether or not
    omegaconf is installed here; without omegaconf a reader gets a placeholder
    (:func:`bench.checkpoints.unpickle.plain` reads it back as the dict)."""

    def __reduce__(self):
        return (_DictConfigClass, (dict(self),))


class _Pickler(pickle._Pickler):  # the Python pickler: its save_global can be overridden
    def save_global(self, obj, name=None):
        if obj is _DictConfigClass:
            self.write(pickle.GLOBAL + b"omegaconf.dictconfig\nDictConfig\n")
            self.memoize(obj)
            return
        super().save_global(obj, name)


class pickle_module:  # noqa: N801 - passed to torch.save as a module
    """What ``torch.save(..., pickle_module=...)`` needs: a ``Pickler`` that writes
    :class:`DictConfigPickle` as an omegaconf ``DictConfig``."""

    Pickler = _Pickler


# --------------------------------------------------------------------------- the file


def export(run_dir: str | Path, out: str | Path, *, ours: bool = True) -> Path:
    """Write the model of ``run_dir`` (a run or model folder with ``weights.pt``) to ``out`` in
    the reference format. Returns ``out``. ``ours=False`` leaves out the ``sflm_bench`` record,
    as in the reference's own files: the importer then reads the options from the config alone,
    as it reads the released files (``python -m bench.sweep --rehearse`` imports such a file)."""
    from bench.checkpoints import build_model
    from bench.weights import WEIGHTS_FILE, load_weights

    run_dir = Path(run_dir)
    weights = run_dir / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"{run_dir}: no weights.pt (is training finished?)")
    facts = read_run(run_dir)
    families.reference_format(facts["method"], str(run_dir))  # a method without one: an error
    method, backbone = build_model(
        facts["method"], facts["options"], facts["backbone"], facts["vocab_size"],
        facts["seq_len"] or 1024,
    )  # fmt: skip
    meta = load_weights(method, backbone, weights)
    return export_model(method, backbone, facts, out, steps=int(meta.get("steps", 0)), ours=ours)


def export_model(
    method, backbone, facts: dict, out: str | Path, *, steps: int = 0, ours: bool = True
) -> Path:
    """Write ``method`` and ``backbone`` (the weights as they are) to ``out`` in the reference
    format; ``facts``: ``method``, ``options``, ``backbone``, ``vocab_size``, ``seq_len`` (and
    ``train``, the recipe, when known), as :func:`read_run` gives them. Returns ``out``."""
    from bench import atomic
    from bench.backbones.dit import resolve_size
    from bench.config import BackboneConfig

    out = Path(out)
    fmt = families.reference_format(facts["method"], str(out))
    family = fmt.family_for(method.opts)
    size = resolve_size(BackboneConfig(**facts["backbone"]))
    V = facts["vocab_size"]
    lay = layout(family.layout)
    tables = set(lay.inputs) | set(lay.outputs)  # one row per class (+ the reference's mask rows)
    rows = V + family.mask_rows
    sd: dict[str, torch.Tensor] = {}
    for k, v in backbone.state_dict().items():
        t = v.detach().float().clone()
        if k in tables and t.shape[0] < rows:  # a mask row the reference has and we do not
            t = torch.cat([t, torch.zeros((rows - t.shape[0], *t.shape[1:]), dtype=t.dtype)])
        sd[unrename(k, family.layout, family.embed)] = t
    head_dim = size.d_model // size.n_heads
    sd["rotary_emb.inv_freq"] = 1.0 / (10_000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    # the reference module's order: its EMA list is matched to its parameters by position
    state_dict = {
        f"backbone.{k}": sd[k] for k in sorted(sd, key=lambda k: reference_order(k, family.layout))
    }
    ordered = {k: v for k, v in state_dict.items() if not k.endswith("rotary_emb.inv_freq")}
    state_dict.update(fmt.export_state(family, method))  # e.g. noise.*, CANDI's tables
    shadow = [v.clone() for v in ordered.values()]
    config = reference_config(family, fmt, method, facts, size)
    ckpt = {
        "epoch": 0,
        "global_step": steps,
        "pytorch-lightning_version": "2.4.0",
        "state_dict": state_dict,
        "ema": {"decay": config["training"]["ema"], "num_updates": steps, "shadow_params": shadow},
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
            "config": DictConfigPickle(config),
            "tokenizer": None,
            "vocab_size": rows if family.vocab_in_hparams else None,
        },
    }
    if ours:
        ckpt["hyper_parameters"]["sflm_bench"] = {
            k: facts[k] for k in ("method", "options", "backbone", "vocab_size", "seq_len")
        }
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_with(out, lambda tmp: torch.save(ckpt, tmp, pickle_module=pickle_module))
    return out
