"""The sandboxed child: set kernel limits, fix the clock and entropy, run the program, report.

Two ways in. The cold path (:mod:`bench.evaluate.sandbox.runner`) runs this file's text as
``python -s -S -B -u -c <text> FD LIMITS [runner.py]`` in a fresh interpreter whose working
directory holds ``program.py``; :func:`main` reads the arguments and calls :func:`run`. The warm
path (:mod:`bench.evaluate.sandbox.zygote`) loads this text once into a pre-imported parent,
forks one child per program and calls :func:`run` in the child, after the uid change. The text
is passed, not a path or ``-m``: the child runs as an unprivileged uid that cannot read this
checkout, and ``-s -S`` (with a scrubbed environment) keep every package of the parent, this
one included, off its ``sys.path``. So this module may import only the standard library.

``FD`` is the write end of the result pipe; ``LIMITS`` is
``address_space_bytes,cpu_s,nproc,fsize_bytes,nofile``; the optional ``runner.py`` is a
standard-library-only module (e.g. bench/evaluate/gsm8k_reference.py) whose
``run_program(src) -> (status, kind, value, detail)`` then runs the program instead of the
plain ``exec``. :func:`run` sets the kernel limits (hard = soft, so the program cannot raise
them), says ``S`` on the result pipe (so a silent interpreter is a harness error, not a wrong
answer), fixes the clock and the entropy sources (:func:`freeze`), then compiles and runs the
program and reports one line ``R<TAB>status<TAB>kind<TAB>value<TAB>detail``; the value of
``simple_math_problem()`` travels as a primitive (int / float text, or a type tag), never as an
object the parent would have to trust. Everything used after the program has run is bound to
local names before it starts (the program may rebind module globals, ``os.write`` or ``type``).
"""

import _signal  # not `signal`: its enum-based wrapper costs ~8 ms of CPU per program start
import os
import resource
import sys

#: the instant every clock reads (2000-01-01T00:00:00Z) and what the monotonic clocks read
FIXED_TIME = 946684800
FIXED_MONOTONIC = 1000.0
#: the seed of ``random`` and of the stream ``os.urandom`` reads
FIXED_SEED = 0


def set_limits(lim) -> None:
    """Kernel limits of this process, hard = soft (never above a hard limit already set)."""

    def setl(res, soft, hard):
        cur_soft, cur_hard = resource.getrlimit(res)
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
            soft = min(soft, hard)
        try:
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError):  # e.g. RLIMIT_AS on macOS: the others still apply
            pass

    setl(resource.RLIMIT_AS, lim[0], lim[0])
    setl(resource.RLIMIT_CPU, lim[1], lim[1] + 1)
    setl(resource.RLIMIT_NPROC, lim[2], lim[2])
    setl(resource.RLIMIT_FSIZE, lim[3], lim[3])
    setl(resource.RLIMIT_NOFILE, lim[4], lim[4])
    setl(resource.RLIMIT_CORE, 0, 0)
    if hasattr(resource, "RLIMIT_MSGQUEUE"):  # no POSIX message queue outlives the program
        setl(resource.RLIMIT_MSGQUEUE, 0, 0)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)


def block_c_datetime() -> None:
    """``datetime`` becomes the standard library's pure-Python implementation (same classes,
    same results), whose ``now()`` / ``today()`` read ``time.time()``: the C one reads the
    system clock directly. Call before ``datetime`` is imported."""
    if "datetime" not in sys.modules:
        sys.modules["_datetime"] = None  # `import _datetime` now fails; datetime falls back


def freeze() -> None:
    """Fix what would make a program's verdict differ between two runs: every clock of ``time``
    reads :data:`FIXED_TIME` (``time.sleep`` still sleeps), ``random`` is seeded with
    :data:`FIXED_SEED` and an unseeded ``Random()`` / ``seed()`` gets that seed too,
    ``os.urandom`` / ``os.getrandom`` / ``SystemRandom`` / ``secrets`` / ``uuid4`` read a seeded
    stream. The hash seed is fixed by the caller (``PYTHONHASHSEED=0`` in the environment).
    docs/gsm8k-sandbox.md lists what is not covered (ctypes, file times, pids, ids)."""
    import time

    block_c_datetime()
    ns = FIXED_TIME * 1_000_000_000
    mono_ns = int(FIXED_MONOTONIC * 1_000_000_000)
    for name in ("time", "clock_gettime"):
        setattr(time, name, lambda *a: float(FIXED_TIME))
    for name in ("time_ns", "clock_gettime_ns"):
        setattr(time, name, lambda *a: ns)
    for name in ("monotonic", "perf_counter", "process_time", "thread_time"):
        setattr(time, name, lambda: FIXED_MONOTONIC)
    for name in ("monotonic_ns", "perf_counter_ns", "process_time_ns", "thread_time_ns"):
        setattr(time, name, lambda: mono_ns)
    for name in ("localtime", "gmtime", "ctime"):
        f = getattr(time, name)
        setattr(time, name, lambda secs=None, f=f: f(FIXED_TIME if secs is None else secs))
    asctime, strftime, localtime = time.asctime, time.strftime, time.localtime
    time.asctime = lambda t=None: asctime(localtime() if t is None else t)
    time.strftime = lambda fmt, t=None: strftime(fmt, localtime() if t is None else t)

    import random

    seed = random.Random.seed
    random.Random.seed = lambda self, a=None, version=2: seed(
        self, FIXED_SEED if a is None else a, version
    )
    random.seed = random._inst.seed  # the module's bound method: rebound to the fixed one
    random.seed(FIXED_SEED)
    stream = random.Random(FIXED_SEED + 1)

    def urandom(n, flags=0):
        return stream.randbytes(n) if n else b""

    import posix

    for mod, name in ((os, "urandom"), (posix, "urandom"), (random, "_urandom")):
        setattr(mod, name, urandom)
    for mod in (os, posix):
        if hasattr(mod, "getrandom"):
            mod.getrandom = urandom


