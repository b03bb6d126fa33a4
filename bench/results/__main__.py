"""``python -m bench.results verify [--results-dir DIR] [--move]`` (:func:`bench.results.main`)."""

import sys

from bench.results import main

sys.exit(main())
