"""What one sandboxed program did (:class:`ExecResult`), read from the child's result channel.

The child (:mod:`bench.evaluate.sandbox.child`) writes ``S`` when the interpreter starts, then
one line ``R<TAB>status<TAB>kind<TAB>value<TAB>detail`` when the program's function returned or
raised; :func:`interpret` reads that channel and the exit status strictly: anything unexpected
is a tampered channel (``no_answer``), never a value, and a run that never started is the
harness's error, never the program's. Statuses: :data:`STATUSES` (docstring of
:mod:`bench.evaluate.sandbox.runner`).
"""

from __future__ import annotations

import math
import re
import signal
from dataclasses import asdict, dataclass

STATUSES = (
    "ok",
    "wrong",
    "no_answer",
    "syntax_error",
    "runtime_error",
    "timeout",
    "memory",
    "crash",
    "harness_error",
)


@dataclass
class ExecResult:
    """What one program did.

    Attributes:
        status: one of :data:`STATUSES` ("done" before grading: the function returned).
        kind: type tag of the return value: int, float, none, str, huge_int, other ('' if none).
        value: the returned primitive (int / float; str for str / type tags; None otherwise).
        detail: exception type, signal name or a reason.
        stdout: last ``max_output_bytes`` of stdout (decoded, for the stdout fallback).
        stderr: last bytes of stderr.
        returncode: of the direct child (negative = signal).
        elapsed_s: wall time from spawn to the end of clean-up.
        isolation: the isolation level the program ran under.
        cached: served by the verdict cache (:mod:`bench.evaluate.sandbox.cache`): the other
            fields are those of the run that made the entry.
    """

    status: str
    kind: str = ""
    value: int | float | str | None = None
    detail: str = ""
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None
    elapsed_s: float = 0.0
    isolation: str = ""
    cached: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def interpret(channel: bytes, total: int, returncode: int | None, timed_out: bool) -> ExecResult:
    """Turn the result channel + exit status into an :class:`ExecResult` (status "done" when
    the function returned; the caller grades it)."""
    started = channel.startswith(b"S\n")
    if not started:
        why = "interpreter did not start"
        if timed_out:
            why += " before the deadline"
        elif returncode is not None and returncode < 0:
            why += f" (killed by {signal_name(-returncode)})"
        elif returncode:
            why += f" (exit {returncode})"
        return ExecResult("harness_error", detail=why)
    body = channel[2:]
    if body:
        if total > 65536 or body.count(b"\n") != 1 or not body.startswith(b"R\t"):
            return ExecResult("no_answer", detail="result channel tampered")
        parts = body[:-1].split(b"\t")
        if len(parts) != 5:
            return ExecResult("no_answer", detail="result channel tampered")
        _, status, kind, value, detail = (p.decode("utf-8", "replace") for p in parts)
        if status == "done":
            res = decode_value(kind, value)
            if res.status == "done":
                res.detail = detail  # e.g. where a runner's value came from
            return res
        if status not in STATUSES:
            return ExecResult("no_answer", detail="result channel tampered")
        return ExecResult(status, detail=detail)
    # started, no result line
    if timed_out:
        return ExecResult("timeout", detail="wall clock")
    if returncode is not None and returncode < 0:
        sig = -returncode
        if sig == signal.SIGXCPU:
            return ExecResult("timeout", detail="cpu time")
        return ExecResult("crash", detail=signal_name(sig))
    if returncode:
        return ExecResult("crash", detail=f"exit {returncode} without a result")
    return ExecResult("no_answer", detail="exited without a result")


_INT_RE = re.compile(r"-?\d{1,1000}")


def decode_value(kind: str, value: str) -> ExecResult:
    """Strictly parse the child's primitive; anything unexpected is a tampered channel."""
    if kind == "int" and _INT_RE.fullmatch(value):
        return ExecResult("done", kind="int", value=int(value))
    if kind == "float":
        try:
            v = float(value)
        except ValueError:
            return ExecResult("no_answer", detail="result channel tampered")
        if math.isfinite(v):
            return ExecResult("done", kind="float", value=v)
        return ExecResult("done", kind="float", value=value)  # "nan" / "inf" kept as text
    if kind == "none" and value == "":
        return ExecResult("done", kind="none", value=None)
    if kind == "huge_int" and value.isdigit():
        return ExecResult("done", kind="huge_int", value=f"<int of {value} bits>")
    if kind in ("str", "other"):
        return ExecResult("done", kind=kind, value=value if kind == "str" else f"<{value}>")
    return ExecResult("no_answer", detail="result channel tampered")
