"""Read what the models wrote: the per-item records behind the store's numbers (bench.records).

    python -m bench.samples [--results-dir R] [--task T] [--model M] [--nfe N]
                            [--temperature T] [--subset S] [--where FIELD=VALUE ...]
                            [--limit K] [--format table|jsonl]

Selects sample cells by their store rows (``--model`` matches the report's model label, the
method, or ``method/variant``; ``--nfe`` the NFE the rows report), then their records by field
(``--where status=timeout``, ``--where correct=0``; several are all required; a value matches
the field's text, so ``correct=0`` matches 0 and false), and prints the first ``--limit`` as a
table (model, subset, NFE, T, item, correct, prompt, output, the ``--where`` fields; long text
cut) or as JSON lines with every field (``--format jsonl``, the model label added as ``model``).
A ``--where`` on a field no selected record has, a damaged records file, or a selection with no
cells: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.usage import UsageError, add_filters, add_limit, add_results_dir, usage_exit


def _parse_where(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for it in items:
        field, sep, value = it.partition("=")
        if not sep or not field.strip():
            raise UsageError(f"--where {it!r}: expected FIELD=VALUE")
        if field.strip() == "seed":  # two seeds, one word each
            raise UsageError(
                f"--where {it!r}: say which seed: train_seed (the model's training seed) or "
                "sample_seed (the sampler's)"
            )
        out.append((field.strip(), value))
    return out


def _text(v) -> str:
    """A field's value as the text ``--where`` compares with (booleans as 0 / 1)."""
    if isinstance(v, bool):
        return str(int(v))
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return v if isinstance(v, str) else json.dumps(v)


def _matches(v, want: str) -> bool:
    if isinstance(v, bool) and want.lower() in ("true", "false"):
        return v == (want.lower() == "true")
    return _text(v) == want


def select_cells(df, *, task=None, model=None, nfe=None, temperature=None, subset=None):
    """One row per sample cell that has records (the headline metric's row, else the first),
    filtered; prepared with the report's model labels. ``df``: the store (``results.read``)."""
    from bench.report.common import prepared, selected

    if not len(df) or "records" not in df:
        return df.iloc[0:0]
    s = prepared(df)
    s = s[(s["kind"] == "sample") & s["records"].notna() & (s["records"].astype(str) != "")]
    s = s[selected(s, task=task, model=model, nfe=nfe, temperature=temperature, subset=subset)]
    rank = s["metric_rank"].map(lambda r: 0 if r == 0 else 1)
    s = s.assign(_rank=rank).sort_values(["task", "model", "subset", "nfe", "temperature", "_rank"])
    return s.drop_duplicates("cell_id").drop(columns="_rank")


def records_of(results_dir, cells, where: list[tuple[str, str]], limit: int | None):
    """(model label, record) pairs of ``cells`` (rows of :func:`select_cells`) matching every
    ``where``, at most ``limit``. UsageError when a ``where`` field is in no record."""
    from bench import records

    out, seen = [], set()
    for _, row in cells.iterrows():
        recs = records.read(results_dir, row["records"], row.get("records_sha256"))
        for r in recs:
            seen.update(r)
        for r in recs:
            if all(f in r and _matches(r[f], v) for f, v in where):
                out.append((row["model"], r))
                if limit and len(out) >= limit:
                    return out
    missing = [f for f, _ in where if f not in seen]
    if missing:
        raise UsageError(
            f"--where {missing[0]}: no selected record has this field "
            f"(fields: {', '.join(sorted(seen))})"
        )
    return out


def _cut(v, width: int) -> str:
    t = _text(v).replace("\n", "\\n")
    return t if len(t) <= width else t[: width - 3] + "..."


def table(pairs, where_fields: list[str]) -> str:
    """The records as a fixed-width text table (long text cut)."""
    cols = ["model", "subset", "nfe", "T", "item", "correct", *where_fields, "prompt", "output"]
    widths = {"prompt": 40, "output": 60}
    lines = []
    for model, r in pairs:
        vals = {
            "model": model,
            "subset": r.get("subset"),
            "nfe": r.get("nfe"),
            "T": r.get("temperature"),
            "item": r.get("item"),
            "correct": r.get("correct"),
            **{f: r.get(f) for f in where_fields},
            "prompt": r.get("prompt"),
            "output": r.get("output"),
        }
        lines.append([_cut(vals[c], widths.get(c, 30)) for c in cols])
    w = [max([len(c)] + [len(line[i]) for line in lines]) for i, c in enumerate(cols)]
    fmt = lambda cells: "  ".join(x.ljust(k) for x, k in zip(cells, w)).rstrip()  # noqa: E731
    return "\n".join([fmt(cols), fmt(["-" * k for k in w]), *map(fmt, lines)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.samples",
        description="Print the per-item records (prompt, output, outcome, task fields) behind "
        "the results store's numbers.",
    )
    add_results_dir(ap, "results folder (default: results)", default="results")
    add_filters(
        ap,
        task="task name (e.g. sudoku, gsm8k, owt)",
        model="model label as the report prints it, method, or method/variant",
        nfe="the NFE the rows report",
        temperature="the temperature the rows report",
        subset="evaluation subset (e.g. a Sudoku difficulty)",
    )
    ap.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="keep records whose FIELD reads VALUE (repeatable; e.g. status=timeout, correct=0)",
    )
    add_limit(ap, "records to print (0 = all; default 20)", default=20)
    ap.add_argument("--format", choices=("table", "jsonl"), default="table")
    args = ap.parse_args(argv)

    from bench.records import RecordsError
    from bench.results import Store

    try:
        if args.limit < 0:
            raise UsageError(f"--limit: must be >= 0, got {args.limit}")
        where = _parse_where(args.where)
        store = Store(args.results_dir)
        if not store.dir.is_dir():
            raise UsageError(f"{store.dir}: no results store")
        cells = select_cells(
            store.read(),
            task=args.task,
            model=args.model,
            nfe=args.nfe,
            temperature=args.temperature,
            subset=args.subset,
        )
        if not len(cells):
            raise UsageError(
                f"{args.results_dir}: no sample cell with records matches the selection"
            )
        pairs = records_of(args.results_dir, cells, where, args.limit or None)
    except (UsageError, RecordsError) as e:
        return usage_exit(e)
    if args.format == "jsonl":
        for model, r in pairs:
            print(json.dumps({"model": model, **r}, ensure_ascii=False))
    else:
        print(table(pairs, [f for f, _ in where if f not in ("correct",)]))
        print(f"({len(pairs)} records from {len(cells)} cells)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
