"""What every command shares: the arguments several commands take, spelled and parsed one way, and
the one answer to bad input.

Bad input (a flag's value, a missing file, a bad key of a sweep file) raises :class:`UsageError`
with a message naming the flag, key or file; the command prints it as one line on stderr
(:func:`usage_exit`: ``error: <message>``, or ``<prog>: error: <message>``) and exits with status 2
before anything is written. :class:`bench.config.ConfigError` (a sweep file's bad value) and
:class:`bench.checkpoints.CheckpointError` are usage errors too, so one ``except UsageError``
answers them all.

The shared arguments (one spelling, one destination name each; the help says what the value means
to that command):

- ``--results-dir R`` (:func:`add_results_dir`, ``args.results_dir``);
- ``--task T`` (:func:`add_task`, ``args.task``);
- ``--set KEY=VALUE``, repeatable, as if written in a sweep file (:func:`add_sets`, ``args.sets``;
  :func:`bench.config.apply_overrides` reads them);
- ``--limit K`` (:func:`add_limit`, ``args.limit``);
- the store filters ``--task``, ``--model``, ``--nfe`` (and ``--temperature``, ``--subset``) of
  the commands that select stored cells (:func:`add_filters`).

It imports nothing of bench (the bottom layer, docs/layers.md), so every layer's command can use it.
"""

from __future__ import annotations

import argparse
import sys

USAGE_STATUS = 2  # bad input or arguments


class UsageError(ValueError):
    """Bad input or arguments (exit status 2); the message names what is wrong, in one line."""


def usage_exit(message: object, prog: str | None = None) -> int:
    """Print ``error: <message>`` (with ``prog``: ``<prog>: error: <message>``) on stderr as one
    line; return the exit status 2."""
    print(f"{prog}: error: {message}" if prog else f"error: {message}", file=sys.stderr)
    return USAGE_STATUS


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``<prog>: error: <message>``, exit 2)
    instead of argparse's usage text and error."""

    def error(self, message: str):
        raise SystemExit(usage_exit(message, self.prog))


def add_results_dir(ap: argparse.ArgumentParser, help: str, default: str | None = None) -> None:
    """``--results-dir R``: the results folder (``args.results_dir``; ``default`` when not
    given)."""
    ap.add_argument("--results-dir", default=default, metavar="R", help=help)


def add_task(ap: argparse.ArgumentParser, help: str) -> None:
    """``--task T``: a task name (``args.task``)."""
    ap.add_argument("--task", metavar="T", help=help)


def add_sets(ap: argparse.ArgumentParser, help: str, metavar: str = "KEY=VALUE") -> None:
    """``--set KEY=VALUE``, repeatable: a sweep-file key as if written in the file (VALUE is YAML;
    ``args.sets``, a list, empty when not given)."""
    ap.add_argument("--set", action="append", default=[], metavar=metavar, dest="sets", help=help)


def add_limit(ap: argparse.ArgumentParser, help: str, default: int | None = None) -> None:
    """``--limit K``: how many items (``args.limit``; ``default`` when not given)."""
    ap.add_argument("--limit", type=int, default=default, metavar="K", help=help)


def add_filters(
    ap: argparse.ArgumentParser,
    *,
    task: str,
    model: str,
    nfe: str,
    temperature: str | None = None,
    subset: str | None = None,
) -> None:
    """The store filters of a command that selects stored cells: ``--task``, ``--model``,
    ``--nfe`` and, when their help is given, ``--temperature`` and ``--subset`` (each argument is
    that flag's help)."""
    add_task(ap, task)
    ap.add_argument("--model", help=model)
    ap.add_argument("--nfe", type=int, help=nfe)
    if temperature is not None:
        ap.add_argument("--temperature", type=float, help=temperature)
    if subset is not None:
        ap.add_argument("--subset", help=subset)
