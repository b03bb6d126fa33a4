"""Run untrusted model-written Python programs and report what ``simple_math_problem()`` returned.

Every program runs in a **fresh process** that never ran anything else: on the warm path
(:mod:`bench.evaluate.sandbox.warm`, where the level offers one) a fork of a pre-imported parent
inside the sandbox that never runs a program itself; on the cold path a fresh interpreter
(``python -s -S -B -u``). Never this process and never a fork of it (a fork of a large parent
inherits its address space: an absolute ``RLIMIT_AS`` would then fail every program, the "false
zeros" of LiveBench PR #536). Per program:

- everything it started is killed with ``SIGKILL`` (by process group and namespace on the cold
  path, by uid on the warm one) when the direct child exits or the wall-clock deadline
  (enforced outside the program) passes;
- kernel resource limits set in the child before the program is compiled: CPU time, address
  space, number of processes, file size, open files, POSIX message queues, no core dumps;
- stdin is ``/dev/null``, the environment is scrubbed, the working directory is a private
  directory emptied / removed afterwards; stdout/stderr are read without blocking and only the
  last ``max_output_bytes`` are kept;
- the clock, the random seeds and the entropy sources read fixed values and the hash seed is
  fixed (:func:`bench.evaluate.sandbox.child.freeze`), so a verdict can be cached
  (:mod:`bench.evaluate.sandbox.cache`);
- the return value comes back as a **primitive** (int / float text, or a type tag) on a
  dedicated pipe, not on stdout (which the program controls); the parent parses it strictly
  and does every comparison itself (an object with an always-true ``__eq__`` never reaches it).

Stronger isolation is added where the machine allows it and recorded as ``isolation`` on every
result (probed once, with a canary program, strongest first; :mod:`~bench.evaluate.sandbox.levels`
and docs/gsm8k-sandbox.md describe each level; ``bwrap+rlimits+uid+netns+pidns`` has the warm
path; plain ``rlimits`` is process group and limits only: prefer namespaces for untrusted
checkpoints).

Statuses (``STATUSES``): ok / wrong (graded by the caller, see :mod:`bench.evaluate.gsm8k`),
no_answer (returned None, no function, ``os._exit`` before the result, tampered result channel),
syntax_error, runtime_error (``detail`` = exception type), timeout (wall clock or CPU limit),
memory (``MemoryError``), crash (killed by a signal / nonzero exit without a result; ``detail`` =
signal name), harness_error (the interpreter never started: never blamed on the program).

The hostile programs it is tested against are tests/fixtures/gsm8k_hostile/ (cases reported
against public code-execution harnesses: bigcode-evaluation-harness `safe_subprocess/evil_programs`,
openai/human-eval `execution.py`, evalplus).

This module holds the limits (:class:`SandboxConfig`) and the :class:`Sandbox` (worker slots,
probing the levels with canaries, one run's set-up); the package's ``__init__`` lists the rest.
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import random
import shutil
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from bench.evaluate.sandbox import levels
from bench.evaluate.sandbox.cache import VerdictCache
from bench.evaluate.sandbox.config import SandboxConfig
from bench.evaluate.sandbox.levels import PROBE_TIMEOUT_S, Level, isolation_levels
from bench.evaluate.sandbox.proc import (
    SpawnError,
    kill_uid,
    rmtree,
    run_and_collect,
    sweep_uid_files,
)
from bench.evaluate.sandbox.result import STATUSES, ExecResult, interpret
from bench.evaluate.sandbox.warm import WarmError, WarmPool, exec_result

__all__ = ["STATUSES", "ExecResult", "Sandbox", "SandboxConfig", "SandboxError"]

# The child's bootstrap (bench/evaluate/sandbox/child.py): its text runs under `python -s -S -B
# -c`, so the child imports nothing of this package and needs no read access to the checkout.
_BOOTSTRAP = Path(__file__).with_name("child.py").read_text(encoding="utf-8")
# the interpreter's flags (no -I / -E: the environment, all of it ours, fixes the hash seed)
_FLAGS = ("-s", "-S", "-B", "-u")
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC",
        "PYTHONHASHSEED": "0"}  # fmt: skip


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
        # the warm parents' run directories (one per slot, the programs' /tmp) live beside it
        self.warm_dir = tempfile.mkdtemp(prefix="sflm-sandbox-warm-", dir=parent)
        self._warm: WarmPool | None = None
        self._pools: list[WarmPool] = []  # what the finalizer closes (it must not hold self)
        self._finalizer = weakref.finalize(
            self, _cleanup, self._pools, self.base_dir, self.warm_dir
        )
        # per-worker unprivileged uids (only used when running as root): random so that two
        # harness processes on one machine do not share uids (and RLIMIT_NPROC counts)
        self._uid_base = random.SystemRandom().randrange(1_000_000, 2_000_000_000)
        self._slots: queue.Queue[int] = queue.Queue()
        for i in range(max(self.workers, 1)):
            self._slots.put(i)
        self._nproc_rlimits = levels.nproc_for_shared_uid(self.workers * self.cfg.nproc)
        self._runner_src = levels.runner_source(self.cfg.runner)
        # stronger levels whose canary failed, with the reason ("name: status detail stderr")
        self.rejected: tuple[str, ...] = ()
        self.level = self._probe()
        self.mode = self._start_warm()  # "warm" or "cold"
        self.child_python = self._child_python()
        self.cache = self._verdict_cache()

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
        result)`` is called from the calling thread as each one finishes. With a verdict cache,
        a program already in it is not run, and one that repeats in ``programs`` runs once."""
        programs = list(programs)
        out: list[ExecResult | None] = [None] * len(programs)
        todo: dict[str, list[int]] = {}  # cache key (or index) -> the inputs it answers
        for i, p in enumerate(programs):
            key = self.cache.key(p, True) if self.cache else str(i)
            hit = self.cache.get(key) if self.cache else None
            if hit is not None:
                hit.isolation = self.isolation
                out[i] = hit
                if callback is not None:
                    callback(i, hit)
            else:
                todo.setdefault(key, []).append(i)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futs = {pool.submit(self.run, programs[ix[0]]): (k, ix) for k, ix in todo.items()}
            for fut in as_completed(futs):
                key, ix = futs[fut]
                try:
                    res = fut.result()
                except Exception as e:  # a bug here must not lose the other rows
                    res = ExecResult(
                        "harness_error", detail=f"{type(e).__name__}: {e}", isolation=self.isolation
                    )
                if self.cache:
                    self.cache.put(key, programs[ix[0]], res)
                for n, i in enumerate(ix):
                    out[i] = res if n == 0 else dataclasses.replace(res, cached=True)
                    if callback is not None:
                        callback(i, out[i])
        if self.cache:
            try:
                self.cache.flush()
            except OSError:  # an unwritable cache folder costs only the next run's time
                pass
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

    # -- warm path and cache --------------------------------------------------------------
    def _start_warm(self) -> str:
        """Start slot 0's warm parent and run the probe's canary through it: "warm" when it
        passes, else "cold" (the reason in :attr:`rejected`)."""
        if not (self.cfg.warm and self.level.warm and self.level.uid):
            return "cold"
        env = dict(_ENV)
        self._warm = WarmPool(
            prefix=self.level.warm,
            python=self.level.python or self.python,
            dirs=self.warm_dir,
            uid=lambda slot: self._uid_base + slot,
            setup={
                "lim": [int(v) for v in self._limits_arg(self.level).split(",")],
                "max_out": self.cfg.max_output_bytes,
                "runner": self._runner_src,
                "env": {**env, "HOME": "/tmp", "TMPDIR": "/tmp"},
            },
            env=env,
            start_timeout=CANARY_TIMEOUT_S,
        )
        self._pools.append(self._warm)
        res = self._run_once(_CANARY_PROBE, 0, self.level, CANARY_TIMEOUT_S)
        if res.status == "done" and res.value == 20:
            return "warm"
        self._warm.close()
        self._warm = None
        self.rejected += (f"warm: {res.status} {res.detail} {res.stderr[-200:]!r}",)
        return "cold"

    def _run_warm(self, program, slot, timeout_s, runner) -> ExecResult:
        t0 = time.monotonic()
        program = program.encode("utf-8", "replace").decode("utf-8")  # as program.py would
        try:
            ans = self._warm.run(slot, program, timeout_s, runner and bool(self._runner_src))
        except (WarmError, OSError) as e:
            return ExecResult("harness_error", detail=f"warm: {e}", isolation=self.isolation)
        return exec_result(ans, self.level.name, t0)

    def _verdict_cache(self) -> VerdictCache | None:
        if not self.cfg.cache_dir:
            return None
        c, python = self.cfg, os.path.realpath(self.level.python or self.python)
        return VerdictCache(
            c.cache_dir,
            {
                "limits": self._limits_arg(self.level),
                "timeout_s": c.timeout_s,
                "max_output_bytes": c.max_output_bytes,
                "runner": [c.runner, self._runner_src],
                "isolation": self.level.name,
                "python": [python, self.child_python],
            },
        )

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
        if self._warm is not None and level is self.level:
            return self._run_warm(program, slot, timeout_s or self.cfg.timeout_s, runner)
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
        env = {**_ENV, "HOME": home, "TMPDIR": home}
        r_fd, w_fd = os.pipe()
        argv = [
            *level.prefix(0 if uid is None else uid - self._uid_base, run_dir),
            level.python or self.python,
            *_FLAGS,
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


def _cleanup(pools: list[WarmPool], base_dir: str, warm_dir: str) -> None:
    for pool in pools:
        pool.close()
    shutil.rmtree(base_dir, True)
    shutil.rmtree(warm_dir, True)
