"""Reading a checkpoint of the S-FLM paper's harness (FrankCCCCC/s-flm @ 18d586f) or of the FLM
repository (david3684/flm): family, config, EMA weights (the mapping onto this project's methods
is :mod:`bench.checkpoints.mapping`, the key names :mod:`bench.checkpoints.names`, the families
the registered methods declare :mod:`bench.checkpoints.families`).

A file is a Lightning checkpoint: ``state_dict`` (raw weights, ``backbone.*``; ``noise.*`` for
the adaptive schedule; ``cont_noise_table`` for CANDI), ``ema`` (``shadow_params``: a list of the
backbone's trainable tensors in ``named_parameters`` order, reference ``models/ema.py``),
``hyper_parameters`` (the training config as a pickled omegaconf ``DictConfig``, read through
placeholders, never resolved), ``global_step`` and optimiser / loop state (never read: the file
is memory-mapped, so only the tensors used are paged in).

What is read from where:
- the family from the keys each family declares (``requires`` / ``excludes`` of
  :class:`bench.reference_format.ReferenceFamily`: ``backbone.sz``: S-arch;
  ``backbone.sphere_embed.weight``: sphere-DiT; ``cont_noise_table``: CANDI; no ``sigma_map``:
  AR), families with the same keys (MDLM / Duo / FLM) from ``config.algo.name`` or the FLM
  repository's own config schema;
- sizes from the tensor shapes (width, blocks, conditioning width, MLP ratio, vocabulary rows),
  the number of heads from ``config.model.n_heads`` (shapes cannot tell it);
- the options each family's sample script ran with from the config (table in
  docs/checkpoints.md).

The weights used are the EMA shadow weights (the reference's ``_eval_mode`` copies them into the
backbone by position before every evaluation), mapped onto the state-dict keys by position with
count and shape checks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.checkpoints import families
from bench.checkpoints.names import DROPPED
from bench.checkpoints.source import CheckpointError
from bench.checkpoints.unpickle import foreign, pickle_module, plain, what

_REQUIRED_KEYS = ("state_dict",)
#: the output rows (DiT layouts, S-arch) and the first MLP matrix of block 0, whose shapes give
#: the output vocabulary and the MLP ratio
_OUTPUT = ("output_layer.linear.weight", "lm_head.weight")
_MLP_IN = ("blocks.0.mlp.0.weight", "blocks.0.c_fc.weight")
#: the config schemas of the two codebases whose files are read (``RefFile.repo``) -> who wrote
#: the file, in words: the S-FLM paper's harness and the FLM repository (david3684/flm)
SCHEMAS = {"s-flm": "S-FLM harness", "flm": "FLM repository",
           "hf": "the authors' Hugging Face repository (bench.checkpoints.hf)"}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name == "FAMILIES":  # every family the registered methods read (families.names())
        return families.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- the file


@dataclass
class RefFile:
    """What a reference checkpoint is (read by :func:`read`)."""

    path: Path
    family: str
    repo: str  # the config schema it was written under (a key of SCHEMAS)
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
        return int(next(self.weights[k] for k in _OUTPUT if k in self.weights).shape[0])

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
        return int(next(self.weights[k] for k in _MLP_IN if k in self.weights).shape[0]) // (
            self.d_model
        )

    def cfg(self, dotted: str, default: Any = None) -> Any:
        """A config value by dotted key (``model.n_heads``); ``default`` when absent."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def num(self, dotted: str, default: Any) -> Any:
        """A config value that must be a plain value: ``default`` when absent or None; an
        interpolation string (``${eval:...}``, never resolved here) is a
        :class:`CheckpointError`."""
        v = self.cfg(dotted, default)
        if v is None:
            return default
        if isinstance(v, str):
            raise self.error(f"config.{dotted} is {v!r}, which needs the reference's resolvers")
        if not isinstance(v, bool | int | float):
            raise self.error(f"config.{dotted} is {what(v)}, not a number")
        return v

    def error(self, message: str) -> CheckpointError:
        """The one-line error about this file: ``<path>: <message>``."""
        return CheckpointError(f"{self.path}: {message}")

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


