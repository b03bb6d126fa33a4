"""The sandboxed child's bootstrap: set kernel limits, run ``program.py``, report one line.

:mod:`bench.evaluate.sandbox.runner` runs this file's text as
``python -I -S -B -u -c <text> FD LIMITS`` in a fresh interpreter whose working directory holds
``program.py``. It is passed as text, not by path or ``-m``: the child may run as an unprivileged
uid that cannot read this checkout, and ``-I -S`` keep every package of the parent (this one
included) off its ``sys.path``. So this module may import only the standard library, and only
the modules below.

Arguments: ``FD`` is the write end of the result pipe; ``LIMITS`` is
``address_space_bytes,cpu_s,nproc,fsize_bytes,nofile``; an optional third, ``runner.py``, is a
standard-library-only module (e.g. bench/evaluate/gsm8k_reference.py) whose
``run_program(src) -> (status, kind, value, detail)`` then runs the program instead of the
plain ``exec`` below. The bootstrap sets its own kernel limits
(hard = soft, so the program cannot raise them), says ``S`` on the result pipe (so a silent
interpreter is a harness error, not a wrong answer), then compiles and runs the program and
reports one line ``R<TAB>status<TAB>kind<TAB>value<TAB>detail``; the value of
``simple_math_problem()`` travels as a primitive (int / float text, or a type tag), never as an
object the parent would have to trust.
"""

import _signal  # not `signal`: its enum-based wrapper costs ~8 ms of CPU per program start
import os
import resource
import sys


def main():
    # Everything lives inside this function: the program runs in the same interpreter, and
    # module-level helpers in ``__main__`` would be within its reach.
    fd = int(sys.argv[1])
    lim = [int(v) for v in sys.argv[2].split(",")]

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
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)
    # bound before the program runs: it may rebind os.write, type or os._exit
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

    try:
        with open("program.py", encoding="utf-8") as f:
            src = f.read()
    except BaseException as e:
        report(b"harness_error", detail=b"cannot read program: " + name(e))
    if len(sys.argv) > 3:  # a runner decides how the program runs (before the program exists)
        try:
            with open(sys.argv[3], encoding="utf-8") as f:
                runner = {"__name__": "runner"}
                exec(compile(f.read(), sys.argv[3], "exec"), runner)
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
    try:
        code = compile(src, "program.py", "exec")
    except MemoryError:
        report(b"memory", detail=b"MemoryError")
    except BaseException as e:
        report(b"syntax_error", detail=name(e))
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(code, g)
        f = g.get("simple_math_problem")
        if f is None:
            report(b"no_answer", detail=b"missing simple_math_problem")
        r = f()
        kind, value = encode(r)
    except MemoryError:
        report(b"memory", detail=b"MemoryError")
    except BaseException as e:
        report(b"runtime_error", detail=name(e))
    report(b"done", kind, value)


if __name__ == "__main__":
    main()
