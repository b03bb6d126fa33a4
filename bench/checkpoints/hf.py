"""Hugging Face-format checkpoints of the methods' own authors (``hf://kuleshov-group/mdlm-owt``,
``hf://s-sahoo/duo``, ``hf://s-sahoo/duo-distilled``, or a local folder holding the same two
files), read without running their code.

A repository holds ``config.json`` (``model_type``, ``auto_map`` naming the authors' modelling
code, the sizes), ``model.safetensors`` (the backbone's tensors under ``backbone.``, with the
names of the DIT of kuleshov-group/mdlm and s-sahoo/duo ``models/dit.py``) and the ``.py`` files
that code lives in. Only the two data files are fetched (``snapshot_download`` with
``allow_patterns``); the ``.py`` files are never downloaded, imported or run (no
``trust_remote_code``). Which method a repository holds, the ``auto_map`` classes, the config
keys and values it may have, each method declares (:class:`bench.reference_format.HubFormat` in
its ``Method.reference.hub_formats``); anything else is one line (:class:`CheckpointError`).

The file is read into a :class:`bench.checkpoints.reference.RefFile` of the declared family, with
the config in the reference harness's sections (``model``, ``algo``, ``noise``), so that the
mapping, ``inspect``, ``convert``, a sweep's ``checkpoint:`` entry, ``bench.eval`` and
``bench.generate`` treat it as they treat the S-FLM paper's files (docs/checkpoints.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from bench.checkpoints.names import DROPPED, rename, unrename
from bench.checkpoints.source import HF_PREFIX, CheckpointError, Source, file_sha256

CONFIG, WEIGHTS = "config.json", "model.safetensors"
#: the keys every ``transformers.PretrainedConfig`` may write, which change nothing here
_GENERIC = {"_name_or_path", "architectures", "auto_map", "model_type", "return_dict",
            "torch_dtype", "transformers_version", "output_hidden_states",
            "use_return_dict"}  # fmt: skip
#: the sizes of the authors' DIT configuration classes (MDLMConfig, DUOConfig)
_SIZES = ("vocab_size", "model_length", "hidden_dim", "cond_dim", "n_blocks", "n_heads", "dropout")
_DTYPES = (None, "float32", "bfloat16", "float16")
_ROTARY = "rotary_emb.inv_freq"
#: the MDLM / Duo harnesses' log-linear schedule floor (configs/noise: eps 1e-3)
_EPS = 1e-3


def formats() -> dict[str, tuple[str, Any]]:
    """``model_type`` -> (method, :class:`~bench.reference_format.HubFormat`), from the
    registered methods' ``reference.hub_formats``."""
    from bench import registry

    out: dict[str, tuple[str, Any]] = {}
    for name, cls in registry.METHODS.items():
        for f in getattr(getattr(cls, "reference", None), "hub_formats", ()) or ():
            out[f.model_type] = (name, f)
    return out


# --------------------------------------------------------------------------- where from


def is_repo(src: str) -> bool:
    """``hf://<owner>/<repo>[@revision]``: a whole repository (a file has a path after it)."""
    if not src.startswith(HF_PREFIX):
        return False
    return len(src[len(HF_PREFIX) :].split("@", 1)[0].strip("/").split("/")) == 2


def is_folder(path: str | Path) -> bool:
    """A local folder in the Hugging Face format (``config.json``, not a converted model folder)."""
    p = Path(path)
    return p.is_dir() and (p / CONFIG).is_file() and not (p / "model.json").exists()


def is_hub_source(src: str) -> bool:
    """An ``hf://<owner>/<repo>`` repository or a local Hugging Face-format folder."""
    return is_repo(src) or (not src.startswith(HF_PREFIX) and is_folder(src))


def _hint(repo: str, rev: str | None) -> str:
    return f"hf download {repo} {CONFIG} {WEIGHTS}" + (f" --revision {rev}" if rev else "")


def _cached(repo: str, rev: str | None) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = [try_to_load_from_cache(repo, f, revision=rev) for f in (CONFIG, WEIGHTS)]
    if not all(isinstance(f, str) for f in found):
        return None
    folders = {Path(f).parent for f in found}
    return folders.pop() if len(folders) == 1 else None


def resolve_repo(src: str, *, fetch: bool = True, hash_file: bool = True) -> Source:
    """A hub repository as a :class:`Source` whose ``path`` is the snapshot folder (None when not
    fetched and ``fetch`` is off); its sha256 is the weights file's (from the hub's metadata
    when not fetched; None offline)."""
    from bench.checkpoints.source import _hub_reachable, _hub_sha256
    from bench.text.locate import hub_offline

    rest = src[len(HF_PREFIX) :]
    repo, _, rev = rest.partition("@")
    repo, rev = repo.strip("/"), rev or None
    out = Source(src, None, None, repo, f"{CONFIG} {WEIGHTS}", rev)
    folder = _cached(repo, rev)
    if folder is None and fetch:
        if hub_offline() or not _hub_reachable():
            why = "HF_HUB_OFFLINE is set" if hub_offline() else "the hub is unreachable"
            raise CheckpointError(
                f"{src}: not in the Hugging Face cache and {why}; fetch it by hand with: "
                f"{_hint(repo, rev)}"
            )
        from huggingface_hub import snapshot_download

        try:  # the two data files only: the repository's .py files are never fetched
            folder = Path(snapshot_download(repo, revision=rev, allow_patterns=[CONFIG, WEIGHTS]))
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise CheckpointError(f"{src}: download failed ({first}); {_hint(repo, rev)}") from None
    if folder is not None:
        out.path = folder
        out.sha256 = file_sha256(folder / WEIGHTS) if hash_file else None
    else:
        out.sha256 = _hub_sha256(repo, WEIGHTS, rev)
    out.fetch_hint = lambda: _hint(repo, rev)  # type: ignore[method-assign]
    return out


