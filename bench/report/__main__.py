import gc
import sys

from bench.report.cli import main

code = main()
gc.freeze()  # exiting: no garbage-collector passes over every live object (bench.commands.sweep)
sys.exit(code)
