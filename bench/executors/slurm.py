"""The SLURM executor: train jobs, dependent sampling arrays, resume.

``python -m bench.sweep SWEEP.yaml --executor slurm`` calls :func:`execute`:

- every train cell that is not done becomes one submitit job (``nodes = train.num_nodes``,
  ``tasks_per_node = train.devices``; Lightning's SLURM environment turns the srun tasks into
  DDP ranks, one GPU each when ``executor.gpus_per_node > 0``, CPU processes over gloo otherwise);
- the sample cells of a trained model run as one job array (``executor.map_array`` over chunks
  of cells), submitted with ``--dependency=afterok:<train job>`` and
  ``--kill-on-invalid-dep=yes`` (so a failed training cancels its array instead of leaving it
  pending forever), at most ``executor.array_parallelism`` tasks at once. When the model is
  already trained the array has no dependency; a dependency is only ever put on a train job
  that ``squeue`` still shows (SLURM treats a dependency on a job it has forgotten as met);
- what was submitted (cell id -> job id) is kept in ``<results>/sweeps/<name>/state.json``
  (:mod:`bench.executors.state`: atomic writes; one driver at a time per sweep, by ``flock``).
  A re-run asks ``squeue`` / ``sacct`` about the recorded jobs (:mod:`bench.executors.cell_status`),
  leaves running, pending and done cells alone and resubmits what failed or vanished. The store
  holds one file per cell, so it ends with one row per (cell, metric) however often the driver
  is killed and re-run;
- preemption and time limits: jobs are submitit ``Checkpointable``. On SLURM's pre-timeout /
  preemption signal (USR2) a train job asks :func:`bench.train.request_stop`, the trainer saves
  ``ckpt/last.ckpt`` at the next step boundary (all DDP ranks together), and the job requeues
  itself through submitit; the requeued job resumes with the exact step, optimiser, EMA and RNG
  state. On SIGTERM (scancel, preemption grace, ``scontrol requeue``) the trainer saves too.
  Sampling jobs requeue the same way and resume at batch granularity.

Before it writes anything the driver checks that SLURM answers here (``squeue``, a short
timeout); otherwise it stops with one line: the cause, what the sweep would submit and its cost
bound, and the ways forward (``--executor local``, ``--dry-run``, ``SLURM_CONF``).

Cluster settings (``executor`` section, ``SFLM_SLURM_<FIELD>`` overrides) and the calls to
squeue / sacct / scancel are in :mod:`bench.executors.slurm_cluster`.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path

import submitit
from submitit.core.utils import FailedJobError
from submitit.helpers import Checkpointable
from tqdm import tqdm

from bench import heap
from bench.config import ConfigError, ExecutorConfig
from bench.executors import log_dir
from bench.executors.cell_status import STATES, CellStatus, statuses
from bench.executors.slurm_cluster import (
    Sizing,
    SlurmUnavailable,
    array_limit_min,
    chunk_cells,
    controller_problem,
    limit_min,
    memory_problem,
    plan_cost,
    sample_resources,
    scancel,
    settings,
    slurm_error_line,
    train_resources,
)
from bench.executors.state import DriverLock, load_state, save_state, state_dir
from bench.plan import Plan, TrainCell
from bench.results import Store, provenance_sha

_ROOT = Path(__file__).resolve().parents[2]  # the repository: jobs import bench from here


# --------------------------------------------------------------------------- job callables


class TrainJob(Checkpointable):
    """One train cell as a (possibly multi-task DDP) SLURM job; requeues itself on USR2."""

    def __init__(self, cell: TrainCell, threads: int):
        self.cell, self.threads = cell, threads

    def __call__(self) -> str:
        # the trainer (Lightning) is imported in the job, not by the driver that submits it
        from bench.cells import run_train
        from bench.train import TrainingInterrupted, request_stop

        submitit_handler = signal.getsignal(signal.SIGUSR2)
        signal.signal(signal.SIGUSR2, request_stop)  # save at the next step boundary, not mid-step
        try:
            return run_train(self.cell, self.threads, progress=False)
        except TrainingInterrupted as e:
            rank = submitit.JobEnvironment().global_rank
            print(
                f"sflm: training interrupted at step {e.step} (rank {rank}); "
                f"checkpoint {e.ckpt}; requeueing",
                file=sys.stderr,
                flush=True,
            )
            if rank == 0 and callable(submitit_handler):
                # submitit's handler: checkpoint() -> pickle -> `scontrol requeue` -> exit
                submitit_handler(signal.SIGUSR2, None)
            if rank != 0:
                time.sleep(300)  # the requeue of rank 0 ends this task
            raise


class SampleJob(Checkpointable):
    """A chunk of one model's cells (an array task: sample cells, likelihood cells, each run by
    its kind); requeues itself on USR2 and resumes at batch granularity (run_samples skips saved
    batches and finished cells)."""

    def __init__(self, threads: int):
        self.threads = threads

    def __call__(self, cells: list) -> int:
        from bench.cells import run_samples

        return run_samples(cells, self.threads, progress=False)


# --------------------------------------------------------------------------- submission


def _job_name(cfg, kind: str, train_id: str) -> str:
    return f"sflm-{state_dir(cfg).name}-{kind}-{train_id[:10]}"


def _executor(
    cfg,
    ex: ExecutorConfig,
    res: dict,
    name: str,
    dependency: str | None = None,
    array: bool = False,
    max_num_timeout: int = 3,
    time_min: int | None = None,
):
    sx = submitit.SlurmExecutor(
        folder=str(log_dir(cfg, ex) / "%j"), max_num_timeout=max_num_timeout
    )
    setup = [
        f"export SFLM_BENCH_GIT_SHA={shlex.quote(provenance_sha())}",
        f"export PYTHONPATH={shlex.quote(str(_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
        heap.SLURM_SETUP,  # malloc on transparent huge pages, as a local job
    ]
    params = {
        "job_name": name,
        "time": time_min or ex.time_min,  # sized from the prediction (slurm_cluster.limit_min)
        "nodes": res["nodes"],
        "ntasks_per_node": res["tasks_per_node"],
        "cpus_per_task": res["cpus_per_task"],
        "mem": f"{res['mem_gb']}GB",
        "setup": setup,
    }
    if res["gpus_per_node"]:
        params["gpus_per_node"] = res["gpus_per_node"]
    for key in ("partition", "account", "qos"):
        if getattr(ex, key):
            params[key] = getattr(ex, key)
    if array:
        params["array_parallelism"] = ex.array_parallelism
    if dependency:
        params["dependency"] = dependency
        params["additional_parameters"] = {"kill_on_invalid_dep": "yes"}
    sx.update_parameters(**params)
    return sx


def _submit_train(cfg, ex, tc: TrainCell, state, sizes: Sizing | None = None) -> str:
    res = train_resources(ex, tc)
    name = _job_name(cfg, "train", tc.id)
    limit = limit_min(sizes.train_s(tc) if sizes else None, ex)
    # a multi-day training run may hit the time limit many times; each time it requeues
    sx = _executor(cfg, ex, res, name, max_num_timeout=100, time_min=limit)
    with _sbatch():
        job = sx.submit(TrainJob(tc.absolute(), ex.cpus_per_task))
    state["jobs"][job.job_id] = {
        "kind": "train",
        "name": name,
        "folder": str(log_dir(cfg, ex) / "%j"),
        "ntasks": res["nodes"] * res["tasks_per_node"],
        "time_min": limit,
        "cells": [tc.id],
        "submitted": time.time(),
    }
    state["cells"][tc.id] = job.job_id
    save_state(cfg, state)
    return job.job_id


def _submit_samples(
    cfg,
    ex,
    tc: TrainCell,
    cells: list,
    after: str | None,
    state,
    sizes: Sizing | None = None,
) -> list[str]:
    chunks = chunk_cells(cells, ex, sizes)
    if not chunks:
        return []
    name = _job_name(cfg, "samples", tc.id)
    limit = array_limit_min(tc, chunks, ex, sizes)
    sx = _executor(
        cfg,
        ex,
        sample_resources(ex),
        name,
        dependency=f"afterok:{after}" if after else None,
        array=True,
        time_min=limit,
    )
    with _sbatch():
        jobs = sx.map_array(
            SampleJob(ex.cpus_per_task), [[c.absolute() for c in ch] for ch in chunks]
        )
    base = jobs[0].job_id.split("_")[0]
    state["jobs"][base] = {
        "kind": "samples",
        "name": name,
        "folder": str(log_dir(cfg, ex) / "%j"),
        "ntasks": 1,
        "time_min": limit,
        "after": after,
        "train_cell": tc.id,
        "submitted": time.time(),
        "tasks": {j.job_id: [c.id for c in ch] for j, ch in zip(jobs, chunks)},
    }
    for j, ch in zip(jobs, chunks):
        for c in ch:
            state["cells"][c.id] = j.job_id
    save_state(cfg, state)
    return [j.job_id for j in jobs]


def _needs_submit(s: CellStatus) -> bool:
    """Neither done nor queued/running: never submitted, failed, or vanished."""
    return s.state == "failed" or (s.state == "pending" and not s.job)


def _submit_missing(
    p: Plan, ex, state, status: dict[str, CellStatus], sizes: Sizing | None = None
) -> tuple[int, int]:
    """Submit every cell that is neither done nor live; returns (train jobs, array tasks)."""
    cfg = p.cfg
    n_train = n_tasks = 0
    for tc in p.train_cells:
        ts = status[tc.id]
        samples = p.samples_of(tc)
        after = None
        if _needs_submit(ts):
            # Pending sample tasks of this model wait on the old (failed) train job, or would
            # start on missing weights: cancel them and resubmit them behind the new job.
            stale = [
                status[s.id]
                for s in samples
                if status[s.id].state == "pending" and status[s.id].job
            ]
            scancel([x.job for x in stale])
            for x in stale:
                x.state = "failed"
            after = _submit_train(cfg, ex, tc, state, sizes)
            n_train += 1
        elif ts.state != "done":
            after = ts.job  # live in squeue right now, so the dependency is real
        todo = [s for s in samples if _needs_submit(status[s.id])]
        n_tasks += len(_submit_samples(cfg, ex, tc, todo, after, state, sizes))
    return n_train, n_tasks


# --------------------------------------------------------------------------- driver


def execute(
    p: Plan,
    progress: bool = True,
    wait: bool = True,
    poll_s: float | None = None,
    forecast=None,
) -> list[str]:
    """Submit what the plan still needs, then (``wait``) watch until nothing is queued or running.

    ``forecast`` is what the command knows of the cost (the cost model sits above the executors
    and is given, not imported: :class:`bench.cost.model.Forecast`): ``sizing(p, ex, store)``,
    the prediction the jobs' time limits and packing are sized from
    (:func:`bench.executors.slurm_cluster.sizing_of`); ``predicted(...)`` / ``local_time(...)``,
    the texts a refusal quotes. None: every job asks ``time_min``, a refusal quotes no prediction.

    Before anything is written it checks that the SLURM client is on PATH and its controller
    answers (:func:`_preflight`); if not it raises :class:`SlurmUnavailable` (a ConfigError: one
    line, exit 2). Returns one line per cell that did not finish (label, SLURM state, last error
    line, log)."""
    cfg = p.cfg
    ex = settings(cfg.executor)
    for t in p.train_cells:
        train_resources(ex, t)  # config errors before anything is submitted
    store = Store(cfg.results_dir)
    if all(store.has(c.id) for c in p.sample_cells) and all(
        store.has(t.id) and t.weights.is_file() for t in p.train_cells
    ):
        return []  # a finished sweep submits nothing and asks SLURM nothing
    # time limits and task packing from the cost model's prediction
    sizes = forecast.sizing(p, ex, store) if forecast is not None else None
    problem = memory_problem(p, sizes)
    if problem:  # before anything is written
        raise ConfigError(problem)
    _preflight(p, ex, store, sizes, forecast)  # before anything is written: no state, logs, runs
    try:
        with DriverLock(cfg):
            state = load_state(cfg)
            status = {s.cell_id: s for s in statuses(p, state)}
            n_train, n_tasks = _submit_missing(p, ex, state, status, sizes)
            if progress:
                print(
                    f"sweep {cfg.name}: submitted {n_train} train job(s) and "
                    f"{n_tasks} sampling task(s); "
                    f"state: {state_dir(cfg) / 'state.json'}; logs: {log_dir(cfg, ex)}",
                    file=sys.stderr,
                )
            if wait:
                _watch(p, state, progress, poll_s)
            final = statuses(p, state)
    except RuntimeError as e:
        return [f"slurm: {e}"]
    # KeyboardInterrupt / SIGTERM: bench.sweep prints what keeps running (jobs stay queued)
    out = []
    for s in final:
        if s.state == "failed" or (wait and s.state != "done"):
            line = f"{s.kind} {s.label}: {s.state} [{s.detail}]"
            if s.error:
                line += f": {s.error}"
            if s.log:
                line += f" (log: {s.log})"
            out.append(line)
    return out


def _preflight(
    p: Plan, ex: ExecutorConfig, store: Store, sizes: Sizing | None = None, forecast=None
) -> None:
    """Raise :class:`SlurmUnavailable` (one line: the cause, what the sweep would submit and its
    cost bound, the ways forward) unless the SLURM client is here and its controller answers."""
    # srun too: submitit's SlurmExecutor refuses to start without it (its job scripts run srun)
    missing = [
        t for t in ("sbatch", "srun", "squeue", "sacct", "scancel") if shutil.which(t) is None
    ]
    if missing:
        cause = f"'{missing[0]}' is not on PATH (no SLURM client here)"
        fix = "or run it on a login node of your cluster"
    else:
        said = controller_problem()
        if said is None:
            return
        cause = f"no SLURM controller answers ({said})"
        conf = os.environ.get("SLURM_CONF")
        fix = (
            f"or check SLURM_CONF={conf} and that its controller is up"
            if conf
            else "or point SLURM_CONF at your cluster's slurm.conf"
        )
    raise SlurmUnavailable(
        f"{cause}; this sweep would submit {plan_cost(p, ex, store, sizes).describe()}"
        f"{forecast.predicted(p, ex, store, sizes) if forecast else ''}; run it here with "
        f"--executor local{forecast.local_time(p, store) if forecast else ''}, plan it with "
        f"--dry-run, {fix} "
        "(a one-node test cluster: bash scripts/slurm-local-up.sh)"
    )


@contextlib.contextmanager
def _sbatch():
    """submitit prints sbatch's stderr when it fails and raises it again: make it one line."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            yield
    except FailedJobError as e:
        raise RuntimeError(f"submission failed: {slurm_error_line(str(e), 'sbatch')}") from None
    except BaseException:
        sys.stderr.write(said.getvalue())  # e.g. Ctrl-C mid-submission: show what was said
        raise
    sys.stderr.write(said.getvalue())