def local_source(path: str) -> Source:
    """A local Hugging Face-format folder; its sha256 is its weights file's."""
    folder = Path(path).expanduser()
    w = folder / WEIGHTS
    if not w.is_file():
        raise CheckpointError(f"{folder}: a Hugging Face-format folder without {WEIGHTS}")
    return Source(path, folder, file_sha256(w))


# --------------------------------------------------------------------------- reading


def _config(folder: Path) -> dict:
    path = folder / CONFIG
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{folder}: no {CONFIG}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not JSON ({str(e)[:120]})") from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{path}: not a config (top level is {type(cfg).__name__})")
    return cfg


def _format(path: Path, cfg: dict):
    """(method, HubFormat) of the config, its ``auto_map``, keys and values checked."""
    known = formats()
    mt = cfg.get("model_type")
    if mt not in known:
        raise CheckpointError(
            f"{path}: model_type {mt!r} is not a format this version reads "
            f"(known: {', '.join(sorted(known))})"
        )
    method, fmt = known[mt]
    amap, classes = cfg.get("auto_map", {}), dict(fmt.classes)
    if not isinstance(amap, dict):
        raise CheckpointError(f"{path}: auto_map is {type(amap).__name__}, not a mapping")
    for key, target in amap.items():
        cls = str(target).rsplit("--", 1)[-1].rsplit(".", 1)[-1]
        if classes.get(key) != cls:
            raise CheckpointError(
                f"{path}: auto_map.{key} = {target!r} is not the {mt} format's code "
                f"(known: {', '.join(f'{k} -> {v}' for k, v in classes.items())})"
            )
    allowed = _GENERIC | set(_SIZES) | set(fmt.fields) | dict(fmt.fixed).keys() | set(fmt.ignored)
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise CheckpointError(f"{path}: config key {unknown[0]!r} is not in the {mt} format")
    for key, want in fmt.fixed:
        if key in cfg and cfg[key] != want:
            raise CheckpointError(f"{path}: {key} = {cfg[key]!r}; the {mt} mapping needs {want!r}")
    if cfg.get("torch_dtype") not in _DTYPES:
        raise CheckpointError(f"{path}: torch_dtype {cfg.get('torch_dtype')!r} is not a float type")
    return method, fmt


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    """The weights file's tensors (memory-mapped by safetensors); a truncated file or one that
    is not safetensors is one line."""
    from safetensors import safe_open

    path = folder / WEIGHTS
    if not path.is_file():
        raise CheckpointError(f"{folder}: no {WEIGHTS}")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # SafetensorError: bad header, data past the end of the file
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise CheckpointError(f"{path}: not a readable safetensors file ({first})") from None


def _num(path: Path, cfg: dict, key: str, kind=int):
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, kind if kind is int else (int, float)):
        raise CheckpointError(f"{path}: config {key} is {v!r}, not a number")
    return v


def _weights(folder: Path, cfg: dict, layout: str) -> dict[str, torch.Tensor]:
    """The backbone tensors without their ``backbone.`` prefix, every name one the layout
    knows."""
    path = folder / WEIGHTS
    out = {}
    for k, v in _tensors(folder).items():
        if not k.startswith("backbone."):
            raise CheckpointError(f"{path}: tensor {k!r} is not a backbone tensor")
        if not v.dtype.is_floating_point:
            raise CheckpointError(f"{path}: tensor {k!r} is {v.dtype}, not floating point")
        name = k[len("backbone.") :]
        if not DROPPED.search(name):
            rename(name, layout)  # an unknown name is a CheckpointError naming it
        out[name] = v
    return out


def _check_sizes(path: Path, cfg: dict, w: dict[str, torch.Tensor], embed: str) -> None:
    """config.json's sizes against the tensors' shapes."""
    blocks = {int(k.split(".")[1]) for k in w if k.startswith("blocks.")}
    emb = w.get(embed)
    if emb is None or emb.dim() != 2:
        raise CheckpointError(f"{path}: no input table backbone.{embed} (a matrix)")
    cond = w.get("sigma_map.mlp.0.weight")
    facts = {"vocab_size": emb.shape[0], "hidden_dim": emb.shape[1], "n_blocks": len(blocks),
             "cond_dim": None if cond is None else cond.shape[0]}  # fmt: skip
    for key, got in facts.items():
        if got is not None and _num(path, cfg, key) != got:
            raise CheckpointError(f"{path}: config {key} = {cfg[key]}, the tensors say {got}")
    if not 0.0 <= _num(path, cfg, "dropout", float) < 1.0:
        raise CheckpointError(f"{path}: config dropout = {cfg['dropout']} is not in [0, 1)")
    # the rotary frequencies (a buffer the file carries) against the ones recomputed here
    head = emb.shape[1] // _num(path, cfg, "n_heads")
    inv = w.get(_ROTARY)
    want = 1.0 / (10_000 ** (torch.arange(0, head, 2, dtype=torch.float32) / head))
    if inv is not None and (inv.shape != want.shape or not torch.allclose(inv.float(), want)):
        raise CheckpointError(f"{path}: backbone.{_ROTARY} is not the base-10,000 rotary table")


