"""What every ``python -m bench.evaluate <evaluator>`` subcommand shares: its input files and
its answer to bad input.

The evaluator raises the commands' one usage error, :class:`bench.usage.UsageError`, with a
message naming the flag, file or line, and its ``run`` turns it into one line on stderr,
``<prog>: error: <message>``, and exit status 2 (:func:`bench.usage.usage_exit`; the argument
parser in ``__main__`` does the same). Input files are JSONL, one object per line
(:func:`read_json_lines`)."""

from __future__ import annotations

import json
import os

from bench.usage import UsageError

PROG = "python -m bench.evaluate"


def check_out_dir(flag: str, path: str) -> None:
    """:class:`UsageError` when the folder that ``path`` (the value of ``flag``; '' = not
    given) would be written in does not exist."""
    d = os.path.dirname(os.path.abspath(path)) if path else ""
    if d and not os.path.isdir(d):
        raise UsageError(f"{flag}: directory does not exist: {d}")


def read_json_lines(path: str, flag: str) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line of the JSONL file ``path`` (the value of
    ``flag``). :class:`UsageError` naming the flag when the file does not exist, else the file
    or the ``path:line`` of the first line that is not a JSON object."""
    if not os.path.isfile(path):
        raise UsageError(f"{flag}: no such file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read: {e}") from None
    out = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise UsageError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        out.append((lineno, obj))
    return out
