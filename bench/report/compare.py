"""``python -m bench.report.compare BEFORE AFTER``: did a code change move a sweep's results by
more than its training seeds do?

Both arguments are results folders of the same sweep (same cell ids) run before and after a
change. For every sample cell of a headline metric with per-item outcomes in both, and for every
model (method, variant, decoding) at every (subset, NFE, temperature) over its seeds:

- ``after - before``: the mean change with a 95 % interval from the two-level bootstrap of the
  per-item, per-seed changes (the same seed and the same items in both runs: paired at both
  levels, so float-rounding changes that flip a few items give a tight interval around 0);
- ``seed spread``: the mean absolute difference between two seeds of the same cell before the
  change (what retraining with another seed moves the number by).

``--by-model`` matches cells by model, subset, NFE and temperature instead of cell id, for two
sweeps whose training differs (a train option changes the cell ids): the two sides' seeds are
then independent and the interval is the two-level difference paired over items only.

Prints a Markdown table and a one-line verdict: "within" when every change's interval covers 0
or its size is below the seed spread. Exit 0, or 2 on a usage error (a missing folder, no cell in
common).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench.evaluate.paired import decode_outcomes, two_level_bootstrap, two_level_difference
from bench.report.common import md_table, metric_with_rank, model_label, pct, rows
from bench.results import read


def _headline(df: pd.DataFrame) -> pd.DataFrame:
    out = []
    for task in df["task"].dropna().unique():
        s = rows(df, task)
        if "item_outcomes" not in s:
            continue
        s = s[(s["metric"] == metric_with_rank(s, 0)) & s["item_outcomes"].notna()]
        out.append(s)
    return pd.concat(out) if out else df.iloc[0:0]


KEYS = ["task", "model", "subset", "nfe", "temperature"]


def _labelled(df: pd.DataFrame) -> pd.DataFrame:
    s = _headline(df)
    return s.assign(model=[model_label(r) for _, r in s.iterrows()])


def compare(before: pd.DataFrame, after: pd.DataFrame, *, by_model: bool = False) -> pd.DataFrame:
    """One row per model cell (over seeds): change, its interval, seed spread. ``by_model``:
    match cells by model, subset, NFE and temperature instead of cell id (two sweeps whose
    training differs, e.g. in a train option): the seeds of the two sides are then independent
    and the interval is the paired-over-items two-level difference."""
    a, b = _labelled(before), _labelled(after)
    if not by_model:
        m = a.merge(b[["cell_id", "metric", "item_outcomes"]], on=["cell_id", "metric"])
    else:
        a, b = a.assign(_s=a["seed"].fillna(0)), b.assign(_s=b["seed"].fillna(0))
        on = [*KEYS, "metric", "items_key", "_s"]
        m = a.merge(b[[*on, "item_outcomes"]], on=on)
    m = m.rename(columns={"item_outcomes_x": "old", "item_outcomes_y": "new"})
    out = []
    for k, g in m.groupby(KEYS, sort=True):
        old = [decode_outcomes(v) for v in g["old"]]
        new = [decode_outcomes(v) for v in g["new"]]
        if len({len(x) for x in old + new}) != 1:
            continue
        if by_model:
            iv = two_level_difference(np.stack(new), np.stack(old))
        else:  # the same seed on both sides: paired at both levels
            iv = two_level_bootstrap(np.stack(new) - np.stack(old))
        means = [float(x.mean()) for x in old]
        spread = (
            float(np.mean([abs(p - q) for p, q in itertools.combinations(means, 2)]))
            if len(means) > 1
            else np.nan
        )
        out.append(
            dict(
                zip(KEYS, k),
                before=float(np.mean(means)),
                after=float(np.stack(new).mean()),
                change=iv.value,
                low=iv.low,
                high=iv.high,
                seeds=iv.seeds,
                items=iv.items,
                seed_spread=spread,
            )
        )
    return pd.DataFrame(out)


def within(c: pd.DataFrame) -> pd.Series:
    """Per row: the change's interval covers 0, or its size is below the seed spread."""
    covers = (c["low"] <= 0) & (c["high"] >= 0)
    return covers | (c["change"].abs() < c["seed_spread"].fillna(0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report.compare", description=__doc__)
    ap.add_argument("before", help="results folder before the change")
    ap.add_argument("after", help="results folder after the change")
    ap.add_argument(
        "--by-model",
        action="store_true",
        help="match cells by model, subset, NFE and temperature, not by cell id (sweeps whose "
        "training differs); seeds are then independent",
    )
    args = ap.parse_args(argv)
    for p in (args.before, args.after):
        if not (Path(p) / "store").is_dir():
            print(f"error: {p}: no results store (store/ missing)", file=sys.stderr)
            return 2
    c = compare(read(args.before), read(args.after), by_model=args.by_model)
    if not len(c):
        print("error: no sample cell with per-item outcomes in both stores", file=sys.stderr)
        return 2
    ok = within(c)
    table = c.assign(
        nfe=c["nfe"].astype(int),
        before=c["before"].map(pct),
        after=c["after"].map(pct),
        change=c["change"].map(pct),
        ci=[f"[{pct(lo)}, {pct(hi)}]" for lo, hi in zip(c["low"], c["high"])],
        seed_spread=c["seed_spread"].map(pct),
        within=ok.map({True: "yes", False: "NO"}),
    ).drop(columns=["low", "high"])
    print(md_table(table))
    print(
        f"\n{int(ok.sum())} of {len(c)} cells within (interval covers 0 or change below the seed "
        "spread); changes and spread in percentage points"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
