"""``python -m bench.eval``: forwards to :mod:`bench.commands.eval`, where the command lives (its
Python API, ``prepare``, ``run``, ``table`` and ``format_table``, is importable from here too)."""

from __future__ import annotations

import sys

from bench.commands.eval import format_table, main, prepare, run, table  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
