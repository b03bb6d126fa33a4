"""Short hashes of what a tokenizer does, from its ids on probe texts.

Two questions, two hashes:

- :func:`cache_fingerprint`: "may a cache built with this tokenizer be reused?" (the TinyGSM
  and OWT token caches key on it). It covers the tokenizer's name, size, BOS / EOS / PAD ids and
  its ids for :data:`CACHE_PROBE`, so a tokenizer loaded under another name or with another
  ``[PAD]`` builds its own cache.
- :func:`ids_fingerprint`: "do these two tokenizers map text to the same ids?" (the Gen. PPL
  scorer then scores sample ids as they are instead of decoding and re-encoding them). It
  ignores names and BOS / PAD: its size, EOS id and ids for :data:`IDS_PROBE` only, so the hub's
  GPT-2 and the one rebuilt from whisper's ranks compare equal.

Both hash strings that existing caches and result rows were keyed with: changing a probe or a
field changes every key.
"""

from __future__ import annotations

import hashlib

# Text whose ids differ between tokenizers that differ in a way seen in practice: words, a
# separator, code indentation, digit runs (split digit by digit or not), whitespace runs before
# a digit (where SmolLM's digit split moves the cut: "x  5", "=   7", "\n  9"), a literal
# backslash-n (the reference separator) and a special token inside text.
CACHE_PROBE = (
    "Natalia sold 48 clips.\ndef simple_math_problem():\n    return 72 * 1.5\n"
    "x  5 y =   7\n  9 12345\\n<|endoftext|>"
)
# Words, digits, whitespace runs, non-ASCII letters and a special token inside text.
IDS_PROBE = "Hello world, 1234!\n\n  The quick brown fox. naïve café <|endoftext|> x  5"


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def cache_fingerprint(tok) -> str:
    """16 hex digits that change when the tokenizer's ids, name, size or special ids change
    (cache keys)."""
    key = (
        f"{getattr(tok, 'name_or_path', '')}|{len(tok)}|{tok.bos_token_id}|{tok.eos_token_id}|"
        f"{tok.pad_token_id}|{_ids(tok, CACHE_PROBE)}"
    )
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def ids_fingerprint(tok) -> str:
    """16 hex digits that change when the tokenizer maps text to different ids (whatever its
    name)."""
    key = f"{len(tok)}|{tok.eos_token_id}|{_ids(tok, IDS_PROBE)}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]