def _watch(p: Plan, state: dict, progress: bool, poll_s: float | None) -> None:
    """Poll squeue/sacct until no recorded job of this plan is live; show a progress bar.
    Sampling tasks whose training failed (DependencyNeverSatisfied) are cancelled."""
    ids = {c.id for c in [*p.train_cells, *p.sample_cells]}  # every cell of every kind
    bar = tqdm(total=len(ids), desc=f"sweep {p.cfg.name}", unit="cell", disable=not progress)
    t0 = time.monotonic()
    errors = 0
    try:
        while True:
            try:
                sts = statuses(p, state)
                errors = 0
            except RuntimeError as e:  # slurmctld / slurmdbd briefly unreachable: keep watching
                errors += 1
                if errors > 10:
                    raise
                print(f"warning: {e} (retrying)", file=sys.stderr)
                time.sleep(poll_s or 10)
                continue
            counts = {s: sum(x.state == s for x in sts) for s in STATES}
            bar.n = counts["done"]
            bar.set_postfix(
                running=counts["running"], pending=counts["pending"], failed=counts["failed"]
            )
            bar.refresh()
            never = [
                x.job
                for x in sts
                if x.state == "pending" and "DependencyNeverSatisfied" in x.detail
            ]
            scancel(never)
            if not any(x.state in ("running", "pending") and x.job for x in sts):
                return
            elapsed = time.monotonic() - t0
            time.sleep(poll_s if poll_s else (2 if elapsed < 120 else 10 if elapsed < 1200 else 30))
    finally:
        bar.close()
