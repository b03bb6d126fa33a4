"""Predicted against measured: the cost model (:mod:`bench.cost.model`) beside what a sweep's
jobs took, per job group (one model: its training and its sampling) and in total.

Measured, from the store (:class:`bench.results.Store`): a train row's ``wall_s`` (its training
loop), the sum of a model's sample and likelihood rows' ``wall_s`` (sampling + scoring); and, where
the local executor recorded the job (the sweep's state file), the job's wall time from its start
to its ``result.json``. Predicted: the same plan's cells as if none were done (the model's train
cell, its sample cells, the job's start and loads); the job and the sweep's wall are predicted for
the work the recorded job did (the rows written after it started: a job that sampled a model
trained by an earlier run, such as ``sweeps/samplers.yaml`` on the quickstart's models, is
compared without the training, and with only the cells it wrote).

A done cell predicted at its call budget (a variable-call decoding: MDLM's ``threshold``,
``factor``, ``cached``; ``sample.eos_stop``) is set beside what it spent
(:func:`variable_call_lines`): per model and decoding, the calls per item its rows say it made
(``calls_mean``) over the budget, the forward-equivalents per item (``fe_mean``) over the
predicted ones, and the sampling seconds (the calls and the sampler's own work, no scoring)
predicted at the budget, that prediction scaled to the calls made, and the rows' ``sample_s``.
The table's sampling column keeps the prediction at the budget: the gap to the measured seconds
is the calls it did not make.

``python -m bench.sweep SWEEP --status`` prints this after its table once cells are done;
``python -m bench.cost SWEEP [--set ...] [--device KIND]`` prints it alone.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench.cost.model import PlanPrediction, fmt_s, local_wall, predict_plan


@dataclass
class Measured:
    train_s: float | None = None  # the train row's wall_s
    sample_s: float | None = None  # sum of the sample / likelihood rows' wall_s
    cells: int = 0  # sample / likelihood cells with a wall_s
    job_s: float | None = None  # the local job's wall time (start to result.json)
    start: float | None = None  # the local job's start (epoch seconds)
    end: float | None = None
    #: the local job wrote the train (or import) row: it trained the model (else an earlier run)
    trained_in_job: bool = True
    #: the sample / likelihood cells whose rows the local job wrote
    sampled_in_job: set[str] = field(default_factory=set)


def _wall(rows: list[dict] | None) -> float | None:
    for r in rows or []:
        v = r.get("wall_s")
        if isinstance(v, int | float) and v == v:
            return float(v)
    return None


def _local_jobs(p) -> dict[str, tuple[float, float]]:
    """train cell id -> (start, end) epoch seconds of its local job, from the sweep's state file
    (``local``: folder and start time) and the job's ``result.json``."""
    from bench.executors.state import state_dir

    try:
        state = json.loads((state_dir(p.cfg) / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for tid, rec in (state.get("local") or {}).items():
        try:
            start = datetime.fromisoformat(rec["since"]).timestamp()
            end = (Path(rec["folder"]) / "result.json").stat().st_mtime
        except (KeyError, OSError, ValueError, TypeError):
            continue
        if end >= start:
            out[tid] = (start, end)
    return out


def _created(rows: list[dict] | None) -> float | None:
    """The epoch seconds of a cell's first row's ``created_at`` (None when absent)."""
    for r in rows or []:
        try:
            return datetime.fromisoformat(str(r.get("created_at"))).timestamp()
        except (TypeError, ValueError):
            continue
    return None


def measured(p, store) -> dict[str, Measured]:
    """What the store (and the local jobs' records) say each model's work took."""
    jobs = _local_jobs(p)
    out = {}
    for tc in p.train_cells:
        train_rows = store.load(tc.id)
        m = Measured(train_s=_wall(train_rows))
        sample_rows = {c.id: store.load(c.id) for c in p.samples_of(tc)}
        walls = [w for w in map(_wall, sample_rows.values()) if w is not None]
        if walls:
            m.sample_s, m.cells = sum(walls), len(walls)
        if tc.id in jobs:
            m.start, m.end = jobs[tc.id]
            m.job_s = m.end - m.start
            # rows written by this job: created at or after its start (1 s for clock rounding)
            since = m.start - 1.0
            made = _created(train_rows)
            m.trained_in_job = made is None or made >= since
            m.sampled_in_job = {
                cid for cid, rows in sample_rows.items() if (_created(rows) or 0.0) >= since
            }
        out[tc.id] = m
    return out


def as_run(j, m: Measured):
    """Job prediction ``j`` for the work the recorded job did (:class:`Measured`): without the
    training when an earlier run trained the model, with only the cells it wrote."""
    if m.start is None:
        return j
    return dataclasses.replace(
        j,
        train=j.train if m.trained_in_job else None,
        samples=[c for c in j.samples if c.cell_id in m.sampled_in_job],
    )


def _num(v) -> float | None:
    """A row's number (None for an empty, NaN or non-numeric value)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        return None
    return float(v)


def _first(rows: list[dict] | None, key: str) -> float | None:
    """The first number under ``key`` in a cell's rows (its cost columns repeat on each row)."""
    for r in rows or []:
        v = _num(r.get(key))
        if v is not None:
            return v
    return None


#: what :func:`variable_call_lines` sums per model and decoding
_GROUP = ("made", "budget", "fe", "fe_pred", "pred_s", "scaled_s", "sample_s")


def variable_call_lines(p, store, pred: PlanPrediction) -> list[str]:
    """The done cells predicted at their call budget (the module docstring), per model and
    decoding: ``[]`` when there are none."""
    cells = pred.cells
    groups: dict[tuple[str, str], dict[str, list]] = {}
    for tc in p.train_cells:
        for c in p.samples_of(tc):
            cp = cells.get(c.id)
            if cp is None or not cp.variable_calls or not cp.item_calls:
                continue
            rows = store.load(c.id)
            made = _first(rows, "calls_mean")
            if made is None:
                continue
            g = groups.setdefault((tc.label(), c.decoding), {k: [] for k in _GROUP})
            g["made"].append(made)
            g["budget"].append(cp.item_calls)
            fe = _first(rows, "fe_mean")
            if fe is not None:
                g["fe"].append(fe)
                g["fe_pred"].append(cp.item_fe)
            sample_s = _first(rows, "sample_s")
            if sample_s is not None:
                g["pred_s"].append(cp.parts.get("network", 0.0))
                g["scaled_s"].append(cp.parts.get("network", 0.0) * made / cp.item_calls)
                g["sample_s"].append(sample_s)
    if not groups:
        return []
    lines = ["variable-call cells (predicted at their call budget; measured: the rows' calls_mean, "
             "fe_mean and sample_s):"]  # fmt: skip
    for (label, dec), g in groups.items():
        made, budget = sum(g["made"]) / len(g["made"]), sum(g["budget"]) / len(g["budget"])
        line = (f"  {label[:32]:32s} {dec[:12]:12s} {len(g['made']):3d} cell(s): calls per item "
                f"{made:.1f} of a budget of {budget:.1f} ({made / budget:.0%})")  # fmt: skip
        if g["fe"]:
            fe, fe_p = sum(g["fe"]) / len(g["fe"]), sum(g["fe_pred"]) / len(g["fe_pred"])
            line += f"; fe per item {fe:.1f} / {fe_p:.1f} predicted"
        if g["sample_s"]:
            line += (f"; sampling {fmt_s(sum(g['pred_s']))} at the budget, "
                     f"{fmt_s(sum(g['scaled_s']))} at the calls made, {fmt_s(sum(g['sample_s']))} "
                     "measured")  # fmt: skip
        lines.append(line)
    return lines


def _pair(pred: float, meas: float | None) -> str:
    if meas is None:
        return f"{fmt_s(pred):>8s} / {'-':>8s}       "
    dev = f"{(pred - meas) / meas:+.0%}" if meas > 0 else ""
    return f"{fmt_s(pred):>8s} / {fmt_s(meas):>8s} {dev:>5s}"


def comparison(p, store, pred: PlanPrediction | None = None) -> str:
    """The predicted-vs-measured table of plan ``p`` (every cell predicted as if not done)."""
    pred = pred or predict_plan(p, store=None)
    meas = measured(p, store)
    lines = [
        f"predicted / measured ({pred.source()}; measured: train row wall_s, the sum of the "
        "sample and likelihood rows' wall_s, the local job's wall):",
        f"  {'model':42s} {'train':>24s} {'sampling':>24s} {'job':>24s}",
    ]
    tot_p = {"train": 0.0, "sample": 0.0, "job": 0.0}
    tot_m = {"train": 0.0, "sample": 0.0, "job": 0.0}
    have = {"train": True, "sample": True, "job": True}
    ran = []  # the jobs the executor recorded, as they ran (a re-run starts none for a done model)
    for j in pred.jobs:
        m = meas.get(j.train_cell_id, Measured())
        job = as_run(j, m)
        if m.start is not None:
            ran.append(job)
        pt, ps, pj = j.train_s, j.sample_s, job.seconds
        lines.append(
            f"  {j.label[:42]:42s} {_pair(pt, m.train_s)} {_pair(ps, m.sample_s)} "
            f"{_pair(pj, m.job_s)}"
        )
        for key, pv, mv in (("train", pt, m.train_s), ("sample", ps, m.sample_s),
                            ("job", pj, m.job_s)):  # fmt: skip
            tot_p[key] += pv
            if mv is None:
                have[key] = False
            else:
                tot_m[key] += mv
    lines.append(
        f"  {'total (device seconds)':42s} "
        + " ".join(
            _pair(tot_p[k], tot_m[k] if have[k] else None) for k in ("train", "sample", "job")
        )
    )
    ex = p.cfg.executor
    if ex.kind == "local" and pred.jobs:
        spans = [(m.start, m.end) for m in meas.values() if m.start is not None]
        span = max(e for _, e in spans) - min(s for s, _ in spans) if spans else None
        parallel = max(1, min(ex.max_parallel, len(pred.jobs)))
        wall = local_wall(ran or pred.jobs, parallel, pred.setup_s)
        lines.append(
            f"  {'sweep wall, ' + str(parallel) + ' job(s) at once':42s} "
            f"{'':24s} {'':24s} {_pair(wall, span)}"
        )
    lines += variable_call_lines(p, store, pred)
    return "\n".join(lines)