def read(folder: str | Path, *, family: str | None = None):
    """Read a Hugging Face-format folder into a :class:`~bench.checkpoints.reference.RefFile`
    (nothing from the folder runs; ``family`` must agree with the format when given)."""
    from bench.checkpoints import families
    from bench.checkpoints.reference import RefFile

    folder = Path(folder)
    cfg = _config(folder)
    method, fmt = _format(folder / CONFIG, cfg)
    if family is not None and family != fmt.family:
        raise CheckpointError(f"{folder}: the file is a {fmt.family} checkpoint, not {family}")
    fam = families.entry(fmt.family).family
    weights = _weights(folder, cfg, fam.layout)
    _check_sizes(folder / WEIGHTS, cfg, weights, fam.embed)
    algo = dict(fmt.algo)
    if "time_conditioning" in fmt.fields and isinstance(cfg.get("time_conditioning"), bool):
        algo["time_conditioning"] = cfg["time_conditioning"]
    config = {
        "model": {"n_heads": _num(folder, cfg, "n_heads"), "length": cfg.get("model_length"),
                  "cond_dim": cfg.get("cond_dim"), "dropout": float(cfg["dropout"])},
        "algo": algo,
        "noise": {"type": "log-linear", "eps": _EPS},
        "hf": {k: v for k, v in cfg.items() if k not in ("auto_map", "architectures")},
    }  # fmt: skip
    return RefFile(
        path=folder, family=fam.name, repo="hf", config=config, global_step=None, epoch=None,
        has_ema=False, weights=weights, raw=weights, noise={}, extra_keys=[],
        warnings=[], embed_name=fam.embed,
    )  # fmt: skip


def notes(ref) -> list[str]:
    """What ``inspect`` / ``convert`` say about a Hugging Face-format file."""
    return [
        f"Hugging Face format ({ref.config['hf'].get('model_type')}): read from {CONFIG} and "
        f"{WEIGHTS}; the repository's .py files were never fetched or run",
        "one set of weights (the file does not say whether they are the EMA average); schedule "
        f"floor eps {_EPS} and time conditioning {ref.config['algo'].get('time_conditioning')} "
        "as the authors' harness runs the model",
    ]


# --------------------------------------------------------------------------- writing


def write_folder(backbone: torch.nn.Module, model_type: str, out: Path, **config: Any) -> Path:
    """Write our DiT ``backbone`` as a Hugging Face-format folder of ``model_type`` (the
    authors' key names, the rotary table, a ``config.json`` with their ``auto_map``): what the
    tests and the rehearsal read back as the published files are read. ``config``: extra
    ``config.json`` values (e.g. ``time_conditioning``)."""
    from safetensors.torch import save_file

    from bench import atomic
    from bench.checkpoints import families

    method, fmt = formats()[model_type]
    fam = families.entry(fmt.family).family
    sd = {f"backbone.{unrename(k, fam.layout, fam.embed)}": v.detach().float().contiguous()
          for k, v in backbone.state_dict().items()}  # fmt: skip
    size = backbone.size
    head = size.d_model // size.n_heads
    sd[f"backbone.{_ROTARY}"] = 1.0 / (10_000 ** (torch.arange(0, head, 2).float() / head))
    modules = {"AutoConfig": "configuration", "AutoModelForMaskedLM": "modeling"}
    cfg = {
        "architectures": [dict(fmt.classes)["AutoModelForMaskedLM"]],
        "auto_map": {k: f"{modules.get(k, 'model')}_{model_type}.{v}" for k, v in fmt.classes},
        "model_type": model_type,
        "vocab_size": int(backbone.embed.weight.shape[0]),
        "model_length": int(config.pop("model_length", 1024)),
        "hidden_dim": size.d_model, "cond_dim": size.cond_dim, "n_blocks": size.n_blocks,
        "n_heads": size.n_heads, "dropout": size.dropout, "return_dict": False,
        "torch_dtype": "float32", **dict(fmt.fixed), **config,
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_with(out / WEIGHTS, lambda tmp: save_file(sd, str(tmp)))
    atomic.write_text(out / CONFIG, json.dumps(cfg, indent=2, sort_keys=True))
    return out


def model_type_of(method: str) -> str | None:
    """The first ``model_type`` method ``method``'s authors publish (None: none)."""
    return next((mt for mt, (m, _) in formats().items() if m == method), None)
