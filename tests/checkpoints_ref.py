"""Tiny checkpoints in the format of the S-FLM paper's released files (HF ``jdeschena/s-flm``)
and an independent reference forward pass on their tensors, for the importer's tests.

Everything here is written from the reference code (FrankCCCCC/s-flm @ 18d586f, david3684/flm;
summarised per file in docs/checkpoints.md), not from the project's code: nothing is
imported from ``bench``, ``baselines`` or ``sflm``, so a renaming, ordering, slicing or
convention bug in the importer makes the converted network disagree with
:func:`reference_logits`. Checked once outside the suite against the reference classes themselves
(s-flm @ 18d586f ``DIT`` / ``FLMDIT`` / ``ContDIT`` / ``SphereDiT`` / ``SphereArch`` and
david3684/flm ``DIT``, with flash-attn stubs and bf16 autocast off): every fixture loads into them
with ``strict=True``, the EMA copies in by position, and the raw outputs agree to <= 4.2e-7
(0.0 for AR, the soft-capped FLMs and flm's own DIT) for every kind in both layouts.

API
---
- :func:`write_reference_checkpoint` ``(path, kind, *, seed=0, vocab=None, **overrides) -> dict``
  writes one Lightning-style ``.ckpt`` (zip ``torch.save``) and returns what it wrote.
- :func:`reference_logits` ``(kind, ema_sd, inputs, sigma_or_time, cfg, *, temperature=1.0,
  post_process=True, attn_softcap=None) -> Tensor``: the reference backbone on the EMA tensors,
  then the family's sampling-time post-processing (s-flm algo.py).
- :func:`reference_time_input` ``(kind, cfg, *, t=None, clean_weight=None) -> Tensor | None``:
  the scalar the reference feeds ``sigma_map`` (s-flm algo.py, samplers.py).
- :func:`make_inputs` ``(info, *, batch=2, length=8, seed=0) -> dict``: representative inputs.
- :func:`vocab_rows` ``(kind, vocab, base=11) -> dict``: the row-count rules below.
- :func:`stub_dataloader_module` (context manager): makes a module named ``dataloader`` with the
  pickled tokenizer classes importable (the real files need the reference's ``dataloader.py``).

Kinds (s-flm algo.py): ``ar``, ``mdlm``, ``duo``, ``candi``, ``flm`` (flm/default), ``flm_caps``
(``model.softcap=50``, ``algo.cap_value=30``), ``sfm_dit_fixed`` (sphere-DiT,
``invert_time_convention=true``, log-linear ``alpha_min=0.869``), ``sfm_dit_adaptive`` (sphere-DiT,
adaptive schedule with the ``noise.*`` buffers), ``sfm_arch_adaptive`` (S-arch, same schedule),
``flm_owt`` (the david3684/flm layout: same tensors as FLMDIT, flm's own config schema without
``model.softcap``; that repository hard-codes attention softcap 50 and has no output cap).

Vocabulary rows (s-flm dataloader.py) at tiny scale, base vocabulary ``B`` (default 11, for
SmolLM's 49152 / GPT-2's 50257). The tokenizer adds ``[PAD]`` = id ``B`` (``len(tok) = B + 1``).

==========================  ======================  ============================
kind                        ``vocab="tinygsm"``     ``vocab="owt"``
==========================  ======================  ============================
ar, mdlm (rows in = out)    B + 2 = 13 (mask 12)    B + 1 = 12 (mask 11 = PAD id)
candi (embed rows / head)   B + 2 = 13 (mask 12);   (no released file) same rule
                            logits B + 1 = 12
duo, flm*, sfm_*            B + 1 = 12              B + 1 = 12
==========================  ======================  ============================

i.e. 49154 / 49153 for TinyGSM and 50258 for OWT at full scale. ``hyper_parameters['vocab_size']``
is the row count for ar / mdlm / candi and ``None`` for the others. The default
layout is "owt" for ``flm_owt`` and "tinygsm" for every other kind.

Weights: the ``state_dict`` holds the raw (non-EMA) weights; ``ema['shadow_params']`` holds an
independent draw (the network to reproduce), in ``state_dict`` parameter order, buffers excluded
(models/ema.py). adaLN and head weights are nonzero; ``flm_caps`` uses std-1 matrices so both caps
bite. S-arch EMA matrices are near unit norm but not exactly (an average of unit-norm matrices,
s-flm models/*.py), the raw ones exactly unit norm.
"""

from __future__ import annotations

import contextlib
import math
import sys
import tempfile
import textwrap
from collections import OrderedDict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

KINDS = (
    "ar",
    "mdlm",
    "duo",
    "candi",
    "flm",
    "flm_caps",
    "sfm_dit_fixed",
    "sfm_dit_adaptive",
    "sfm_arch_adaptive",
    "flm_owt",
)
SFM_KINDS = ("sfm_dit_fixed", "sfm_dit_adaptive", "sfm_arch_adaptive")
FLM_KINDS = ("flm", "flm_caps", "flm_owt")
#: kinds drawn with std-1 matrices so that the attention softcap (50) and output cap (30) bite
BIG_KINDS = ("flm_caps", "flm_owt")
NEG_INF = -1e6  # reference neg_infinity_mode=large-finite (trainer_base.py)
N_FREQ = 256  # TimestepEmbedder frequency features (s-flm models/*.py; s-flm models/dit.py)

#: tiny sizes (each layer type once "smallest config that exercises every layer type")
DEFAULTS = dict(
    base_vocab=11,
    hidden=32,
    n_heads=2,
    cond=16,
    n_blocks=2,
    length=8,
    global_step=1234,
    epoch=3,
    buffer_size=64,  # adaptive t_buf / loss_buf length (released: 50 x 512 = 25600)
    refit_count=4540,
    alpha_overshoot=0.0,  # add to alpha_vals[0] (a real refit gave 0.12112 for a 0.121 cap)
    compiled_infix=False,  # write ``backbone._orig_mod.*`` keys (torch.compile, s-flm checkpoints)
    teacher_keys=False,  # add ``teacher.*`` keys (filtered by the reference loaders)
    softcap=None,  # flm_caps attention softcap (default 50)
    cap_value=None,  # flm_caps output cap (default 30)
    config=None,  # {dotted key: value} set in the config after it is built, e.g. algo.mixed_coeff
)

