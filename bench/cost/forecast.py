"""What the SLURM executor asks of the cost model, handed to it by the command that runs a sweep
(the prediction sits above the executors: they take it as an argument, never import it), and the
SLURM jobs' predictions (:func:`slurm_sizing`, :func:`slurm_cost`).

:class:`Forecast` answers three questions for :func:`bench.executors.slurm.execute`: the
prediction its jobs are sized from (time limits, task packing:
:func:`bench.executors.slurm_cluster.sizing_of` turns it into a ``Sizing``), and the two texts a
refusal to submit quotes (the predicted device-hours of the sweep on SLURM, and its predicted
wall time here with the local executor).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bench.config import ExecutorConfig
from bench.cost.model import (
    PlanPrediction,
    chunk_seconds,
    device_kind,
    fmt_s,
    local_wall,
    predict_plan,
)


class Forecast:
    """The cost model's answers for a SLURM run (module docstring)."""

    def sizing(self, p, ex, store):
        """The jobs' ``Sizing``, or None (``time_safety`` 0, or no table for the device kind)."""
        return slurm_sizing(p, ex, store)

    def predicted(self, p, ex, store, sizes) -> str:
        """``, predicted 44.6 GPU-hours on h100``, or nothing without a table."""
        if sizes is None:
            return ""
        try:
            sc = slurm_cost(predict_plan(p, sizes.kind, store, ex=ex), p, ex, store)
        except Exception:  # noqa: BLE001 - the prediction never hides the refusal's cause
            return ""
        gpu = f"{sc.gpu_h:.1f} GPU-hours" if ex.gpus_per_node else f"{sc.cpu_h:.1f} CPU-hours"
        return f", predicted {gpu} on {sizes.kind}"

    def local_time(self, p, store) -> str:
        """`` (predicted 8.0 min here)``: the local executor's predicted wall time here."""
        try:
            ex = dataclasses.replace(p.cfg.executor, kind="local", device="")
            pred = predict_plan(p, None, store, ex=ex)
            parallel = max(1, min(ex.max_parallel, len(pred.jobs)))
            wall = local_wall(pred.jobs, parallel, pred.setup_s)
        except Exception:  # noqa: BLE001
            return ""
        return f" (predicted {fmt_s(wall)} here)"


@dataclass
class SlurmPrediction:
    """A plan's predicted SLURM jobs: seconds of each train / import job and of each sampling
    array task (each task starts a process and loads its model), and the device-hours they use
    (GPU-hours: a train job's GPUs, one per array task on a cluster with GPUs)."""

    train_s: dict[str, float] = field(default_factory=dict)  # train cell id -> seconds
    import_s: dict[str, float] = field(default_factory=dict)  # import cell id -> seconds
    task_s: dict[str, list[float]] = field(default_factory=dict)  # train cell id -> per task
    gpu_h: float = 0.0
    cpu_h: float = 0.0  # import jobs and, without GPUs, every job (x cpus_per_task)

    @property
    def longest_s(self) -> float:
        """The longest job or array task (what a time limit must cover)."""
        every = [*self.train_s.values(), *self.import_s.values()]
        every += [t for ts in self.task_s.values() for t in ts]
        return max(every, default=0.0)


def slurm_sizing(p, ex: ExecutorConfig, store):
    """The prediction SLURM jobs are sized from (:class:`bench.executors.slurm_cluster.Sizing`),
    or None when ``time_safety`` is 0 or there is no table for the executor's device kind (every
    job then asks ``time_min``)."""
    from bench.executors.slurm_cluster import sizing_of

    if ex.time_safety <= 0:
        return None
    kind = device_kind(ex)[0]
    try:
        pred = predict_plan(p, kind, store, ex=ex)
    except KeyError:  # no table for this kind (bench.cost.table)
        return None
    return sizing_of(pred)


def slurm_cost(pred: PlanPrediction, p, ex: ExecutorConfig, store=None) -> SlurmPrediction:
    """What the SLURM executor would submit for ``p`` (as
    :func:`bench.executors.slurm_cluster.plan_cost` counts it), predicted: each train job, each
    import job (CPU) and each sampling array task (:func:`chunk_seconds`)."""
    from bench.executors.slurm_cluster import chunk_cells, sizing_of, train_resources

    out = SlurmPrediction()
    jobs = {j.train_cell_id: j for j in pred.jobs}
    cpus = max(1, int(ex.cpus_per_task))
    sizes = sizing_of(pred) if ex.time_safety > 0 else None  # tasks packed as the executor does
    for tc in p.train_cells:
        j = jobs.get(tc.id)
        if j is None:
            continue
        if j.train is not None:
            secs = j.prepare_s + j.start_s + j.train_s
            r = train_resources(ex, tc)
            if tc.imported:  # a checkpoint converted on the CPU
                out.import_s[tc.id] = secs
                out.cpu_h += secs * r["cpus_per_task"] / 3600
            else:
                out.train_s[tc.id] = secs
                gpus = r["gpus_per_node"] * r["nodes"]
                if gpus:
                    out.gpu_h += secs * gpus / 3600
                else:
                    out.cpu_h += secs * cpus * r["tasks_per_node"] * r["nodes"] / 3600
        todo = [s for s in p.samples_of(tc) if store is None or not store.has(s.id)]
        ts = chunk_seconds(j, chunk_cells(todo, ex, sizes))
        out.task_s[tc.id] = ts
        if ex.gpus_per_node:
            out.gpu_h += sum(ts) / 3600
        else:
            out.cpu_h += sum(ts) * cpus / 3600
    return out
