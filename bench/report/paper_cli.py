"""The paper flags of ``python -m bench.report``: ``--paper``, ``--figure LABEL`` (repeatable),
``--list`` (registry: :mod:`bench.report.artifacts`). Output: ``<out>/paper/`` (``--out``
default ``<results-dir>/report``). A store is optional: store-free artifacts (e.g.
``tab-alpha-crit-grid``) render without one; the rest are listed as missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from bench.results import COLUMNS, read


def paper_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("paper artifacts (files named by the paper's labels)")
    g.add_argument(
        "--paper",
        action="store_true",
        help="write every paper table / figure the store has cells for to <out>/paper",
    )
    g.add_argument(
        "--figure",
        action="append",
        metavar="LABEL",
        default=[],
        help="write one paper artifact by label (repeatable; see --list)",
    )
    g.add_argument(
        "--list",
        action="store_true",
        help="print every label, what it needs and whether the store has it",
    )
    g.add_argument(
        "--mc-trials",
        type=int,
        default=None,
        help="tab-alpha-crit-grid: Monte-Carlo trials a row (default 100000; 0: none)",
    )
    g.add_argument(
        "--tokenlen-n",
        type=int,
        default=None,
        help="fig-tokenlen-smollm-gpt2: examples tokenised (default 2000)",
    )


def _store(results_dir: str) -> pd.DataFrame:
    if (Path(results_dir) / "store").is_dir():
        return read(results_dir)
    return pd.DataFrame(columns=COLUMNS)


def paper_main(args: argparse.Namespace) -> int:
    from bench.report import artifacts

    df = _store(args.results_dir)
    if args.list:
        print(artifacts.list_text(df))
        return 0
    out = Path(args.out or Path(args.results_dir) / "report") / "paper"
    try:
        written, skipped = artifacts.run(df, out, args.figure or None, args)
    except KeyError as e:
        print(f"error: --figure: {e.args[0]}", file=sys.stderr)
        return 2
    print(f"{len(df)} rows -> {out}")
    for p in written:
        print(f"  {p}")
    for label, why in skipped:
        print(f"  skipped {label}: {why}")
    if args.figure and skipped:
        return 1
    return 0
