"""``python -m bench.perf``: :func:`bench.perf.suite.main`."""

import sys

from bench.perf.suite import main

sys.exit(main())
