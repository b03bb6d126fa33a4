"""``python -m bench.eval SRC --likelihood DATASET[,DATASET...] [--limit K] [--draws N]``: the
likelihood of one model (a run folder, a converted model folder, a reference-format file or
``hf://...``; :mod:`bench.source_model`) on each dataset (:mod:`bench.likelihood.datasets`).

Like the sampling side of ``bench.eval``, it writes the sweep a user would write for SRC, here with
a ``likelihood`` section (``datasets``; ``--limit K`` -> ``n_sequences = K``, ``--draws N`` ->
``draws = N``; ``--set likelihood.block=...`` / ``likelihood.wrap=false`` / ``likelihood.seed=...``
as in a sweep file), plans it with the sweep's planner (the same
:class:`bench.kinds.likelihood.LikelihoodCell` ids: running it twice computes nothing) and runs the
model's likelihood cells here (:func:`bench.likelihood.cells.run_likelihood_cell`). It prints one
line per (training seed,) dataset: nll in nats per token, perplexity per token, bits per token
(``bpd`` in the store: nll / ln 2), each prefixed ``<=`` where it is an upper bound (a NELBO), the
95 % bootstrap interval of the perplexity, the sequences and tokens scored, the Monte-Carlo standard
error of nll (nats per token) and the wall time.

Bad input is one line on stderr and exit status 2 before anything is written: an unknown dataset,
a method without a likelihood bound (``Method.bound_kind`` empty: S-FLM, ...), blocks longer than
the model's positions, ``--limit 0``. A zero-shot corpus that cannot be loaded (offline) is one
line and exit 2 too, when its cell runs.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field

from bench.config import ConfigError
from bench.usage import usage_exit

LABEL = "bench.eval"


@dataclass
class LikelihoodPlan:
    """SRC, its train cells (one per training seed; an import: one) and their likelihood cells."""

    source: object
    train_cells: list
    cells: list
    results_dir: str = ""
    computed: list = field(default_factory=list)
    wall_s: float = 0.0


def split_datasets(text: str) -> list[str]:
    """``a,b,text:x.txt`` -> its specs (empty items dropped; ConfigError when none is left)."""
    out = [d.strip() for d in str(text).split(",") if d.strip()]
    if not out:
        raise ConfigError("--likelihood: name at least one dataset")
    return out


def prepare(
    src: str,
    datasets: list[str],
    *,
    task: str | None = None,
    limit: int | None = None,
    draws: int | None = None,
    seeds: list[int] | None = None,
    sets: list[str] = (),
    results_dir: str | None = None,
) -> LikelihoodPlan:
    """Plan the likelihood cells of SRC (module docstring). Pure: writes nothing; ConfigError
    (one line) on bad input."""
    from bench import registry
    from bench import source_model as sm
    from bench.kinds.likelihood import KIND
    from bench.likelihood.datasets import block_length, check, parse

    for d in datasets:  # an unknown spec: one line before anything else
        parse(d)
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit: must be >= 1, got {limit}")
    if draws is not None and draws < 1:
        raise ConfigError(f"--draws: must be >= 1, got {draws}")
    source = sm.resolve_source(src)
    own = [f"likelihood.datasets={json.dumps(list(datasets))}"]
    own += [f"likelihood.n_sequences={limit}"] if limit else []
    own += [f"likelihood.draws={draws}"] if draws else []
    data = sm.sweep_data(source, task=task, sets=[*own, *sets], results_dir=results_dir,
                         seeds=seeds)  # fmt: skip
    p = sm.build_plan(data, LABEL)
    mine = sm.own_train_cells(source, p)
    ids = {tc.id for tc in mine}
    cells = [c for c in p.cells.get(KIND.name, []) if c.train.id in ids]
    tc = mine[0]
    if not registry.METHODS[tc.method].bound_kind:
        raise ConfigError(
            f"{LABEL}: {tc.method} has no likelihood bound (Method.bound_kind is empty): "
            "nothing to evaluate (docs/likelihood.md)"
        )
    the_task = registry.make_task(tc.task_config())  # cheap: no data
    for c in cells:  # blocks too long, a missing file, ...: one line, before any work
        block_length(parse(c.subset), the_task, c.block)
        check(parse(c.subset), the_task)
    for t in mine:  # a trained model must be trained: bench.eval never trains
        if not t.imported and not t.weights.is_file():
            raise ConfigError(
                f"{LABEL}: training seed {t.train.get('seed', 0)} of this model has no weights "
                f"({t.weights}); train it with python -m bench.sweep"
            )
    if source.kind == "run":  # a sweep's model: these cells are an evaluation of their own
        from dataclasses import replace

        name = sm.evaluation_name(likelihood=datasets, limit=limit, draws=draws, sets=sets)
        cells = [replace(c, evaluation=name) for c in cells]
    return LikelihoodPlan(source, mine, cells, results_dir=tc.results_dir)


def run(lp: LikelihoodPlan, *, progress: bool = True) -> LikelihoodPlan:
    """Compute the cells not in the store, here (an import is converted first; nothing trains)."""
    from bench.likelihood.cells import run_likelihood_cell
    from bench.results import Store

    t0 = time.perf_counter()
    store = Store(lp.results_dir)
    for tc in lp.train_cells:
        todo = [c for c in lp.cells if c.train.id == tc.id and not store.has(c.id)]
        if not todo:
            continue
        print(f"{LABEL}: {tc.label()}: {len(todo)} likelihood cells to compute", file=sys.stderr)
        if tc.imported and not store.has(tc.id):
            from bench.cells import run_train  # an import cell's "training" converts the file

            run_train(tc, progress=progress)
        for c in todo:
            if run_likelihood_cell(c, store, progress=progress) and store.has(c.id):
                lp.computed.append(c)
    lp.wall_s = time.perf_counter() - t0
    return lp


def _num(v, digits: int = 4) -> str:
    return "" if v is None or v != v else f"{float(v):.{digits}g}"


def table(lp: LikelihoodPlan):
    """One row per likelihood cell in the store: model (with its training seed when several),
    dataset, bound, nll (nats/token), ppl (per token), bits/token, ppl's CI, sequences, tokens,
    MC s.e. of nll, wall_s; the three values prefixed ``<=`` for an upper bound."""
    import pandas as pd

    from bench.results import Store

    store = Store(lp.results_dir)
    seeds = len({tc.id for tc in lp.train_cells}) > 1
    cols = ["model", "dataset", "bound", "nll nats/tok", "ppl", "bits/tok", "ppl CI", "sequences",
            "tokens", "MC se", "wall_s"]  # fmt: skip
    out = []
    for c in lp.cells:
        rows = {r["metric"]: r for r in store.load(c.id) or []}
        if not rows:
            continue
        first = next(iter(rows.values()))
        model = f"{c.train.method}/{c.variant or c.train.variant}"
        if seeds:
            model += f" seed {c.train.train.get('seed', 0)}"
        ppl = rows.get("ppl", {})
        lo, hi = ppl.get("ci_low"), ppl.get("ci_high")
        kind = first.get("bound_kind") or "no bound"
        le = "<= " if kind.startswith("upper") else ""  # every value of a bound is a bound
        out.append(
            {
                "model": model,
                "dataset": c.subset,
                "bound": kind,
                "nll nats/tok": le + _num(rows.get("nll", {}).get("value")),
                "ppl": le + _num(ppl.get("value")),
                "bits/tok": le + _num(rows.get("bpd", {}).get("value")),
                "ppl CI": f"[{_num(lo)}, {_num(hi)}]" if lo is not None else "",
                "sequences": first.get("n") or 0,
                "tokens": int(rows["tokens"]["value"]) if "tokens" in rows else "",
                "MC se": _num(rows.get("nll_mc_se", {}).get("value"), 2) or "n/a",
                "wall_s": f"{float(first.get('wall_s') or 0):.1f}",
            }
        )
    return pd.DataFrame(out, columns=cols)


def main(args, format_table, lm_eval_files=None) -> int:
    """``bench.eval``'s ``--likelihood`` path (``args``: its parsed arguments; ``format_table``:
    its table printer, :func:`bench.commands.eval.format_table`; ``lm_eval_files``: its
    ``--output-lm-eval`` step, called with the results folder and the cells once they are done)."""
    if args.nfe or args.temperature or args.decoding:
        return usage_exit("--nfe / --temperature / --decoding: not with --likelihood")
    try:
        lp = prepare(
            args.src,
            split_datasets(args.likelihood),
            task=args.task,
            limit=args.limit,
            draws=args.draws,
            seeds=args.seeds,
            sets=args.sets,
            results_dir=args.results_dir,
        )
    except ValueError as e:  # UsageError (ConfigError, CheckpointError) included: one line
        return usage_exit(e)
    from bench.locks import CellBusy

    try:
        run(lp, progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as e:  # a corpus offline, a file changed, no weights
        return usage_exit(e)
    except CellBusy as e:
        print(f"error: {LABEL}: {e}", file=sys.stderr)
        return 1
    df = table(lp)
    print(f"{lp.train_cells[0].label()}: {len(lp.cells)} likelihood cells "
          f"({len(lp.computed)} computed now, store {lp.results_dir}/store)")  # fmt: skip
    print(format_table(df))
    if len(df) < len(lp.cells):  # another process holds their locks: it computes them
        print(f"{LABEL}: {len(lp.cells) - len(df)} cells have no rows yet (being computed "
              "by another process)", file=sys.stderr)  # fmt: skip
        return 1
    if lm_eval_files:
        lm_eval_files(lp.results_dir, lp.cells, lp.train_cells)
    return 0
