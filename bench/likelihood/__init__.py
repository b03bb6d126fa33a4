"""Held-out likelihood of a trained model (docs/likelihood.md).

- :mod:`bench.likelihood.datasets`: a dataset spec (``heldout``, ``owt-valid``, ``text:PATH``, a
  zero-shot corpus) -> fixed-length blocks for a task (:mod:`~bench.likelihood.layout` wraps or
  pads documents, :mod:`~bench.likelihood.zeroshot` loads the corpora of the MDLM / Duo tables
  with their detokenizers, :mod:`~bench.likelihood.detok`);
- :mod:`bench.likelihood.evaluate`: the method's :meth:`~bench.method.Method.nll_bound` over the
  blocks -> ``nll`` / ``ppl`` / ``bpd`` with bootstrap CIs, the Monte-Carlo standard error, one
  record per sequence;
- :mod:`bench.likelihood.cells`: one likelihood cell of a trained model (weights loaded, records
  and store rows written, skipped when the store has it);
- ``python -m bench.eval SRC --likelihood ...`` is :mod:`bench.commands.likelihood`.
"""
