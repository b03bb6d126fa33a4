"""A character tokenizer for the CPU stand-in of the program tasks (bench/data/program/arith.py).

:class:`CharTokenizer`: one id per character of a fixed alphabet plus PAD / BOS / EOS, and
optionally a fixed list of multi-character pieces (whole words, ``"\n    "``) matched greedily,
longest first: the stand-in's word problems use a closed vocabulary, so word pieces cut the
sequences about 3x while digits stay single characters (as in SmolLM's tokenizer, which splits
numbers into digits). It offers the small subset of the Hugging Face tokenizer interface the
loaders use (``__call__`` with ``add_special_tokens``, ``encode``, ``decode``,
``bos/eos/pad_token_id``, ``len``), so the same code path serves both.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Iterable, Sequence

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
