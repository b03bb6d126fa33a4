"""The command-line entry points, one module each (the top layer, docs/layers.md):

- :mod:`bench.commands.sweep`: ``python -m bench.sweep``, plan and run a sweep;
- :mod:`bench.commands.eval`: ``python -m bench.eval``, one model on a task, and its
  ``--likelihood`` side, :mod:`bench.commands.likelihood`;
- :mod:`bench.commands.generate`: ``python -m bench.generate``, continuations and infilling;
- :mod:`bench.commands.samples`: ``python -m bench.samples``, the per-item records;
- :mod:`bench.commands.rescore`: ``python -m bench.rescore``, score saved samples again;
- :mod:`bench.commands.lmeval`: ``python -m bench.lmeval``, lm-evaluation-harness with the
  harness's models.

``python -m bench.X`` stays the way to run them: ``bench/X.py`` (``bench/lmeval/__main__.py``)
only forwards to ``main`` here. A package's own command stays in its package
(``bench.report``, ``bench.perf``, ``bench.cost``, ``bench.checkpoints``, ``bench.evaluate``,
``bench.data``). The arguments several commands share and their one usage error are
:mod:`bench.usage`'s.
"""
