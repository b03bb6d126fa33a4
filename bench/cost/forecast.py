"""What the SLURM executor asks of the cost model, handed to it by the command that runs a sweep
(the prediction sits above the executors: they take it as an argument, never import it).

:class:`Forecast` answers three questions for :func:`bench.executors.slurm.execute`: the
prediction its jobs are sized from (time limits, task packing:
:func:`bench.executors.slurm_cluster.sizing_of` turns it into a ``Sizing``), and the two texts a
refusal to submit quotes (the predicted device-hours of the sweep on SLURM, and its predicted
wall time here with the local executor).
"""

from __future__ import annotations

import dataclasses

from bench.cost.model import fmt_s, local_wall, predict_plan, slurm_cost, slurm_sizing


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
