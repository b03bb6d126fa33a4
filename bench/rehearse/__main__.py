"""``python -m bench.rehearse SWEEP [SWEEP ...]``: :func:`bench.rehearse.command.main`."""

import sys

from bench.rehearse.command import main

sys.exit(main())
