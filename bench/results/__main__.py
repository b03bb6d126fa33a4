"""``python -m bench.results verify [--results-dir DIR] [--move]`` (:func:`bench.results.main`) and
``python -m bench.results export --lm-eval DIR`` (:mod:`bench.report.lmeval_cli`, a layer above
the store's: handed to it as a subcommand)."""

import sys

from bench.report import lmeval_cli
from bench.results import main

EXPORT = (
    "write the store as lm-evaluation-harness result files (results_<date>.json, samples_*.jsonl)",
    lmeval_cli.add_arguments,
    lmeval_cli.run,
)

sys.exit(main(commands={"export": EXPORT}))
