"""``python -m bench.report [--results-dir DIR] [--out DIR] [--force]``: tables and figures from
the store.

Reads the results table only (:func:`bench.results.read`); see :mod:`bench.report` for the files.
Run again when nothing it reads changed (store, run logs, code, options:
:mod:`bench.report.unchanged`), it writes nothing and says so; ``--force`` rewrites it anyway.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import atomic
from bench.plugins import PluginError
from bench.records import warn_damaged
from bench.report import evaluations, html, renderers, unchanged
from bench.report.common import rows
from bench.report.document import Doc
from bench.report.figures import figures
from bench.report.paper.command import paper_arguments, paper_main
from bench.report.tables import task_markdown
from bench.results import read
from bench.usage import UsageError, add_results_dir, usage_exit


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n")[0])
    add_results_dir(ap, "results folder holding store/ (default: results)", default="results")
    ap.add_argument("--out", help="output folder (default: <results-dir>/report)")
    ap.add_argument(
        "--sweep",
        action="append",
        metavar="NAME",
        help="report only the cells of this sweep (the rows' sweep column; repeatable)",
    )
    ap.add_argument(
        "--evaluation",
        action="append",
        metavar="NAME",
        help="report the cells of this bench.eval evaluation of a sweep's models (the rows' "
        "evaluation column; evaluations.md lists them; repeatable) instead of the sweeps' own, "
        "by default into <results-dir>/evaluations/<name>",
    )
    ap.add_argument(
        "--no-html",
        action="store_true",
        help="do not write <out>/index.html (the report as one page)",
    )
    ap.add_argument(
        "--force",
        action="store_true",
        help="write the report even when nothing it reads changed since the last one (store, run "
        "logs, code, options: by default it is then kept as it is)",
    )
    ap.add_argument(
        "--open",
        action="store_true",
        help="open <out>/index.html in the default web browser when done (where there is one)",
    )
    try:  # every item's flags; a plug-in that fails to import or clashes: one line, exit 2
        renderers.add_arguments(ap, paper_arguments(ap))
    except PluginError as e:
        return usage_exit(e)
    args = ap.parse_args(argv)
    try:
        return _report(args)
    except UsageError as e:  # an empty store, an unknown --sweep / --evaluation
        return usage_exit(e)
    except OSError as e:  # a full disk or a read-only folder: earlier files stay as they were
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        return 1


def _report(args) -> int:
    if args.paper or args.figure or args.list:
        return paper_main(args)
    store = Path(args.results_dir) / "store"
    if not store.is_dir():
        raise UsageError(f"{store}: no results store (run python -m bench.sweep first)")
    if args.evaluation and not args.out:
        name = args.evaluation[0] if len(args.evaluation) == 1 else "+".join(args.evaluation)
        args.out = str(Path(args.results_dir) / "evaluations" / evaluations.slug(name))
    out = Path(args.out or Path(args.results_dir) / "report")
    digest = unchanged.inputs_digest(args, Path(args.results_dir), out)
    stamp = None if args.force else unchanged.current(out, digest)
    if stamp is not None:
        print(
            f"{out}: nothing changed since the report of {stamp['written']} (same store, run "
            "logs, code and options); nothing written (--force rewrites it)"
        )
        html.open_if_asked(args, out)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    df = read(args.results_dir)
    warn_damaged(args.results_dir, df)  # one stderr line per damaged records file (bench.records)
    df, apart = _selected(df, args, store)
    raw, df = df, rows(df, kind=None)  # report columns and models, once for every item
    # the store's rows as they are, with the label every table gives their model and its recipe id
    csv = raw.assign(model_label=df["model"].to_numpy(), recipe_id=df["recipe_id"].to_numpy())
    atomic.write_with(out / "results.csv", lambda t: csv.to_csv(t, index=False))
    written = [out / "results.csv"]
    args.fraction_tasks = renderers.fraction_tasks(df)  # the generic tables' (and sections')
    for sec in renderers.sections():
        written += sec.render(sec, df, out, args)
    written += _task_pages(df, out, args)
    written += _evaluations_page(apart, out, args)
    written += html.finish(args, out, df)
    unchanged.remember(out, digest)
    print(f"{len(df)} rows -> {out}")
    for p in written:
        print(f"  {p}")
    html.open_if_asked(args, out)
    return 0


def _selected(df, args, store: Path):
    """The rows ``--sweep`` / ``--evaluation`` select, and the bench.eval evaluations reported
    apart from them (one protocol per table: a bench.eval of a sweep's model is reported apart,
    or alone). :class:`UsageError` naming a sweep or an evaluation the store does not have."""
    if args.sweep:
        known = sorted(df["sweep"].dropna().unique()) if "sweep" in df else []
        unknown = [s for s in args.sweep if s not in known]
        if unknown:
            raise UsageError(
                f"--sweep: no cells of sweep {unknown[0]!r} in {store} "
                f"(sweeps there: {', '.join(known) or 'none'})"
            )
        df = df[df["sweep"].isin(args.sweep)].reset_index(drop=True)
    if not args.evaluation:
        return evaluations.split(df)
    known = sorted(set(evaluations.names(df)) - {""})
    unknown = [e for e in args.evaluation if e not in known]
    if unknown:
        listed = "; ".join(repr(k) for k in known) or "none"
        raise UsageError(f"--evaluation: no cells of evaluation {unknown[0]!r} in {store} "
                         f"(evaluations there: {listed})")  # fmt: skip
    return evaluations.select(df, args.evaluation), df.iloc[0:0]


def _task_pages(df, out: Path, args) -> list[Path]:
    """Each task's page (``<task>.md``: its fraction tables, its kind's sections) and figures;
    the files written."""
    written = []
    for task in sorted(df["task"].dropna().unique()):
        kinds = df.loc[df["task"] == task, "task_kind"].dropna()
        kind = str(kinds.iloc[0]) if len(kinds) else "generic"
        extra = renderers.task_sections(kind)
        if task in args.fraction_tasks:
            text, headline = task_markdown(task, df)
        else:  # not a fraction (OWT's Gen. PPL): the kind writes the page and its files
            text, headline = Doc([f"# {task}"]), None
        for r in extra:
            text += r.markdown(task, df, args)
        text.write(out / f"{task}.md")
        written.append(out / f"{task}.md")
        if headline:
            written += figures(task, df, headline, out)
        for r in extra:
            written += r.figures(task, df, out, args)
    return written


def _evaluations_page(apart, out: Path, args) -> list[Path]:
    """``evaluations.md``, the bench.eval evaluations reported apart (written after the sweeps'
    files: it adds to them, changes none); none any more: no list of them."""
    if not len(apart):
        (out / evaluations.FILE).unlink(missing_ok=True)
        return []
    evaluations.markdown(rows(apart, kind=None), args.results_dir).write(out / evaluations.FILE)
    print(f"{apart['cell_id'].nunique()} cells of bench.eval evaluations reported apart: "
          f"{out / evaluations.FILE}")  # fmt: skip
    return [out / evaluations.FILE]


if __name__ == "__main__":
    sys.exit(main())
