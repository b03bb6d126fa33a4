"""The S-FLM paper's released checkpoints (and any file in the reference harness's format):
inspect, convert into a model folder this harness samples like a trained run, load in Python,
and export a model trained here back into the reference format.

    python -m bench.checkpoints inspect SRC
    python -m bench.checkpoints convert SRC --out DIR [--family F] [--option key=value ...]
    python -m bench.checkpoints export RUN_DIR --out FILE

``SRC`` is a local file or ``hf://jdeschena/s-flm/<path>`` (see :mod:`bench.checkpoints.source`),
or a method's authors' Hugging Face-format repository ``hf://<owner>/<repo>`` / a local folder of
its ``config.json`` + ``model.safetensors`` (:mod:`bench.checkpoints.hf`; their code never runs).
In Python, :func:`load` returns the method (options set from the file) and its backbone holding
the EMA weights. A sweep uses a file with ``checkpoint: SRC`` in a method entry (an import cell
instead of a train cell; :mod:`bench.plan`). docs/checkpoints.md lists the 15 released files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.checkpoints import families
from bench.checkpoints.mapping import Spec, fit_problem, our_state
from bench.checkpoints.mapping import spec as reference_spec
from bench.checkpoints.reference import RefFile
from bench.checkpoints.reference import read as read_reference
from bench.checkpoints.source import CheckpointError, Source
from bench.checkpoints.source import resolve as resolve_file
from bench.config import BackboneConfig, ConfigError, canonical

__all__ = [
    "FAMILIES",
    "CheckpointError",
    "Loaded",
    "MODEL_JSON",
    "convert",
    "load",
    "open_source",
    "plan_spec",
    "resolve_options",
]

#: the file a converted model folder (or an import cell's run folder) describes itself in
MODEL_JSON = "model.json"
MODEL_FORMAT = "sflm-bench-model/1"


def __getattr__(name: str) -> Any:
    if name == "FAMILIES":  # the families the registered methods read (Method.reference)
        return families.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Loaded:
    """A loaded model. ``info``: provenance (source, sha256, global step, family, options)."""

    method: Any
    backbone: torch.nn.Module
    family: str
    info: dict = field(default_factory=dict)


@dataclass
class Opened:
    """A resolved and read reference file."""

    source: Source
    ref: RefFile
    spec: Spec


def resolve(src: str, *, fetch: bool = True, hash_file: bool = True) -> Source:
    """Where ``src`` is: a method's authors' Hugging Face-format repository or folder
    (:mod:`bench.checkpoints.hf`), else a reference-format file or hub file
    (:func:`bench.checkpoints.source.resolve`)."""
    from bench.checkpoints import hf

    if hf.is_repo(src):
        return hf.resolve_repo(src, fetch=fetch, hash_file=hash_file)
    if not src.startswith("hf://") and hf.is_folder(Path(src).expanduser()):
        return hf.local_source(src)
    return resolve_file(src, fetch=fetch, hash_file=hash_file)


def open_source(src: str, *, family: str | None = None) -> Opened:
    """Resolve ``src`` (downloading a hub file when needed) and read it."""
    source = resolve(src)
    ref = read_file(source.path, family=family)
    return Opened(source, ref, checked_spec(ref))


def read_file(path: Path, *, family: str | None = None) -> RefFile:
    """A reference-format file (:func:`bench.checkpoints.reference.read`) or a Hugging
    Face-format folder of a method's authors (:func:`bench.checkpoints.hf.read`)."""
    from bench.checkpoints import hf

    if hf.is_folder(path):
        return hf.read(path, family=family)
    return read_reference(path, family=family)


def is_model_folder(src: str | Path) -> bool:
    """A folder :func:`convert` wrote (not an ``hf://`` source, not a Hugging Face folder)."""
    from bench.checkpoints import hf

    return not str(src).startswith("hf://") and Path(src).is_dir() and not hf.is_folder(src)


def checked_spec(ref: RefFile) -> Spec:
    """:func:`bench.checkpoints.mapping.spec`, checked against our backbone for it, built with
    its parameters on the meta device (no memory; shapes only, no weight read): a file whose
    sizes our backbone cannot take or whose tensors do not fit it is a :class:`CheckpointError`
    naming the file, before anything is written."""
    sp = reference_spec(ref)
    try:
        _, backbone = build_model(
            sp.method, sp.options, sp.backbone, sp.vocab_size, sp.seq_len or 1024, meta=True
        )
    except CheckpointError:
        raise
    except (ConfigError, ValueError) as e:  # e.g. a width that the heads cannot split
        raise CheckpointError(f"{ref.path}: {e}") from None
    problem = fit_problem(ref, sp, {k: v.shape for k, v in backbone.state_dict().items()})
    if problem:
        raise CheckpointError(problem)
    return sp


