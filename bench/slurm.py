"""The SLURM executor of :mod:`bench.sweep`: train jobs, dependent sampling arrays, resume.

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
  (atomic writes; one driver at a time per sweep, by ``flock``). A re-run asks ``squeue`` /
  ``sacct`` about the recorded jobs, leaves running, pending and done cells alone and
  resubmits what failed or vanished. The store holds one file per cell, so it ends with one
  row per (cell, metric) however often the driver is killed and re-run;
- preemption and time limits: jobs are submitit ``Checkpointable``. On SLURM's pre-timeout /
  preemption signal (USR2) a train job asks :func:`bench.train.request_stop`, the trainer saves
  ``ckpt/last.ckpt`` at the next step boundary (all DDP ranks together), and the job requeues
  itself through submitit; the requeued job resumes with the exact step, optimiser, EMA and RNG
  state. On SIGTERM (scancel, preemption grace, ``scontrol requeue``) the trainer saves too.
  Sampling jobs requeue the same way and resume at batch granularity.

Cluster facts come from the sweep's ``executor`` section; an environment variable
``SFLM_SLURM_<FIELD>`` (e.g. ``SFLM_SLURM_PARTITION``, ``SFLM_SLURM_TIME_MIN``) overrides
``executor.<field>``. Nothing about a particular cluster is written in this module.
"""

from __future__ import annotations

import dataclasses
import fcntl
import getpass
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import submitit
from submitit.core.utils import JobPaths
from submitit.helpers import Checkpointable

from bench import atomic
from bench.config import ConfigError, ExecutorConfig, build

ENV_PREFIX = "SFLM_SLURM_"
_ENV_FIELDS = ("partition", "account", "qos", "time_min", "gpus_per_node", "cpus_per_task", "mem_gb",
               "array_parallelism", "log_dir")
# sacct states after which a job will not run again (without a requeue)
_FAILED_STATES = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
                  "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
# a Python exception line, or slurmstepd's "*** JOB 12 ON node CANCELLED AT ... ***"
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Interrupted)\b|slurmstepd(-[\w.-]+)?: error:)")
STATES = ("done", "running", "pending", "failed")


# --------------------------------------------------------------------------- settings


def settings(ex: ExecutorConfig, env: dict | None = None) -> ExecutorConfig:
    """The executor section with ``SFLM_SLURM_<FIELD>`` environment overrides applied."""
    env = os.environ if env is None else env
    merged = dataclasses.asdict(ex)
    for name in _ENV_FIELDS:
        key = ENV_PREFIX + name.upper()
        if key not in env:
            continue
        raw = env[key].strip()
        if isinstance(merged[name], int) and not isinstance(merged[name], bool):
            try:
                merged[name] = int(raw)
            except ValueError:
                raise ConfigError(f"environment {key}: expected an integer, got {raw!r}") from None
        else:
            merged[name] = raw
    return build(ExecutorConfig, merged, where=f"executor (with {ENV_PREFIX}* environment overrides)")


def _log_dir(cfg) -> Path:
    return Path(settings(cfg.executor).log_dir or Path(cfg.results_dir) / "logs").absolute()


def state_dir(cfg) -> Path:
    return Path(cfg.results_dir).absolute() / "sweeps" / re.sub(r"[^A-Za-z0-9_.-]", "_", cfg.name)


def _job_name(cfg, kind: str, train_id: str) -> str:
    return f"sflm-{re.sub(r'[^A-Za-z0-9_.-]', '_', cfg.name)}-{kind}-{train_id[:10]}"


def _train_resources(ex: ExecutorConfig, tc) -> dict:
    devices, nodes = int(tc.train["devices"]), int(tc.train["num_nodes"])
    if ex.gpus_per_node and devices > ex.gpus_per_node:
        raise ConfigError(f"train.devices={devices} for {tc.label()} exceeds executor.gpus_per_node="
                          f"{ex.gpus_per_node} (use train.num_nodes for more GPUs)")
    return {"nodes": nodes, "tasks_per_node": devices, "gpus_per_node": devices if ex.gpus_per_node else 0,
            "cpus_per_task": ex.cpus_per_task, "mem_gb": ex.mem_gb * devices}


