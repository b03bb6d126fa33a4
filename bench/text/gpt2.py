"""The GPT-2 BPE tokenizer (50,257 ids, ``<|endoftext|>`` = 50256), online or offline.

Sources, in order for ``source="auto"``:

- ``hf-cache``: ``AutoTokenizer.from_pretrained("gpt2", local_files_only=True)``;
- ``hf-hub``: the same from the hub (skipped when ``HF_HUB_OFFLINE=1``);
- ``whisper``: the GPT-2 ranks that the PyPI package ``openai-whisper`` ships as
  ``whisper/assets/gpt2.tiktoken`` (``pip install --no-deps openai-whisper==20250625``; the
  package is located, never imported). That file is byte-identical to OpenAI's
  ``r50k_base.tiktoken`` (its sha256 is the one tiktoken checks, :data:`GPT2_TIKTOKEN_SHA256`).
  From the ranks we rebuild the Hugging Face ``vocab.json`` / ``merges.txt`` (byte-to-unicode
  map of GPT-2's ``encoder.py``; each merge is found by replaying BPE on a token's bytes with the
  lower-ranked merges), save a ``GPT2TokenizerFast`` folder once under the data cache and load
  it from there. ``tests/bench/data/test_owt.py`` checks fixed ids (``"Hello world"`` ->
  [15496, 995]) and the committed reference ids of ``tests/fixtures/gpt2_reference_ids.json``.

The loaded tokenizer carries ``sflm_source`` (the source label) like
:func:`bench.text.smollm.load_smollm_tokenizer`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from bench.text.bpe import pin_pre_tokenizer
from bench.text.locate import data_cache_root, error_line, hub_offline, package_dir

GPT2 = "gpt2"
EOT = "<|endoftext|>"
EOT_ID = 50256
VOCAB_SIZE = 50257
WHISPER_PACKAGE = "whisper"
WHISPER_DIST = "openai-whisper"
WHISPER_PIN = f"{WHISPER_DIST}==20250625"
GPT2_TIKTOKEN = ("assets", "gpt2.tiktoken")
# sha256 of OpenAI's r50k_base.tiktoken (tiktoken_ext/openai_public.py, expected_hash)
GPT2_TIKTOKEN_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
REBUILD_VERSION = 1


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (openai/gpt-2 ``src/encoder.py``,
    ``bytes_to_unicode``): printable Latin-1 bytes map to themselves, the other 68 bytes to
    code points 256, 257, ... in byte order."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def whisper_ranks_path() -> Path:
    """``gpt2.tiktoken`` inside the installed ``openai-whisper`` (located, never imported)."""
    return package_dir(WHISPER_PACKAGE, WHISPER_PIN).joinpath(*GPT2_TIKTOKEN)


def read_ranks(path: Path) -> dict[bytes, int]:
    """The ``<base64 token> <rank>`` lines of a ``.tiktoken`` file, checked against the
    official r50k_base hash."""
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != GPT2_TIKTOKEN_SHA256:
        raise ValueError(f"{path}: sha256 {digest[:12]}... is not OpenAI's r50k_base ranks")
    ranks = {}
    for line in raw.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def _last_merge(ranks: dict[bytes, int], token: bytes) -> tuple[bytes, bytes]:
    """The two parts that the merge of rank ``ranks[token]`` joins: run byte-level BPE on
    ``token`` using only merges ranked below it (they all apply before it) until two parts
    remain."""
    limit = ranks[token]
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_rank, best_i = limit, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1], limit)
            if r < best_rank:
                best_rank, best_i = r, i
        if best_i < 0:
            raise ValueError(f"GPT-2 ranks: token {token!r} cannot be built from lower merges")
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts[0], parts[1]


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[str]]:
    """Hugging Face ``vocab.json`` (token string -> id) and ``merges.txt`` lines (in rank
    order) equivalent to the tiktoken ranks, plus ``<|endoftext|>`` = 50256."""
    b2u = _bytes_to_unicode()

    def show(bs: bytes) -> str:
        return "".join(b2u[b] for b in bs)

    vocab = {show(t): r for t, r in ranks.items()}
    vocab[EOT] = EOT_ID
    merges = []
    for tok, _ in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) > 1:
            a, b = _last_merge(ranks, tok)
            merges.append(f"{show(a)} {show(b)}")
    return vocab, merges


def build_offline_folder(data_dir: str = "") -> Path:
    """A ``GPT2TokenizerFast`` folder rebuilt from the whisper ranks (once, across processes:
    :func:`bench.atomic.build_once`; ``tokenizer.json`` marks a finished folder)."""
    from bench.atomic import build_once

    out = data_cache_root(data_dir) / "tokenizers" / f"gpt2-from-whisper-v{REBUILD_VERSION}"
    return build_once(
        out, _save_offline_folder, check=lambda d: d if (d / "tokenizer.json").is_file() else None
    )


def _save_offline_folder(tmp: Path) -> None:
    from transformers import GPT2TokenizerFast

    vocab, merges = vocab_and_merges(read_ranks(whisper_ranks_path()))
    # vocab=/merges= objects: transformers 5.x ignores vocab_file=/merges_file= keyword paths
    tok = GPT2TokenizerFast(
        vocab=vocab,
        merges=[tuple(m.split(" ")) for m in merges],
        bos_token=EOT,
        eos_token=EOT,
        unk_token=EOT,
        add_prefix_space=False,
    )
    tok.model_max_length = 1024
    tok.save_pretrained(str(tmp))
    (tmp / "sflm_source.json").write_text(
        json.dumps(
            {"source": f"{WHISPER_DIST}:{'/'.join(GPT2_TIKTOKEN)}", "sha256": GPT2_TIKTOKEN_SHA256}
        )
    )


def load_gpt2_tokenizer(source: str = "auto", data_dir: str = ""):
    """The GPT-2 tokenizer; ``source`` is auto | hf | whisper. Raises RuntimeError listing
    what was tried. The result has ``sflm_source`` and ``len() == 50257``."""
    if source not in ("auto", "hf", "whisper"):
        raise ValueError(f"GPT-2 tokenizer source must be auto, hf or whisper, got {source!r}")
    from transformers import AutoTokenizer

    attempts = []
    if source in ("auto", "hf"):
        attempts.append(
            ("hf-cache", lambda: AutoTokenizer.from_pretrained(GPT2, local_files_only=True))
        )
        if source == "hf" or not hub_offline():
            attempts.append(("hf-hub", lambda: AutoTokenizer.from_pretrained(GPT2)))
    if source in ("auto", "whisper"):
        attempts.append(
            (
                f"{WHISPER_DIST}:{'/'.join(GPT2_TIKTOKEN)}",
                lambda: AutoTokenizer.from_pretrained(str(build_offline_folder(data_dir))),
            )
        )
    errors = []
    for label, load in attempts:
        try:
            tok = load()
        except Exception as e:  # each source fails its own way (OSError, ImportError, ...)
            errors.append(f"{label}: {error_line(e)}")
            continue
        if len(tok) != VOCAB_SIZE or tok.eos_token_id != EOT_ID:
            errors.append(f"{label}: not GPT-2 ({len(tok)} ids, eos {tok.eos_token_id})")
            continue
        tok.sflm_source = label
        return pin_pre_tokenizer(tok, "gpt2")
    raise RuntimeError(
        f"GPT-2 tokenizer unavailable ({'; '.join(errors)}). Offline, install the ranks file: "
        f"pip install --no-deps {WHISPER_PIN}"
    )
