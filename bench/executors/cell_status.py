"""Where a planned sweep stands: one status per cell (the model; its text views, the
``--status`` table and the ``--dry-run`` plan, are :mod:`bench.status`'s).

The SLURM executor (:mod:`bench.executors.slurm`) decides what to submit from these statuses;
the CLI prints them. The results store says what is done; the sweep's state file
(:mod:`bench.executors.state`) and SLURM (:mod:`bench.executors.slurm_cluster`) say what runs,
waits or failed, with the log and the last error line of a failed job. For cells without a
SLURM job, the cell locks (:mod:`bench.locks`) say what runs now (a local job, another
driver's, a debug run), and a dead local job (``state["local"]``: its ``result.json`` and log)
or a run folder's ``failed.json`` (:mod:`bench.failures`: diverged training) say what failed.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from bench import locks
from bench.executors.slurm_cluster import JobState, last_error_line, log_paths, query
from bench.executors.state import load_state
from bench.failures import failure_path, read_failure
from bench.plan import Plan
from bench.results import Store

STATES = ("done", "running", "pending", "failed")


@dataclass
class CellStatus:
    kind: str  # the cell's kind (bench.kind): train, import, sample, likelihood, ...
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
    for tc in p.train_cells:  # a model, then its cells (its lock, its job)
        cells.append((True, tc, store.has(tc.id) and tc.weights.is_file()))
        cells += [(False, s, store.has(s.id)) for s in p.samples_of(tc)]
    if jobs is None:
        wanted = [
            state["cells"][c.id] for _, c, done in cells if not done and c.id in state["cells"]
        ]
        jobs = query(wanted) if wanted and shutil.which("squeue") else {}
    out = []
    owners: dict[str, dict | None] = {}  # train cell id -> holder of its lock
    for model, c, done in cells:
        st = CellStatus(
            c.kind,
            c.id,
            c.label(),
            "done" if done else "pending",
            state["cells"].get(c.id),
            "" if done else "not submitted",
        )
        if not done and not st.job:
            _local_status(st, model, c, state, owners)
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


def _local_status(st: CellStatus, model: bool, c, state: dict, owners: dict) -> None:
    """Fill in ``st`` (a cell without a SLURM job, not done; ``model``: ``c`` is a model, else a
    cell of one) from the cell locks, the local job recorded for its model, and the model's
    ``failed.json``."""
    tc = c if model else c.train
    if tc.id not in owners:
        owners[tc.id] = locks.holder(locks.train_lock_path(tc.run_dir))
    owner = owners[tc.id]
    rec = state.get("local", {}).get(tc.id)
    if not model:  # a cell of a model holds its own lock
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
    info = read_failure(tc.run_dir)
    if info is not None:
        st.state, st.detail = "failed", f"training {info.get('kind', 'failed')}"
        st.error, st.log = info.get("reason") or "see the run folder", str(failure_path(tc.run_dir))
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
