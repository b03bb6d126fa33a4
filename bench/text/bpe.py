"""What every byte-level BPE tokenizer here shares: its pre-tokenizer rules and the ``[PAD]``
token.

:func:`pin_pre_tokenizer`: every source of a tokenizer gets its family's published pre-tokenizer
set explicitly. SmolLM's ``tokenizer.json`` splits every digit on its own *before* the
byte-level step (``Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)]``;
llama.cpp calls this rule ``smollm``: ``\\p{N}`` then the GPT-2 regex, and the GGUF's
``tokenizer.ggml.pre`` says ``smollm``). transformers 4.45 (the paper's harness) loads it as
written, but the GGUF conversion, and transformers 5.x rebuilding a ``GPT2Tokenizer``, give plain
``ByteLevel``. That is not cosmetic: the digit split also moves where a whitespace run before a
digit is cut (``"x  5"`` is ``x|  |5`` = [104, 256, 37] with it, ``x| | 5`` = [104, 216, 216, 37]
without), so GSM8K questions and indented code tokenise differently. GPT-2 is plain
``ByteLevel``: ``pin_pre_tokenizer(tok, "gpt2")``.

:data:`PAD_TOKEN`: the paper's harness gives every tokenizer without a pad token a ``[PAD]``
special token at the next id (s-flm ``dataloader.py::get_tokenizer``; :func:`add_pad`).
"""

from __future__ import annotations

PAD_TOKEN = "[PAD]"
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


def add_pad(tok):
    """Add the harness's ``[PAD]`` special token to ``tok`` when it has no pad token (at the
    next id). Returns ``tok``."""
    if tok.pad_token is None:
        tok.add_special_tokens({"pad_token": PAD_TOKEN})
    return tok
