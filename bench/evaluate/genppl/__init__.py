"""Generative perplexity (Gen. PPL) and unigram entropy of samples:
:mod:`~bench.evaluate.genppl.evaluator` (what is scored: sample preparation and the
:class:`~bench.evaluate.genppl.evaluator.GenPPL` evaluator), :mod:`~bench.evaluate.genppl.score`
(reference-LM passes and the cell values) and :mod:`~bench.evaluate.genppl.command`
(``python -m bench.evaluate genppl``)."""
