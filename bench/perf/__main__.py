"""``python -m bench.perf``: :func:`bench.perf.cli.main`."""

import sys

from bench.perf.cli import main

sys.exit(main())
