"""``python -m bench.eval SRC [--task T] [--nfe N ...] [--temperature T ...] [--decoding D ...]
[--limit K] [--seeds S ...] [--set KEY=VALUE ...] [--results-dir R] [--likelihood D,... --draws N]``

Evaluate one model without writing a sweep file. ``SRC`` is a run folder of a sweep
(``results/runs/<method>-<variant>-<id>``), a model folder from ``python -m bench.checkpoints
convert``, a reference-format file or ``hf://...`` (:mod:`bench.source_model`).

It writes the sweep a user would write for SRC (a run folder: its task, backbone, recipe, method,
variant and options from ``cell.json``, its training seed; a file: a method entry with
``checkpoint: SRC`` and the task of ``--task`` / ``--set task...``), plans it with
:func:`bench.plan.plan` (the same cells and ids as that sweep: running it twice does nothing),
runs the cells in this process (:func:`bench.cells.run_train_then_samples`: a file is imported
once into ``<results>/runs/``; nothing is trained), and prints one line per cell x metric: the
value, its 95 % interval, the items scored, seeds x items (several ``--seeds`` pool as the report
does) and the wall time. It leaves the store rows and per-item records that ``bench.report`` and
``bench.samples`` read; a run folder's go to the results folder holding it, a file's to
``--results-dir`` (default ``results``).

``--limit K`` scores the first K items of the task's order only: the cells sample K items
(``sample.n_samples = K``, so their ids differ from a full run's) and the rows record
``item_limit = K``; their items key differs from a full run's, so the report never pairs them
with one. Unset flags take the task's defaults, as a sweep's unset fields do (e.g. Sudoku: NFE =
the sequence length, every validation puzzle). ``--set`` takes any key of a sweep file
(``--set task.options.n_digits=4 --set sample.seed=1``).

``--likelihood DATASET[,DATASET...]`` (with ``--limit K``, ``--draws N``) evaluates the model's
likelihood on each dataset instead of sampling (:mod:`bench.commands.likelihood`;
docs/likelihood.md).

Bad input (an unknown SRC, a task the model's vocabulary cannot serve, ``--limit 0``, a run
folder whose ``cell.json`` no longer plans to its own id, an untrained seed) is one line on
stderr and exit status 2, before anything is written. Progress goes to stderr, the table to
stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field, replace

from bench.config import ConfigError
from bench.usage import (
    UsageError,
    add_limit,
    add_results_dir,
    add_sets,
    add_task,
    usage_exit,
)

LABEL = "bench.eval"


@dataclass
class EvalPlan:
    """What one ``bench.eval`` call runs: SRC, its train cells (one per training seed; an import:
    one), the sample cells planned on them, the item limit."""

    source: object  # bench.source_model.Source
    train_cells: list
    sample_cells: list
    limit: int | None = None
    results_dir: str = ""
    #: sample cells this call computed (the others were in the store already)
    sampled: list = field(default_factory=list)
    wall_s: float = 0.0


def _check_flags(nfe, temperature, limit, seeds) -> None:
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: must be >= 1, got {limit}")
    for n in nfe or []:
        if n < 1:
            raise ConfigError(f"--nfe: must be >= 1, got {n}")
    for t in temperature or []:
        if not t > 0:
            raise ConfigError(f"--temperature: must be > 0, got {t}")
    for s in seeds or []:
        if s < 0:
            raise ConfigError(f"--seeds: must be >= 0, got {s}")


def prepare(
    src: str,
    *,
    task: str | None = None,
    nfe: list[int] | None = None,
    temperature: list[float] | None = None,
    decoding: list[str] | None = None,
    limit: int | None = None,
    seeds: list[int] | None = None,
    sets: list[str] = (),
    results_dir: str | None = None,
) -> EvalPlan:
    """Plan the cells of ``bench.eval`` (module docstring). Pure: reads SRC and the planner's
    inputs, writes nothing; :class:`ConfigError` (one line) on bad input."""
    from bench import source_model as sm

    _check_flags(nfe, temperature, limit, seeds)
    source = sm.resolve_source(src)
    sample = {}
    if nfe:
        sample["nfe"] = list(nfe)
    if temperature:
        sample["temperature"] = list(temperature)
    data = sm.sweep_data(
        source,
        task=task,
        sets=sets,
        results_dir=results_dir,
        seeds=seeds,
        sample=sample,
        decoding=decoding,
    )
    p = sm.build_plan(data, LABEL)
    mine = sm.own_train_cells(source, p)
    cells = [c for c in p.sample_cells if c.train.id in {tc.id for tc in mine}]
    if not cells:
        raise ConfigError(f"{LABEL}: {src}: no sample cells planned (check --decoding)")
    if limit is not None:
        full = cells[0].n_samples
        if limit > full:
            raise ConfigError(
                f"--limit: {limit} is more than the {full} items a full evaluation of task "
                f"{cells[0].train.task['name']} scores (sample.n_samples)"
            )
        if limit < full:  # K == every item: the full run itself
            data["sample"] = {**data.get("sample", {}), "n_samples": limit}
            p = sm.build_plan(data, LABEL)
            mine = sm.own_train_cells(source, p)
            ids = {tc.id for tc in mine}
            cells = [replace(c, limit=limit) for c in p.sample_cells if c.train.id in ids]
        else:
            limit = None
    for tc in mine:  # a trained model must be trained: bench.eval never trains
        if not tc.imported and not tc.weights.is_file():
            seed = tc.train.get("seed", 0)
            raise ConfigError(
                f"{LABEL}: training seed {seed} of this model has no weights ({tc.weights}); "
                "train it with python -m bench.sweep"
            )
    if source.kind == "run":  # a sweep's model: its cells here are an evaluation of their own
        name = sm.evaluation_name(nfe=nfe, temperature=temperature, decoding=decoding,
                               limit=limit, sets=sets)  # fmt: skip
        cells = [replace(c, evaluation=name) for c in cells]
    return EvalPlan(source, mine, cells, limit, results_dir=mine[0].results_dir)


def run(ep: EvalPlan, *, progress: bool = True) -> EvalPlan:
    """Compute the cells not yet in the store, in this process (imports first, never training)."""
    from bench.results import Store

    t0 = time.perf_counter()
    store = Store(ep.results_dir)
    for tc in ep.train_cells:
        todo = [c for c in ep.sample_cells if c.train.id == tc.id]
        missing = [c for c in todo if not store.has(c.id)]
        if not missing and (not tc.imported or store.has(tc.id)):
            continue
        _say(f"{tc.label()}: {len(missing)} of {len(todo)} sample cells to compute")
        from bench import cells as cells_mod  # the trainer's imports (Lightning): only for work

        if tc.imported or store.has(tc.id):
            # an import: imported once into the run folder; a trained model: training is a no-op
            # (weights and rows exist; damaged weights are rebuilt from its checkpoints)
            cells_mod.run_train_then_samples(tc, todo, progress=progress)
        else:  # trained weights without their train rows (a copied run folder): sample only
            cells_mod.run_samples(todo, progress=progress)
        ep.sampled += [c for c in missing if store.has(c.id)]
    ep.wall_s = time.perf_counter() - t0
    return ep


def _say(msg: str) -> None:
    print(f"{LABEL}: {msg}", file=sys.stderr, flush=True)


def table(ep: EvalPlan):
    """One row per cell x metric (several training seeds: pooled as the report pools them, the
    two-level interval over seeds and items): model, subset, nfe, T, decoding, metric, value,
    CI, items, seeds x items, wall_s, s/sample (sampling seconds per sample) and tok/s
    (generated positions per sampling second; :func:`_cost`). A cell with no rows (its lock held
    by another process) is left out."""
    import pandas as pd

    from bench.report.uncertainty import cell_summary
    from bench.results import Store

    store = Store(ep.results_dir)
    rows = []
    for c in ep.sample_cells:
        for r in store.load(c.id) or []:
            key = (c.variant or c.train.variant, c.subset, c.nfe, c.temperature, c.decoding)
            rows.append({**r, "_key": key})
    cols = ["model", "subset", "nfe", "T", "decoding", "metric", "value", "CI", "items",
            "seeds x items", "wall_s", "s/sample", "tok/s"]  # fmt: skip
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(rows)
    out = []
    for (_, metric), g in df.groupby(["_key", "metric"], sort=False):
        s = cell_summary(g)
        first = g.iloc[0]
        nfes = sorted({int(n) for n in g["nfe"].dropna()})
        if s["low"] is not None:
            ci = f"[{_num(s['low'])}, {_num(s['high'])}]"
        else:  # several seeds without per-item outcomes: the report's mean +- sd, not a CI
            ci = f"sd {_num(s['sd'])}" if s["seeds"] > 1 and s.get("sd") == s.get("sd") else ""
        seeds = s["seeds"]
        out.append(
            {
                "model": f"{first['method']}/{first['variant']}",
                "subset": first["subset"],
                "nfe": "/".join(map(str, nfes)) or "",
                "T": f"{float(first['temperature']):g}",
                "decoding": first["decoding"],
                "metric": metric,
                "value": _num(s["value"]),
                "CI": ci,
                "items": int(s["items"]),
                "seeds x items": f"{seeds} seed{'s' if seeds > 1 else ''} x {int(s['items'])}",
                "wall_s": f"{float(pd.to_numeric(g['wall_s'], errors='coerce').sum()):.1f}",
                **_cost(g),
            }
        )
    return pd.DataFrame(out, columns=cols)


def _cost(g) -> dict:
    """The ``s/sample`` and ``tok/s`` cells of rows ``g`` (one per seed): the seeds' sampling
    seconds over their samples, and their generated positions over those seconds; empty when a
    row does not record them (written before the cost columns, or resumed from older batches)."""
    import pandas as pd

    def col(name):
        return pd.to_numeric(g[name], errors="coerce") if name in g else pd.Series([float("nan")])

    secs, per_sample, tok_s = col("sample_s"), col("seconds_per_sample"), col("tokens_per_s")
    if secs.isna().any() or per_sample.isna().any() or tok_s.isna().any() or secs.sum() <= 0:
        return {"s/sample": "", "tok/s": ""}
    return {
        "s/sample": _num(secs.sum() / (secs / per_sample).sum()),
        "tok/s": _num((tok_s * secs).sum() / secs.sum()),
    }


def _num(v) -> str:
    if v is None or v != v:
        return ""
    return f"{float(v):.4g}"


def format_table(df) -> str:
    """``df`` as aligned text columns (strings left, numbers right)."""
    if not len(df):
        return "(no rows)"
    cols = list(df.columns)
    cells = [[str(v) for v in df[c]] for c in cols]
    widths = [max(len(c), *(len(v) for v in vs)) for c, vs in zip(cols, cells)]
    right = {"nfe", "T", "value", "items", "wall_s", "s/sample", "tok/s"}

    def line(vals):
        return "  ".join(
            v.rjust(w) if c in right else v.ljust(w) for c, v, w in zip(cols, vals, widths)
        ).rstrip()

    out = [line(cols), line(["-" * w for w in widths])]
    out += [line([vs[i] for vs in cells]) for i in range(len(df))]
    return "\n".join(out)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.eval",
        description="Evaluate one model (a run folder, a converted model folder, a "
        "reference-format file or hf://...) on a task: plans the cells a sweep would (same ids), "
        "runs them here, prints a table and leaves store rows and per-item records.",
    )
    ap.add_argument("src", metavar="SRC", help="run folder, model folder, .ckpt file or hf://...")
    add_task(ap, "task name (required for a checkpoint; a run folder's must agree)")
    ap.add_argument("--nfe", type=int, nargs="+", help="NFE grid (default: the task's)")
    ap.add_argument("--temperature", type=float, nargs="+", help="temperature grid (default: 1.0)")
    ap.add_argument(
        "--decoding", nargs="+", help="decodings (default: the method's default decoding)"
    )
    add_limit(ap, "score the first K items of the task's order only (recorded as item_limit)")
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        metavar="S",
        help="training seeds of a run folder's model to evaluate and pool (their runs must "
        "exist beside it; default: the folder's own seed)",
    )
    add_sets(
        ap,
        "any sweep-file key, as if written in the sweep (repeatable; VALUE is YAML), e.g. "
        "--set task.options.n_digits=4 --set sample.seed=1",
    )
    ap.add_argument(
        "--n-per-item",
        type=int,
        metavar="K",
        help="K independent draws per item: pass@1 (their mean), pass@j for j <= K, maj@K "
        "(sample.n_per_item; default 1)",
    )
    add_results_dir(
        ap, "where a checkpoint's rows go (default: results); a run folder's go beside it"
    )
    ap.add_argument(
        "--likelihood",
        metavar="DATASET[,DATASET...]",
        help="evaluate the model's likelihood instead of sampling: heldout, owt-valid, "
        "text:PATH or a zero-shot corpus (docs/likelihood.md); --limit K: the first K sequences",
    )
    ap.add_argument(
        "--draws", type=int, metavar="N", help="with --likelihood: Monte-Carlo draws of the bound"
    )
    ap.add_argument(
        "--output-lm-eval",
        metavar="DIR",
        help="also write the cells' results as lm-evaluation-harness result files in DIR (a new "
        "or empty folder; docs/report.md)",
    )
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    return ap


def _lm_eval_files(out_dir):
    """The ``--output-lm-eval`` step: a function of (results folder, cells, train cells) that
    writes their lm-eval files into ``out_dir`` (None: no such flag), or a usage error now when
    ``out_dir`` cannot take them (before any work)."""
    if not out_dir:
        return None
    from bench.report import lmeval_export

    lmeval_export.check_folder(out_dir)

    def write(results_dir, cells, train_cells) -> None:
        ids = [c.id for c in cells] + [tc.id for tc in train_cells]
        files = lmeval_export.export_cells(results_dir, ids, out_dir)
        _say(f"{len(files)} lm-eval files in {out_dir}")

    return write


def _draw_sets(args) -> list[str]:
    """``--set`` items with ``--n-per-item K`` as ``sample.n_per_item=K`` (checked with them)."""
    k = args.n_per_item
    return [*args.sets, f"sample.n_per_item={k}"] if k is not None else list(args.sets)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        lm_eval_files = _lm_eval_files(args.output_lm_eval)
    except ValueError as e:  # the folder exists and is not empty
        return usage_exit(e)
    if args.likelihood is not None:
        from bench.commands import likelihood

        return likelihood.main(args, format_table, lm_eval_files)
    if args.draws is not None:
        return usage_exit("--draws: only with --likelihood")
    try:
        ep = prepare(
            args.src,
            task=args.task,
            nfe=args.nfe,
            temperature=args.temperature,
            decoding=args.decoding,
            limit=args.limit,
            seeds=args.seeds,
            sets=_draw_sets(args),
            results_dir=args.results_dir,
        )
    except UsageError as e:  # ConfigError, CheckpointError included
        return usage_exit(e)
    except ValueError as e:  # a task or method rule outside ConfigError
        return usage_exit(f"{LABEL}: {e}")
    from bench.checkpoints import CheckpointError
    from bench.locks import CellBusy

    try:
        run(ep, progress=not args.no_progress)
    except CheckpointError as e:  # the file changed since it was planned
        return usage_exit(e)
    except CellBusy as e:
        print(f"error: {LABEL}: {e}", file=sys.stderr)
        return 1
    status = _print_results(ep)
    if status == 0 and lm_eval_files:
        lm_eval_files(ep.results_dir, ep.sample_cells, ep.train_cells)
    return status


def _print_results(ep: EvalPlan) -> int:
    """Print ``ep``'s table (stdout); 1 when a cell has no rows yet (another process holds its
    lock and computes it), else 0."""
    from bench.results import Store

    df = table(ep)
    limit = f", first {ep.limit} items" if ep.limit else ""
    print(f"{ep.train_cells[0].label()}: {len(ep.sample_cells)} cells{limit} "
          f"({len(ep.sampled)} computed now, store {ep.results_dir}/store)")  # fmt: skip
    print(format_table(df))
    store = Store(ep.results_dir)
    missing = sum(not store.has(c.id) for c in ep.sample_cells)
    if missing:  # another process holds their locks: it computes them
        _say(f"{missing} cells have no rows yet (being computed by another process)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
