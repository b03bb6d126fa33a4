"""A sample cell's scoring, one draw per item or k (``sample.n_per_item``): its metrics and its
per-item records, the same whether sampled now (:mod:`bench.kinds.sample`) or re-scored from the
saved ids (:mod:`bench.commands.rescore`).

One draw: the task's metrics and records, as always. k draws (the saved ids: k blocks of N rows,
draw-major): every draw is scored by the task on its own and gets its N records, each with a
``draw`` field (0..k-1); the cell's metrics are then (:func:`draw_metrics`):

- the task's headline metric as pass@1, the mean over the k draws and the N items, with the
  two-level bootstrap over items and draws (:func:`bench.evaluate.passk.score_draws`); its
  ``outcomes`` the (k, N) matrix (draw 0's row the row's ``item_outcomes``, the others its
  ``draw_outcomes``: :func:`bench.results.rows.sample_rows`);
- ``pass@j`` for j = 1..k (Chen et al. 2021's unbiased estimator) and ``maj@k`` (the majority of
  the draws' answers, :meth:`bench.data.base.Task.record_answer`; ties: the answer first
  reached), each with its interval over items;
- every other metric as its mean over the draws (no interval: the draws are not independent
  items).
"""

from __future__ import annotations

import hashlib
import json

from bench import records
from bench.evaluate.metrics import MetricValue

# numpy and the estimators (bench.evaluate.passk) are imported where k > 1 is scored: the
# sample kind imports this module for n_draws / draw_seed


def n_draws(cell) -> int:
    """Cell ``cell``'s draws per item (1 for a cell pickled before the field)."""
    return int(getattr(cell, "n_per_item", 1) or 1)


def draw_seed(base: int, draw: int) -> int:
    """The generator seed of draw ``draw`` of a batch whose one-draw seed is ``base``: ``base``
    itself for draw 0 (a k-draw cell's first draw is the one-draw cell's samples), else 32 bits
    of a hash of (base, draw) (the CPU generator keeps a seed's low 32 bits only, so an offset
    above them would repeat draw 0)."""
    if not draw:
        return base
    h = hashlib.sha256(f"draw|{base}|{draw}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def score_samples(task, cell, samples, data, *, nfe, cost=None) -> tuple[list, list[dict]]:
    """(the metrics, the records) of sample cell ``cell``'s ``samples`` ((k * N, L) ids, draw
    after draw) on ``data`` (N items); ``cost``: as :func:`bench.records.item_records`', its
    ``sample_s`` one value per sampled row."""
    k, n = n_draws(cell), len(data)
    if k == 1:
        metrics = task.evaluate(samples, data, cell.subset)
        recs = records.item_records(task, cell, samples, data, metrics, nfe=nfe, cost=cost)
        return metrics, recs
    if samples.shape[0] != k * n:
        raise ValueError(f"cell {cell.id}: {samples.shape[0]} samples for {k} draws of {n} items")
    per_draw, recs = [], []
    for d in range(k):
        part = slice(d * n, (d + 1) * n)
        # per-row lists (sample_s, calls) cut to this draw's rows
        dcost = (
            None
            if cost is None
            else {key: v[part] if isinstance(v, list) else v for key, v in cost.items()}
        )
        metrics = task.evaluate(samples[part], data, cell.subset)
        drecs = records.item_records(task, cell, samples[part], data, metrics, nfe=nfe, cost=dcost)
        per_draw.append(metrics)
        recs += [{**r, "draw": d} for r in drecs]
    return draw_metrics(task, per_draw, recs, k), recs


def _hashable(a):
    """An answer as a dict key: lists and dicts as canonical JSON."""
    if isinstance(a, list | dict):
        return json.dumps(a, sort_keys=True)
    return a


def draw_metrics(task, per_draw: list[list], recs: list[dict], k: int) -> list:
    """The metrics of a k-draw cell (module docstring) from each draw's ``task.evaluate``
    (``per_draw``) and the records (draw-major, each with its ``correct``)."""
    import numpy as np

    from bench.evaluate.passk import TIE_RULE, score_draws

    first = per_draw[0]
    n = len(recs) // k
    out = []
    for pos, m in enumerate(first):
        vals = [d[pos].value for d in per_draw]
        mean = None if any(v is None for v in vals) else float(np.mean(vals))
        out.append(MetricValue(m.metric, mean, m.n))
    correct = [r.get("correct") for r in recs]
    if any(c is None for c in correct):
        return out  # no 0/1 headline outcomes: no pass@j
    y = np.asarray(correct, dtype=float).reshape(k, n)
    answers = [
        [_hashable(task.record_answer(r)) for r in recs[d * n : (d + 1) * n]] for d in range(k)
    ]
    s = score_draws(y, answers)
    # the metric whose outcomes the records' ``correct`` holds (bench.records.headline_outcomes)
    with_outcomes = [m.metric for m in first if getattr(m, "outcomes", None) is not None]
    head = task.headline_metric
    head = head if head in with_outcomes or not with_outcomes else with_outcomes[0]
    names = [m.metric for m in out]
    p1 = s.pass1
    pass1 = MetricValue(head, p1.value, n, p1.low, p1.high, p1.method, outcomes=y)
    if head in names:
        out[names.index(head)] = pass1
    else:
        out.insert(0, pass1)
    for j, iv in s.pass_j.items():
        out.append(MetricValue(f"pass@{j}", iv.value, n, iv.low, iv.high, iv.method))
    iv = s.maj
    out.append(MetricValue(f"maj@{k}", iv.value, n, iv.low, iv.high, f"{iv.method}; {TIE_RULE}"))
    return out