def plan_spec(src: str, *, family: str | None = None) -> tuple[Spec, Source]:
    """What a sweep plans with: the file's own facts when it is here (a local file, or a hub file
    in the Hugging Face cache; read memory-mapped, weights untouched); for a released file not
    fetched yet, the catalogue's (:mod:`bench.checkpoints.catalogue`), with the sha256 from the
    hub's metadata (None offline)."""
    from bench.checkpoints import catalogue

    if is_model_folder(src):  # a folder convert wrote
        meta = read_model_json(Path(src))
        sp = Spec(meta["family"], meta["method"], dict(meta["options"]), {},
                  dict(meta["backbone"]), int(meta["vocab_size"]), meta.get("seq_len"))  # fmt: skip
        return sp, Source(src, Path(src), resolve(str(Path(src) / "weights.pt")).sha256)
    source = resolve(src, fetch=False)
    if source.path is None:
        entry = catalogue.released(src)
        if entry is None:
            raise CheckpointError(
                f"{src}: not in the Hugging Face cache and not one of the released files this "
                f"version knows; fetch it first: {source.fetch_hint()}"
            )
        sp = entry[1]
        if family is not None and family != sp.family:
            raise CheckpointError(f"{src}: is a {sp.family} checkpoint, not {family} (forced)")
        return dataclasses.replace(sp, options=dict(sp.options), choices=dict(sp.choices)), source
    return checked_spec(read_file(source.path, family=family)), source


def resolve_options(sp: Spec, requested: dict | None, *, where: str = "options") -> dict:
    """The file's options overlaid with ``requested``. An option the file fixes may only take a
    value the file allows (``sp.choices``); any other value is a :class:`CheckpointError` naming
    both. Options the file does not fix (e.g. sampling-only ones) pass through."""
    out = dict(sp.options)
    for key, value in (requested or {}).items():
        if key in sp.choices:
            allowed = sp.choices[key]
            if canonical(value) not in [canonical(a) for a in allowed]:
                raise CheckpointError(
                    f"{where}.{key}: {value!r} is not available for this checkpoint "
                    f"(the file allows {allowed})"
                )
            out[key] = value
        elif key in sp.options and canonical(value) != canonical(sp.options[key]):
            raise CheckpointError(
                f"{where}.{key}: the sweep says {value!r}, the checkpoint says {sp.options[key]!r}"
            )
        else:
            out[key] = value
    return out


def _options_obj(method: str, options: dict, where: str):
    from bench import registry
    from bench.config import build

    cls = registry.METHODS[method].Options
    return build(cls, options, where=where)


def build_model(
    method: str, options: dict, backbone: dict, vocab_size: int, seq_len: int, *, meta=False
) -> tuple[Any, torch.nn.Module]:
    """Our method and backbone for these facts (weights as initialised; ``meta``: the
    backbone's parameters on the meta device, shapes without memory or initialisation)."""
    from bench import registry

    cls = registry.METHODS[method]
    opts = _options_obj(method, options, f"{method}.options")
    m = cls(opts, vocab_size, seq_len)
    with _parameters_on_meta() if meta else contextlib.nullcontext():
        return m, m.build_backbone(BackboneConfig(**backbone))


@contextlib.contextmanager
def _parameters_on_meta():
    """Parameters registered inside go to the meta device (their initialisation then does
    nothing); buffers and every other tensor stay on the CPU, so a method that computes a
    schedule while building its backbone still can (as accelerate's ``init_empty_weights``)."""
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        register(module, name, param)
        if param is not None:
            p = module._parameters[name]
            module._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def _load_into(op: Opened, options: dict, seq_len: int) -> tuple[Any, torch.nn.Module]:
    sp, ref = op.spec, op.ref
    method, backbone = build_model(sp.method, options, sp.backbone, sp.vocab_size, seq_len)
    problem = fit_problem(ref, sp, {k: v.shape for k, v in backbone.state_dict().items()})
    if problem:
        raise CheckpointError(problem)
    backbone.load_state_dict(our_state(ref, sp.vocab_size), strict=True)
    # method state the file holds beyond the weights (S-FLM: the fitted adaptive schedule)
    families.entry(ref.family).format.load_state(method, ref)
    return method, backbone


