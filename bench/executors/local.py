"""The local executors: ``local`` (detached processes on this machine) and ``debug`` (in-process).

``local``: one job per model that still has work (train it unless its weights are in the
store, then sample every sample cell of it that is not: :func:`bench.cells.run_train_then_samples`),
at most ``executor.max_parallel`` at once, CPU threads split between them.

- A job is a process of its own (``python -m bench.executors.local_job <folder>``, folder
  ``<logs>/local/<model>-<time>`` with ``job.pkl``, ``log.out``, ``log.err``, ``result.json``),
  in its own session: a Ctrl-C or SIGTERM aimed at the driver does not reach it. On Linux the
  driver's fork server (:mod:`bench.executors.forkserver`, log ``<logs>/local-forkserver.log``)
  forks it with the trainer's imports done, instead of a new interpreter importing them again
  for every model (``SFLM_LOCAL_FORK=0``: a new interpreter per job).
- It holds its train cell's lock (:mod:`bench.locks`) for its whole life, and the driver
  records it in the sweep state (``state["local"][<train cell id>]``: pid, process start time,
  host, start time, folder), so ``--status`` shows it running and ``--cancel`` can stop it.
- A model whose lock another process holds (the job of an interrupted driver, another driver,
  a SLURM job) is attached to, never started twice: the driver waits until the lock is free,
  then runs whatever that job left undone.
- The driver stops a job that outlives ``executor.time_min`` with SIGTERM (training saves
  ``ckpt/last.ckpt`` at the next step boundary; a re-run resumes there).

``debug``: submitit's DebugExecutor, in the driver's process, one job at a time.
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tqdm import tqdm

from bench import atomic, heap, locks
from bench.executors import log_dir
from bench.executors.forkserver import Forked, ForkServer
from bench.executors.state import load_state, save_state, state_dir
from bench.plan import Plan, TrainCell
from bench.results import Store

_ROOT = Path(__file__).resolve().parents[2]  # the repository: jobs import bench from here
KILL_GRACE_S = 120  # after SIGTERM at the time limit, SIGKILL if the job is still there


def _todo(p: Plan) -> list[tuple[TrainCell, list]]:
    """The models that still have work, with their cells (of every kind) not in the store."""
    store = Store(p.cfg.results_dir)
    out = []
    for tc in p.train_cells:
        cells = [s for s in p.samples_of(tc) if not store.has(s.id)]
        if cells or not (store.has(tc.id) and tc.weights.is_file()):
            out.append((tc, cells))
    return out


def execute(p: Plan, kind: str, progress: bool = True, started: list | None = None) -> list[str]:
    """Run what the plan still needs (``kind``: ``local`` or ``debug``); returns one line per
    failed job (model label, last line of the error, log). ``started`` (a list) receives a
    :class:`LocalJob` for every process started, as it starts (for the driver's interrupt line)."""
    todo = _todo(p)
    if not todo:
        return []
    if kind == "debug":
        return _execute_debug(p, todo, progress)
    cfg = p.cfg
    parallel = max(1, min(cfg.executor.max_parallel, len(todo)))
    threads = max(1, (os.cpu_count() or 1) // parallel)
    failures: list[str] = []
    running: list[LocalJob] = []
    queue = list(todo)
    server = ForkServer(log_dir(cfg) / "local-forkserver.log", _job_env(), _ROOT)
    bar = tqdm(total=len(todo), desc=f"sweep {cfg.name}", unit="model", disable=not progress)
    try:
        while queue or running:
            while queue and len(running) < parallel:
                job = _start(cfg, queue.pop(0), threads, server)
                running.append(job)
                if started is not None and job.proc is not None:
                    started.append(job)
            time.sleep(0.2)
            still = []
            for job in running:
                if job.alive():
                    job.enforce_time_limit(cfg.executor.time_min * 60)
                    still.append(job)
                elif _ended(p, job, queue, failures):
                    bar.update(1)
            running = still
    finally:
        bar.close()
        server.close()  # the jobs it forked run on (an interrupted driver leaves them running)
    return failures


def _start(cfg, work: tuple, threads: int, server: ForkServer) -> LocalJob:
    """The job of one model (``work``: the model and its cells to run): attached to the process
    that holds the model's lock, else launched."""
    tc, cells = work
    owner = locks.holder(locks.train_lock_path(tc.run_dir))
    if owner is None:
        return LocalJob.launch(cfg, tc, cells, threads, server)
    rec = load_state(cfg).get("local", {}).get(tc.id) or {}
    mine = rec.get("pid") == owner.get("pid") and rec.get("host") == owner.get("host")
    print(
        f"sweep {cfg.name}: {tc.label()} is already running "
        f"({locks.describe(owner)}); waiting for it",
        file=sys.stderr,
        flush=True,
    )
    return LocalJob(tc, cells, owner=owner, folder=Path(rec["folder"]) if mine else None)


def _ended(p: Plan, job: LocalJob, queue: list, failures: list[str]) -> bool:
    """Account for a job that ended: a failure line, or its model queued again (what a job it
    attached to left undone: False, the model is not done). True when the model is done with."""
    cfg = p.cfg
    result = job.result()
    if result.get("stopped") and job.term_at is None and queue:
        # SIGTERM from outside this driver (--cancel, an operator): start nothing more
        print(
            f"sweep {cfg.name}: {job.tc.label()} was stopped from outside this "
            f"driver; not starting the {len(queue)} queued job(s) (run the sweep "
            "again to resume)",
            file=sys.stderr,
            flush=True,
        )
        queue.clear()
    if job.proc is None and result.get("ok") is False and not result.get("busy"):
        # the job it attached to failed or was stopped (--cancel): not retried here
        what = "was stopped" if result.get("stopped") else "failed"
        failures.append(
            f"{job.tc.label()}: the job it attached to (pid {job.pid}) {what}: "
            f"{result.get('error')} (log: {job.folder / 'log.err'})"
        )
    elif job.proc is None or result.get("busy"):
        # attached to a job that ended (or was killed), or lost the race for the lock:
        # what is left undone, this driver runs
        left = [t for t in _todo(p) if t[0].id == job.tc.id]
        if left:
            queue.insert(0, left[0])
            return False
    elif not result.get("ok"):
        failures.append(
            f"{job.tc.label()}: {result.get('error') or 'job ended without a result'} "
            f"(log: {job.folder / 'log.err'})"
        )
    return True


def _execute_debug(p: Plan, todo, progress: bool) -> list[str]:
    import submitit

    from bench.cells import run_train_then_samples  # the trainer (Lightning): only to run jobs

    ex = submitit.DebugExecutor(folder=str(log_dir(p.cfg) / "%j"))
    failures = []
    for tc, cells in tqdm(todo, desc=f"sweep {p.cfg.name}", unit="model", disable=not progress):
        job = ex.submit(run_train_then_samples, tc, cells, 0, True)
        try:
            job.result()
        except Exception as e:  # a failed job must not stop the sweep
            last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            failures.append(f"{tc.label()}: {last} (log: {job.paths.stderr})")
    return failures


# --------------------------------------------------------------------------- jobs


def _job_env() -> dict:
    """A job's environment: this one, with the repository first on ``PYTHONPATH`` and malloc on
    transparent huge pages (:func:`bench.heap.job_env`)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    return heap.job_env(env)


@dataclass
class LocalJob:
    """A job of this driver (``proc``: a :class:`subprocess.Popen`, or a
    :class:`bench.executors.forkserver.Forked` when the fork server started it) or one it
    attached to (``owner``: the lock holder)."""

    tc: TrainCell
    cells: list = field(default_factory=list)
    proc: subprocess.Popen | Forked | None = None
    folder: Path | None = None
    owner: dict | None = None
    t0: float = field(default_factory=time.monotonic)
    term_at: float | None = None

    @classmethod
    def launch(
        cls,
        cfg,
        tc: TrainCell,
        cells: list,
        threads: int,
        server: ForkServer | None = None,
    ) -> LocalJob:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        folder = log_dir(cfg) / "local" / f"{tc.method}-{tc.variant}-{tc.id[:10]}-{stamp}"
        folder.mkdir(parents=True)
        atomic.write_with(
            folder / "job.pkl", lambda t: t.write_bytes(pickle.dumps((tc, cells, threads)))
        )
        proc = server.spawn(folder) if server is not None else None
        if proc is None:
            with open(folder / "log.out", "wb") as out, open(folder / "log.err", "wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "bench.executors.local_job", str(folder)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=_job_env(),
                    cwd=_ROOT,
                    start_new_session=True,
                )  # its own session: the driver's Ctrl-C is not its
        record(
            cfg,
            tc.id,
            {
                "pid": proc.pid,
                "start": getattr(proc, "start", None) or locks.process_start(proc.pid),
                "host": socket.gethostname(),
                "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "folder": str(folder),
            },
        )
        return cls(tc, cells, proc=proc, folder=folder)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else (self.owner or {}).get("pid")

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return locks.holder(locks.train_lock_path(self.tc.run_dir)) is not None

    def result(self) -> dict:
        """What the job wrote (``result.json``: ok, error, busy, stopped); {} if nothing."""
        return read_result(self.folder)

    def enforce_time_limit(self, limit_s: float) -> None:
        if self.proc is None:
            return
        now = time.monotonic()
        try:  # a forked job is reaped by the fork server: it may be gone by now
            if self.term_at is None and now - self.t0 > limit_s:
                self.term_at = now
                os.killpg(self.proc.pid, signal.SIGTERM)
            elif self.term_at is not None and now - self.term_at > KILL_GRACE_S:
                os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def read_result(folder: str | Path | None) -> dict:
    if folder is None:
        return {}
    try:
        return json.loads((Path(folder) / "result.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def record(cfg, train_id: str, rec: dict) -> None:
    """Note a local job in the sweep state (read-modify-write under ``state.lock``: several
    drivers of one sweep may run at once)."""
    d = state_dir(cfg)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "state.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        state = load_state(cfg)
        state.setdefault("local", {})[train_id] = rec
        save_state(cfg, state)


# --------------------------------------------------------------------------- live jobs, stopping


def live_jobs(p: Plan) -> list[tuple[TrainCell, dict]]:
    """The plan's models that some process is working on now (train cell lock held), with
    the holder (:func:`bench.locks.holder`)."""
    out = []
    for tc in p.train_cells:
        owner = locks.holder(locks.train_lock_path(tc.run_dir))
        if owner is not None:
            out.append((tc, owner))
    return out


def stop(
    jobs: list[tuple[TrainCell, dict]], timeout: float = 60
) -> list[tuple[TrainCell, dict, str]]:
    """SIGTERM each job (its process group when it leads one, as local jobs do; training saves
    ``ckpt/last.ckpt`` at the next step boundary) and wait up to ``timeout`` s for its lock.
    Returns (cell, holder, outcome) with outcome ``stopped``, ``still running``, ``other host``,
    ``slurm`` (a SLURM job's: scancel stops it) or ``gone``."""
    host = socket.gethostname()
    out, sent = [], []
    for tc, owner in jobs:
        pid = owner.get("pid")
        if owner.get("slurm_job"):
            out.append((tc, owner, "slurm"))
        elif not pid or owner.get("host") != host:
            out.append((tc, owner, "other host"))
        elif not locks.alive(pid, owner.get("start")):
            out.append((tc, owner, "gone"))
        else:
            try:
                if owner.get("pgid") == pid:
                    os.killpg(pid, signal.SIGTERM)
                else:
                    os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                out.append((tc, owner, "gone"))
                continue
            sent.append((tc, owner))
    deadline = time.monotonic() + timeout
    for tc, owner in sent:
        free = locks.wait_free(
            locks.train_lock_path(tc.run_dir), max(0.0, deadline - time.monotonic()), 0.2
        )
        out.append((tc, owner, "stopped" if free else "still running"))
    return out
