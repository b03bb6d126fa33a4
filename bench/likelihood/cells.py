"""One likelihood cell: a trained model's likelihood on one dataset, as store rows + records.

:func:`run_likelihood` is the whole job of a cell: skip it when the store has it, load the model's
weights as sampling does (:func:`bench.cell_model.method_backbone`,
:func:`bench.weights.load_weights`),
build the dataset's blocks (:mod:`bench.likelihood.datasets`), evaluate
(:func:`bench.likelihood.evaluate.evaluate`), write the per-sequence records
(:func:`bench.records.write`) and then the rows (:meth:`bench.results.Store.write_cell`). A method
without a bound gets rows with no value and ``bound_kind`` "" (the report prints "no bound").

Its id (:func:`cell_id`) is the planner's (:class:`bench.kinds.likelihood.LikelihoodCell`): the
train cell's id, the dataset spec and the evaluation settings that change the number (sequences,
block, wrap, draws, seed); ``batch_size`` is not in it (as ``sample.batch_size`` is not in a sample
cell's id, although the draws are seeded per batch).

Rows (one per metric of :mod:`bench.likelihood.evaluate`): the model's columns (as sample rows),
``kind = "likelihood"``, ``subset`` = the dataset spec, ``nfe`` None, ``decoding`` "",
``bound_kind``, ``n`` = sequences, ``item_limit`` = the sequences asked for (empty: all),
``records`` / ``records_sha256``, ``wall_s``, and what the cell cost
(:data:`bench.measure.LIKELIHOOD_COST_COLUMNS`): ``eval_s``, the seconds of every block's
bound (:func:`~bench.likelihood.evaluate.evaluate`'s ``bound_s``; loading the model and the
corpus, the metrics' bootstrap and writing are not in it), of them ``network_s`` inside
``network_calls`` backbone calls (timed by hooks on the backbone,
:func:`bench.measure.timing_calls`: the bounds call it directly), ``tokens_per_s`` (scored
positions per ``eval_s``), ``peak_mem_mb`` (reset before the evaluation) and the machine
(:func:`bench.measure.environment`). A method without a bound gets the machine columns only.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from bench.config import config_hash
from bench.results import Store
from bench.results.rows import likelihood_rows

#: metrics a method without a bound gets a valueless row of
NO_BOUND_METRICS = ("nll", "ppl", "bpd")


@dataclass(frozen=True)
class Settings:
    """How a dataset is evaluated (:class:`bench.config.LikelihoodConfig`'s fields):
    ``n_sequences`` (0 = every block), ``block`` (0 = the task's sequence length), ``wrap``,
    ``draws`` of the bound per sequence, ``batch_size``, ``seed`` of the draws."""

    n_sequences: int = 0
    block: int = 0
    wrap: bool = True
    draws: int = 1
    batch_size: int = 32
    seed: int = 0

    @classmethod
    def of(cls, cfg) -> Settings:
        """From a sweep's ``likelihood`` section (or a planned
        :class:`bench.kinds.likelihood.LikelihoodCell`)."""
        if hasattr(cfg, "n_samples"):  # a planned cell
            return cls(cfg.n_samples, cfg.block, cfg.wrap, cfg.draws, cfg.batch_size, cfg.seed)
        return cls(cfg.n_sequences, cfg.block, cfg.wrap, cfg.draws, cfg.batch_size, cfg.seed)


def cell_id(tc, dataset: str, s: Settings) -> str:
    """The cell's id: the rule of the likelihood kind's plan (:mod:`bench.kinds.likelihood`)."""
    return config_hash(
        {
            "likelihood": tc.id,
            "dataset": dataset,
            "n": s.n_sequences,
            "block": s.block,
            "wrap": s.wrap,
            "draws": s.draws,
            "seed": s.seed,
        }
    )


def run_likelihood(
    tc,
    dataset: str,
    settings: Settings,
    store: Store,
    *,
    variant: str = "",
    progress: bool = False,
    evaluation: str = "",
) -> str | None:
    """Evaluate train cell ``tc``'s trained model on ``dataset`` (a spec) under ``settings`` and
    write its records and rows to ``store`` (the model's results folder's); nothing when the store
    has the cell, or another process holds its lock (None then). Returns the cell id. ``variant``:
    the method entry's variant when it differs from the model's; ``evaluation``: the ``bench.eval``
    call computing it (its rows record it; "" for a sweep's cell). Raises
    :class:`~bench.config.ConfigError` (one line) for a bad spec, a block too long for the model,
    or a corpus that cannot be loaded; FileNotFoundError when the model has no weights."""
    from bench import locks

    cid = cell_id(tc, dataset, settings)
    if store.has(cid):
        return cid
    try:
        with locks.CellLock(locks.sample_lock_path(tc.run_dir, cid)):
            if not store.has(cid):
                _compute(tc, dataset, settings, store, cid, variant, progress, evaluation)
    except locks.CellBusy as e:
        print(f"sflm: skipping likelihood cell {dataset}: {e}", file=sys.stderr, flush=True)
        return None
    return cid


def run_likelihood_cell(c, store: Store | None = None, progress: bool = False) -> str | None:
    """:func:`run_likelihood` for a planned :class:`bench.kinds.likelihood.LikelihoodCell`."""
    s = Settings.of(c)
    if cell_id(c.train, c.subset, s) != c.id:
        raise ValueError(f"likelihood cell {c.id}: its id is not the one its settings give")
    store = store if store is not None else Store(c.train.results_dir)
    return run_likelihood(
        c.train,
        c.subset,
        s,
        store,
        variant=c.variant,
        progress=progress,
        evaluation=getattr(c, "evaluation", ""),
    )


def _compute(
    tc, dataset, s: Settings, store: Store, cid: str, variant: str, progress: bool, evaluation: str
):
    from bench import records
    from bench.cell_model import _device, cell_task, method_backbone
    from bench.evaluate.metrics import MetricValue
    from bench.likelihood.datasets import parse
    from bench.measure import environment

    t0 = time.perf_counter()
    spec = parse(dataset)
    task = cell_task(tc)
    method, backbone = method_backbone(tc, task)
    kind = method.bound_kind
    row = {"variant": variant, "n_sequences": s.n_sequences, "seed": s.seed, "dataset": dataset,
           "evaluation": evaluation}  # fmt: skip
    if not kind:  # "no bound": a row without a value, no records
        none = [MetricValue(m, None, 0) for m in NO_BOUND_METRICS]
        rows = likelihood_rows(tc, task, none, bound_kind="", steps=None,
                               wall_s=time.perf_counter() - t0, cost=environment(_device()),
                               **row)  # fmt: skip
        store.write_cell(cid, rows)
        return
    steps, metrics, recs, cost = _evaluate(tc, task, method, backbone, spec, s, progress)
    common = {
        "cell_id": cid,
        "method": tc.method,
        "variant": variant or tc.variant,
        "subset": dataset,
        "sample_seed": s.seed,  # the draws' seed (likelihood.seed)
        "train_seed": tc.train.get("seed"),
        "bound_kind": kind,
    }
    # the records first: a cell whose rows exist always has them (bench.records)
    files = records.write(tc.results_dir, cid, [{**common, **r} for r in recs])
    rows = likelihood_rows(tc, task, metrics, bound_kind=kind, steps=steps,
                           wall_s=time.perf_counter() - t0, cost=cost, **row)  # fmt: skip
    store.write_cell(cid, [{**r, **files} for r in rows])


def _evaluate(tc, task, method, backbone, spec, s: Settings, progress: bool):
    """The trained model's bound on the blocks of dataset ``spec`` (parsed): (its training steps,
    the metrics, the per-sequence records, the cost columns)."""
    from bench.cell_model import _device, keep_freed_heap
    from bench.likelihood.datasets import load_blocks
    from bench.likelihood.evaluate import evaluate
    from bench.measure import CallTimer, PeakMemory, environment, timing_calls
    from bench.weights import load_weights

    if not tc.weights.is_file():
        raise FileNotFoundError(f"{tc.weights}: train cell {tc.label()} has no weights")
    meta = load_weights(method, backbone, tc.weights)
    dev = _device()
    keep_freed_heap(dev)
    backbone.to(dev).eval()
    method.to(dev)
    blocks = load_blocks(
        task,
        spec,
        groups=list(tc.groups),
        block=s.block,
        wrap=s.wrap,
        n=s.n_sequences,
        positions=method.seq_len,
    )
    timer, peak, timing = CallTimer(dev), PeakMemory(dev).reset(), {}
    with timing_calls(backbone, timer):
        metrics, recs = evaluate(
            method,
            backbone,
            blocks,
            n_draws=s.draws,
            batch_size=s.batch_size,
            seed=s.seed,
            device=dev,
            decode=task.decode_text,
            progress=progress,
            timing=timing,
        )
    eval_s = timing["bound_s"]
    tokens = next((m.value for m in metrics if m.metric == "tokens"), None)
    cost = {
        "eval_s": eval_s,
        "network_s": timer.seconds(),
        "network_calls": timer.calls,
        "tokens_per_s": tokens / eval_s if tokens is not None and eval_s > 0 else None,
        "peak_mem_mb": peak.peak_mb(),
        **environment(dev),
    }
    return meta["steps"], metrics, recs, cost