def _provenance(op: Opened, options: dict) -> dict:
    s = op.source
    return {
        "source": s.name,
        "sha256": s.sha256,
        "repo": s.repo,
        "filename": s.filename or Path(s.name).name,
        "revision": s.revision,
        "global_step": op.ref.global_step,
        "family": op.ref.family,
        "written_by": op.ref.repo,
        "ema": op.ref.has_ema,
        "options": options,
    }


def load(
    src: str,
    *,
    family: str | None = None,
    options: dict | None = None,
    seq_len: int | None = None,
    device: str | torch.device = "cpu",
) -> Loaded:
    """Load ``src``: a reference-format file (local or ``hf://``) or a model folder written by
    :func:`convert`. ``options``: choices among those the file allows (e.g. S-FLM
    ``adaptive=True`` for the fitted schedule) and free options (sampling-only ones)."""
    if is_model_folder(src):
        return _load_folder(Path(src), device)
    op = open_source(src, family=family)
    for w in op.ref.warnings:
        print(f"warning: {w}", flush=True)
    opts = resolve_options(op.spec, options)
    method, backbone = _load_into(op, opts, seq_len or op.spec.seq_len or 1024)
    backbone.to(device).eval()
    method.to(device)
    return Loaded(method, backbone, op.ref.family, _provenance(op, opts))


def read_model_json(folder: Path) -> dict:
    """The description of a model folder written by :func:`convert`."""
    path = folder / MODEL_JSON
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{folder}: not a model folder (no {MODEL_JSON})") from None
    except ValueError as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from None
    missing = [
        k for k in ("method", "family", "options", "backbone", "vocab_size") if k not in meta
    ]
    if missing or not (folder / "weights.pt").is_file():
        what = f"no {missing[0]!r} key" if missing else "no weights.pt beside it"
        raise CheckpointError(f"{path}: not a model folder ({what})")
    return meta


def _load_folder(folder: Path, device) -> Loaded:
    from bench.weights import load_weights

    meta = read_model_json(folder)
    method, backbone = build_model(
        meta["method"], meta["options"], meta["backbone"], meta["vocab_size"],
        meta.get("seq_len") or 1024,
    )  # fmt: skip
    load_weights(method, backbone, folder / "weights.pt")
    backbone.to(device).eval()
    method.to(device)
    return Loaded(method, backbone, meta["family"], meta.get("source", {}))


def write_model(op: Opened, options: dict, out_dir: Path, *, seq_len: int | None = None) -> dict:
    """Write ``weights.pt`` (our format: EMA backbone, method state, steps, provenance) and
    ``model.json`` into ``out_dir`` (atomically each). Returns the model.json content."""
    from bench import atomic
    from bench.weights import WEIGHTS_FILE, save_weights

    sp = op.spec
    method, backbone = _load_into(op, options, seq_len or sp.seq_len or 1024)
    prov = _provenance(op, options)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_weights(out_dir / WEIGHTS_FILE, backbone, method, op.ref.global_step or 0,
                 {"imported": prov})  # fmt: skip
    meta = {
        "format": MODEL_FORMAT,
        "method": sp.method,
        "family": sp.family,
        "options": canonical(dataclasses.asdict(method.opts)),
        "backbone": sp.backbone,
        "vocab_size": sp.vocab_size,
        "seq_len": seq_len or sp.seq_len,
        "parameters": sum(p.numel() for p in backbone.parameters()),
        "source": prov,
        "choices": sp.choices,
        "notes": sp.notes,
        "converted": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    atomic.write_text(out_dir / MODEL_JSON, json.dumps(meta, indent=2, sort_keys=True))
    return meta


def convert(
    src: str, out_dir: str | Path, *, family: str | None = None, options: dict | None = None
) -> dict:
    """Convert ``src`` into the model folder ``out_dir`` (see :func:`write_model`)."""
    op = open_source(src, family=family)
    opts = resolve_options(op.spec, options)
    return write_model(op, opts, Path(out_dir))


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` with a YAML value (``adaptive=true``, ``attn_softcap=50``)."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"--option: expected key=value, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), yaml.safe_load(value)
