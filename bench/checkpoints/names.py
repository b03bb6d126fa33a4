"""Key names and order: reference checkpoint keys (s-flm ``models/dit.py::DIT``, ``FLMDIT``,
``ContDIT``, ``SphereDiT``, ``sphere_arch.py::SphereArch``; the FLM repository's DIT has the DIT's
names) against this project's backbones (:class:`bench.backbones.dit.DiT`,
:class:`sflm.sarch.SArch`), both ways, and the reference modules' parameter order (the order its
EMA list follows): one :class:`Layout` per reference module kind, named by a family's
``layout`` (:class:`bench.reference_format.ReferenceFamily`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.checkpoints.source import CheckpointError

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
DROPPED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


_DIT_INVERSE = [
    (r"^time\.mlp\.(\d)\.(weight|bias)$", r"sigma_map.mlp.\1.\2"),
    (r"^blocks\.(\d+)\.qkv\.weight$", r"blocks.\1.attn_qkv.weight"),
    (r"^blocks\.(\d+)\.adaLN\.(weight|bias)$", r"blocks.\1.adaLN_modulation.\2"),
    (r"^norm_f\.weight$", "output_layer.norm_final.weight"),
    (r"^adaLN_f\.(weight|bias)$", r"output_layer.adaLN_modulation.\1"),
    (r"^head\.(weight|bias)$", r"output_layer.linear.\1"),
    (r"^(.*)$", r"\1"),
]
_SARCH_INVERSE = [
    (r"^s_z$", "sz"),
    (r"^time\.mlp\.(\d)\.(weight|bias)$", r"sigma_map.mlp.\1.\2"),
    (r"^blocks\.(\d+)\.s_qk$", r"blocks.\1.sqk"),
    (r"^blocks\.(\d+)\.gamma_attn$", r"blocks.\1.attn_alpha"),
    (r"^blocks\.(\d+)\.gamma_mlp$", r"blocks.\1.mlp_alpha"),
    (r"^blocks\.(\d+)\.delta\.(weight|bias)$", r"blocks.\1.alpha_modulation.\2"),
    (r"^(.*)$", r"\1"),
]


@dataclass(frozen=True)
class Layout:
    """The key names of one reference backbone module against ours, both ways, and the
    module's parameter order. ``inputs`` / ``outputs``: our names of the input table and of the
    output rows (one row per class), which the vocabulary rows of a family slice or pad."""

    renames: list
    inverse: list
    top_order: list
    block_order: list
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


#: layout name (:attr:`bench.reference_format.ReferenceFamily.layout`) -> its tables
LAYOUTS: dict[str, Layout] = {}


def layout(name: str) -> Layout:
    """The :class:`Layout` called ``name``; an unknown one is a :class:`CheckpointError`."""
    try:
        return LAYOUTS[name]
    except KeyError:
        raise CheckpointError(
            f"unknown reference key layout {name!r} (known: {', '.join(LAYOUTS)})"
        ) from None


def rename(key: str, layout_name: str, family: str | None = None) -> str:
    """Our key for reference backbone key ``key`` (without the ``backbone.`` prefix) in a file
    of ``family`` (named in the error for an unknown key)."""
    for pat, repl in layout(layout_name).renames:
        if re.match(pat, key):
            return re.sub(pat, repl, key)
    raise CheckpointError(f"unknown backbone key {key!r} for a {family or layout_name} checkpoint")


def unrename(key: str, layout_name: str, embed_name: str) -> str:
    """The reference key for our key (the inverse of :func:`rename`; ``embed_name``: the
    reference's name of the input table, which differs between DiT classes)."""
    if key == "embed.weight":
        return embed_name
    for pat, repl in layout(layout_name).inverse:
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


LAYOUTS["dit"] = Layout(_DIT_RENAMES, _DIT_INVERSE, _DIT_TOP_ORDER, _DIT_BLOCK_ORDER,
                        ("embed.weight",), ("head.weight", "head.bias"))  # fmt: skip
LAYOUTS["sarch"] = Layout(_SARCH_RENAMES, _SARCH_INVERSE, _SARCH_TOP_ORDER, _SARCH_BLOCK_ORDER,
                          ("embed.weight",), ("lm_head.weight", "s_z"))  # fmt: skip


def reference_order(key: str, layout_name: str) -> tuple:
    """Sort key: the position of reference backbone key ``key`` in the reference module's
    ``state_dict`` / ``named_parameters`` (a module's own parameters, then its children in
    registration order: s-flm ``models/dit.py::DIT``, ``sphere_arch.py::SphereArch``). The EMA
    list is matched by this position, so an exported file must follow it."""
    lay = layout(layout_name)
    top, block = lay.top_order, lay.block_order
    m = re.match(r"blocks\.(\d+)\.(.*)$", key)
    if m:
        return (top.index("blocks"), int(m.group(1)), block.index(m.group(2)))
    return (top.index(key), 0, 0)
