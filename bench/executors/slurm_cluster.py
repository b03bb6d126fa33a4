"""Talking to a SLURM cluster: settings, job sizes, squeue / sacct / scancel, job logs.

Cluster facts come from the sweep's ``executor`` section; an environment variable
``SFLM_SLURM_<FIELD>`` (e.g. ``SFLM_SLURM_PARTITION``, ``SFLM_SLURM_TIME_MIN``) overrides
``executor.<field>``. Nothing about a particular cluster is written in this module.
"""

from __future__ import annotations

import dataclasses
import getpass
import math
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench import registry
from bench.config import ConfigError, ExecutorConfig, build

ENV_PREFIX = "SFLM_SLURM_"
_ENV_FIELDS = (
    "partition",
    "account",
    "qos",
    "time_min",
    "gpus_per_node",
    "cpus_per_task",
    "mem_gb",
    "array_parallelism",
    "log_dir",
    "device",
    "time_safety",
    "time_floor_min",
    "task_target_min",
)
# a Python exception line, or slurmstepd's "*** JOB 12 ON node CANCELLED AT ... ***"
_ERROR_LINE = re.compile(
    r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Interrupted)\b"
    r"|slurmstepd(-[\w.-]+)?: error:)"
)


# --------------------------------------------------------------------------- settings and job sizes


def settings(ex: ExecutorConfig, env: dict | None = None) -> ExecutorConfig:
    """The executor section with ``SFLM_SLURM_<FIELD>`` environment overrides applied."""
    env = os.environ if env is None else env
    merged = dataclasses.asdict(ex)
    for name in _ENV_FIELDS:
        key = ENV_PREFIX + name.upper()
        if key not in env:
            continue
        raw = env[key].strip()
        if isinstance(merged[name], (int, float)) and not isinstance(merged[name], bool):
            kind = type(merged[name])
            try:
                merged[name] = kind(raw)
            except ValueError:
                what = "an integer" if kind is int else "a number"
                raise ConfigError(f"environment {key}: expected {what}, got {raw!r}") from None
        else:
            merged[name] = raw
    # a device kind without a cost table: bench.cost.table.check_device (names the variable)
    return build(
        ExecutorConfig, merged, where=f"executor (with {ENV_PREFIX}* environment overrides)"
    )


def train_resources(ex: ExecutorConfig, tc) -> dict:
    """One train cell's job: ``train.num_nodes`` nodes x ``train.devices`` tasks (DDP ranks); an
    import cell (a checkpoint converted, nothing trained) is one CPU task."""
    if getattr(tc, "imported", False):
        return {"nodes": 1, "tasks_per_node": 1, "gpus_per_node": 0,
                "cpus_per_task": ex.cpus_per_task, "mem_gb": max(ex.mem_gb, 16)}  # fmt: skip
    devices, nodes = int(tc.train["devices"]), int(tc.train["num_nodes"])
    if ex.gpus_per_node and devices > ex.gpus_per_node:
        raise ConfigError(
            f"train.devices={devices} for {tc.label()} exceeds executor.gpus_per_node="
            f"{ex.gpus_per_node} (use train.num_nodes for more GPUs)"
        )
    return {
        "nodes": nodes,
        "tasks_per_node": devices,
        "gpus_per_node": devices if ex.gpus_per_node else 0,
        "cpus_per_task": ex.cpus_per_task,
        "mem_gb": ex.mem_gb * devices,
    }


def sample_resources(ex: ExecutorConfig) -> dict:
    """One sampling array task: one process (one GPU when the cluster has GPUs)."""
    return {
        "nodes": 1,
        "tasks_per_node": 1,
        "gpus_per_node": 1 if ex.gpus_per_node else 0,
        "cpus_per_task": ex.cpus_per_task,
        "mem_gb": ex.mem_gb,
    }


