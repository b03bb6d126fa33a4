"""Where a planned sweep stands: one status per cell, the ``--status`` table, the ``--dry-run``
plan.

The results store says what is done; the sweep's state file (:mod:`bench.executors.state`)
and SLURM (:mod:`bench.executors.slurm_cluster`) say what runs, waits or failed, with the
log and the last error line of a failed job. For cells without a SLURM job, the cell locks
(:mod:`bench.locks`) say what runs now (a local job, another driver's, a debug run), and a
dead local job (``state["local"]``: its ``result.json`` and log) or a run folder's
``failed.json`` (:func:`bench.train.write_failure`: diverged training) say what failed.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from bench import locks
from bench.executors.slurm_cluster import (
    JobState,
    chunk_cells,
    last_error_line,
    log_paths,
    query,
    sample_resources,
    settings,
    train_resources,
)
from bench.executors.state import load_state, state_dir
from bench.plan import Plan
from bench.results import Store
from bench.train import FAILED_FILE

STATES = ("done", "running", "pending", "failed")


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


def statuses(
    p: Plan, state: dict | None = None, jobs: dict[str, JobState] | None = None
) -> list[CellStatus]:
    """One status per cell, in plan order (a train cell, then its sample cells). ``state``: the
    sweep state file (default: read it); ``jobs``: SLURM's answer for its jobs (default: ask
    squeue / sacct when they exist; ``{}``: do not ask)."""
    cfg = p.cfg
    state = load_state(cfg) if state is None else state
    store = Store(cfg.results_dir)
    cells = []
    for tc in p.train_cells:
        cells.append(("train", tc, store.has(tc.id) and tc.weights.is_file()))
        cells += [("sample", s, store.has(s.id)) for s in p.samples_of(tc)]
    if jobs is None:
        wanted = [
            state["cells"][c.id] for _, c, done in cells if not done and c.id in state["cells"]
        ]
        jobs = query(wanted) if wanted and shutil.which("squeue") else {}
    out = []
    owners: dict[str, dict | None] = {}  # train cell id -> holder of its lock
    for kind, c, done in cells:
        st = CellStatus(
            kind,
            c.id,
            c.label(),
            "done" if done else "pending",
            state["cells"].get(c.id),
            "" if done else "not submitted",
        )
        if not done and not st.job:
            _local_status(st, kind, c, state, owners)
        if not done and st.job:
            base = st.job.split("_")[0]
            js = jobs.get(st.job)
            recorded = state["jobs"].get(base, {}).get("name")
            if (
                js is not None
                and js.state != "VANISHED"
                and recorded
                and js.name
                and js.name != recorded
            ):
                js = JobState("VANISHED", False)  # the id now belongs to someone else's job
            if js is None:
                st.detail = "unknown (SLURM not queried)"
            elif js.live:
                st.state = (
                    "running" if js.state in ("RUNNING", "COMPLETING", "CONFIGURING") else "pending"
                )
                st.detail = js.state + (
                    f" ({js.reason})" if js.reason and js.reason != "None" else ""
                )
            else:
                st.state = "failed"
                st.detail = {
                    "VANISHED": "job vanished from SLURM",
                    "COMPLETED": "job completed without a result",
                }.get(js.state, js.state)
                paths = log_paths(state, st.job)
                st.log = str(paths[0]) if paths else None
                st.error = last_error_line(paths)
        out.append(st)
    return out


def _local_status(st: CellStatus, kind: str, c, state: dict, owners: dict) -> None:
    """Fill in ``st`` (a cell without a SLURM job, not done) from the cell locks, the local
    job recorded for its model, and the model's ``failed.json``."""
    tc = c if kind == "train" else c.train
    if tc.id not in owners:
        owners[tc.id] = locks.holder(locks.train_lock_path(tc.run_dir))
    owner = owners[tc.id]
    rec = state.get("local", {}).get(tc.id)
    if kind == "sample":
        own = locks.holder(locks.sample_lock_path(tc.run_dir, c.id))
        if own is not None:
            st.state, st.detail = "running", locks.describe(own)
            return
        if owner is not None and not (rec and owner.get("pid") == rec.get("pid")):
            st.detail = f"model busy: {locks.describe(owner)}"  # someone else's job holds the model
            return
    if owner is not None:
        st.state, st.detail = "running", locks.describe(owner)
        return
    failed = tc.run_dir / FAILED_FILE
    if failed.is_file():
        try:
            info = json.loads(failed.read_text())
        except (OSError, json.JSONDecodeError):
            info = {}
        st.state, st.detail = "failed", f"training {info.get('kind', 'failed')}"
        st.error, st.log = info.get("reason") or "see the run folder", str(failed)
        return
    if rec:
        folder = Path(rec.get("folder", ""))
        try:
            result = json.loads((folder / "result.json").read_text())
        except (OSError, json.JSONDecodeError):
            result = {}
        st.state = "failed"
        st.detail = f"local job pid {rec.get('pid')} " + (
            "stopped" if result.get("stopped") else "ended"
        )
        st.log = str(folder / "log.err")
        st.error = (
            result.get("error") or last_error_line([folder / "log.err"]) or "no result (killed?)"
        )


