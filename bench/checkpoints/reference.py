"""Reading a checkpoint of the S-FLM paper's harness (FrankCCCCC/s-flm @ 18d586f) or of the FLM
repository (david3684/flm) and mapping it onto this project's methods and backbones.

A file is a Lightning checkpoint: ``state_dict`` (raw weights, ``backbone.*``; ``noise.*`` for
the adaptive schedule; ``cont_noise_table`` for CANDI), ``ema`` (``shadow_params``: a list of the
backbone's trainable tensors in ``named_parameters`` order, reference ``models/ema.py``),
``hyper_parameters`` (the training config as a pickled omegaconf ``DictConfig``, read through
placeholders, never resolved), ``global_step`` and optimiser / loop state (never read: the file
is memory-mapped, so only the tensors used are paged in).

What is read from where:
- the family from the keys (``backbone.sz``: S-arch; ``backbone.sphere_embed.weight``:
  sphere-DiT; ``cont_noise_table``: CANDI; no ``sigma_map``: AR), MDLM / Duo / FLM (same keys)
  from ``config.algo.name`` or the FLM repository's own config schema;
- sizes from the tensor shapes (width, blocks, conditioning width, MLP ratio, vocabulary rows),
  the number of heads from ``config.model.n_heads`` (shapes cannot tell it);
- the options each family's sample script ran with from the config (table in
  docs/checkpoints.md).

The weights used are the EMA shadow weights (the reference's ``_eval_mode`` copies them into the
backbone by position before every evaluation), mapped onto the state-dict keys by position with
count and shape checks.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.checkpoints.source import CheckpointError
from bench.checkpoints.unpickle import Placeholder, pickle_module, plain

FAMILIES = ("ar", "mdlm", "duo", "candi", "flm", "sfm_dit", "sfm_arch")
#: our method for each reference family
METHOD_OF = {
    "ar": "ar",
    "mdlm": "mdlm",
    "duo": "duo",
    "candi": "candi",
    "flm": "flm",
    "sfm_dit": "sflm",
    "sfm_arch": "sflm",
}
#: reference ``algo.name`` values (s-flm ``configs/algo/*.yaml``) -> family
_ALGO_NAMES = {
    "ar": "ar",
    "mdlm": "mdlm",
    "duo": "duo",
    "duo_base": "duo",
    "udlm": "duo",
    "candi": "candi",
    "flm": "flm",
    "sfm": "sfm_dit",
}
_REQUIRED_KEYS = ("state_dict",)


# --------------------------------------------------------------------------- renames

# reference DiT / FLMDIT / ContDIT / SphereDiT names -> bench.backbones.dit.DiT names
_DIT_RENAMES = [
    (r"^vocab_embed\.embedding$", "embed.weight"),
    (r"^sphere_embed\.weight$", "embed.weight"),
    (r"^sigma_map\.mlp\.(\d)\.(weight|bias)$", r"time.mlp.\1.\2"),
    (r"^blocks\.(\d+)\.attn_qkv\.weight$", r"blocks.\1.qkv.weight"),
    (r"^blocks\.(\d+)\.adaLN_modulation\.(weight|bias)$", r"blocks.\1.adaLN.\2"),
    (r"^blocks\.(\d+)\.(norm1|norm2|attn_out)\.weight$", r"blocks.\1.\2.weight"),
    (r"^blocks\.(\d+)\.mlp\.(0|2)\.(weight|bias)$", r"blocks.\1.mlp.\2.\3"),
    (r"^output_layer\.norm_final\.weight$", "norm_f.weight"),
    (r"^output_layer\.adaLN_modulation\.(weight|bias)$", r"adaLN_f.\1"),
    (r"^output_layer\.linear\.(weight|bias)$", r"head.\1"),
]
# reference SphereArch names -> sflm.sarch.SArch names
_SARCH_RENAMES = [
    (r"^sz$", "s_z"),
    (r"^sphere_embed\.weight$", "embed.weight"),
    (r"^sigma_map\.mlp\.(\d)\.(weight|bias)$", r"time.mlp.\1.\2"),
    (r"^blocks\.(\d+)\.sqk$", r"blocks.\1.s_qk"),
    (r"^blocks\.(\d+)\.attn_alpha$", r"blocks.\1.gamma_attn"),
    (r"^blocks\.(\d+)\.mlp_alpha$", r"blocks.\1.gamma_mlp"),
    (r"^blocks\.(\d+)\.alpha_modulation\.(weight|bias)$", r"blocks.\1.delta.\2"),
    (r"^blocks\.(\d+)\.(s_fc)$", r"blocks.\1.\2"),
    (
        r"^blocks\.(\d+)\.(query|key|value|att_out|c_fc|mlp_out)\.(weight|bias)$",
        r"blocks.\1.\2.\3",
    ),
    (r"^lm_head\.weight$", "lm_head.weight"),
]
#: reference buffers with no counterpart here (rotary frequencies are recomputed)
_DROPPED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


def _table(family: str) -> list[tuple[str, str]]:
    return _SARCH_RENAMES if family == "sfm_arch" else _DIT_RENAMES


def rename(key: str, family: str) -> str:
    """Our key for reference backbone key ``key`` (without the ``backbone.`` prefix)."""
    for pat, repl in _table(family):
        if re.match(pat, key):
            return re.sub(pat, repl, key)
    raise CheckpointError(f"unknown backbone key {key!r} for a {family} checkpoint")


def unrename(key: str, family: str, embed_name: str | None = None) -> str:
    """The reference key for our key (the inverse of :func:`rename`; ``embed_name``: the
    reference's name of the input table, which differs between DiT classes)."""
    if key == "embed.weight":
        return embed_name or ("sphere_embed.weight" if family.startswith("sfm") else
                              "vocab_embed.embedding")  # fmt: skip
    inverse = {
        "sfm_arch": [
            (r"^s_z$", "sz"),
            (r"^time\.mlp\.(\d)\.(weight|bias)$", r"sigma_map.mlp.\1.\2"),
            (r"^blocks\.(\d+)\.s_qk$", r"blocks.\1.sqk"),
            (r"^blocks\.(\d+)\.gamma_attn$", r"blocks.\1.attn_alpha"),
            (r"^blocks\.(\d+)\.gamma_mlp$", r"blocks.\1.mlp_alpha"),
            (r"^blocks\.(\d+)\.delta\.(weight|bias)$", r"blocks.\1.alpha_modulation.\2"),
            (r"^(.*)$", r"\1"),
        ],
    }.get(
        family,
        [
            (r"^time\.mlp\.(\d)\.(weight|bias)$", r"sigma_map.mlp.\1.\2"),
            (r"^blocks\.(\d+)\.qkv\.weight$", r"blocks.\1.attn_qkv.weight"),
            (r"^blocks\.(\d+)\.adaLN\.(weight|bias)$", r"blocks.\1.adaLN_modulation.\2"),
            (r"^norm_f\.weight$", "output_layer.norm_final.weight"),
            (r"^adaLN_f\.(weight|bias)$", r"output_layer.adaLN_modulation.\1"),
            (r"^head\.(weight|bias)$", r"output_layer.linear.\1"),
            (r"^(.*)$", r"\1"),
        ],
    )
    for pat, repl in inverse:
        if re.match(pat, key):
            return re.sub(pat, repl, key)
    return key  # pragma: no cover - the last pattern matches everything


_DIT_BLOCK_ORDER = ["norm1.weight", "attn_qkv.weight", "attn_out.weight", "norm2.weight",
                    "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias",
                    "adaLN_modulation.weight", "adaLN_modulation.bias"]  # fmt: skip
_SARCH_BLOCK_ORDER = ["s_fc", "attn_alpha", "mlp_alpha", "sqk", "query.weight", "key.weight",
                      "value.weight", "att_out.weight", "c_fc.weight", "c_fc.bias",
                      "mlp_out.weight", "mlp_out.bias", "alpha_modulation.weight",
                      "alpha_modulation.bias"]  # fmt: skip
_DIT_TOP_ORDER = ["vocab_embed.embedding", "sphere_embed.weight", "sigma_map.mlp.0.weight",
                  "sigma_map.mlp.0.bias", "sigma_map.mlp.2.weight", "sigma_map.mlp.2.bias",
                  "rotary_emb.inv_freq", "blocks", "output_layer.norm_final.weight",
                  "output_layer.linear.weight", "output_layer.linear.bias",
                  "output_layer.adaLN_modulation.weight",
                  "output_layer.adaLN_modulation.bias"]  # fmt: skip
_SARCH_TOP_ORDER = ["sz", "sphere_embed.weight", "sigma_map.mlp.0.weight", "sigma_map.mlp.0.bias",
                    "sigma_map.mlp.2.weight", "sigma_map.mlp.2.bias", "rotary_emb.inv_freq",
                    "blocks", "lm_head.weight"]  # fmt: skip


def reference_order(key: str, family: str) -> tuple:
    """Sort key: the position of reference backbone key ``key`` in the reference module's
    ``state_dict`` / ``named_parameters`` (a module's own parameters, then its children in
    registration order: s-flm ``models/dit.py::DIT``, ``sphere_arch.py::SphereArch``). The EMA
    list is matched by this position, so an exported file must follow it."""
    top, block = ((_SARCH_TOP_ORDER, _SARCH_BLOCK_ORDER) if family == "sfm_arch"
                  else (_DIT_TOP_ORDER, _DIT_BLOCK_ORDER))  # fmt: skip
    m = re.match(r"blocks\.(\d+)\.(.*)$", key)
    if m:
        return (top.index("blocks"), int(m.group(1)), block.index(m.group(2)))
    return (top.index(key), 0, 0)


# --------------------------------------------------------------------------- the file


@dataclass
class RefFile:
    """What a reference checkpoint is (read by :func:`read`)."""

    path: Path
    family: str
    repo: str  # "s-flm" or "flm" (the FLM repository's config schema)
    config: dict
    global_step: int | None
    epoch: int | None
    has_ema: bool
    #: reference backbone keys (no prefix) -> tensor: the EMA weights (raw weights if no EMA),
    #: buffers included, in the file's order
    weights: dict[str, torch.Tensor]
    #: the raw (non-EMA) backbone weights
    raw: dict[str, torch.Tensor]
    #: ``noise.*`` tensors (adaptive schedule state), prefix removed
    noise: dict[str, torch.Tensor]
    extra_keys: list[str]  # other top-level state_dict keys (CANDI tables)
    replaced: list[str] = field(default_factory=list)  # globals loaded as placeholders
    warnings: list[str] = field(default_factory=list)
    embed_name: str = "vocab_embed.embedding"
    #: our own method / options / sizes, in a file written by :mod:`bench.checkpoints.export`
    ours: dict | None = None

    # sizes read from the shapes
    @property
    def d_model(self) -> int:
        return int(self.weights[self.embed_name].shape[1])

    @property
    def vocab_rows(self) -> int:
        return int(self.weights[self.embed_name].shape[0])

    @property
    def out_rows(self) -> int:
        w = self.weights.get("output_layer.linear.weight", self.weights.get("lm_head.weight"))
        return int(w.shape[0])

    @property
    def n_blocks(self) -> int:
        idx = [int(m.group(1)) for k in self.weights if (m := re.match(r"blocks\.(\d+)\.", k))]
        return max(idx) + 1 if idx else 0

    @property
    def cond_dim(self) -> int | None:
        w = self.weights.get("sigma_map.mlp.0.weight")
        return int(w.shape[0]) if w is not None else None

    @property
    def mlp_ratio(self) -> int:
        w = self.weights.get("blocks.0.mlp.0.weight", self.weights.get("blocks.0.c_fc.weight"))
        return int(w.shape[0]) // self.d_model

    def cfg(self, dotted: str, default: Any = None) -> Any:
        """A config value by dotted key (``model.n_heads``); ``default`` when absent."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    @property
    def n_heads(self) -> int:
        n = self.cfg("model.n_heads")
        if not isinstance(n, int) or n <= 0:
            raise CheckpointError(
                f"{self.path}: config.model.n_heads is unreadable ({n!r}); the number of attention "
                "heads cannot be told from the shapes"
            )
        return n

    @property
    def adaptive(self) -> bool:
        return "alpha_vals" in self.noise


def _torch_load(path: Path) -> tuple[dict, list[str]]:
    import zipfile

    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a checkpoint (not a zip-format torch.save file)")
    unp: list = []

    class _Recording(pickle_module.Unpickler):  # remembers the placeholders it made
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            unp.append(self)

    class _mod:  # noqa: N801
        Unpickler = _Recording
        __name__ = pickle_module.__name__
        load = pickle_module.load

    try:
        obj = torch.load(path, map_location="cpu", weights_only=False, mmap=True,
                         pickle_module=_mod)  # fmt: skip
    except CheckpointError:
        raise
    except Exception as e:  # truncated zip, bad pickle, missing record
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise CheckpointError(
            f"{path}: unreadable checkpoint ({type(e).__name__}: {first})"
        ) from None
    replaced = sorted({n for u in unp for n in u.replaced})
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: not a checkpoint (top level is {type(obj).__name__})")
    return obj, replaced


def _detect(path: Path, sd_keys: set[str], extra: list[str], config: dict) -> tuple[str, str]:
    """(family, repo) from the keys and, for MDLM / Duo / FLM, the config."""
    algo = config.get("algo", {}) if isinstance(config, dict) else {}
    model = config.get("model", {}) if isinstance(config, dict) else {}
    flm_schema = (
        isinstance(algo, dict)
        and algo.get("backbone") == "dit"
        and (isinstance(model, dict) and model.get("type") == "ddit")
    )  # the FLM repository's config (note: its algo.name is also "flm")
    repo = "flm" if flm_schema else "s-flm"
    if "backbone.sz" in sd_keys:
        return "sfm_arch", repo
    if "backbone.sphere_embed.weight" in sd_keys:
        return "sfm_dit", repo
    if "cont_noise_table" in extra:
        return "candi", repo
    if "backbone.sigma_map.mlp.0.weight" not in sd_keys:
        return "ar", repo
    name = algo.get("name") if isinstance(algo, dict) else None
    fam = _ALGO_NAMES.get(name) if isinstance(name, str) else None
    if fam in ("mdlm", "duo", "flm"):
        return fam, repo
    if flm_schema:
        return "flm", repo
    return "", repo  # MDLM / Duo / FLM share keys: the caller needs --family


def read(path: str | Path, *, family: str | None = None) -> RefFile:
    """Read a reference checkpoint (memory-mapped, no code from the file runs). ``family`` forces
    the family when the config cannot say it; one that contradicts the file is an error."""
    path = Path(path)
    ckpt, replaced = _torch_load(path)
    missing = [k for k in _REQUIRED_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(f"{path}: not a Lightning checkpoint (no {missing[0]!r} key)")
    sd = ckpt["state_dict"]
    if not isinstance(sd, Mapping):
        raise CheckpointError(f"{path}: state_dict is a {type(sd).__name__}, not a mapping")
    # torch.compile's "._orig_mod." infix and distillation teachers (reference loaders do the same)
    sd = {k.replace("._orig_mod.", ".").replace("_orig_mod.", ""): v for k, v in sd.items()
          if not k.startswith("teacher")}  # fmt: skip
    hp = ckpt.get("hyper_parameters") or {}
    hp = hp if isinstance(hp, Mapping) else plain(hp)
    config = plain(hp.get("config")) if isinstance(hp, Mapping) else None
    config = config if isinstance(config, dict) else {}
    keys = set(sd)
    extra = [k for k in sd if "." not in k]
    if not any(k.startswith("backbone.") for k in keys):
        raise CheckpointError(f"{path}: no backbone.* weights in state_dict")
    fam, repo = _detect(path, keys, extra, config)
    if family is not None:
        if family not in FAMILIES:
            raise CheckpointError(
                f"--family: unknown family {family!r} (known: {', '.join(FAMILIES)})"
            )
        if fam and fam != family:
            raise CheckpointError(
                f"{path}: the file is a {fam} checkpoint, not {family} (forced family)"
            )
        fam = family
    if not fam:
        raise CheckpointError(
            f"{path}: MDLM, Duo and FLM checkpoints have the same keys and config.algo.name is "
            "unreadable; say which with --family (or family= in Python)"
        )
    backbone = [(k[len("backbone.") :], v) for k, v in sd.items() if k.startswith("backbone.")]
    params = [(k, v) for k, v in backbone if not _DROPPED.search(k)]
    ema = ckpt.get("ema")
    shadow = ema.get("shadow_params") if isinstance(ema, Mapping) else None
    warnings = []
    if shadow is None:
        warnings.append(
            f"{path}: no EMA weights in the file; using the raw (non-averaged) weights, which are "
            "not what the reference evaluates"
        )
        weights = dict(params)
    else:
        shadow = list(shadow)
        if len(shadow) != len(params):
            raise CheckpointError(
                f"{path}: {len(shadow)} EMA tensors for {len(params)} backbone parameters "
                "(EMA is matched by position)"
            )
        weights = {}
        for i, ((k, v), s) in enumerate(zip(params, shadow)):
            if not isinstance(s, torch.Tensor) or tuple(s.shape) != tuple(v.shape):
                got = tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__
                raise CheckpointError(
                    f"{path}: EMA tensor {i} has shape {got}, parameter backbone.{k} has "
                    f"{tuple(v.shape)}"
                )
            weights[k] = s
    noise = {k[len("noise.") :]: v for k, v in sd.items() if k.startswith("noise.")}
    embed_name = next(
        (n for n in ("vocab_embed.embedding", "sphere_embed.weight") if n in weights), None
    )
    if embed_name is None:
        raise CheckpointError(
            f"{path}: no input embedding (vocab_embed / sphere_embed) in backbone"
        )
    step = ckpt.get("global_step")
    epoch = ckpt.get("epoch")
    return RefFile(
        path=path,
        family=fam,
        repo=repo,
        config=config,
        global_step=int(step) if isinstance(step, int) else None,
        epoch=int(epoch) if isinstance(epoch, int) else None,
        has_ema=shadow is not None,
        weights=weights,
        raw=dict(params),
        noise=noise,
        extra_keys=extra,
        replaced=[r for r in replaced],
        warnings=warnings,
        embed_name=embed_name,
        ours=hp.get("sflm_bench") if isinstance(hp.get("sflm_bench"), dict) else None,
    )


def is_placeholder(obj: Any) -> bool:
    return isinstance(obj, Placeholder)


# --------------------------------------------------------------------------- the mapping


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
        if _DROPPED.search(k):
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
        "parameters": sum(v.numel() for k, v in ref.weights.items() if not _DROPPED.search(k)),
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


def replace(sp: Spec, **kw) -> Spec:
    return dataclasses.replace(sp, **kw)
