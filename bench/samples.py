"""``python -m bench.samples``: forwards to :mod:`bench.commands.samples`, where the command
lives."""

from __future__ import annotations

import sys

from bench.commands.samples import main

if __name__ == "__main__":
    sys.exit(main())
