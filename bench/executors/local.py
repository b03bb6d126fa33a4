"""The local executors: submitit's LocalExecutor (processes on this machine, at most
``executor.max_parallel`` at once, CPU threads split between them) or its DebugExecutor
(in-process, one job at a time, with progress bars).

One job per model that still has work: train it (unless its weights are in the store), then
sample every sample cell of it that is not (:func:`bench.cells.run_train_then_samples`).
"""

from __future__ import annotations

import os
import time

import submitit
from tqdm import tqdm

from bench.cells import run_train_then_samples
from bench.executors import log_dir
from bench.plan import Plan
from bench.results import Store


def execute(p: Plan, kind: str, progress: bool = True) -> list[str]:
    """Run what the plan still needs (``kind``: ``local`` or ``debug``); returns one line per
    failed job (model label, last line of the error, log)."""
    cfg = p.cfg
    store = Store(cfg.results_dir)
    jobs_todo = []
    for tc in p.train_cells:
        cells = [s for s in p.samples_of(tc) if not store.has(s.id)]
        if cells or not (store.has(tc.id) and tc.weights.is_file()):
            jobs_todo.append((tc, cells))
    if not jobs_todo:
        return []
    debug = kind == "debug"
    parallel = 1 if debug else max(1, min(cfg.executor.max_parallel, len(jobs_todo)))
    threads = 0 if debug else max(1, (os.cpu_count() or 1) // parallel)
    if debug:
        ex = submitit.DebugExecutor(folder=str(log_dir(cfg) / "%j"))
    else:
        ex = submitit.LocalExecutor(folder=str(log_dir(cfg) / "%j"))
        ex.update_parameters(timeout_min=cfg.executor.time_min)
    failures: list[str] = []
    running: list = []
    queue = list(jobs_todo)
    bar = tqdm(total=len(jobs_todo), desc=f"sweep {cfg.name}", unit="model", disable=not progress)
    while queue or running:
        while queue and len(running) < parallel:
            tc, cells = queue.pop(0)
            job = ex.submit(run_train_then_samples, tc, cells, threads, debug)
            running.append((job, tc))
            if debug:
                break
        time.sleep(0 if debug else 0.2)
        still = []
        for job, tc in running:
            if not debug and not job.done():
                still.append((job, tc))
                continue
            try:
                job.result()
            except Exception as e:  # a failed job must not stop the sweep
                last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                failures.append(f"{tc.label()}: {last} (log: {getattr(job, 'paths', None) and job.paths.stderr})")
            bar.update(1)
        running = still
    bar.close()
    return failures
