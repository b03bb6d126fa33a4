"""The paper flags of ``python -m bench.report``: ``--paper``, ``--figure LABEL`` (repeatable),
``--list``, plus the flags the paper labels declare themselves (e.g. ``--mc-trials``,
``--tokenlen-n``; :class:`bench.report.items.Artifact`). Labels: every
:class:`~bench.report.items.Artifact` the registry (:mod:`bench.report.renderers`) knows. Output:
``<out>/paper/`` (``--out`` default ``<results-dir>/report``). A store is optional: store-free
artifacts (e.g. ``tab-alpha-crit-grid``) render without one; the rest are listed as missing.
``--paper`` / ``--figure`` also rewrite ``<out>/index.html`` (unless ``--no-html``), whose paper
section shows every label with its ``--list`` status and what was written for it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from bench.report import html, renderers
from bench.results import COLUMNS, read


def paper_arguments(ap: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Add the paper flags; returns their group (where the labels' own flags go)."""
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
    return g


def _store(results_dir: str) -> pd.DataFrame:
    if (Path(results_dir) / "store").is_dir():
        return read(results_dir)
    return pd.DataFrame(columns=COLUMNS)


def list_text(df: pd.DataFrame) -> str:
    """Every label with its kind, status and sweep, and what it has and needs."""
    lines = []
    for a in renderers.paper_artifacts().values():
        st, have, miss = a.status(df)
        lines.append(f"{a.label:48s} {a.kind:6s} {st:16s} sweep: {a.sweep}")
        for h in have:
            lines.append(f"    have: {h}")
        for m in miss:
            lines.append(f"    need: {m}")
    return "\n".join(lines)


def run(df: pd.DataFrame, out: Path, labels: list[str] | None, args=None) -> tuple[list, list]:
    """Render ``labels`` (None: every artifact the store has cells for, and the store-free
    tables) into ``out``; returns (written files, [(label, reason)] skipped)."""
    reg = renderers.paper_artifacts()
    unknown = [x for x in labels or [] if x not in reg]
    if unknown:
        raise KeyError(f"unknown label(s) {unknown} (python -m bench.report --list)")
    out.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for label in labels or list(reg):
        a = reg[label]
        st, have, miss = a.status(df)
        if labels is None and (st == "missing" or a.explicit_only):
            skipped.append((label, st if st == "missing" else "only with --figure"))
            continue
        try:
            written += a.render(a, df, out, args)
        except (LookupError, RuntimeError, ImportError, OSError) as e:
            skipped.append((label, str(e)))
    return written, skipped


def paper_main(args: argparse.Namespace) -> int:
    df = _store(args.results_dir)
    if args.list:
        print(list_text(df))
        return 0
    root = Path(args.out or Path(args.results_dir) / "report")
    out = root / "paper"
    try:
        written, skipped = run(df, out, args.figure or None, args)
    except KeyError as e:
        print(f"error: --figure: {e.args[0]}", file=sys.stderr)
        return 2
    written += html.finish(args, root, df)  # the page shows the paper items with the rest
    print(f"{len(df)} rows -> {out}")
    for p in written:
        print(f"  {p}")
    for label, why in skipped:
        print(f"  skipped {label}: {why}")
    html.open_if_asked(args, root)
    if args.figure and skipped:
        return 1
    return 0
