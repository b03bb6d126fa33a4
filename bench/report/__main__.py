import sys

from bench.report.cli import main

sys.exit(main())
