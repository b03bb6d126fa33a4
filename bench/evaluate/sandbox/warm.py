"""The harness's side of the warm path: one pre-imported parent per worker slot inside the
sandbox (:mod:`bench.evaluate.sandbox.zygote`), asked to fork a child per program.

:class:`WarmPool` starts a slot's parent on first use under the level's ``warm`` prefix
(bubblewrap's view and namespaces, root with only ``CAP_SETUID`` / ``CAP_SETGID``), its run
directory (owned by the slot's uid, the programs' ``/tmp``) beside the sandbox's base
directory, and sends it the set-up frame. :meth:`WarmPool.run` sends one program and waits for
its answer (the program's deadline is enforced by the parent; this side allows
:data:`ANSWER_GRACE_S` more, then ends the parent). A parent that fails, answers late or reports
a leftover (``clean`` false) is ended, whole namespace included, and the slot's next program
starts a fresh one.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.evaluate.sandbox.proc import rmtree
from bench.evaluate.sandbox.result import ExecResult, interpret

_HERE = Path(__file__).parent
ZYGOTE_TEXT = (_HERE / "zygote.py").read_text(encoding="utf-8")
PROC_TEXT = (_HERE / "proc.py").read_text(encoding="utf-8")
CHILD_TEXT = (_HERE / "child.py").read_text(encoding="utf-8")
#: seconds past a program's deadline the parent has to answer (kill, sweep, drain)
ANSWER_GRACE_S = 10.0


def exec_result(ans: dict, isolation: str, t0: float) -> ExecResult:
    """The :class:`ExecResult` of a parent's answer (as the cold path reads its child)."""
    result = interpret(ans["ch"].encode("latin-1"), ans["tot"], ans["rc"], ans["timed_out"])
    result.stdout = ans["out"].encode("latin-1").decode("utf-8", "replace")
    result.stderr = ans["err"].encode("latin-1").decode("utf-8", "replace")
    result.returncode = ans["rc"]
    result.isolation = isolation
    result.elapsed_s = time.monotonic() - t0
    return result


class WarmError(RuntimeError):
    """The warm parent failed (never the program's fault: the harness retries on a fresh one)."""


class _Parent:
    """One slot's running parent: its bwrap process and run directory."""

    def __init__(self, argv: list[str], run_dir: str, env: dict, setup: dict, timeout: float):
        self.run_dir = run_dir
        err = open(
            os.path.join(os.path.dirname(run_dir), f".{os.path.basename(run_dir)}.err"), "wb"
        )
        self.err_path = err.name
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
                cwd="/",
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            raise WarmError(f"cannot start: {e}") from e
        finally:
            err.close()
        try:
            self.send(setup)
            ready = self.receive(time.monotonic() + timeout)
            if not ready.get("ready"):
                raise WarmError(f"not ready: {ready!r}")
        except WarmError:
            self.kill()
            raise

    def send(self, obj: dict) -> None:
        data = json.dumps(obj).encode()
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        except OSError as e:
            raise WarmError(f"cannot send: {e} {self.stderr()}") from e

    def receive(self, deadline: float) -> dict:
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        need = 4
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while len(buf) < need:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    raise WarmError(f"no answer in time {self.stderr()}")
                data = os.read(fd, 1 << 16)  # one request at a time: never a second frame
                if not data:
                    raise WarmError(f"exited (status {self.proc.poll()}) {self.stderr()}")
                buf += data
                if need == 4 and len(buf) >= 4:
                    need = 4 + struct.unpack(">I", bytes(buf[:4]))[0]
        try:
            return json.loads(bytes(buf[4:need]))
        except ValueError as e:
            raise WarmError(f"bad answer: {e}") from e

    def stderr(self) -> str:
        try:
            with open(self.err_path, "rb") as f:
                return repr(f.read()[-300:].decode("utf-8", "replace"))
        except OSError:
            return ""

    def kill(self) -> None:
        """End the parent and its namespace at once (bwrap leads the session; its init and
        everything in the namespace die with it), then :meth:`close`."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # end of file: the parent returns
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        self.proc.stdout.close()
        for p in (self.run_dir, self.err_path):
            if os.path.isdir(p):
                rmtree(p)
            elif os.path.exists(p):
                os.unlink(p)


class WarmPool:
    """The warm parents of one :class:`~bench.evaluate.sandbox.runner.Sandbox`, one per slot.

    ``prefix(slot, run_dir)``: the argv before the interpreter's (the level's ``warm``);
    ``uid(slot)``: the slot's unprivileged uid; ``setup``: the set-up frame without the
    per-slot ``uid`` / ``tmp``; ``env``: the parent's environment."""

    def __init__(
        self,
        *,
        prefix: Callable[[int, str], list[str]],
        python: str,
        dirs: str,
        uid: Callable[[int], int],
        setup: dict,
        env: dict,
        start_timeout: float,
    ):
        self.prefix, self.python, self.dirs, self.uid = prefix, python, dirs, uid
        self.setup = {"proc": PROC_TEXT, "child": CHILD_TEXT, **setup}
        self.env, self.start_timeout = env, start_timeout
        self._parents: dict[int, _Parent] = {}
        self._lock = threading.Lock()

    def _parent(self, slot: int) -> _Parent:
        p = self._parents.get(slot)
        if p is not None and p.proc.poll() is None:
            return p
        if p is not None:
            p.close()
        run_dir = os.path.join(self.dirs, f"slot-{slot}")
        if os.path.exists(run_dir):
            rmtree(run_dir)
        os.mkdir(run_dir)
        os.chown(run_dir, self.uid(slot), self.uid(slot))
        os.chmod(run_dir, 0o755)  # the parent lists it after each program (its folder is 0700)
        argv = [*self.prefix(slot, run_dir), self.python, "-s", "-S", "-B", "-u", "-c", ZYGOTE_TEXT]
        try:
            p = _Parent(
                argv, run_dir, self.env, {**self.setup, "uid": self.uid(slot), "tmp": "/tmp"},
                self.start_timeout,
            )  # fmt: skip
        except WarmError:
            if os.path.exists(run_dir):
                rmtree(run_dir)
            raise
        with self._lock:
            self._parents[slot] = p
        return p

    def run(self, slot: int, program: str, timeout_s: float, runner: bool) -> dict:
        """The parent's answer for one program (see :mod:`~bench.evaluate.sandbox.zygote`);
        :class:`WarmError` when the parent failed (it is ended then)."""
        p = self._parent(slot)
        try:
            p.send({"program": program, "timeout": timeout_s, "runner": runner})
            ans = p.receive(time.monotonic() + timeout_s + ANSWER_GRACE_S)
        except WarmError:
            self._end(slot)
            raise
        if not ans.get("clean"):
            self._end(slot)  # a leftover of this program: the next one gets a fresh parent
        return ans

    def _end(self, slot: int) -> None:
        with self._lock:
            p = self._parents.pop(slot, None)
        if p is not None:
            p.kill()

    def close(self) -> None:
        with self._lock:
            parents, self._parents = list(self._parents.values()), {}
        for p in parents:
            p.close()
