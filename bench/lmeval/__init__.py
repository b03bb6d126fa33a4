"""The lm-evaluation-harness adapter: any model this harness can load, as the lm-eval model
``sflm-bench`` (optional extra: ``pip install -e '.[lmeval]'``; docs/likelihood.md,
"lm-evaluation-harness").

- :mod:`bench.lmeval.model`: the model class, registered with lm-eval's own registry
  (``lm_eval.api.registry.register_model("sflm-bench")``) when it is imported;
  :mod:`bench.lmeval.args` its ``model_args`` checks, :mod:`bench.lmeval.greedy` its
  ``is_greedy`` check;
- :mod:`bench.commands.lmeval` (``python -m bench.lmeval <lm_eval arguments>``, through
  :mod:`bench.lmeval.__main__`): lm-eval's own command line with the model registered. lm-eval
  0.4 finds a model only when the module that registers it has been imported (its CLI imports
  ``lm_eval.models`` and nothing else; it has no entry-point group for models), so the bare
  ``lm_eval`` command does not know ``sflm-bench``.

Importing this package registers the model when lm-eval is installed and does nothing when it
is not (``python -m bench.lmeval`` then says how to install it, in one line).
"""

from __future__ import annotations

from importlib.util import find_spec

if find_spec("lm_eval") is not None:
    from bench.lmeval.model import SFLMBenchLM  # noqa: F401  (registers "sflm-bench")