def _sample_resources(ex: ExecutorConfig) -> dict:
    return {"nodes": 1, "tasks_per_node": 1, "gpus_per_node": 1 if ex.gpus_per_node else 0,
            "cpus_per_task": ex.cpus_per_task, "mem_gb": ex.mem_gb}


def chunk_cells(cells: list, ex: ExecutorConfig) -> list[list]:
    """Split one model's sample cells into array tasks: as many tasks as may run at once
    (``array_parallelism``; more would only reload the model more often), or
    ``cells_per_task`` cells each when the executor section has that field."""
    if not cells:
        return []
    per = getattr(ex, "cells_per_task", 0) or 0
    n = math.ceil(len(cells) / per) if per > 0 else min(len(cells), ex.array_parallelism)
    bounds = [round(i * len(cells) / n) for i in range(n + 1)]
    return [cells[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


# --------------------------------------------------------------------------- job callables


def _absolute(cell):
    """The same cell with an absolute results_dir (jobs may start in another directory).
    Duck-typed: under ``python -m bench.sweep`` the cell classes live in ``__main__``."""
    if hasattr(cell, "results_dir"):  # a TrainCell
        return dataclasses.replace(cell, results_dir=str(Path(cell.results_dir).absolute()))
    return dataclasses.replace(cell, train=_absolute(cell.train))


class TrainJob(Checkpointable):
    """One train cell as a (possibly multi-task DDP) SLURM job; requeues itself on USR2."""

    def __init__(self, cell, threads: int):
        self.cell, self.threads = cell, threads

    def __call__(self) -> str:
        from bench.sweep import run_train
        from bench.train import TrainingInterrupted, request_stop

        submitit_handler = signal.getsignal(signal.SIGUSR2)
        signal.signal(signal.SIGUSR2, request_stop)  # save at the next step boundary, not mid-step
        try:
            return run_train(self.cell, self.threads, progress=False)
        except TrainingInterrupted as e:
            rank = submitit.JobEnvironment().global_rank
            print(f"sflm: training interrupted at step {e.step} (rank {rank}); checkpoint {e.ckpt}; requeueing",
                  file=sys.stderr, flush=True)
            if rank == 0 and callable(submitit_handler):
                # submitit's handler: checkpoint() -> pickle -> `scontrol requeue` -> exit
                submitit_handler(signal.SIGUSR2, None)
            if rank != 0:
                time.sleep(300)  # the requeue of rank 0 ends this task
            raise


class SampleJob(Checkpointable):
    """A chunk of one model's sample cells (an array task); requeues itself on USR2 and
    resumes at batch granularity (run_samples skips saved batches and finished cells)."""

    def __init__(self, threads: int):
        self.threads = threads

    def __call__(self, cells: list) -> int:
        from bench.sweep import run_samples

        return run_samples(cells, self.threads, progress=False)


# --------------------------------------------------------------------------- state file


def load_state(cfg) -> dict:
    path = state_dir(cfg) / "state.json"
    if not path.is_file():
        return {"sweep": cfg.name, "jobs": {}, "cells": {}}
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: unreadable sweep state ({e})") from None
    state.setdefault("jobs", {})
    state.setdefault("cells", {})
    return state


def save_state(cfg, state: dict) -> None:
    d = state_dir(cfg)
    d.mkdir(parents=True, exist_ok=True)
    state["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    atomic.write_text(d / "state.json", json.dumps(state, indent=1, sort_keys=True))


class _DriverLock:
    """One driver per sweep: an flock on <state dir>/driver.lock (released by the kernel even
    when the driver is SIGKILLed)."""

    def __init__(self, cfg):
        self.path = state_dir(cfg) / "driver.lock"

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "a+")
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.f.seek(0)
            other = self.f.read().strip() or "?"
            self.f.close()
            raise RuntimeError(f"another driver (pid {other}) is running this sweep ({self.path})") from None
        self.f.seek(0)
        self.f.truncate()
        self.f.write(str(os.getpid()))
        self.f.flush()
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


# --------------------------------------------------------------------------- asking SLURM


@dataclass
class JobState:
    state: str  # SLURM state word (PENDING, RUNNING, COMPLETED, FAILED, ...) or VANISHED
    live: bool  # in squeue: pending / running / requeued
    reason: str = ""
    name: str = ""


def _run(cmd: list[str], timeout: float = 60) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{cmd[0]} failed: {e}") from None
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}... failed (rc {r.returncode}): {r.stderr.strip()[:300]}")
    return r.stdout


def _expand_array(spec: str) -> list[int]:
    """'[0-3%2]' / '[1,4-6]' -> task ids."""
    out = []
    for part in spec.strip("[]").split("%")[0].split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def query(job_ids: list[str]) -> dict[str, JobState]:
    """State of recorded jobs ('123' or '123_4'): squeue for live ones, sacct for the rest.
    Ids that neither knows come back as VANISHED (e.g. a pending array task cancelled
    inside its array record, or a job of a cluster whose controller state was reset)."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    out: dict[str, JobState] = {}
    for line in _run(["squeue", "-h", "-r", "-u", getpass.getuser(), "-o", "%i|%T|%r|%j"]).splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            out[parts[0]] = JobState(parts[1], True, parts[2], parts[3])
    bases = sorted({j.split("_")[0] for j in ids})
    acct: dict[str, JobState] = {}
    ranges: list[tuple[str, list[int], JobState]] = []
    for k in range(0, len(bases), 200):
        text = _run(["sacct", "-n", "-X", "-P", "-j", ",".join(bases[k:k + 200]), "-o", "JobID,State,JobName"])
        for line in text.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 3:
                continue
            jid, st, name = parts[0], (parts[1].split() or ["UNKNOWN"])[0], parts[2]
            js = JobState(st, False, "", name)
            m = re.fullmatch(r"(\d+)_(\[.*\])", jid)
            if m:
                ranges.append((m.group(1), _expand_array(m.group(2)), js))
            else:
                acct[jid] = js
    res = {}
    for j in ids:
        if j in out:
            res[j] = out[j]
        elif j in acct:
            res[j] = acct[j]
        else:
            base, _, task = j.partition("_")
            hit = [js for b, tasks, js in ranges if b == base and task.isdigit() and int(task) in tasks]
            res[j] = hit[-1] if hit else JobState("VANISHED", False)
    return res


def _scancel(job_ids: list[str]) -> None:
    if job_ids:
        subprocess.run(["scancel", *sorted(set(job_ids))], capture_output=True, text=True, timeout=60)


# --------------------------------------------------------------------------- cell status


@dataclass
class CellStatus:
    kind: str  # train | sample
    cell_id: str
    label: str
    state: str  # done | running | pending | failed
    job: str | None = None
    detail: str = ""  # SLURM state / reason / "not submitted"
    log: str | None = None
    error: str | None = None


def _log_paths(state: dict, job: str) -> list[Path]:
    base = job.split("_")[0]
    info = state["jobs"].get(base, {})
    folder = info.get("folder")
    if not folder:
        return []
    return [JobPaths(folder, job_id=job, task_id=t).stderr for t in range(int(info.get("ntasks", 1)))]


def last_error_line(paths: list[Path]) -> str | None:
    """The most telling line of a job's stderr (any task): the last Python exception or
    slurmstepd error, else the last ``srun: error`` line, else the last line of the first log."""
    fallback = srun_error = None
    for p in paths:
        try:
            lines = [ln.strip() for ln in p.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            continue
        for ln in reversed(lines):
            ln = re.sub(r"^\[rank\d+\]:\s*", "", ln)  # torch.distributed prefixes each rank's traceback
            if _ERROR_LINE.match(ln):
                return ln[:300]
            if srun_error is None and ln.startswith("srun: error:"):
                srun_error = ln[:300]
        if lines and fallback is None:
            fallback = lines[-1][:300]
    return srun_error or fallback


def statuses(p, state: dict | None = None, jobs: dict[str, JobState] | None = None) -> list[CellStatus]:
    """One status per cell, in plan order (a train cell, then its sample cells)."""
    from bench.results import Store

    cfg = p.cfg
    state = load_state(cfg) if state is None else state
    store = Store(cfg.results_dir)
    cells = []
    for tc in p.train_cells:
        cells.append(("train", tc, store.has(tc.id) and tc.weights.is_file()))
        cells += [("sample", s, store.has(s.id)) for s in p.samples_of(tc)]
    if jobs is None:
        wanted = [state["cells"][c.id] for _, c, done in cells if not done and c.id in state["cells"]]
        jobs = query(wanted) if wanted and shutil.which("squeue") else {}
    out = []
    for kind, c, done in cells:
        st = CellStatus(kind, c.id, c.label(), "done" if done else "pending", state["cells"].get(c.id),
                        "" if done else "not submitted")
        if not done and st.job:
            base = st.job.split("_")[0]
            js = jobs.get(st.job)
            recorded = state["jobs"].get(base, {}).get("name")
            if js is not None and js.state != "VANISHED" and recorded and js.name and js.name != recorded:
                js = JobState("VANISHED", False)  # the id now belongs to someone else's job
            if js is None:
                st.detail = "unknown (SLURM not queried)"
            elif js.live:
                st.state = "running" if js.state in ("RUNNING", "COMPLETING", "CONFIGURING") else "pending"
                st.detail = js.state + (f" ({js.reason})" if js.reason and js.reason != "None" else "")
            else:
                st.state = "failed"
                st.detail = {"VANISHED": "job vanished from SLURM",
                             "COMPLETED": "job completed without a result"}.get(js.state, js.state)
                paths = _log_paths(state, st.job)
                st.log = str(paths[0]) if paths else None
                st.error = last_error_line(paths)
        out.append(st)
    return out


def status_table(p) -> str:
    """What ``--status`` prints: one line per cell, log and last error line for failures."""
    rows = statuses(p)
    lines = [f"{'STATE':8s} {'KIND':6s} {'JOB':12s} CELL"]
    for r in rows:
        extra = f"  [{r.detail}]" if r.state != "done" and r.detail else ""
        lines.append(f"{r.state:8s} {r.kind:6s} {(r.job or '-'):12s} {r.label}{extra}")
        if r.state == "failed":
            lines.append(f"{'':28s} log:   {r.log or '-'}")
            lines.append(f"{'':28s} error: {r.error or '-'}")
    counts = {s: sum(r.state == s for r in rows) for s in STATES}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()) + f" (of {len(rows)} cells); "
                 f"state: {state_dir(p.cfg) / 'state.json'}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- dry run


def dry_run(p) -> str:
    """The plan for the cells not yet done: jobs, resources and an upper bound of the cost."""
    from bench.results import Store

    cfg = p.cfg
    store = Store(cfg.results_dir)
    kind = cfg.executor.kind
    ex = settings(cfg.executor) if kind == "slurm" else cfg.executor
    lines = [f"sweep {cfg.name}: {len(p.train_cells)} train cells, {len(p.sample_cells)} sample cells; "
             f"executor {kind}"]
    if kind == "slurm":
        facts = ", ".join(f"{k}={getattr(ex, k)}" for k in ("partition", "account", "qos") if getattr(ex, k))
        lines.append(f"  cluster: {facts or 'default partition/account'}; time limit {ex.time_min} min; "
                     f"gpus/node {ex.gpus_per_node}; cpus/task {ex.cpus_per_task}; mem {ex.mem_gb} GB/task; "
                     f"array parallelism {ex.array_parallelism}")
    n_train = n_arrays = n_tasks = n_cells = 0
    gpu_h = cpu_h = 0.0
    hours = ex.time_min / 60
    for tc in p.train_cells:
        todo = [s for s in p.samples_of(tc) if not store.has(s.id)]
        trained = store.has(tc.id) and tc.weights.is_file()
        if trained and not todo:
            continue
        if kind == "slurm":
            r = _train_resources(ex, tc)
            if not trained:
                n_train += 1
                gpu_h += hours * r["gpus_per_node"] * r["nodes"]
                cpu_h += hours * r["cpus_per_task"] * r["tasks_per_node"] * r["nodes"]
            chunks = chunk_cells(todo, ex)
            sr = _sample_resources(ex)
            n_arrays += bool(chunks)
            n_tasks += len(chunks)
            gpu_h += hours * sr["gpus_per_node"] * len(chunks)
            cpu_h += hours * sr["cpus_per_task"] * len(chunks)
            res = (f"nodes={r['nodes']} tasks/node={r['tasks_per_node']} gpus/node={r['gpus_per_node']}"
                   if not trained else "trained")
            lines.append(f"  {'train' if not trained else 'done ':5s} {tc.label():40s} {res}; "
                         f"{len(todo)} sample cells in {len(chunks)} array task(s)")
        else:
            n_train += 1
            lines.append(f"  job   {tc.label():40s} {'train + ' if not trained else ''}{len(todo)} sample cells")
        n_cells += len(todo)
    if kind == "slurm":
        lines.append(f"jobs: {n_train} train job(s), {n_arrays} sampling array(s) with {n_tasks} task(s) "
                     f"for {n_cells} sample cell(s)")
        lines.append(f"cost upper bound (time limit x resources): {gpu_h:.1f} GPU-hours, {cpu_h:.1f} CPU-hours")
    else:
        lines.append(f"jobs: {n_train} local job(s) for {n_cells} sample cell(s)")
    lines.append("nothing submitted (--dry-run)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- submission


def _executor(cfg, ex: ExecutorConfig, res: dict, name: str, dependency: str | None = None,
              array: bool = False, max_num_timeout: int = 3):
    from bench.results import provenance_sha

    sx = submitit.SlurmExecutor(folder=str(_log_dir(cfg) / "%j"), max_num_timeout=max_num_timeout)
    root = Path(__file__).resolve().parent.parent
    setup = [f"export SFLM_BENCH_GIT_SHA={shlex.quote(provenance_sha())}",
             f"export PYTHONPATH={shlex.quote(str(root))}${{PYTHONPATH:+:$PYTHONPATH}}"]
    params = {"job_name": name, "time": ex.time_min, "nodes": res["nodes"],
              "ntasks_per_node": res["tasks_per_node"], "cpus_per_task": res["cpus_per_task"],
              "mem": f"{res['mem_gb']}GB", "setup": setup}
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


def _submit_train(cfg, ex, tc, state) -> str:
    res = _train_resources(ex, tc)
    name = _job_name(cfg, "train", tc.id)
    # a multi-day training run may hit the time limit many times; each time it requeues
    sx = _executor(cfg, ex, res, name, max_num_timeout=100)
    job = sx.submit(TrainJob(_absolute(tc), ex.cpus_per_task))
    state["jobs"][job.job_id] = {"kind": "train", "name": name, "folder": str(_log_dir(cfg) / "%j"),
                                 "ntasks": res["nodes"] * res["tasks_per_node"], "cells": [tc.id],
                                 "submitted": time.time()}
    state["cells"][tc.id] = job.job_id
    save_state(cfg, state)
    return job.job_id


def _submit_samples(cfg, ex, tc, cells, after: str | None, state) -> list[str]:
    chunks = chunk_cells(cells, ex)
    if not chunks:
        return []
    name = _job_name(cfg, "samples", tc.id)
    sx = _executor(cfg, ex, _sample_resources(ex), name, dependency=f"afterok:{after}" if after else None,
                   array=True)
    jobs = sx.map_array(SampleJob(ex.cpus_per_task), [[_absolute(c) for c in ch] for ch in chunks])
    base = jobs[0].job_id.split("_")[0]
    state["jobs"][base] = {"kind": "samples", "name": name, "folder": str(_log_dir(cfg) / "%j"), "ntasks": 1,
                           "after": after, "train_cell": tc.id, "submitted": time.time(),
                           "tasks": {j.job_id: [c.id for c in ch] for j, ch in zip(jobs, chunks)}}
    for j, ch in zip(jobs, chunks):
        for c in ch:
            state["cells"][c.id] = j.job_id
    save_state(cfg, state)
    return [j.job_id for j in jobs]


def _needs_submit(s: CellStatus) -> bool:
    """Neither done nor queued/running: never submitted, failed, or vanished."""
    return s.state == "failed" or (s.state == "pending" and not s.job)


def _submit_missing(p, ex, state, status: dict[str, CellStatus]) -> tuple[int, int]:
    """Submit every cell that is neither done nor live; returns (train jobs, array tasks)."""
    cfg = p.cfg
    n_train = n_tasks = 0
    for tc in p.train_cells:
        ts = status[tc.id]
        samples = [s for s in p.samples_of(tc)]
        after = None
        if _needs_submit(ts):
            # Pending sample tasks of this model wait on the old (failed) train job, or would
            # start on missing weights: cancel them and resubmit them behind the new job.
            stale = [status[s.id] for s in samples if status[s.id].state == "pending" and status[s.id].job]
            _scancel([x.job for x in stale])
            for x in stale:
                x.state = "failed"
            after = _submit_train(cfg, ex, tc, state)
            n_train += 1
        elif ts.state != "done":
            after = ts.job  # live in squeue right now, so the dependency is real
        todo = [s for s in samples if _needs_submit(status[s.id])]
        n_tasks += len(_submit_samples(cfg, ex, tc, todo, after, state))
    return n_train, n_tasks


def execute(p, progress: bool = True, wait: bool = True, poll_s: float | None = None) -> list[str]:
    """Submit what the plan still needs, then (``wait``) watch until nothing is queued or running.

    Returns one line per cell that did not finish (label, SLURM state, last error line, log)."""
    cfg = p.cfg
    ex = settings(cfg.executor)
    for t in p.train_cells:
        _train_resources(ex, t)  # config errors before anything is submitted
    from bench.results import Store

    store = Store(cfg.results_dir)
    if all(store.has(c.id) for c in p.sample_cells) and all(store.has(t.id) and t.weights.is_file()
                                                           for t in p.train_cells):
        return []  # a finished sweep submits nothing and asks SLURM nothing
    for tool in ("sbatch", "squeue", "sacct", "scancel"):
        if shutil.which(tool) is None:
            raise ConfigError(f"executor.kind=slurm but '{tool}' is not on PATH (is this a SLURM login node? "
                              "for a local test cluster: bash scripts/slurm-local-up.sh)")
    try:
        with _DriverLock(cfg):
            state = load_state(cfg)
            status = {s.cell_id: s for s in statuses(p, state)}
            n_train, n_tasks = _submit_missing(p, ex, state, status)
            if progress:
                print(f"sweep {cfg.name}: submitted {n_train} train job(s) and {n_tasks} sampling task(s); "
                      f"state: {state_dir(cfg) / 'state.json'}; logs: {_log_dir(cfg)}", file=sys.stderr)
            if wait:
                _watch(p, state, progress, poll_s)
            final = statuses(p, state)
    except RuntimeError as e:
        return [f"slurm: {e}"]
    except KeyboardInterrupt:
        return ["driver interrupted; submitted jobs keep running. Re-run the same command to keep watching "
                "(it resubmits nothing that is queued, running or done), or use --status"]
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


def _watch(p, state: dict, progress: bool, poll_s: float | None) -> None:
    """Poll squeue/sacct until no recorded job of this plan is live; show a progress bar.
    Sampling tasks whose training failed (DependencyNeverSatisfied) are cancelled."""
    from tqdm import tqdm

    ids = {c.id for c in [*p.train_cells, *p.sample_cells]}
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
            bar.set_postfix(running=counts["running"], pending=counts["pending"], failed=counts["failed"])
            bar.refresh()
            never = [x.job for x in sts if x.state == "pending" and "DependencyNeverSatisfied" in x.detail]
            _scancel(never)
            if not any(x.state in ("running", "pending") and x.job for x in sts):
                return
            elapsed = time.monotonic() - t0
            time.sleep(poll_s if poll_s else (2 if elapsed < 120 else 10 if elapsed < 1200 else 30))
    finally:
        bar.close()
