"""``python -m bench.generate``: forwards to :mod:`bench.commands.generate`, where the command
lives (its Python API, ``generate`` and ``load_model``, is importable from here too)."""

from __future__ import annotations

import sys

from bench.commands.generate import generate, load_model, main  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
