"""``python -m bench.rescore``: forwards to :mod:`bench.commands.rescore`, where the command
lives."""

from __future__ import annotations

import sys

from bench.commands.rescore import main

if __name__ == "__main__":
    sys.exit(main())
