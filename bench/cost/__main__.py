"""``python -m bench.cost SWEEP [--set KEY=VALUE ...] [--results-dir DIR] [--device KIND]``:
the cost model's prediction for a sweep (every cell, done or not) and, where its store has done
cells, the prediction beside what they took, per model and in total (:mod:`bench.cost.check`);
what the prediction assumes of the cells (:mod:`bench.cost.notes`: a call budget a variable-call
decoding may not spend, block-only calls) after its first line.
``--device`` picks the throughput table (as ``executor.device``). Exit 2 on a bad sweep or kind."""

from __future__ import annotations

import argparse
import sys

from bench.usage import add_results_dir, add_sets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cost", description=__doc__.split("\n")[0])
    ap.add_argument("sweep", help="sweep YAML file")
    add_sets(ap, "override a value of the file, as if written in it (repeatable; VALUE is YAML)")
    add_results_dir(ap, "override results_dir (the store to compare with)")
    ap.add_argument("--device", help="the device kind's table (as executor.device)")
    args = ap.parse_args(argv)

    from bench.config import ConfigError, load_sweep
    from bench.cost.check import comparison
    from bench.cost.model import fmt_s, local_wall, predict_plan
    from bench.cost.notes import caveat_lines
    from bench.plan import plan
    from bench.results import Store

    overrides = list(args.sets)
    if args.device:
        overrides.append(f"executor.device={args.device}")
    try:
        cfg = load_sweep(args.sweep, overrides)
        from bench.cost.table import check_device

        check_device(cfg, args.sweep)
        if args.results_dir:
            cfg.results_dir = args.results_dir
        p = plan(cfg, args.sweep, offline_ok=True)
        pred = predict_plan(p)
    except (ConfigError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ex = cfg.executor
    parallel = max(1, min(ex.max_parallel, len(pred.jobs))) if ex.kind == "local" else 1
    print(
        f"sweep {cfg.name}: {len(pred.jobs)} job(s), {pred.device_hours:.2f} {pred.kind} "
        f"device-hours ({pred.source()}); local wall with {parallel} at once "
        f"{fmt_s(local_wall(pred.jobs, parallel, pred.setup_s))}"
    )
    for line in caveat_lines(pred, indent=""):
        print(line)
    store = Store(cfg.results_dir)
    if any(store.has(tc.id) for tc in p.train_cells):
        print(comparison(p, store, pred))
    return 0


if __name__ == "__main__":
    sys.exit(main())
