"""Compare two ``python -m bench.report`` folders: did a change alter any result?

    python scripts/compare_reports.py OLD_REPORT_DIR NEW_REPORT_DIR

Every file of OLD must exist in NEW with the same bytes, except:

- ``results.csv``: compared row by row on (cell_id, metric) over the columns both have, leaving
  out what depends on the machine or the moment (wall time, steps/s, git sha, creation time, the
  measured cost columns of bench/measure.py and the machine's name and versions);
  columns NEW adds (e.g. report columns) are listed, not compared;
- ``training.md``: its steps/s column is a timing; the rest of each line must match;
- PDFs: compared by their content streams (what is drawn), so a ``/CreationDate`` (reports
  made before the report dropped it carry one) and the offsets it shifts do not count;
- ``.report-inputs.json``: the digest of what the report read (bench.report.unchanged), not a
  result;
- ``index.html`` and the page's data (``.page/``): a view of the other files, stamped with the
  time it was written; present in NEW, not compared.

Prints one line per difference and exits 1 if there is any, 0 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

PAGE_DATA = ".page"
STAMP = ".report-inputs.json"  # what the report read, to skip an unchanged re-run (its own key)
TIMING_COLUMNS = {"wall_s", "git_sha", "created_at", "sample_s", "score_s", "network_s",
                  "forward_equivalents", "tokens_per_s", "seconds_per_sample", "peak_mem_mb",
                  "eval_s", "s_per_step", "device_name", "torch_version", "cuda_version",
                  "threads"}  # fmt: skip
TIMING_METRICS = {"train_steps_per_s"}


def _csv_diffs(old: Path, new: Path) -> list[str]:
    a, b = pd.read_csv(old), pd.read_csv(new)
    out = []
    added = sorted(set(b.columns) - set(a.columns))
    if added:
        print(f"results.csv: new columns (not compared): {', '.join(added)}")
    key = ["cell_id", "metric"]
    m = a.merge(b, on=key, how="outer", suffixes=("_old", "_new"), indicator=True)
    for side in ("left_only", "right_only"):
        n = int((m["_merge"] == side).sum())
        if n:
            out.append(f"results.csv: {n} rows only in {'OLD' if side == 'left_only' else 'NEW'}")
    both = m[(m["_merge"] == "both") & ~m["metric"].isin(TIMING_METRICS)]
    for col in sorted(set(a.columns) & set(b.columns) - set(key) - TIMING_COLUMNS):
        x, y = both[f"{col}_old"], both[f"{col}_new"]
        differ = ~((x == y) | (x.isna() & y.isna()))
        if differ.any():
            out.append(f"results.csv: column {col} differs in {int(differ.sum())} rows")
    return out


def _training_diffs(old: Path, new: Path) -> list[str]:
    def strip(path: Path) -> list[str]:  # drop the steps/s cell of each table row
        rows = []
        for line in path.read_text().splitlines():
            cells = line.split("|")
            rows.append("|".join(cells[:-3] + cells[-2:]) if len(cells) > 4 else line)
        return rows

    return [] if strip(old) == strip(new) else ["training.md: differs beyond steps/s"]


def _bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix != ".pdf":
        return data
    return b"\0".join(re.findall(rb"stream\r?\n(.*?)endstream", data, re.S))


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(Path(p).is_dir() for p in argv):
        print(
            "usage: python scripts/compare_reports.py OLD_REPORT_DIR NEW_REPORT_DIR",
            file=sys.stderr,
        )
        return 2
    old, new = map(Path, argv)
    diffs = []
    for f in sorted(p for p in old.rglob("*") if p.is_file()):
        rel = f.relative_to(old)
        g = new / rel
        if not g.is_file():
            diffs.append(f"{rel}: missing in NEW")
        elif rel.name in ("index.html", STAMP) or PAGE_DATA in rel.parts:
            continue  # the page: rendered from the files compared here; the inputs' stamp
        elif rel.name == "results.csv":
            diffs += _csv_diffs(f, g)
        elif rel.name == "training.md":
            diffs += _training_diffs(f, g)
        elif _bytes(f) != _bytes(g):
            diffs.append(f"{rel}: bytes differ")
    for d in diffs:
        print(d)
    print(f"{'identical' if not diffs else f'{len(diffs)} differences'} ({old} vs {new})")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
