"""The parent's side of one sandboxed run: start the child, read its streams without blocking,
end everything it started, clean up after it.

:func:`run_and_collect` starts the child interpreter in its own session and process group,
keeps the last bytes of its stdout and stderr and its result channel (:class:`Tail`), enforces
the wall-clock deadline itself, and kills the whole group with SIGKILL while the (not yet reaped)
leader still holds the group id. :func:`kill_uid` and :func:`sweep_uid_files` end the processes
and remove the files of a worker's private uid (root only); :func:`rmtree` removes a run
directory whatever modes the program left on it.
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from collections.abc import Callable

# `subprocess`, `shutil` and `dataclasses` are imported where they are used: the warm parent
# (bench/evaluate/sandbox/zygote.py) loads this module, and every megabyte it maps makes each of
# its forks slower

SWEEP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


class Tail:
    """Keep the last ``limit`` bytes of a stream."""

    def __init__(self, limit: int):
        self.limit = limit
        self.buf = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        self.buf += data
        if len(self.buf) > 2 * self.limit:
            del self.buf[: len(self.buf) - self.limit]

    def text(self) -> str:
        return bytes(self.buf[-self.limit :]).decode("utf-8", "replace")


def exited_nowait(pid: int, poll: Callable[[], bool]) -> bool:
    """True when child ``pid`` has exited, without reaping it where the OS allows (its pgid
    then stays reserved until the group is killed); ``poll`` reaps instead (macOS: a pgid is
    not reused within microseconds)."""
    if not hasattr(os, "waitid"):
        return poll()
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def read_into(fd: int, tail: Tail) -> bool:
    """Read what is available; True at end of file."""
    for _ in range(64):
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if not data:
            return True
        tail.add(data)
    return False


def rmtree(path: str) -> None:
    import shutil

    def onerror(func, p, exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)


def kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` but this one until none is left (root, or ``uid``
    itself)."""
    me = os.getpid()
    for _ in range(50):
        found = False
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                st = os.stat(f"/proc/{pid}")
            except OSError:
                continue
            if st.st_uid == uid and int(pid) != me:
                found = True
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        if not found:
            return
        time.sleep(0.01)


def sweep_uid_files(uid: int) -> None:
    """Remove what the program left in the world-writable directories."""
    for d in SWEEP_DIRS:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if e.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if e.is_dir(follow_symlinks=False):
                    rmtree(e.path)
                else:
                    os.unlink(e.path)
            except OSError:
                pass


class SpawnError(Exception):
    """The child could not be started (the OSError of ``subprocess.Popen``)."""


class Collected:
    """What the parent read from one child: the kept tails of its stdout, stderr and result
    channel, its exit status (negative = signal) and whether the deadline passed."""

    def __init__(self, stdout: Tail, stderr: Tail, channel: Tail, returncode, timed_out: bool):
        self.stdout, self.stderr, self.channel = stdout, stderr, channel
        self.returncode: int | None = returncode
        self.timed_out = timed_out


def run_and_collect(
    argv: list[str],
    *,
    r_fd: int,
    w_fd: int,
    cwd: str,
    env: dict[str, str],
    deadline: float,
    max_output_bytes: int,
    after_kill: Callable[[], None] = lambda: None,
) -> Collected:
    """Start ``argv`` in its own session (the write end ``w_fd`` of the result pipe passed on,
    and closed here), read its stdout, stderr and the result pipe ``r_fd`` without blocking until
    it exits or ``deadline`` (``time.monotonic``) passes, then SIGKILL its whole process group,
    call ``after_kill`` (e.g. killing a uid's leftovers), reap it and drain what is buffered.
    Raises :class:`SpawnError` when it cannot be started (both pipe ends closed then)."""
    import subprocess

    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(w_fd,),
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        os.close(r_fd)
        raise SpawnError(e) from e
    finally:
        os.close(w_fd)

    def kill() -> None:
        # the whole group, while the (zombie) leader still holds the pgid
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        after_kill()

    def reap() -> int | None:
        try:
            return proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    out, err, res = Tail(max_output_bytes), Tail(max_output_bytes), Tail(65536)
    streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err, r_fd: res}
    try:
        rc, timed_out = collect(
            proc.pid,
            streams,
            deadline,
            exited=lambda: exited_nowait(proc.pid, lambda: proc.poll() is not None),
            kill=kill,
            reap=reap,
        )
    finally:
        os.close(r_fd)
        proc.stdout.close()
        proc.stderr.close()
    return Collected(out, err, res, rc, timed_out)


def collect(
    pid: int,
    streams: dict[int, Tail],
    deadline: float,
    *,
    exited: Callable[[], bool],
    kill: Callable[[], None],
    reap: Callable[[], int | None],
) -> tuple[int | None, bool]:
    """Read the non-blocking ``streams`` (fd -> :class:`Tail`; the caller closes them) until
    child ``pid`` exits (a pidfd, else ``exited()`` polled) or ``deadline`` passes; then
    ``kill()`` everything it started, ``reap()`` it and drain what is still buffered (0.5 s at
    most). Returns ``(exit status from reap, whether the deadline passed)``."""
    sel = selectors.DefaultSelector()
    pidfd = None
    try:
        for fd in streams:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        try:
            pidfd = os.pidfd_open(pid)
            sel.register(pidfd, selectors.EVENT_READ)
        except (AttributeError, OSError):
            pidfd = None
        open_fds = set(streams)
        timed_out = _read_until_exit(sel, streams, open_fds, pidfd, deadline, exited)
        kill()
        rc = reap()
        grace = time.monotonic() + 0.5
        while open_fds and time.monotonic() < grace:
            for key, _ in sel.select(timeout=0.05):
                if key.fd in open_fds and read_into(key.fd, streams[key.fd]):
                    sel.unregister(key.fd)
                    open_fds.discard(key.fd)
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
    return rc, timed_out


def _read_until_exit(sel, streams, open_fds, pidfd, deadline, exited) -> bool:
    """The reading loop of :func:`collect`; True when the deadline passed first."""
    while True:
        now = time.monotonic()
        if now >= deadline:
            return True
        done = pidfd is None and exited()
        if done and not open_fds:
            return False
        for key, _ in sel.select(timeout=min(deadline - now, 0.05 if pidfd is None else 1.0)):
            if key.fd == pidfd:
                done = True
                sel.unregister(pidfd)
            elif read_into(key.fd, streams[key.fd]):
                sel.unregister(key.fd)
                open_fds.discard(key.fd)
        if done:
            # the direct child is gone (not yet reaped, so its pgid cannot be reused): the
            # caller drains what is already buffered and kills the rest
            return False