def reporter(fd):
    """``(report, encode, name, clean)`` bound to the result pipe ``fd`` (and to ``os.write``,
    ``type``, ``os._exit`` as they are now); says ``S`` on the pipe."""
    w, t, ex = os.write, type, os._exit
    w(fd, b"S\n")

    def clean(s):
        try:
            s = str(s)
        except BaseException:
            s = "?"
        s = s[:200].encode("utf-8", "backslashreplace")
        return s.replace(b"\t", b" ").replace(b"\n", b" ")

    def name(e):
        try:
            return clean(t(e).__name__)
        except BaseException:
            return b"?"

    def report(status, kind=b"", value=b"", detail=b""):
        try:
            w(fd, b"R\t" + status + b"\t" + kind + b"\t" + value + b"\t" + detail + b"\n")
        finally:
            ex(0)

    def encode(r):
        k = t(r)
        if r is None:
            return b"none", b""
        if k is bool:
            return b"other", b"bool"
        if k is int:
            if r.bit_length() > 3000:
                return b"huge_int", str(r.bit_length()).encode()
            return b"int", int.__repr__(r).encode()
        if k is float:
            return b"float", float.__repr__(r).encode()
        fr, de = sys.modules.get("fractions"), sys.modules.get("decimal")
        if (fr is not None and k is fr.Fraction) or (de is not None and k is de.Decimal):
            if k is fr.Fraction and r.denominator == 1:
                return encode(int(r.numerator))
            if k is not fr.Fraction and r.is_finite() and r == r.to_integral_value():
                return encode(int(r))
            return encode(float(r))
        if k is str:
            return b"str", clean(r[:100])
        return b"other", name(r)

    return report, encode, name, clean


def run_with_runner(src, runner_src, report, name, clean) -> None:
    """Run ``src`` with the runner module's ``run_program`` and report what it says."""
    try:
        runner = {"__name__": "runner"}
        exec(compile(runner_src, "runner.py", "exec"), runner)
        run_program = runner["run_program"]
    except BaseException as e:
        report(b"harness_error", detail=b"cannot load runner: " + name(e))
    try:
        status, kind, value, detail = run_program(src)
    except MemoryError:
        report(b"memory", detail=b"MemoryError")
    except BaseException as e:
        report(b"runtime_error", detail=name(e))
    # the value is a number's text (up to ~900 digits): not cut like the other fields
    value = str(value).encode("ascii", "replace").replace(b"\t", b" ").replace(b"\n", b" ")
    report(clean(status), clean(kind), value, clean(detail))


def run(fd, lim, src, runner_src=None) -> None:
    """Limits, ``S``, the fixed clock and entropy, then the program; never returns. ``src``
    None: ``program.py`` (in the working directory) is read after the limits are set."""
    set_limits(lim)
    report, encode, name, clean = reporter(fd)
    if sys.path and sys.path[0] == "":  # `-c` puts the working directory first
        del sys.path[0]
    try:
        freeze()
    except BaseException as e:
        report(b"harness_error", detail=b"cannot fix the clock: " + name(e))
    if src is None:
        try:
            with open("program.py", encoding="utf-8") as f:
                src = f.read()
        except BaseException as e:
            report(b"harness_error", detail=b"cannot read program: " + name(e))
    if runner_src is not None:  # a runner decides how the program runs
        run_with_runner(src, runner_src, report, name, clean)
    try:
        code = compile(src, "program.py", "exec")
    except MemoryError:
        report(b"memory", detail=b"MemoryError")
    except BaseException as e:
        report(b"syntax_error", detail=name(e))
    import builtins

    g = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(code, g)
        f = g.get("simple_math_problem")
        if f is None:
            report(b"no_answer", detail=b"missing simple_math_problem")
        kind, value = encode(f())
    except MemoryError:
        report(b"memory", detail=b"MemoryError")
    except BaseException as e:
        report(b"runtime_error", detail=name(e))
    report(b"done", kind, value)


def main():
    """The cold path: ``FD LIMITS [runner.py]`` from ``sys.argv``."""
    fd = int(sys.argv[1])
    lim = [int(v) for v in sys.argv[2].split(",")]
    runner_src = None
    if len(sys.argv) > 3:
        try:
            with open(sys.argv[3], encoding="utf-8") as f:
                runner_src = f.read()
        except OSError:
            runner_src = "raise OSError('cannot read runner.py')\n"
    run(fd, lim, None, runner_src)


if __name__ == "__main__":
    main()