_DATALOADER_SRC = textwrap.dedent(
    '''
    """Throwaway stand-in for the reference harness's ``dataloader.py`` (tests only)."""


    class GPT2TokenizerFast:
        """Stands in for the transformers tokenizer the real files pickle."""

        def __init__(self, name, n_tokens, pad_token_id):
            self.name_or_path = name
            self.n_tokens = n_tokens
            self.pad_token = "[PAD]"
            self.pad_token_id = pad_token_id
            self.mask_token = None

        def __len__(self):
            return self.n_tokens


    class VocabSizeTokenizerWrapper:
        """The reference wrapper: ``vocab_size`` = ``len`` of the wrapped tokenizer."""

        def __init__(self, tokenizer):
            self.tokenizer = tokenizer
            self.mask_token = None

        @property
        def vocab_size(self):
            return len(self.tokenizer)

        def __len__(self):
            return len(self.tokenizer)
    '''
)


@contextlib.contextmanager
def stub_dataloader_module():
    """Make a module named ``dataloader`` importable (from a temporary directory), yield it, then
    remove it from ``sys.modules`` and ``sys.path`` (restoring any previous one)."""
    saved = sys.modules.pop("dataloader", None)
    with tempfile.TemporaryDirectory(prefix="sflm-ref-dataloader-") as tmp:
        Path(tmp, "dataloader.py").write_text(_DATALOADER_SRC)
        sys.path.insert(0, tmp)
        try:
            import dataloader  # noqa: PLC0415  (the throwaway module just written)

            yield dataloader
        finally:
            sys.modules.pop("dataloader", None)
            sys.path.remove(tmp)
            if saved is not None:
                sys.modules["dataloader"] = saved


# --------------------------------------------------------------------------- vocabulary (sec. 5)


def vocab_rows(kind: str, vocab: str | None = None, base: int = 11) -> dict:
    """Row counts of a ``kind`` file in the ``vocab`` layout ("tinygsm" / "owt")."""
    vocab = vocab or ("owt" if kind == "flm_owt" else "tinygsm")
    if vocab not in ("tinygsm", "owt"):
        raise ValueError(f"vocab must be 'tinygsm' or 'owt', got {vocab!r}")
    pad_id, len_tok = base, base + 1
    # `vocab_size` property: the wrapper (TinyGSM) returns len(tok); bare GPT-2 excludes [PAD]
    vocab_size_prop = len_tok if vocab == "tinygsm" else base
    if kind in ("ar", "mdlm"):  # mask = vocab_size; classes = vocab_size + 1
        mask, rows_in = vocab_size_prop, vocab_size_prop + 1
        rows_out, n_logits, hp = rows_in, rows_in, rows_in
    elif kind == "candi":  # mask = len(tok); embed + head len + 1; last logit column dropped
        mask, rows_in = len_tok, len_tok + 1
        rows_out, n_logits, hp = rows_in, len_tok, rows_in
    elif kind in KINDS:  # duo, flm*, sfm*: len(tok), PAD is a class
        mask, rows_in, rows_out, n_logits, hp = None, len_tok, len_tok, len_tok, None
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return dict(
        vocab=vocab,
        base_vocab=base,
        pad_id=pad_id,
        len_tokenizer=len_tok,
        vocab_size_property=vocab_size_prop,
        mask_id=mask,
        rows_in=rows_in,
        rows_out=rows_out,
        n_logits=n_logits,
        hp_vocab_size=hp,
    )


# --------------------------------------------------------------------------- key tables (sec. 2.1)


