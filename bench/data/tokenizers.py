"""The tokenizers of the program tasks, from :mod:`bench.text` (where they are built and
documented): their public names, importable from here too.

- :class:`CharTokenizer`: :mod:`bench.text.char` (the CPU stand-in's).
- :func:`load_smollm_tokenizer`, :data:`SMOLLM`, :data:`SMOLLM_VOCAB_SIZE`:
  :mod:`bench.text.smollm` (the paper's GSM8K tokenizer).
- :func:`pin_pre_tokenizer`, :func:`byte_level_rules`, :data:`PAD_TOKEN`: :mod:`bench.text.bpe`.
- :func:`tokenizer_fingerprint` (the cache-key hash), :data:`FINGERPRINT_PROBE`:
  :func:`bench.text.fingerprint.cache_fingerprint`, :data:`bench.text.fingerprint.CACHE_PROBE`.
"""

from __future__ import annotations

from bench.text.bpe import PAD_TOKEN, PRE_TOKENIZER_FAMILIES, byte_level_rules, pin_pre_tokenizer
from bench.text.char import DEFAULT_ALPHABET, CharTokenizer
from bench.text.fingerprint import CACHE_PROBE as FINGERPRINT_PROBE
from bench.text.fingerprint import cache_fingerprint as tokenizer_fingerprint
from bench.text.smollm import (
    SMOLLM,
    SMOLLM_GGUF_FILE,
    SMOLLM_GGUF_PACKAGE,
    SMOLLM_VOCAB_SIZE,
    load_smollm_tokenizer,
)

__all__ = [
    "DEFAULT_ALPHABET",
    "FINGERPRINT_PROBE",
    "PAD_TOKEN",
    "PRE_TOKENIZER_FAMILIES",
    "SMOLLM",
    "SMOLLM_GGUF_FILE",
    "SMOLLM_GGUF_PACKAGE",
    "SMOLLM_VOCAB_SIZE",
    "CharTokenizer",
    "byte_level_rules",
    "load_smollm_tokenizer",
    "pin_pre_tokenizer",
    "tokenizer_fingerprint",
]
