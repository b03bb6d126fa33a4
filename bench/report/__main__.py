import gc
import sys

from bench.report.cli import main

code = main()
gc.freeze()  # exiting: no garbage-collector passes over every live object (bench/sweep.py)
sys.exit(code)