def backbone_keys(kind: str, d: int, n_heads: int, cond: int, n_blocks: int, rows: dict) -> list:
    """``[(name after 'backbone.', shape, is_buffer)]`` in state_dict order (a module's own
    parameters, then its own buffers, then its children in registration order; s-flm models/).
    """
    hd = d // n_heads
    time = [
        ("sigma_map.mlp.0.weight", (cond, N_FREQ)),
        ("sigma_map.mlp.0.bias", (cond,)),
        ("sigma_map.mlp.2.weight", (cond, cond)),
        ("sigma_map.mlp.2.bias", (cond,)),
    ]
    rot = [("rotary_emb.inv_freq", (hd // 2,), True)]
    keys: list = []
    if kind == "sfm_arch_adaptive":  # SphereArch: own sz first, then children
        keys += [("sz", (rows["rows_out"],)), ("sphere_embed.weight", (rows["rows_in"], d))]
        keys += time + rot
        for n in range(n_blocks):
            p = f"blocks.{n}."
            keys += [
                (p + "s_fc", (4 * d,)),
                (p + "attn_alpha", (d,)),
                (p + "mlp_alpha", (d,)),
                (p + "sqk", (d,)),
                (p + "query.weight", (d, d)),
                (p + "key.weight", (d, d)),
                (p + "value.weight", (d, d)),
                (p + "att_out.weight", (d, d)),
                (p + "c_fc.weight", (4 * d, d)),
                (p + "c_fc.bias", (4 * d,)),
                (p + "mlp_out.weight", (d, 4 * d)),
                (p + "mlp_out.bias", (d,)),
                (p + "alpha_modulation.weight", (2 * d, cond)),
                (p + "alpha_modulation.bias", (2 * d,)),
            ]
        keys += [("lm_head.weight", (rows["rows_out"], d))]
    else:  # DIT / FLMDIT / ContDIT / SphereDiT (and flm:'s DIT)
        adaln = kind != "ar"
        emb = "sphere_embed.weight" if kind.startswith("sfm_dit") else "vocab_embed.embedding"
        keys += [(emb, (rows["rows_in"], d))]
        keys += (time if adaln else []) + rot
        for n in range(n_blocks):
            p = f"blocks.{n}."
            keys += [
                (p + "norm1.weight", (d,)),
                (p + "attn_qkv.weight", (3 * d, d)),
                (p + "attn_out.weight", (d, d)),
                (p + "norm2.weight", (d,)),
                (p + "mlp.0.weight", (4 * d, d)),
                (p + "mlp.0.bias", (4 * d,)),
                (p + "mlp.2.weight", (d, 4 * d)),
                (p + "mlp.2.bias", (d,)),
            ]
            if adaln:
                keys += [(p + "adaLN_modulation.weight", (6 * d, cond))]
                keys += [(p + "adaLN_modulation.bias", (6 * d,))]
        keys += [
            ("output_layer.norm_final.weight", (d,)),
            ("output_layer.linear.weight", (rows["rows_out"], d)),
            ("output_layer.linear.bias", (rows["rows_out"],)),
        ]
        if adaln:
            keys += [("output_layer.adaLN_modulation.weight", (2 * d, cond))]
            keys += [("output_layer.adaLN_modulation.bias", (2 * d,))]
    return [(k[0], k[1], len(k) > 2 and k[2]) for k in keys]


def _draw(name: str, shape: tuple, kind: str, d: int, g: torch.Generator, exact_unit: bool):
    """One random tensor for ``name``: nonzero everywhere, magnitudes that keep every layer
    type visible in the output (flm_caps, flm_owt: std-1 matrices, so the soft-caps bite)."""
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    leaf = name.rsplit(".", 1)[-1]
    b = 1.0 / math.sqrt(d)
    if kind == "sfm_arch_adaptive":
        if leaf == "sz":  # effective sz * sqrt(d) ~ 4
            return b * 4.0 * (1 + 0.2 * r(*shape))
        if leaf == "s_fc":  # effective s_fc * sqrt(d)
            return 0.3 * (1 + 0.2 * r(*shape))
        if leaf in ("attn_alpha", "mlp_alpha"):  # gate ~ |gamma 0.05 sqrt(d) + delta| ~ 0.2-0.5
            return b * (4.0 + 2.0 * r(*shape))
        if leaf == "sqk":  # effective sqk * sqrt(d) ~ 1.5
            return b * 1.5 * (1 + 0.2 * r(*shape))
        if "alpha_modulation" in name:
            return 0.05 * r(*shape)
        if name.endswith(("c_fc.bias", "mlp_out.bias")):
            return 0.05 * r(*shape)
        if leaf == "weight" and len(shape) == 2 and not name.startswith("sigma_map"):
            w = r(*shape)
            # unit norm along the d_model axis: rows of [out, d], columns of att_out / mlp_out
            axis = 0 if name.endswith(("att_out.weight", "mlp_out.weight")) else 1
            if name == "sphere_embed.weight":
                return w * b  # ngpt init, not re-projected (normalize_input_embed=False)
            w = w / w.norm(dim=axis, keepdim=True)
            if not exact_unit:  # an EMA average of unit-norm matrices: near, not exactly, unit
                w = w * (1 + 0.05 * r(*shape))
            return w
    if name.startswith("sigma_map"):
        fan_in = shape[-1] if len(shape) == 2 else 1
        return r(*shape) / math.sqrt(fan_in) if len(shape) == 2 else 0.1 * r(*shape)
    if leaf == "weight" and len(shape) == 1:  # LayerNorm weights
        return 1 + 0.1 * r(*shape)
    if "adaLN_modulation" in name:
        return (0.3 if kind in BIG_KINDS else 0.05) * r(*shape)
    if name in ("vocab_embed.embedding", "sphere_embed.weight"):
        return r(*shape) * (b if kind.startswith("sfm") else 1.0)
    if name.startswith("output_layer.linear"):
        return (1.0 if kind in BIG_KINDS else 0.1) * r(*shape)
    if len(shape) == 2:  # attn_qkv, attn_out, mlp.*
        return r(*shape) * (1.0 if kind in BIG_KINDS else 1.0 / math.sqrt(shape[1]))
    return 0.1 * r(*shape)  # biases


# --------------------------------------------------------------------------- config (sec. 1.2, 4)


def _config(kind: str, o: dict, rows: dict) -> dict:
    """The Hydra-composed training config of ``kind`` as a plain dict (the keys trainer_base.py
    lists, with the values of sec. 4; interpolations with custom resolvers left unresolved)."""
    tok = "HuggingFaceTB/SmolLM-135M" if rows["vocab"] == "tinygsm" else "gpt2"
    data = {
        "train": "tiny-gsm" if rows["vocab"] == "tinygsm" else "openwebtext",
        "tokenizer_name_or_path": tok,
        "wrap": rows["vocab"] != "tinygsm",
        "cache_dir": "/data_cache",
    }
    loader = {
        "global_batch_size": 512,
        "eval_global_batch_size": "${.global_batch_size}",
        "batch_size": "${div_up:${.global_batch_size}, "
        "${eval:${trainer.devices} * ${trainer.num_nodes}}}",
        "num_workers": 16,
    }
    trainer = {
        "_target_": "lightning.Trainer",
        "num_nodes": 1,
        "devices": "${device_count:}",
        "accumulate_grad_batches": "${div_up:${loader.global_batch_size}, "
        "${eval:${trainer.devices} * ${loader.batch_size} * ${trainer.num_nodes}}}",
        "max_steps": 250_000 if rows["vocab"] == "tinygsm" else 1_000_000,
        "precision": "bf16",
    }
    training = {"ema": 0.9999, "antithetic_sampling": True, "sampling_eps": 1e-3}
    sizes = {
        "hidden_size": o["hidden"],
        "cond_dim": o["cond"],
        "length": o["length"],
        "n_blocks": o["n_blocks"],
        "n_heads": o["n_heads"],
        "dropout": 0.1,
    }
    if kind == "flm_owt":  # the flm repository's schema (s-flm trainer_base.py): no model.softcap
        return {
            "mode": "train",
            "seed": 1,
            "loader": loader,
            "trainer": trainer,
            "training": {**training, "loss_type": "flow", "pred_type": "x0"},
            "data": data,
            "model": {"name": "small", "type": "ddit", **sizes, "scale_by_sigma": True}
            | {"tie_word_embeddings": False, "vocab_lookup": True},
            "algo": {
                "name": "flm",
                "backbone": "dit",
                "parameterization": "mean",
                "time_conditioning": True,
                "T": 0,
                "subs_masking": False,
                "causal_attention": False,
                "ignore_bos": False,
                "t_max": 1.0,
                "t_min": 0.0,
                "double_temb": False,
                "learnable_loss_weighting": False,
            },
            "noise": {"type": "log-linear", "eps": 0},
            "sampling": {"predictor": "ancestral", "steps": [1024], "temperature": 1.0}
            | {"solver": "euler", "noise_removal": "ancestral"},
            "eval": {"disable_ema": False, "ema_decay": None}
            | {"generated_samples_path": "${cwd:}/samples.json"},
            "checkpointing": {"save_dir": "${hydra:runtime.cwd}"},
        }
    noise = {"type": "log-linear", "eps": 1e-3, "alpha_min": None, "alpha_max": None}
    noise["adaptive"] = False
    model = {"name": "small", "type": "dit", **sizes}
    sampler = {"predictor": "ancestral", "noise_removal": "ancestral", "p_nucleus": 1.0}
    if kind == "ar":
        algo = {"name": "ar", "backbone": "dit", "parameterization": "ar"}
        algo |= {"time_conditioning": False, "causal_attention": True, "adaLN": False, "T": 0}
        sampler = {"predictor": "ar"}
    elif kind == "mdlm":
        algo = {"name": "mdlm", "diffusion_type": "absorbing", "parameterization": "subs"}
        algo |= {"time_conditioning": False, "causal_attention": False, "adaLN": True}
        algo |= {"post_process_mode": "log_probs", "loss_type": "elbo", "T": 0}
    elif kind == "duo":
        algo = {"name": "duo_base", "diffusion_type": "uniform", "parameterization": "mean"}
        algo |= {"time_conditioning": True, "causal_attention": False, "adaLN": True, "T": 0}
    elif kind == "candi":
        model |= {"name": "small-candi", "type": "candi-dit", "softcap": 0.0}
        model |= {"use_original_rope": True}
        algo = {"name": "candi", "backbone": "candi-dit", "parameterization": "mean"}
        algo |= {"time_conditioning": True, "causal_attention": False, "adaLN": True}
        algo |= {"mixed_coeff": 0.5, "temp": 1.0, "sigma_min": 0.01, "sigma_max": 2.0}
        algo |= {"min_percentile": 0.01, "max_percentile": 0.25, "pure_continuous": False}
        algo |= {"is_embed": False, "sampler": "cached", "step_size": 1.0}
        algo |= {"use_percentile_scheduling": True, "ignore_bos": False}
        sampler = {"predictor": "candi"}
    elif kind in ("flm", "flm_caps"):
        caps = kind == "flm_caps"
        softcap = (50.0 if o["softcap"] is None else o["softcap"]) if caps else 0.0
        cap = (30.0 if o["cap_value"] is None else o["cap_value"]) if caps else None
        model |= {"name": "small-flm", "type": "flm-dit", "softcap": softcap}
        algo = {"name": "flm", "diffusion_type": "flow", "parameterization": "mean"}
        algo |= {"time_conditioning": True, "causal_attention": False, "adaLN": True}
        algo |= {"t_min": 0.0, "t_max": 1.0, "double_temb": False}
        algo |= {"learnable_loss_weighting": False, "cap_value": cap}
        sampler = {"predictor": "flm_euler"}
    else:  # S-FLM
        adaptive = kind != "sfm_dit_fixed"
        if kind == "sfm_arch_adaptive":
            model |= {"type": "sphere-arch", "init": "ngpt", "eps": 1e-6}
            model |= {"use_time_alpha": True, "use_time_token": False, "mlp_type": "gelu"}
            model |= {"normalize_input_embed": False, "pretrained_ckpt_path": None}
        else:
            model |= {"type": "sphere-dit", "init": "ngpt", "eps": 1e-6}
            model |= {"learn_temperature_scaling": False, "pretrained_ckpt_path": None}
        algo = {"name": "sfm", "diffusion_type": "sphere", "backbone": "sphere-dit"}
        algo |= {"time_conditioning": True, "causal_attention": False, "adaLN": True}
        algo |= {"invert_time_convention": not adaptive}
        algo |= {"renormalize_weights": kind == "sfm_arch_adaptive"}
        algo |= {"slerp_precision": "float64", "eps": 1e-6, "loss_type": "ce"}
        if adaptive:
            noise |= {"alpha_max": 0.121, "adaptive": True, "adaptive_refit_every": 50}
            noise |= {"adaptive_buffer_size": o["buffer_size"], "adaptive_ema": 0.9}
            noise |= {"adaptive_uniform_mix": 1e-3, "adaptive_warmup_steps": 1000}
            noise |= {"adaptive_n_grid": 1000, "adaptive_n_knots": 20}
            noise |= {"adaptive_spline_degree": 3, "adaptive_ridge_alpha": 1e-3}
        else:
            noise |= {"alpha_min": 0.869}
        sampler = {"predictor": "sfm", "noise_removal": "greedy"}
    return {
        "mode": "train",
        "seed": 1,
        "neg_infinity_mode": "large-finite",
        "loader": loader,
        "trainer": trainer,
        "training": training,
        "data": data,
        "model": model,
        "algo": algo,
        "noise": noise,
        "sampler": sampler,
        "prior": {"type": "none"},
        "optim": {"lr": 1e-3 if kind == "candi" else 3e-4, "weight_decay": 0},
        "eval": {"strict_loading": True, "disable_ema": False}
        | {"generated_samples_path": "${cwd:}/samples.json"},
        "checkpointing": {"save_dir": "${cwd:}", "resume_from_ckpt": True},
    }


# --------------------------------------------------------------------------- writer (sec. 1, 8)


def _adaptive_buffers(o: dict, g: torch.Generator) -> OrderedDict:
    """``noise.*`` of the adaptive schedule: dtypes and shapes of the real files;
    alpha_vals decreasing over linspace(0, 1, 1000) from the cap 0.121 to the floor 1e-3."""
    n = o["buffer_size"]
    u = torch.linspace(0, 1, 1000, dtype=torch.float64)

    def curve(p):
        return 1e-3 + (0.121 - 1e-3) * (1 - u) ** p

    alpha = curve(1.7)
    alpha[0] += o["alpha_overshoot"]
    return OrderedDict(
        t_buf=torch.rand(n, generator=g, dtype=torch.float64),
        loss_buf=torch.rand(n, generator=g, dtype=torch.float64) * 5 + 0.1,
        buf_pos=torch.tensor(17, dtype=torch.int64),
        alpha_vals=alpha,
        has_schedule=torch.tensor(True),
        ema_alpha_vals=curve(1.5),
        refit_count=torch.tensor(o["refit_count"], dtype=torch.int64),
    )


def write_reference_checkpoint(
    path, kind: str, *, seed: int = 0, vocab: str | None = None, **overrides
) -> dict:
    """Write a tiny ``kind`` checkpoint in the released files' format to ``path``.

    ``overrides``: any key of :data:`DEFAULTS` (sizes, ``base_vocab``, ``global_step``,
    ``buffer_size``, ``refit_count``, ``alpha_overshoot``, ``compiled_infix``, ``teacher_keys``,
    ``softcap`` / ``cap_value`` for flm_caps, ``config={dotted key: value}`` to set any config
    value, which :func:`reference_logits` then follows, e.g. ``{"algo.mixed_coeff": 0.3}``).

    Returns ``{kind, path, vocab rows (vocab_rows keys), sizes, config (plain dict, unresolved),
    ema_sd (reference names with 'backbone.': EMA parameters + state_dict buffers, i.e. the
    network to reproduce), raw_sd (the state_dict as written, before any compiled infix), noise
    (adaptive buffers or {}), global_step, ema_decay, ema_num_updates}``."""
    from omegaconf import OmegaConf

    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"unknown overrides {sorted(unknown)}")
    o = {**DEFAULTS, **overrides}
    rows = vocab_rows(kind, vocab, o["base_vocab"])
    d, H = o["hidden"], o["n_heads"]
    keys = backbone_keys(kind, d, H, o["cond"], o["n_blocks"], rows)
    g = torch.Generator().manual_seed(seed)
    inv_freq = 1.0 / 10000 ** (torch.arange(0, d // H, 2).float() / (d // H))
    raw, ema = OrderedDict(), OrderedDict()
    shadow = []
    for name, shape, is_buf in keys:
        if is_buf:
            raw["backbone." + name] = ema["backbone." + name] = inv_freq.clone()
            continue
        raw["backbone." + name] = _draw(name, shape, kind, d, g, exact_unit=True).float()
        e = _draw(name, shape, kind, d, g, exact_unit=False).float()
        ema["backbone." + name] = e
        shadow.append(e.clone())
    noise = {}
    if kind in ("sfm_dit_adaptive", "sfm_arch_adaptive"):
        noise = _adaptive_buffers(o, g)
        raw.update(("noise." + k, v) for k, v in noise.items())
    if kind == "candi":  # top-level buffers derived from the vocabulary (s-flm checkpoints)
        raw["cont_noise_table"] = torch.linspace(0.2, 4.0, 1000)
        raw["disc_noise_table"] = torch.linspace(0.9, 0.01, 1000)
    state_dict = OrderedDict(raw)
    if o["compiled_infix"]:
        state_dict = OrderedDict(
            (k.replace("backbone.", "backbone._orig_mod.", 1), v) for k, v in raw.items()
        )
    if o["teacher_keys"]:
        state_dict["teacher.vocab_embed.embedding"] = torch.zeros(rows["rows_in"], d)
    cfg_dict = _config(kind, o, rows)
    for dotted, value in (o["config"] or {}).items():
        *parents, leaf = dotted.split(".")
        node = cfg_dict
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    config = OmegaConf.create(cfg_dict)
    n_params = len(shadow)
    step = o["global_step"]
    with stub_dataloader_module() as dl:
        inner = dl.GPT2TokenizerFast(
            cfg_dict["data"]["tokenizer_name_or_path"], rows["len_tokenizer"], rows["pad_id"]
        )
        tokenizer = dl.VocabSizeTokenizerWrapper(inner) if rows["vocab"] == "tinygsm" else inner
        ckpt = {
            "epoch": o["epoch"],
            "global_step": step,
            "pytorch-lightning_version": "2.4.0",
            "state_dict": state_dict,
            "loops": _loops(step, o["epoch"]),
            "callbacks": {
                "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 10000}": {
                    "best_model_path": "",
                    "last_model_path": "checkpoints/last.ckpt",
                },
                "LearningRateMonitor": {},
            },
            "optimizer_states": [_adamw_state(shadow)],
            "lr_schedulers": [
                {"base_lrs": [3e-4], "last_epoch": step, "_step_count": step + 1}
                | {"lr_lambdas": [None], "_last_lr": [3e-4]}
            ],
            "hparams_name": "kwargs",
            "hyper_parameters": {
                "config": config,
                "tokenizer": tokenizer,
                "vocab_size": rows["hp_vocab_size"],
            },
            "ema": {"decay": 0.9999, "num_updates": step, "shadow_params": shadow},
            "sampler": {"random_state": 42, "counter": 0},
        }
        torch.save(ckpt, path)
    return dict(
        kind=kind,
        path=str(path),
        **rows,
        sizes=dict(hidden=d, n_heads=H, head_dim=d // H, cond=o["cond"], n_blocks=o["n_blocks"]),
        n_shadow=n_params,
        config=cfg_dict,
        ema_sd=ema,
        raw_sd=raw,
        noise=noise,
        global_step=step,
        ema_decay=0.9999,
        ema_num_updates=step,
    )


def _loops(step: int, epoch: int) -> dict:
    prog = lambda n: {"ready": n, "started": n, "processed": n, "completed": n}  # noqa: E731
    return {
        "fit_loop": {
            "state_dict": {},
            "epoch_loop.state_dict": {"_batches_that_stepped": step},
            "epoch_progress": {"total": prog(epoch), "current": prog(epoch)},
            "epoch_loop.batch_progress": {"total": prog(step), "current": prog(step % 97)},
            "epoch_loop.automatic_optimization.optim_progress": {
                "optimizer": {"step": {"total": prog(step), "current": prog(step % 97)}}
            },
        },
        "validate_loop": {"state_dict": {}},
    }


def _adamw_state(params: list) -> dict:
    return {
        "state": {
            i: {
                "step": torch.tensor(1.0),
                "exp_avg": torch.zeros_like(p),
                "exp_avg_sq": torch.zeros_like(p),
            }
            for i, p in enumerate(params)
        },
        "param_groups": [
            {"lr": 3e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0}
            | {"amsgrad": False, "params": list(range(len(params)))}
        ],
    }


# --------------------------------------------------------------------------- reference forward


def _cfg(cfg, dotted: str, default=None):
    """Read ``a.b`` from a write_reference_checkpoint info dict, a plain config dict or an
    omegaconf DictConfig (without resolving anything else)."""
    if isinstance(cfg, dict) and "config" in cfg and "kind" in cfg:
        cfg = cfg["config"]
    node = cfg
    for part in dotted.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, AttributeError):
            return default
        if node is None:
            return default
    return node


def _strip(sd: dict) -> dict:
    return {k.removeprefix("backbone."): v for k, v in sd.items()}


def _time_features(t: Tensor) -> Tensor:
    """Sinusoid of the time scalar: frequencies exp(-ln(1e4) i / 128), **cos half first**
    (s-flm models/dit.py)."""
    half = N_FREQ // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def _time_cond(sd: dict, t: Tensor) -> Tensor:
    """sigma_map: Linear(256->cond), SiLU, Linear(cond->cond); SiLU once more **outside**
    (s-flm models/dit.py)."""
    h = F.linear(_time_features(t), sd["sigma_map.mlp.0.weight"], sd["sigma_map.mlp.0.bias"])
    h = F.linear(F.silu(h), sd["sigma_map.mlp.2.weight"], sd["sigma_map.mlp.2.bias"])
    return F.silu(h)


def _rope(x: Tensor, inv_freq: Tensor) -> Tensor:
    """Rotate-half RoPE, base 1e4, positions 0..L-1; x (B, L, H, D) (s-flm models/dit.py, flash-attn
    ``apply_rotary_emb_*`` non-interleaved). inv_freq is the checkpoint's buffer."""
    L = x.shape[1]
    freqs = torch.outer(torch.arange(L, dtype=torch.float32), inv_freq.float())
    emb = torch.cat([freqs, freqs], dim=-1)[None, :, None, :]
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * emb.cos() + rot * emb.sin()


def _layer_norm(x: Tensor, w: Tensor) -> Tensor:
    """LayerNorm, weight only, no bias, default eps, in fp32 (s-flm models/*.py)."""
    return F.layer_norm(x.float(), (x.shape[-1],)) * w


def _attention(q, k, v, *, causal=False, softcap=0.0, scale=None) -> Tensor:
    """softmax(scale q k^T [softcapped]) v on (B, L, H, D); default scale 1/sqrt(D); softcap
    c tanh(s / c) on the *scaled* score (flash-attn ``softcap``; s-flm algo.py)."""
    B, L, H, D = q.shape
    s = torch.einsum("bihd,bjhd->bhij", q, k) * (1.0 / math.sqrt(D) if scale is None else scale)
    if softcap and softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhij,bjhd->bihd", s.softmax(-1), v).reshape(B, L, H * D)


def _dit_trunk(sd: dict, x: Tensor, c: Tensor | None, n_heads: int, *, causal, softcap):
    """DDiTBlock x N + DDiTFinalLayer on the embedded input x (B, L, d); c None = no adaLN
    (AR: DDiTBlockCausal without modulation, s-flm models/*.py; s-flm models/dit.py)."""
    B, L, d = x.shape
    n_blocks = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    inv_freq = sd["rotary_emb.inv_freq"]
    for n in range(n_blocks):
        p = f"blocks.{n}."
        if c is not None:  # 6 chunks: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate
            mod = F.linear(c, sd[p + "adaLN_modulation.weight"], sd[p + "adaLN_modulation.bias"])
            sh1, sc1, g1, sh2, sc2, g2 = mod[:, None].chunk(6, dim=-1)
        h = _layer_norm(x, sd[p + "norm1.weight"])
        if c is not None:
            h = h * (1 + sc1) + sh1
        qkv = F.linear(h, sd[p + "attn_qkv.weight"]).view(B, L, 3, n_heads, d // n_heads)
        q, k, v = _rope(qkv[:, :, 0], inv_freq), _rope(qkv[:, :, 1], inv_freq), qkv[:, :, 2]
        a = F.linear(_attention(q, k, v, causal=causal, softcap=softcap), sd[p + "attn_out.weight"])
        x = x + (g1 * a if c is not None else a)
        h = _layer_norm(x, sd[p + "norm2.weight"])
        if c is not None:
            h = h * (1 + sc2) + sh2
        m = F.linear(h, sd[p + "mlp.0.weight"], sd[p + "mlp.0.bias"])
        m = F.linear(F.gelu(m, approximate="tanh"), sd[p + "mlp.2.weight"], sd[p + "mlp.2.bias"])
        x = x + (g2 * m if c is not None else m)
    h = _layer_norm(x, sd["output_layer.norm_final.weight"])
    if c is not None:  # final adaLN: 2 chunks (shift, scale)
        mod = F.linear(
            c, sd["output_layer.adaLN_modulation.weight"], sd["output_layer.adaLN_modulation.bias"]
        )
        shift, scale = mod[:, None].chunk(2, dim=-1)
        h = h * (1 + scale) + shift
    return F.linear(h, sd["output_layer.linear.weight"], sd["output_layer.linear.bias"])


def _justnorm(x: Tensor, eps: float = 1e-6) -> Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


def _sarch(sd: dict, x: Tensor, sigma: Tensor, n_heads: int) -> Tensor:
    """SphereArch forward (s-flm models/sphere_arch.py): RoPE on q, k *before* the per-head
    L2 norm x sqk sqrt(d); SDPA scale sqrt(head_dim); h <- Norm(Norm(h) + g (Norm(y) - Norm(h)))
    with g = |gamma 0.05 sqrt(d) + delta(t)|; MLP pre-activation x s_fc sqrt(d), GELU tanh;
    logits = lm_head(h) x sz sqrt(d). No re-normalisation of the loaded matrices."""
    B, L, d = x.shape
    D = d // n_heads
    rd = math.sqrt(d)
    c = _time_cond(sd, sigma)
    n_blocks = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    h = x
    for n in range(n_blocks):
        p = f"blocks.{n}."
        q = _rope(
            F.linear(h, sd[p + "query.weight"]).view(B, L, n_heads, D), sd["rotary_emb.inv_freq"]
        )
        k = _rope(
            F.linear(h, sd[p + "key.weight"]).view(B, L, n_heads, D), sd["rotary_emb.inv_freq"]
        )
        v = F.linear(h, sd[p + "value.weight"]).view(B, L, n_heads, D)
        sqk = (sd[p + "sqk"] * rd).view(n_heads, D)
        q, k = sqk * _justnorm(q), sqk * _justnorm(k)
        y = F.linear(_attention(q, k, v, scale=math.sqrt(D)), sd[p + "att_out.weight"])
        delta = F.linear(c, sd[p + "alpha_modulation.weight"], sd[p + "alpha_modulation.bias"])
        d_att, d_mlp = delta.chunk(2, dim=-1)
        g_att = (sd[p + "attn_alpha"] * 0.05 * rd + d_att).abs()[:, None]
        g_mlp = (sd[p + "mlp_alpha"] * 0.05 * rd + d_mlp).abs()[:, None]
        a = _justnorm(h)
        h = _justnorm(a + g_att * (_justnorm(y) - a))
        pre = sd[p + "s_fc"] * rd * F.linear(h, sd[p + "c_fc.weight"], sd[p + "c_fc.bias"])
        m = F.linear(
            F.gelu(pre, approximate="tanh"), sd[p + "mlp_out.weight"], sd[p + "mlp_out.bias"]
        )
        a = _justnorm(h)
        h = _justnorm(a + g_mlp * (_justnorm(m) - a))
    return F.linear(h, sd["lm_head.weight"]) * (sd["sz"] * rd)


def reference_logits(
    kind: str,
    ema_sd: dict,
    inputs,
    sigma_or_time,
    cfg,
    *,
    temperature: float = 1.0,
    post_process: bool = True,
    attn_softcap: float | None = None,
) -> Tensor:
    """What the reference computes at sampling time, in fp32 on the CPU (bf16 autocast off).

    - ``ema_sd``: reference-named tensors (``backbone.`` prefix optional), e.g. ``info['ema_sd']``.
    - ``inputs``: ar / mdlm / duo: (B, L) ids; flm*: (B, L, V) float state z (fed as z @ E);
      candi: ``{'xt': (B, L, V) float (or (B, L) ids), 'reveal_mask': (B, L), 'continuous_noise':
      (B,) or None, 'x0_tokens': optional (B, L) ids}``; sfm_*: (B, L, d) latents (fed directly).
    - ``sigma_or_time``: the (B,) scalar fed to ``sigma_map`` (:func:`reference_time_input`);
      ignored for ar, replaced by zeros when ``algo.time_conditioning`` is false (mdlm).
    - ``cfg``: the info dict of :func:`write_reference_checkpoint`, its ``config`` or a DictConfig.
    - ``temperature``: divides the raw output before post-processing (``TrainerBase.forward``).
    - ``post_process``: False returns the raw backbone output (after CANDI's column drop).
    - ``attn_softcap``: None = from the config (``model.softcap``; flm_owt: 50, hard-coded in flm).
    """
    sd = {k: v.float() if v.is_floating_point() else v for k, v in _strip(ema_sd).items()}
    n_heads = int(_cfg(cfg, "model.n_heads"))
    if attn_softcap is None:
        attn_softcap = 50.0 if kind == "flm_owt" else float(_cfg(cfg, "model.softcap", 0.0))
    B = (inputs["xt"] if kind == "candi" else inputs).shape[0]
    if kind != "ar":
        sigma = torch.as_tensor(sigma_or_time, dtype=torch.float32).reshape(-1).expand(B)
        if not _cfg(cfg, "algo.time_conditioning", True):  # _process_sigma: zeros (MDLM)
            sigma = torch.zeros(B)
    # ---- input embedding (s-flm models/dit.py "embedding-layer semantics differ by class")
    if kind in ("ar", "mdlm", "duo"):  # DIT: ids lookup (a 3-D input would be softmaxed first)
        E = sd["vocab_embed.embedding"]
        x = E[inputs] if inputs.ndim == 2 else inputs.float().softmax(-1) @ E
    elif kind in FLM_KINDS:  # FLMDIT / flm: DIT: plain z @ E in fp32, no softmax
        E = sd["vocab_embed.embedding"]
        x = E[inputs] if inputs.ndim == 2 else inputs.float() @ E.float()
    elif kind == "candi":  # ContDIT: rows L2-normalised except the last (mask) row, mixed
        E = sd["vocab_embed.embedding"]
        normed = F.normalize(E[:-1], p=2, dim=-1)
        xt = inputs["xt"]
        x = normed[xt] if xt.ndim == 2 else xt.float() @ normed
        reveal, cont = inputs.get("reveal_mask"), inputs.get("continuous_noise")
        if reveal is not None:
            special = F.normalize(E[-1], p=2, dim=-1)[None, None]
            scaled = x
            if cont is not None:
                scaled = x / torch.sqrt(1.0 + cont.float() ** 2)[:, None, None]
            m = reveal.float()[..., None]
            mc = float(_cfg(cfg, "algo.mixed_coeff"))
            x = x * m + (1 - m) * (mc * special + (1 - mc) * scaled)
    else:  # SphereDiT / SphereArch: the latent itself
        x = inputs.float()
    # ---- trunk
    if kind == "sfm_arch_adaptive":
        out = _sarch(sd, x, sigma, n_heads)
    else:
        c = None if kind == "ar" else _time_cond(sd, sigma)
        out = _dit_trunk(sd, x, c, n_heads, causal=kind == "ar", softcap=attn_softcap)
    if kind == "candi":
        out = out[..., :-1]  # ContDIT drops the mask logit column in forward
    if not post_process:
        return out
    out = out / temperature if temperature != 1.0 else out
    return _post_process(kind, out, inputs, cfg)


def _post_process(kind: str, out: Tensor, inputs, cfg) -> Tensor:
    """Each family's ``_process_model_output`` at sampling (s-flm algo.py table, algo.py)."""
    out = out.clone()
    if kind == "ar":  # mask logit (last row) set to -1e6, then log_softmax
        out[..., -1] = NEG_INF
        return out.log_softmax(-1)
    if kind == "mdlm":  # -1e6 *added* to the mask logit, log-normalise, carry-over
        mask_id = out.shape[-1] - 1
        out[..., mask_id] += NEG_INF
        out = out - out.logsumexp(-1, keepdim=True)
        keep = inputs != mask_id
        out[keep] = NEG_INF
        out[keep, inputs[keep]] = 0.0
        return out
    if kind == "candi":  # / temp, log-normalise, revealed rows forced to their token
        out = out / float(_cfg(cfg, "algo.temp", 1.0))
        out = out - out.logsumexp(-1, keepdim=True)
        reveal = inputs.get("reveal_mask")
        if reveal is not None:
            xt = inputs["xt"]
            tok = inputs.get("x0_tokens")
            tok = tok if tok is not None else (xt if xt.ndim == 2 else xt.argmax(-1))
            rm = reveal.bool()
            out[rm] = NEG_INF
            out[rm, tok[rm]] = 0.0
        return out
    if kind in FLM_KINDS:  # temperature already applied, then the output cap, then log_softmax
        cap = None if kind == "flm_owt" else _cfg(cfg, "algo.cap_value")
        if cap is not None:
            out = cap * torch.tanh(out / cap)
        return out.log_softmax(-1)
    return out.float().log_softmax(-1)  # duo, sfm_*


def reference_time_input(kind: str, cfg, *, t=None, clean_weight=None) -> Tensor | None:
    """The (B,) scalar the reference feeds ``sigma_map`` (s-flm algo.py, samplers.py).

    - ar: None; mdlm: zeros; duo / candi: -log(alpha_t), alpha_t = 1 - (1 - 1e-3) t;
    - flm*: the FLM time s itself (``t`` is s, 1 = clean);
    - sfm non-inverted: -log(clean weight); sfm_dit_fixed (inverted): -log(1 - clean weight).
    """
    if kind == "ar":
        return None
    if kind in SFM_KINDS:
        c = torch.as_tensor(clean_weight, dtype=torch.float64)
        inverted = bool(_cfg(cfg, "algo.invert_time_convention", False))
        return (-torch.log1p(-c) if inverted else -torch.log(c)).float()
    t = torch.as_tensor(t, dtype=torch.float64)
    if kind == "mdlm" and not _cfg(cfg, "algo.time_conditioning", False):
        return torch.zeros_like(t, dtype=torch.float32)
    if kind in FLM_KINDS:
        return t.float()
    return (-torch.log(1 - (1 - 1e-3) * t)).float()


def make_inputs(info: dict, *, batch: int = 2, length: int = 8, seed: int = 0) -> dict:
    """Representative inputs of ``info['kind']``: ``{'inputs', 'time' (the network input),
    'tokens' (B, L) clean ids, and per family 't' / 'clean_weight' / 'gamma'}``.

    ids: tokens below the mask id (ar, mdlm) or any class; mdlm: about half the positions at
    the mask id; flm:
    z = (1 - gamma) eps + gamma onehot; candi: noisy one-hot, about half revealed; sfm: unit
    latents slerped between noise and a token's normalised embedding row."""
    kind = info["kind"]
    g = torch.Generator().manual_seed(seed)
    # token ids: ar / mdlm never see the mask row as a clean token (at OWT it is also [PAD]);
    # candi: the tokenizer's ids; the others: every class ([PAD] included)
    n_tok = {"ar": info["rows_in"] - 1, "mdlm": info["rows_in"] - 1}.get(kind, info["n_logits"])
    tokens = torch.randint(0, n_tok, (batch, length), generator=g)
    t = torch.rand(batch, generator=g, dtype=torch.float64) * 0.8 + 0.1
    out = {"tokens": tokens, "t": t}
    if kind in ("ar", "duo"):
        out["inputs"] = tokens
    elif kind == "mdlm":
        masked = torch.rand(batch, length, generator=g) < 0.5
        out["inputs"] = torch.where(masked, torch.full_like(tokens, info["mask_id"]), tokens)
    elif kind in FLM_KINDS:
        gamma = t.float()[:, None, None]
        onehot = F.one_hot(tokens, info["n_logits"]).float()
        eps = torch.randn(onehot.shape, generator=g)
        out["gamma"] = gamma.flatten()
        out["inputs"] = (1 - gamma) * eps + gamma * onehot
    elif kind == "candi":
        reveal = torch.rand(batch, length, generator=g) < 0.5
        sig = (0.2 + 1.5 * t).float()
        onehot = F.one_hot(tokens, info["n_logits"]).float()
        noisy = onehot + sig[:, None, None] * torch.randn(onehot.shape, generator=g)
        xt = torch.where(reveal[..., None], onehot, noisy)
        out["inputs"] = {"xt": xt, "reveal_mask": reveal.float(), "continuous_noise": sig}
        out["inputs"]["x0_tokens"] = tokens
    else:
        cap = 0.131 if kind == "sfm_dit_fixed" else 0.121
        c = cap * (1 - t) + 1e-3 * t  # clean weight
        e = _justnorm(_strip(info["ema_sd"])["sphere_embed.weight"][tokens].double())
        z0 = _justnorm(torch.randn(e.shape, generator=g, dtype=torch.float64))
        z = _justnorm((1 - c)[:, None, None] * z0 + c[:, None, None] * e)
        out["clean_weight"] = c
        out["inputs"] = z.float()
    out["time"] = reference_time_input(kind, info, t=t, clean_weight=out.get("clean_weight", None))
    return out
