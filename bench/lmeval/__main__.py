"""``python -m bench.lmeval``: forwards to :mod:`bench.commands.lmeval`, where the command lives."""

from __future__ import annotations

import sys

from bench.commands.lmeval import main

if __name__ == "__main__":
    sys.exit(main())
