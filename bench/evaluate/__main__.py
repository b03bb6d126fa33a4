"""``python -m bench.evaluate <evaluator> ...``: one subcommand per evaluator.

Adding an evaluator is one line in :data:`EVALUATORS`: a module that defines ``CLI_HELP``,
``add_arguments(parser)`` and ``run(args) -> int`` (its exit status). Usage errors exit 2 with
a single line on stderr (:mod:`bench.evaluate.cli`: raise its ``UsageError``, return
``usage_exit(prog, error)``).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from bench.evaluate.cli import PROG, usage_exit

EVALUATORS = {
    "gsm8k": "bench.evaluate.gsm8k",
    "genppl": "bench.evaluate.genppl",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage + error)
        raise SystemExit(usage_exit(self.prog, message))


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog=PROG, description="Score generated samples.")
    sub = parser.add_subparsers(dest="evaluator", metavar="EVALUATOR", parser_class=_Parser)
    modules = {}
    for name, modname in EVALUATORS.items():
        mod = importlib.import_module(modname)
        modules[name] = mod
        mod.add_arguments(sub.add_parser(name, help=mod.CLI_HELP, description=mod.CLI_HELP))
    args = parser.parse_args(argv)
    if args.evaluator is None:
        parser.error(f"choose an evaluator: {', '.join(EVALUATORS)}")
    return modules[args.evaluator].run(args)


if __name__ == "__main__":
    sys.exit(main())
