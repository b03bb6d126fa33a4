"""Executors: where the jobs of a planned sweep (:mod:`bench.plan`) run.

- :mod:`bench.executors.local`: detached processes on this machine (each in its own session,
  :mod:`bench.executors.local_job`) or submitit's DebugExecutor (in-process); one job per model.
- :mod:`bench.executors.slurm`: SLURM, one train job per model and a dependent sampling array;
  :mod:`bench.executors.slurm_cluster` asks the cluster (settings, job sizes, squeue / sacct,
  logs) and :mod:`bench.executors.state` remembers what was submitted (state file, driver lock).

:mod:`bench.executors.cell_status` says where every cell stands (store, locks, local and SLURM jobs,
failures): the SLURM executor submits from it, the CLI's views (:mod:`bench.status`) print it.

Every job runs the functions of :mod:`bench.cells`.
"""

from __future__ import annotations

from pathlib import Path


def log_dir(cfg, ex=None) -> Path:
    """The absolute folder of job logs: ``executor.log_dir``, else ``<results>/logs``.
    ``ex``: the executor section to read (default ``cfg.executor``; SLURM passes its settings
    with environment overrides applied)."""
    ex = cfg.executor if ex is None else ex
    return Path(ex.log_dir or Path(cfg.results_dir) / "logs").absolute()