def count_done(p: Plan) -> int:
    """Cells done; when squeue / sacct are unreachable, what the store says."""
    try:
        rows = statuses(p)
    except RuntimeError:
        rows = statuses(p, jobs={})
    return sum(s.state == "done" for s in rows)


def status_table(p: Plan) -> str:
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
    lines.append(
        ", ".join(f"{n} {s}" for s, n in counts.items()) + f" (of {len(rows)} cells); "
        f"state: {state_dir(p.cfg) / 'state.json'}"
    )
    return "\n".join(lines)


def dry_run(p: Plan) -> str:
    """What ``--dry-run`` prints: the jobs for the cells not yet done, their resources and
    (SLURM) an upper bound of the cost."""
    cfg = p.cfg
    store = Store(cfg.results_dir)
    kind = cfg.executor.kind
    ex = settings(cfg.executor) if kind == "slurm" else cfg.executor
    lines = [
        f"sweep {cfg.name}: {len(p.train_cells)} train cells, {len(p.sample_cells)} sample cells; "
        f"executor {kind}"
    ]
    opts = cfg.task.options if isinstance(cfg.task.options, dict) else vars(cfg.task.options)
    # the task's options say which data and grader the rows use (e.g. Sudoku generator: reference)
    lines.append(f"  task: {cfg.task.name}" + "".join(f"; {k}={v}" for k, v in opts.items()))
    if kind == "slurm":
        facts = ", ".join(
            f"{k}={getattr(ex, k)}" for k in ("partition", "account", "qos") if getattr(ex, k)
        )
        lines.append(
            f"  cluster: {facts or 'default partition/account'}; time limit {ex.time_min} min; "
            f"gpus/node {ex.gpus_per_node}; cpus/task {ex.cpus_per_task}; mem {ex.mem_gb} GB/task; "
            f"array parallelism {ex.array_parallelism}"
        )
    n_train = n_arrays = n_tasks = n_cells = 0
    gpu_h = cpu_h = 0.0
    hours = ex.time_min / 60
    for tc in p.train_cells:
        todo = [s for s in p.samples_of(tc) if not store.has(s.id)]
        trained = store.has(tc.id) and tc.weights.is_file()
        if trained and not todo:
            continue
        if kind == "slurm":
            r = train_resources(ex, tc)
            if not trained:
                n_train += 1
                gpu_h += hours * r["gpus_per_node"] * r["nodes"]
                cpu_h += hours * r["cpus_per_task"] * r["tasks_per_node"] * r["nodes"]
            chunks = chunk_cells(todo, ex)
            sr = sample_resources(ex)
            n_arrays += bool(chunks)
            n_tasks += len(chunks)
            gpu_h += hours * sr["gpus_per_node"] * len(chunks)
            cpu_h += hours * sr["cpus_per_task"] * len(chunks)
            res = (
                f"nodes={r['nodes']} tasks/node={r['tasks_per_node']} "
                f"gpus/node={r['gpus_per_node']}"
                if not trained
                else "trained"
            )
            verb = (
                ("import" if getattr(tc, "imported", False) else "train") if not trained else "done"
            )
            lines.append(
                f"  {verb:6s} {tc.label():40s} {res}; "
                f"{len(todo)} sample cells in {len(chunks)} array task(s)"
            )
        else:
            n_train += 1
            verb = "import" if getattr(tc, "imported", False) else "train"
            lines.append(
                f"  job   {tc.label():40s} "
                f"{verb + ' + ' if not trained else ''}{len(todo)} sample cells"
            )
        n_cells += len(todo)
    if kind == "slurm":
        lines.append(
            f"jobs: {n_train} train job(s), {n_arrays} sampling array(s) with {n_tasks} task(s) "
            f"for {n_cells} sample cell(s)"
        )
        lines.append(
            "cost upper bound (time limit x resources): "
            f"{gpu_h:.1f} GPU-hours, {cpu_h:.1f} CPU-hours"
        )
    else:
        lines.append(f"jobs: {n_train} local job(s) for {n_cells} sample cell(s)")
    lines.append("nothing submitted (--dry-run)")
    return "\n".join(lines)
