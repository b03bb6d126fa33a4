"""One owner per cell: an advisory ``flock`` on a file in the cell's run folder.

The process that computes a cell holds an exclusive ``flock`` on its lock file for as long as
it works on it; the kernel releases the lock when that process ends, however it ends (return,
exception, SIGKILL, OOM kill). So a second driver, a re-run or another executor that finds
the lock held knows the cell is being computed right now and waits for it, attaches to it or
skips it, and never computes it twice; a lock that is free means nobody is working on the
cell, whatever files an earlier, killed owner left behind.

The file also says who holds it (JSON: pid, host, process start time, process group, start
time, SLURM job id), for ``--status`` and ``--cancel``; the lock, not the text, is what counts.

Where flock works: local filesystems, and NFS (Linux turns ``flock`` into an NFS byte-range
lock that the server arbitrates, so it holds across the nodes of a cluster). A filesystem
without lock support (some FUSE mounts) may give node-local locks only.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

#: a train cell's lock, in its run folder: held by the job that trains (and then samples) it
OWNER_LOCK = "owner.lock"

_HELD: dict[str, list] = {}  # resolved path -> [open file, re-entry count]: this process's locks


def train_lock_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / OWNER_LOCK


def sample_lock_path(run_dir: str | Path, cell_id: str) -> Path:
    return Path(run_dir) / "samples" / f"{cell_id}.lock"


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat``
    field 22), which with the pid names one process even after the pid is reused; None if
    there is no such process (or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def alive(pid: int, start: int | None = None) -> bool:
    """Is process ``pid`` (started at ``start`` ticks, when given) running on this host?
    A zombie (ended, not yet reaped by its parent) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: kill(0) is all we know
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0] != "Z" and (start is None or int(fields[19]) == start)


def describe(owner: dict) -> str:
    """'pid 123 on host since 2026-01-01T10:00:00+00:00 (SLURM job 42)'."""
    if not owner.get("pid"):
        return "owner unknown"
    text = f"pid {owner['pid']} on {owner.get('host', '?')} since {owner.get('since', '?')}"
    return text + (f" (SLURM job {owner['slurm_job']})" if owner.get("slurm_job") else "")


class CellBusy(RuntimeError):
    """Another process holds the cell's lock."""

    def __init__(self, path: Path, owner: dict):
        self.path, self.owner = Path(path), owner
        super().__init__(
            f"{self.path}: held by {describe(owner)}; the cell is being computed there, not here"
        )


def _read(f) -> dict:
    f.seek(0)
    try:
        return json.loads(f.read() or "{}")
    except json.JSONDecodeError:
        return {}


class CellLock:
    """``with CellLock(path):`` hold the lock or raise :class:`CellBusy`. Re-entrant within a
    process (a job that holds a train cell's lock can call code that takes it again)."""

    def __init__(self, path: str | Path, patience_s: float = 1.0):
        self.path = Path(path)
        self.patience_s = patience_s

    def _key(self) -> str:
        return str(self.path.absolute())

    def acquire(self) -> CellLock:
        key = self._key()
        if key in _HELD:
            _HELD[key][1] += 1
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")
        deadline = time.monotonic() + self.patience_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # :func:`holder` takes a shared lock for an instant: retry briefly before
                # concluding that another process owns the cell
                if time.monotonic() >= deadline:
                    owner = _read(f)
                    f.close()
                    raise CellBusy(self.path, owner) from None
                time.sleep(0.05)
        pid = os.getpid()
        info = {
            "pid": pid,
            "host": socket.gethostname(),
            "start": process_start(pid),
            "pgid": os.getpgid(0),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "slurm_job": os.environ.get("SLURM_JOB_ID"),
        }
        f.seek(0)
        f.truncate()
        f.write(json.dumps(info))
        f.flush()
        _HELD[key] = [f, 1]
        return self

    def release(self) -> None:
        key = self._key()
        entry = _HELD.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            f = _HELD.pop(key)[0]
            f.truncate(0)  # a free lock names nobody
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()

    def __enter__(self) -> CellLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class NoLock:
    """Stands in for :class:`CellLock` where a process must not take the lock (DDP ranks > 0)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def holder(path: str | Path) -> dict | None:
    """Who holds the lock at ``path`` (its JSON; ``{}`` if it has not written it yet), or None
    when nobody does. This process's own locks count as held."""
    path = Path(path)
    if str(path.absolute()) in _HELD:
        return _read(_HELD[str(path.absolute())][0])
    try:
        f = open(path)
    except FileNotFoundError:
        return None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(f)
        fcntl.flock(f, fcntl.LOCK_UN)
        return None


def wait_free(path: str | Path, timeout: float | None = None, interval: float = 0.5) -> bool:
    """Wait until nobody holds the lock at ``path``; False if ``timeout`` seconds passed first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while holder(path) is not None:
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
