"""Tiny local reference LMs for the Gen. PPL / OWT tests (no download, a second to build).

- :func:`tiny_gpt2`: a random 2-layer GPT-2 (``transformers.GPT2Config``) of any vocabulary.
- :func:`byte_tokenizer`: a byte-level tokenizer (one id per byte, ``<|endoftext|>`` = 256), a
  tokenizer that differs from GPT-2's, for the retokenisation path.
"""

from __future__ import annotations


def tiny_gpt2(vocab: int, n_positions: int = 64, seed: int = 0, eos: int | None = None):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    eos = vocab - 1 if eos is None else eos
    cfg = GPT2Config(
        vocab_size=vocab,
        n_positions=n_positions,
        n_embd=16,
        n_layer=2,
        n_head=2,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # larger logits than the 0.02 init: per-token NLLs that differ clearly
        model.lm_head.weight.mul_(40.0)
    return model


def byte_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<|endoftext|>"] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