def chunk_cells(cells: list, ex: ExecutorConfig, sizes: Sizing | None = None) -> list[list]:
    """Split one model's sample cells into array tasks: ``cells_per_task`` cells each when that
    is set; else, with a prediction (``sizes``) and ``task_target_min``, consecutive cells packed
    into tasks of about ``task_target_min`` predicted minutes (short cells share a task and its
    model load; a cell longer than the target is a task of its own); else as many tasks as may
    run at once (``array_parallelism``; more would only reload the model more often)."""
    if not cells:
        return []
    per = ex.cells_per_task
    if per <= 0 and sizes is not None and ex.task_target_min > 0:
        target = ex.task_target_min * 60
        out: list[list] = [[]]
        total = 0.0
        for c in cells:
            s = sizes.cell_s.get(c.id, 0.0)
            if out[-1] and total + s > target:
                out.append([])
                total = 0.0
            out[-1].append(c)
            total += s
        return out
    n = math.ceil(len(cells) / per) if per > 0 else min(len(cells), ex.array_parallelism)
    bounds = [round(i * len(cells) / n) for i in range(n + 1)]
    return [cells[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@dataclass
class Sizing:
    """SLURM job sizes from the cost model's prediction (:func:`bench.cost.forecast.slurm_sizing`;
    this module imports nothing of the cost model): each sample cell's
    predicted seconds (to pack array tasks) and each model's :class:`bench.cost.model.
    JobPrediction` (to size a job's time limit: :func:`limit_min`)."""

    kind: str  # the device kind predicted for (bench.cost.model.device_kind)
    cell_s: dict  # sample cell id -> predicted seconds
    jobs: dict  # train cell id -> JobPrediction
    memory_bytes: int = 0  # the device's memory (0: unknown)

    def train_s(self, tc) -> float | None:
        """Predicted seconds of ``tc``'s train (or import) job, None when not predicted."""
        j = self.jobs.get(tc.id)
        return None if j is None or j.train is None else j.prepare_s + j.start_s + j.train_s

    def task_s(self, tc, cells: list) -> float | None:
        """Predicted seconds of one array task sampling ``cells`` of model ``tc``."""
        j = self.jobs.get(tc.id)
        return None if j is None else j.seconds_of(c.id for c in cells)


def sizing_of(pred) -> Sizing:
    """The :class:`Sizing` of a :class:`bench.cost.model.PlanPrediction`."""
    cell_s = {c.cell_id: c.seconds for j in pred.jobs for c in j.samples}
    jobs = {j.train_cell_id: j for j in pred.jobs}
    return Sizing(pred.kind, cell_s, jobs, int(pred.entry.get("memory_bytes") or 0))


def limit_min(seconds: float | None, ex: ExecutorConfig) -> int:
    """A job's SLURM time limit in minutes: its predicted ``seconds`` x ``time_safety``, at least
    ``time_floor_min``, at most ``time_min`` (the user's cap); ``time_min`` itself when nothing is
    predicted or ``time_safety`` is 0."""
    if seconds is None or ex.time_safety <= 0:
        return ex.time_min
    sized = math.ceil(seconds * ex.time_safety / 60)
    return max(1, min(ex.time_min, max(ex.time_floor_min, sized)))


def memory_problem(p, sizes: Sizing | None) -> str | None:
    """One line naming the first job whose predicted peak memory is above the device's (the
    plan stops: bench.executors.slurm.execute), or None."""
    if sizes is None or not sizes.memory_bytes:
        return None
    labels = {tc.id: tc.label() for tc in p.train_cells}
    for tid, j in sizes.jobs.items():
        for c in ([j.train] if j.train else []) + list(j.samples):
            if c.peak_bytes > sizes.memory_bytes:
                kind = registry.KINDS[c.kind]
                what = "training" if kind.model else f"{c.kind} cell {c.cell_id}"
                fix = kind.batch_key or "the batch size"
                return (
                    f"{labels.get(tid, tid)}: {what}: predicted peak memory "
                    f"{c.peak_bytes / 2**30:.1f} GiB is above the {sizes.kind}'s "
                    f"{sizes.memory_bytes / 2**30:.1f} GiB; lower {fix} (or set executor.device "
                    "to a larger card)"
                )
    return None


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


@dataclass
class PlanCost:
    """The SLURM jobs a plan's unfinished cells need, and an upper bound of their cost (time
    limit x resources), as ``--dry-run`` prints them (:func:`bench.status.dry_run`)."""

    train: int = 0  # train jobs
    imports: int = 0  # import jobs (a checkpoint converted on CPU)
    arrays: int = 0  # sampling arrays (one per model)
    tasks: int = 0  # their array tasks
    cells: int = 0  # sample cells still to run
    gpu_h: float = 0.0
    cpu_h: float = 0.0

    def describe(self) -> str:
        """``2 train jobs and 4 sampling tasks for 8 sample cells (cost upper bound: 3.0
        GPU-hours, 6.0 CPU-hours)``"""
        jobs = [_n(self.train, "train job")] if self.train or not self.imports else []
        jobs += [_n(self.imports, "import job")] if self.imports else []
        return (
            f"{', '.join(jobs)} and {_n(self.tasks, 'sampling task')} for "
            f"{_n(self.cells, 'sample cell')} (cost upper bound: {self.gpu_h:.1f} GPU-hours, "
            f"{self.cpu_h:.1f} CPU-hours)"
        )


def plan_cost(p, ex: ExecutorConfig, store, sizes: Sizing | None = None) -> PlanCost:
    """What :func:`bench.executors.slurm.execute` would submit for plan ``p`` (cells already in
    ``store`` skipped): the same count and bound as ``--dry-run``. The bound is each job's time
    limit x its resources: the limits sized from ``sizes`` (:func:`limit_min`), or ``time_min``
    for every job without them."""
    out = PlanCost()
    for tc in p.train_cells:
        todo = [s for s in p.samples_of(tc) if not store.has(s.id)]
        trained = store.has(tc.id) and tc.weights.is_file()
        if trained and not todo:
            continue
        if not trained:
            r = train_resources(ex, tc)
            pred_s = sizes.train_s(tc) if sizes else None
            hours = limit_min(pred_s, ex) / 60
            if pred_s is not None and ex.time_safety > 0:  # training longer than its cap requeues
                hours *= max(1, math.ceil(pred_s * ex.time_safety / 3600 / hours))
            if getattr(tc, "imported", False):
                out.imports += 1
                out.cpu_h += hours * r["cpus_per_task"]
            else:
                out.train += 1
                out.gpu_h += hours * r["gpus_per_node"] * r["nodes"]
                out.cpu_h += hours * r["cpus_per_task"] * r["tasks_per_node"] * r["nodes"]
        chunks = chunk_cells(todo, ex, sizes)
        sr = sample_resources(ex)
        hours = array_limit_min(tc, chunks, ex, sizes) / 60
        out.arrays += bool(chunks)
        out.tasks += len(chunks)
        out.gpu_h += hours * sr["gpus_per_node"] * len(chunks)
        out.cpu_h += hours * sr["cpus_per_task"] * len(chunks)
        out.cells += len(todo)
    return out


def array_limit_min(tc, chunks: list[list], ex: ExecutorConfig, sizes: Sizing | None) -> int:
    """The time limit of a model's sampling array (one for all its tasks): sized from its
    longest task's prediction."""
    if sizes is None or not chunks:
        return ex.time_min
    secs = [sizes.task_s(tc, ch) for ch in chunks]
    return limit_min(None if None in secs else max(secs), ex)


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
        raise RuntimeError(
            f"{' '.join(cmd[:3])}... failed (rc {r.returncode}): "
            f"{slurm_error_line(r.stderr, cmd[0])}"
        )
    return r.stdout


# the SLURM client's own prefix: "sbatch: error: ...", "squeue: fatal: ..."
_CLIENT_LINE = re.compile(r"^([\w.-]+): (error|fatal): (.*)$")


def slurm_error_line(stderr: str | bytes | None, tool: str) -> str:
    """The one line of a SLURM client's stderr that names the cause, as ``<tool>: <message>``:
    its last ``fatal:`` line, else its last line (``error:`` / ``fatal:`` dropped). A client that
    cannot reach its controller writes several lines (``resolve_ctls_from_dns_srv: ...``,
    ``fetch_config: ...``) before the one that says why: ``Could not establish a configuration
    source``, ``Unable to contact slurm controller (connect failure)``."""
    if isinstance(stderr, bytes):
        stderr = stderr.decode(errors="replace")
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    if not lines:
        return f"{tool}: no error message"
    fatal = [ln for ln in lines if (m := _CLIENT_LINE.match(ln)) and m.group(2) == "fatal"]
    line = (fatal or lines)[-1]
    m = _CLIENT_LINE.match(line)
    return (f"{m.group(1)}: {m.group(3)}" if m else f"{tool}: {line}")[:300]


#: how long the pre-submission check waits for the controller (it answers in well under a
#: second; a client without a configuration retries for up to a minute, one whose controller is
#: down for ~10 s)
PREFLIGHT_TIMEOUT_S = 20.0


class SlurmUnavailable(ConfigError):
    """SLURM cannot be used from here (no client, or no controller answers): nothing submitted."""


def controller_problem(timeout: float | None = None) -> str | None:
    """Ask the controller once, as every later step does (``squeue`` for this user's jobs, a
    cheap call). ``None`` when it answers, else the cause in one line, e.g. ``squeue: Could not
    establish a configuration source``."""
    timeout = PREFLIGHT_TIMEOUT_S if timeout is None else timeout
    cmd = ["squeue", "-h", "-u", getpass.getuser(), "-o", "%i"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        said = f": {slurm_error_line(e.stderr, 'squeue')}" if e.stderr else ""
        return f"squeue had no answer within {timeout:g} s{said}"
    except OSError as e:
        return f"squeue: {e}"
    return None if r.returncode == 0 else slurm_error_line(r.stderr, "squeue")


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
    for line in _run(
        ["squeue", "-h", "-r", "-u", getpass.getuser(), "-o", "%i|%T|%r|%j"]
    ).splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            out[parts[0]] = JobState(parts[1], True, parts[2], parts[3])
    bases = sorted({j.split("_")[0] for j in ids})
    acct: dict[str, JobState] = {}
    ranges: list[tuple[str, list[int], JobState]] = []
    for k in range(0, len(bases), 200):
        text = _run(
            [
                "sacct",
                "-n",
                "-X",
                "-P",
                "-j",
                ",".join(bases[k : k + 200]),
                "-o",
                "JobID,State,JobName",
            ]
        )
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
            hit = [
                js for b, tasks, js in ranges if b == base and task.isdigit() and int(task) in tasks
            ]
            res[j] = hit[-1] if hit else JobState("VANISHED", False)
    return res


def scancel(job_ids: list[str]) -> None:
    if job_ids:
        subprocess.run(
            ["scancel", *sorted(set(job_ids))], capture_output=True, text=True, timeout=60
        )


# --------------------------------------------------------------------------- job logs


def log_paths(state: dict, job: str) -> list[Path]:
    """The stderr file of every task of a recorded job (``state``: the sweep state file)."""
    from submitit.core.utils import JobPaths  # submitit: only where a SLURM job was recorded

    base = job.split("_")[0]
    info = state["jobs"].get(base, {})
    folder = info.get("folder")
    if not folder:
        return []
    return [
        JobPaths(folder, job_id=job, task_id=t).stderr for t in range(int(info.get("ntasks", 1)))
    ]


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
            ln = re.sub(
                r"^\[rank\d+\]:\s*", "", ln
            )  # torch.distributed prefixes each rank's traceback
            if _ERROR_LINE.match(ln):
                return ln[:300]
            if srun_error is None and ln.startswith("srun: error:"):
                srun_error = ln[:300]
        if lines and fallback is None:
            fallback = lines[-1][:300]
    return srun_error or fallback
