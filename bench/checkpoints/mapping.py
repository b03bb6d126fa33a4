"""How a reference file becomes one of our models: the method, the options its sample script ran
with (and the choices the file allows), sizes and vocabulary (:func:`spec`), the EMA state dict
in our names (:func:`our_state`) and what ``inspect`` prints (:func:`describe`). What differs
per family (the options a file implies, method state such as S-FLM's adaptive schedule) the
family's method declares (``Method.reference``, :mod:`bench.reference_format`); facts per
family: docs/checkpoints.md."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bench.checkpoints import families
from bench.checkpoints.names import DROPPED, layout, rename
from bench.checkpoints.reference import SCHEMAS, RefFile
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


def spec(ref: RefFile) -> Spec:
    """The method, options, backbone and vocabulary a reference file maps to: sizes and
    vocabulary from the file, the options from its method's reference format
    (:meth:`bench.reference_format.ReferenceFormat.options_from`)."""
    from bench.backbones.dit import SIZES

    e = families.entry(ref.family)
    fam = e.family
    V_in, V_out = ref.vocab_rows, ref.out_rows
    # vocabulary rows (reference dataloader.get_tokenizer + algo constructors): a family with a
    # mask class has one more row than the model's classes in both tables
    vocab = V_in - fam.mask_rows
    want_out = vocab + fam.mask_rows
    if V_out != want_out:
        raise CheckpointError(
            f"{ref.path}: a {fam.name} checkpoint with {V_in} input rows should have {want_out} "
            f"output rows, has {V_out}"
        )
    if ref.mlp_ratio != 4:
        raise CheckpointError(f"{ref.path}: MLP ratio {ref.mlp_ratio} (the shared backbone has 4)")
    n_heads = ref.n_heads
    cond = ref.cond_dim or int(ref.num("model.cond_dim", 128))
    dropout = float(ref.num("model.dropout", 0.0))
    sizes = {"n_blocks": ref.n_blocks, "d_model": ref.d_model, "n_heads": n_heads,
             "cond_dim": cond, "dropout": dropout}  # fmt: skip
    preset = next(
        (name for name, s in SIZES.items()
         if (s.n_blocks, s.d_model, s.n_heads, s.cond_dim) ==
         (ref.n_blocks, ref.d_model, n_heads, cond)),
        "small",
    )  # fmt: skip
    backbone = {"size": preset, **sizes}
    opts, choices, notes = e.format.options_from(ref, fam)
    opts, choices, notes = dict(opts), dict(choices), list(notes)
    length = ref.cfg("model.length")
    if ref.ours is not None:  # exported here: our exact options and sizes
        o = ref.ours
        if o.get("method") != e.method or int(o.get("vocab_size", -1)) != vocab:
            raise CheckpointError(
                f"{ref.path}: its sflm_bench record ({o.get('method')}, |V| "
                f"{o.get('vocab_size')}) does not match the weights ({e.method}, |V| {vocab})"
            )
        opts, backbone, choices = dict(o["options"]), dict(o["backbone"]), {}
        length = o.get("seq_len", length)
    return Spec(
        family=fam.name,
        method=e.method,
        options=opts,
        choices=choices,
        backbone=backbone,
        vocab_size=vocab,
        seq_len=length if isinstance(length, int) else None,
        notes=notes + _hub_notes(ref) + list(ref.warnings),
    )


def _hub_notes(ref: RefFile) -> list[str]:
    from bench.checkpoints import hf

    return hf.notes(ref) if ref.repo == "hf" else []


def _ours(ref: RefFile, vocab: int) -> dict[str, torch.Tensor]:
    """The file's backbone tensors under our names, as views (the rows of a mask class our
    backbone does not have are sliced off: the reference pins or drops their logits)."""
    fam = families.entry(ref.family).family
    lay = layout(fam.layout)
    rows = {**{k: vocab + fam.kept_mask_rows[0] for k in lay.inputs},
            **{k: vocab + fam.kept_mask_rows[1] for k in lay.outputs}}  # fmt: skip
    out = {}
    for k, v in ref.weights.items():
        if DROPPED.search(k):
            continue
        name = rename(k, fam.layout, fam.name)
        out[name] = v[: rows[name]] if name in rows and v.shape[0] > rows[name] else v
    return out


def our_state(ref: RefFile, vocab: int) -> dict[str, torch.Tensor]:
    """The backbone state dict in our names (EMA weights, float32 copies; see :func:`_ours`)."""
    return {k: v.detach().to(torch.float32).clone() for k, v in _ours(ref, vocab).items()}


def fit_problem(ref: RefFile, sp: Spec, ours: dict[str, tuple]) -> str | None:
    """What keeps the file's backbone tensors from loading into ours (``ours``: our state dict's
    names -> shapes), in words naming the file, or None when they fit. Reads shapes only."""
    theirs = {k: tuple(v.shape) for k, v in _ours(ref, sp.vocab_size).items()}
    missing = sorted(set(ours) - set(theirs))
    unexpected = sorted(set(theirs) - set(ours))
    if missing or unexpected:
        return (
            f"{ref.path}: does not fit our {sp.method} backbone"
            + (f"; missing {missing[:3]}" if missing else "")
            + (f"; unexpected {unexpected[:3]}" if unexpected else "")
        )
    for k, shape in theirs.items():
        if shape != tuple(ours[k]):
            return f"{ref.path}: {k}: shape {shape} in the file, {tuple(ours[k])} here"
    return None


def describe(ref: RefFile, sp: Spec) -> dict:
    """What ``inspect`` prints."""
    out = {
        "file": str(ref.path),
        "family": ref.family,
        "written_by": SCHEMAS[ref.repo],
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
    out.update(families.entry(ref.family).format.describe(ref))
    if ref.replaced:
        out["placeholders"] = ref.replaced
    return out
