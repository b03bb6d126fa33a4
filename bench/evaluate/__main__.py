"""``python -m bench.evaluate <evaluator> ...``: one subcommand per evaluator.

An evaluator is an object (usually a module) with ``CLI_HELP``, ``add_arguments(parser)`` and
``run(args) -> int`` (its exit status): the built-in ones are declared with the other built-ins in
:data:`bench.registry.EVALUATORS`, other packages add theirs as entry points of the group
``sflm_bench.evaluators`` (:mod:`bench.plugins`; a clash or a failed import is one line naming
the package, exit 2). Usage errors exit 2 with a
single line on stderr (raise :class:`bench.usage.UsageError`, return
``bench.usage.usage_exit(error, prog)``).
"""

from __future__ import annotations

import sys

from bench.evaluate.usage import PROG
from bench.usage import OneLineParser as _Parser


def evaluators():
    """Built-in evaluators, then those of installed packages (:data:`bench.registry.EVALUATORS`)."""
    from bench.registry import EVALUATORS

    return EVALUATORS


def main(argv: list[str] | None = None) -> int:
    from bench.config import ConfigError

    try:
        found = dict(evaluators())
    except ConfigError as e:  # a plug-in that fails to import, a name clash
        print(f"error: {e}", file=sys.stderr)
        return 2
    parser = _Parser(prog=PROG, description="Score generated samples.")
    sub = parser.add_subparsers(dest="evaluator", metavar="EVALUATOR", parser_class=_Parser)
    for name, mod in found.items():
        mod.add_arguments(sub.add_parser(name, help=mod.CLI_HELP, description=mod.CLI_HELP))
    args = parser.parse_args(argv)
    if args.evaluator is None:
        parser.error(f"choose an evaluator: {', '.join(found)}")
    return found[args.evaluator].run(args)


if __name__ == "__main__":
    sys.exit(main())
