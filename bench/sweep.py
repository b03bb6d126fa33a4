"""``python -m bench.sweep SWEEP.yaml [--executor local|slurm|debug] [--status] [--dry-run]``

Plans a sweep into content-addressed cells (:mod:`bench.plan`) and runs what is not yet in the
results store (:mod:`bench.cells`) on the chosen executor (:mod:`bench.executors`):

- a **train cell** = task x backbone x train recipe x method (+ options) x training subsets;
  its run folder ``<results>/runs/<method>-<variant>-<hash>`` holds resumable checkpoints and
  the final EMA weights;
- a **sample cell** = train cell x evaluation subset (Sudoku difficulty) x nfe x temperature x
  decoding (+ sample size / seed); it samples the validation problems at batch granularity
  (resumable), scores them and writes one store row per metric.

Cells already in the store are skipped, so re-running a finished sweep does nothing.
Bad input (missing file, malformed YAML, unknown key / method, out-of-range values) exits 2
with one line naming the problem, before anything is written. ``--status`` / ``--dry-run``
print :mod:`bench.status`'s table / plan and submit nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import status
from bench.config import ConfigError, load_sweep
from bench.executors import local, slurm
from bench.plan import plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.split("\n")[0])
    ap.add_argument("sweep", help="sweep YAML file")
    ap.add_argument(
        "--executor", choices=("local", "slurm", "debug"), help="override executor.kind"
    )
    ap.add_argument("--status", action="store_true", help="print the state of every cell and exit")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, submit nothing")
    ap.add_argument("--results-dir", help="override results_dir")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument(
        "--no-wait", action="store_true", help="slurm: submit and exit (default: watch until done)"
    )
    args = ap.parse_args(argv)
    try:
        cfg = load_sweep(args.sweep)
        if args.executor:
            cfg.executor.kind = args.executor
        if args.results_dir:
            cfg.results_dir = args.results_dir
        p = plan(cfg, args.sweep)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.status or args.dry_run:
        try:
            print(status.dry_run(p) if args.dry_run else status.status_table(p))
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except RuntimeError as e:  # squeue / sacct unreachable
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    t0 = time.perf_counter()
    kind = cfg.executor.kind
    if kind == "slurm":
        try:
            failures = slurm.execute(p, progress=not args.no_progress, wait=not args.no_wait)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    else:
        failures = local.execute(p, kind, progress=not args.no_progress)
    for f in failures:
        print(f"failed: {f}", file=sys.stderr)
    done = status.count_done(p)
    print(
        f"sweep {cfg.name}: {done}/{len(p.train_cells) + len(p.sample_cells)} cells done "
        f"in {time.perf_counter() - t0:.1f}s; store: {Path(cfg.results_dir) / 'store'}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
