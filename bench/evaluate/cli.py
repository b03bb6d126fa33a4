"""What every ``python -m bench.evaluate <evaluator>`` subcommand shares on bad input: the
evaluator raises :class:`UsageError` with a message naming the flag, file or line, and its
``run`` turns it into one line on stderr, ``<prog>: error: <message>``, and exit status 2
(:func:`usage_exit`; the argument parser in ``__main__`` does the same)."""

from __future__ import annotations

import os
import sys

PROG = "python -m bench.evaluate"
USAGE_STATUS = 2  # bad input or arguments


class UsageError(Exception):
    """Bad input file or arguments (CLI exit status 2); the message names what is wrong."""


def usage_exit(prog: str, message: object) -> int:
    """Print ``<prog>: error: <message>`` on stderr (one line); return the exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return USAGE_STATUS


def check_out_dir(flag: str, path: str) -> None:
    """:class:`UsageError` when the folder that ``path`` (the value of ``flag``; '' = not
    given) would be written in does not exist."""
    d = os.path.dirname(os.path.abspath(path)) if path else ""
    if d and not os.path.isdir(d):
        raise UsageError(f"{flag}: directory does not exist: {d}")