def _schema(config: dict) -> str:
    """The config schema a file was written under (a key of :data:`SCHEMAS`): the FLM
    repository's when its ``algo.backbone`` is ``dit`` and its ``model.type`` ``ddit`` (note:
    its algo.name is the harness's FLM name too), else the paper harness's."""
    algo = config.get("algo", {}) if isinstance(config, dict) else {}
    model = config.get("model", {}) if isinstance(config, dict) else {}
    flm_schema = (
        isinstance(algo, dict)
        and algo.get("backbone") == "dit"
        and (isinstance(model, dict) and model.get("type") == "ddit")
    )
    harness, flm_repo = list(SCHEMAS)[:2]  # the order of the table above
    return flm_repo if flm_schema else harness


def _state_dict(path: Path, ckpt: dict) -> dict:
    """The checkpoint's ``state_dict`` (torch.compile's infix and distillation teachers left
    out), its read entries checked to be tensors, and the types of ``ema`` / ``global_step`` /
    ``epoch`` checked."""
    missing = [k for k in _REQUIRED_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(f"{path}: not a Lightning checkpoint (no {missing[0]!r} key)")
    sd = ckpt["state_dict"]
    if not isinstance(sd, Mapping):
        raise CheckpointError(f"{path}: state_dict is {what(sd)}, not a mapping")
    # torch.compile's "._orig_mod." infix and distillation teachers (reference loaders do the same)
    sd = {k.replace("._orig_mod.", ".").replace("_orig_mod.", ""): v for k, v in sd.items()
          if not k.startswith("teacher")}  # fmt: skip
    for k, v in sd.items():  # what is read: backbone.*, noise.*, top-level tables
        if not isinstance(v, torch.Tensor) and (
            k.startswith(("backbone.", "noise.")) or "." not in k
        ):
            raise CheckpointError(f"{path}: state_dict[{k!r}] is {what(v)}, not a tensor")
    for key, kind in (("ema", Mapping), ("global_step", int), ("epoch", int)):
        v = ckpt.get(key)
        if v is not None and not isinstance(v, kind):
            words = "a mapping" if kind is Mapping else "an integer"
            raise CheckpointError(f"{path}: {key} is {what(v)}, not {words}")
    if not any(k.startswith("backbone.") for k in sd):
        raise CheckpointError(f"{path}: no backbone.* weights in state_dict")
    return sd


def _hyper_parameters(path: Path, ckpt: dict) -> tuple[Mapping, dict]:
    """(``hyper_parameters`` as plain values, its ``config`` as a dict; {} when unreadable).
    A call of a function outside the allow-list is never a config."""
    hp = ckpt.get("hyper_parameters") or {}
    raw_config = hp.get("config") if isinstance(hp, Mapping) else None
    hp = hp if isinstance(hp, Mapping) else plain(hp)
    for name, v in (("hyper_parameters", hp), ("hyper_parameters['config']", raw_config)):
        said = foreign(v)
        if said and said.startswith(("a call of", "the function")):
            raise CheckpointError(f"{path}: {name} is {said}, not a config")
    config = plain(hp.get("config")) if isinstance(hp, Mapping) else None
    return hp, config if isinstance(config, dict) else {}


def _family(path: Path, keys: set[str], config: dict, repo: str, forced: str | None) -> str:
    """The file's family (:func:`bench.checkpoints.families.detect`), or ``forced`` when it
    agrees; a file no family fits, or several, is a :class:`CheckpointError`."""
    fam = families.detect(keys, config, repo)
    if forced is not None:
        known = families.names()
        if forced not in known:
            raise CheckpointError(
                f"--family: unknown family {forced!r} (known: {', '.join(known)})"
            )
        if fam and fam != forced:
            raise CheckpointError(
                f"{path}: the file is a {fam} checkpoint, not {forced} (forced family)"
            )
        return forced
    if fam:
        return fam
    tied = families.ambiguous(keys)
    if not tied:
        raise CheckpointError(
            f"{path}: its keys fit none of the known families ({', '.join(families.names())})"
        )
    raise CheckpointError(
        f"{path}: {', '.join(tied)} checkpoints have the same keys and config.algo.name is "
        "unreadable; say which with --family (or family= in Python)"
    )


def _ema(path: Path, ckpt: dict, params: list) -> tuple[dict, list[str], bool]:
    """(the EMA weights paired with the parameters by position, warnings, whether the file has
    EMA weights); without them the raw weights, with a warning."""
    ema = ckpt.get("ema")
    shadow = ema.get("shadow_params") if isinstance(ema, Mapping) else None
    if shadow is None:
        return dict(params), [
            f"{path}: no EMA weights in the file; using the raw (non-averaged) weights, which "
            "are not what the reference evaluates"
        ], False  # fmt: skip
    if not isinstance(shadow, list | tuple):
        raise CheckpointError(
            f"{path}: ema['shadow_params'] is {what(shadow)}, not a list of tensors"
        )
    if len(shadow) != len(params):
        raise CheckpointError(
            f"{path}: {len(shadow)} EMA tensors for {len(params)} backbone parameters "
            "(EMA is matched by position)"
        )
    weights = {}
    for i, ((k, v), s) in enumerate(zip(params, shadow)):
        if not isinstance(s, torch.Tensor):
            raise CheckpointError(f"{path}: ema['shadow_params'][{i}] is {what(s)}, not a tensor")
        if tuple(s.shape) != tuple(v.shape):
            raise CheckpointError(
                f"{path}: EMA tensor {i} has shape {tuple(s.shape)}, parameter backbone.{k} "
                f"has {tuple(v.shape)}"
            )
        weights[k] = s
    return weights, [], True


def _check_size_tensors(path: Path, weights: dict, fam: str, embed_name: str) -> None:
    """The tensors the sizes are read from (``RefFile.d_model``, ``vocab_rows``, ``out_rows``,
    ``mlp_ratio``) are there and are matrices."""
    for part, names in (
        ("input embedding", (embed_name,)),
        ("output layer", _OUTPUT),
        ("MLP input of block 0", _MLP_IN),
    ):
        name = next((n for n in names if n in weights), None)
        if name is None:
            raise CheckpointError(f"{path}: no {part} ({' or '.join(names)}) in a {fam} backbone")
        if weights[name].dim() != 2:
            raise CheckpointError(
                f"{path}: backbone.{name} has shape {tuple(weights[name].shape)}, not a matrix"
            )


def read(path: str | Path, *, family: str | None = None) -> RefFile:
    """Read a reference checkpoint (memory-mapped, no code from the file runs). ``family`` forces
    the family when the config cannot say it; one that contradicts the file is an error."""
    path = Path(path)
    ckpt, replaced = _torch_load(path)
    sd = _state_dict(path, ckpt)
    hp, config = _hyper_parameters(path, ckpt)
    repo = _schema(config)
    fam = _family(path, set(sd), config, repo, family)
    backbone = [(k[len("backbone.") :], v) for k, v in sd.items() if k.startswith("backbone.")]
    params = [(k, v) for k, v in backbone if not DROPPED.search(k)]
    weights, warnings, has_ema = _ema(path, ckpt, params)
    embed_name = families.entry(fam).family.embed
    _check_size_tensors(path, weights, fam, embed_name)
    step, epoch = ckpt.get("global_step"), ckpt.get("epoch")
    return RefFile(
        path=path,
        family=fam,
        repo=repo,
        config=config,
        global_step=int(step) if isinstance(step, int) else None,
        epoch=int(epoch) if isinstance(epoch, int) else None,
        has_ema=has_ema,
        weights=weights,
        raw=dict(params),
        noise={k[len("noise.") :]: v for k, v in sd.items() if k.startswith("noise.")},
        extra_keys=[k for k in sd if "." not in k],
        replaced=list(replaced),
        warnings=warnings,
        embed_name=embed_name,
        ours=hp.get("sflm_bench") if isinstance(hp.get("sflm_bench"), dict) else None,
    )
