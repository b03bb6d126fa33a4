"""``python -m bench.lmeval <lm_eval arguments>``: lm-eval's command line (``lm_eval run ...``,
``lm_eval ls tasks``, ...) with the ``sflm-bench`` model registered, e.g.

    python -m bench.lmeval --model sflm-bench --model_args src=RUN,nfe=4 \\
        --tasks tests/bench/lmeval_tasks/sflm_sort_mc.yaml --limit 8 --device cpu

lm-eval 0.4 has no plug-in hook for models (its CLI imports ``lm_eval.models`` only), so this is
the supported entry point (docs/likelihood.md, "lm-evaluation-harness"). Without lm-eval
installed: one line on stderr and exit status 2; an error of the adapter
(:class:`bench.config.ConfigError`: a bad ``src``, a method without a likelihood bound asked for
likelihoods) is one line and exit status 2 too.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

from bench.config import ConfigError
from bench.usage import usage_exit


def main(argv: list[str] | None = None) -> int:
    if find_spec("lm_eval") is None:
        return usage_exit(
            "lm-eval is not installed: pip install -e '.[lmeval]' (the optional extra "
            "lmeval of sflm-bench)"
        )
    from lm_eval.__main__ import cli_evaluate

    import bench.lmeval.model  # noqa: F401  (registers "sflm-bench")

    args = sys.argv[1:] if argv is None else list(argv)
    saved = sys.argv
    sys.argv = ["lm-eval", *args]  # lm-eval's parser reads sys.argv (legacy form: adds "run")
    try:
        cli_evaluate()
    except ConfigError as e:  # NoLikelihoodBound included
        return usage_exit(e)
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
