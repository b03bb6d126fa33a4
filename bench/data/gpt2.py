"""The GPT-2 tokenizer, from :mod:`bench.text.gpt2` (where it is built and documented): its
public names, importable from here too."""

from __future__ import annotations

from bench.text.gpt2 import (
    EOT,
    EOT_ID,
    GPT2,
    GPT2_TIKTOKEN,
    GPT2_TIKTOKEN_SHA256,
    REBUILD_VERSION,
    VOCAB_SIZE,
    WHISPER_DIST,
    WHISPER_PACKAGE,
    build_offline_folder,
    load_gpt2_tokenizer,
    read_ranks,
    vocab_and_merges,
    whisper_ranks_path,
)
from bench.text.locate import data_cache_root as cache_root

__all__ = [
    "EOT",
    "EOT_ID",
    "GPT2",
    "GPT2_TIKTOKEN",
    "GPT2_TIKTOKEN_SHA256",
    "REBUILD_VERSION",
    "VOCAB_SIZE",
    "WHISPER_DIST",
    "WHISPER_PACKAGE",
    "build_offline_folder",
    "cache_root",
    "load_gpt2_tokenizer",
    "read_ranks",
    "vocab_and_merges",
    "whisper_ranks_path",
]
