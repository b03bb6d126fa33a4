"""The local executor's fork server: one process imports what a local job needs (torch,
Lightning, the trainer, the methods and tasks) once, then forks every job of the sweep from it.

A local job spent most of its start on imports (Lightning, torchmetrics, torch._dynamo; what
the fork server saved the quickstart's jobs: docs/measurements/quickstart.md). A forked job
starts with them done and then runs exactly what a job process started from scratch runs
(:func:`bench.executors.local_job.main` on its folder: same job file, same ``log.out`` /
``log.err`` / ``result.json``, its own session), so its results are the same; the server itself
runs no torch operation (no thread pool exists when it forks).

Protocol (``python -m bench.executors.forkserver``, started by :class:`ForkServer`): the driver
writes a job folder per line on the server's stdin; the server forks, and answers ``pid N`` (the
job's process id) or ``error ...`` on its stdout. Everything else the server prints goes to its
log. It exits when its stdin closes (the driver ended, however it ended); the jobs it forked run
on, as local jobs do when their driver is interrupted. The driver starts jobs itself
(:class:`subprocess.Popen`, as before) where there is no server: not Linux, a machine with a GPU
(a process forked after CUDA was touched cannot use it; there the imports are a small part of a
job anyway), the server failed to start or to answer, or ``SFLM_LOCAL_FORK=0``.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

#: set to 0 to start every local job as a process of its own (no fork server)
ENV_SWITCH = "SFLM_LOCAL_FORK"
#: seconds the driver waits for the server's answer: the first one waits for its imports
FIRST_ANSWER_S, ANSWER_S = 600.0, 60.0


#: device files of a GPU (NVIDIA, AMD): a process forked after CUDA / ROCm was touched cannot
#: use it, so on such a machine every job is a process of its own
GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")


def enabled() -> bool:
    """Whether the driver forks its local jobs: on Linux, without a GPU, unless switched off."""
    return (
        sys.platform.startswith("linux")
        and os.environ.get(ENV_SWITCH, "1") != "0"
        and not any(os.path.exists(d) for d in GPU_DEVICES)
    )


# --------------------------------------------------------------------------- driver side


class Forked:
    """What the driver needs of a :class:`subprocess.Popen` (``pid``, ``poll``, ``wait``) for a
    job the server forked: not this process's child, so alive is what ``/proc`` says
    (:func:`bench.locks.alive`: same process start time, not a zombie)."""

    def __init__(self, pid: int):
        from bench import locks

        self.pid = pid
        self.start = locks.process_start(pid)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        from bench import locks

        if self.returncode is None and not locks.alive(self.pid, self.start):
            self.returncode = 0  # unknown: result.json says how the job ended
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode


class ForkServer:
    """The driver's handle on its fork server (started on the first :meth:`spawn`)."""

    def __init__(self, log: Path, env: dict, cwd: Path):
        self.log, self.env, self.cwd = Path(log), env, cwd
        self.proc: subprocess.Popen | None = None
        self.broken = not enabled()
        self._answers = 0

    def spawn(self, folder: Path) -> Forked | None:
        """Fork a job on ``folder`` (its ``job.pkl`` written); None when there is no server (the
        caller then starts the job as a process of its own)."""
        if self.broken:
            return None
        try:
            if self.proc is None:
                self._start()
            self.proc.stdin.write(f"{folder}\n".encode())
            self.proc.stdin.flush()
            line = self._answer(FIRST_ANSWER_S if not self._answers else ANSWER_S)
        except OSError as e:
            return self._give_up(f"{type(e).__name__}: {e}")
        if not line.startswith("pid "):
            return self._give_up(line or "no answer")
        self._answers += 1
        return Forked(int(line.split()[1]))

    def _start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.executors.forkserver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,  # a terminal's Ctrl-C aimed at the driver is not its
            )

    def _answer(self, timeout: float) -> str:
        """The server's next line (``pid N`` / ``error ...``), or "" at EOF or after ``timeout``."""
        out = self.proc.stdout
        buf = b""
        deadline = time.monotonic() + timeout
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return ""
            chunk = os.read(out.fileno(), 1)
            if not chunk:
                return ""
            buf += chunk
        return buf.decode(errors="replace").strip()

    def _give_up(self, why: str) -> None:
        print(
            f"sweep: the local fork server stopped answering ({why}; log: {self.log}); "
            "starting each job as a process of its own",
            file=sys.stderr,
            flush=True,
        )
        self.broken = True
        self.close()
        return None

    def close(self) -> None:
        """End the server (the jobs it forked run on: they are in sessions of their own). It
        exits when its stdin closes; one still importing (an interrupted driver) is killed."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


# --------------------------------------------------------------------------- server side


def _preload() -> None:
    """Import what every local job imports (the trainer and Lightning, the job, the registered
    methods and tasks, every kind of cell and the work of each, plug-ins included). Nothing here
    runs a torch operation."""
    import importlib

    import lightning.pytorch  # noqa: F401
    from lightning.pytorch.utilities.exceptions import SIGTERMException  # noqa: F401

    import bench.atomic  # noqa: F401
    import bench.cells  # noqa: F401
    import bench.executors.local_job  # noqa: F401
    import bench.records  # noqa: F401
    from bench import registry

    for reg in (registry.METHODS, registry.TASKS, registry.KINDS):
        try:
            len(reg)  # loads the built-ins and the plug-ins
        except Exception:  # noqa: BLE001 - a broken plug-in fails the jobs that use it, as before
            continue
        for name in reg if reg is registry.KINDS else ():
            for module in getattr(reg[name], "work", ()):  # a kind's work, by module name
                try:
                    importlib.import_module(module)
                except Exception:  # noqa: BLE001 - as a broken plug-in: its jobs fail
                    pass


def _reap(signum=None, frame=None) -> None:
    """Collect the server's ended children (so that none stays a zombie)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _child(folder: str, reply: int) -> None:
    """In the forked process: become what ``python -m bench.executors.local_job FOLDER`` started
    in its own session with ``log.out`` / ``log.err`` would be, run the job, exit. Never
    returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the job waits for its own children
        os.close(reply)
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(Path(folder) / "log.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        err = os.open(Path(folder) / "log.err", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        from bench.executors import local_job

        sys.argv = [local_job.__file__, folder]
        code = local_job.main([folder])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported in log.err, as a job process would
        import traceback

        traceback.print_exc()
    finally:
        _exit(code)


def _exit(code: int) -> None:
    """What the interpreter does at exit (wait for non-daemon threads, atexit hooks, flush the
    standard streams), then leave without unwinding into the server's loop."""
    try:
        for t in threading.enumerate():
            if t is not threading.main_thread() and not t.daemon:
                t.join()
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(code)


def serve() -> int:
    reply = os.dup(1)  # answers go here; whatever imported code prints goes to the log
    os.dup2(2, 1)
    _preload()
    import torch

    if torch.cuda.is_initialized():  # a forked job could not use it: let the driver start jobs
        print("fork server: CUDA was initialised while importing; not forking", file=sys.stderr)
        return 1
    signal.signal(signal.SIGCHLD, _reap)
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return 0  # the driver closed the pipe: no more jobs
        folder = line.decode().strip()
        if not folder:
            continue
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # nothing of the server's buffers ends up in the job's logs
        try:
            pid = os.fork()
        except OSError as e:
            os.write(reply, f"error fork: {e}\n".encode())
            continue
        if pid == 0:
            _child(folder, reply)
        try:
            os.write(reply, f"pid {pid}\n".encode())
        except BrokenPipeError:  # the driver is gone; the job runs on
            return 0


if __name__ == "__main__":
    sys.exit(serve())
