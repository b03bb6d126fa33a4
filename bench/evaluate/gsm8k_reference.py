"""The paper harness's GSM8K grader (``grader: reference``), reproduced inside our sandbox.

The released harness (first commit of FrankCCCCC/s-flm: ``sandbox_gsm8k.py``, called from
``main.py::_gsm8k_eval`` with ``gsm8k.timeout = 5.0``) decides each completion as follows; this
module reproduces every step with its own code. See docs/gsm8k-grader.md for the comparison
with ``grader: standard`` (:mod:`bench.evaluate.gsm8k`).

1. Input: the whole generated canvas after the prompt, decoded WITHOUT special tokens
   (``tokenizer.decode(ids, skip_special_tokens=True)``): text written after an EOS stays.
2. Extraction (:func:`extract_code`): the first ```` ```(python)? ... ``` ```` block if a
   closed one exists; then the text from the first ``"def "`` (a plain substring search);
   stripped; if it does not compile and the error is on line L > 1, the lines before L when
   those compile, else the text unchanged.
3. Execution (:func:`run_program`, in the sandboxed child): ``exec`` in a namespace holding
   only ``math`` (pre-imported, so ``math.floor`` works without an import) and the builtins
   ``abs min max sum len range enumerate int float str bool round print``; ``__import__``
   allows ``math`` only. No ``__name__`` (``if __name__ == ...`` raises NameError), no
   ``__build_class__`` (no classes). Module-level output is discarded; the call
   ``simple_math_problem()`` runs with its stdout captured. Any exception, a missing function
   or the 5 s limit (exec + call) scores the completion wrong.
4. Prediction (:func:`to_number`): ``None`` -> none; ints and bools -> int; a finite float ->
   the nearest int when within 1e-6 (strictly), else the float; a non-finite float -> none; a
   string -> its first number (``[-+]?\\$?\\d[\\d,]*\\.?\\d*``, commas and ``$`` dropped,
   near-integers snapped); anything else (lists, tuples, ...) -> none. When none, the
   function's stdout decides (:func:`extract_text_answer`): the last "final answer / answer /
   result (is|=|:) N", else the last "#### N", else the last number.
5. Gold (:func:`reference_gold`): the number after ``####`` by the same rule.
6. Verdict (:func:`numbers_equal`): no prediction -> wrong; when either side is a float,
   ``abs(float(pred) - float(gold)) <= 1e-3`` in binary floating point (100.001 vs 100 is
   wrong: the difference is 0.0010000000000047748); otherwise exact integer equality.

This file imports only the standard library and has no module-level side effects: the
sandbox hands its text to the child interpreter (:func:`child_source`), which calls
:func:`run_program` on the program instead of its plain ``exec``.
"""

import contextlib
import io
import math
import re
import warnings

TIMEOUT_S = 5.0  # reference configs/config.yaml: gsm8k.timeout
FLOAT_TOL = 1e-3  # reference _numbers_equal
INT_SNAP = 1e-6  # reference _to_number: |x - round(x)| < 1e-6 -> int
SAFE_BUILTINS = (
    "abs",
    "min",
    "max",
    "sum",
    "len",
    "range",
    "enumerate",
    "int",
    "float",
    "str",
    "bool",
    "round",
    "print",
)  # reference _safe_exec_no_timer: the only builtins a program sees (plus __import__)

_FENCE = re.compile(r"```(?:python)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_NUM = r"[-+]?\$?\d[\d,]*\.?\d*"
_NUM_RE = re.compile(_NUM)
_TEXT_PATTERNS = (
    re.compile(r"(?:final answer|answer|result)\s*(?:is|=|:)\s*(" + _NUM + ")", re.IGNORECASE),
    re.compile(r"####\s*(" + _NUM + ")", re.IGNORECASE),
)
_GOLD_RE = re.compile(r"####\s*(.+)")


# --------------------------------------------------------------------------- extraction


def extract_code(text: str) -> str:
    """The program the reference executes for one decoded completion (step 2)."""
    fence = _FENCE.search(text)
    if fence:
        text = fence.group(1)
    i = text.find("def ")
    if i != -1:
        text = text[i:]
    text = text.strip()
    if not text:
        return text
    try:
        compile(text, "<sample>", "exec", dont_inherit=True)
        return text
    except SyntaxError as err:
        if err.lineno is None or err.lineno <= 1:
            return text
        line = err.lineno
    except Exception:  # null bytes before Python 3.12 (ValueError), nesting limits: unchanged
        return text
    head = "\n".join(text.splitlines()[: line - 1]).strip()
    if not head:
        return text
    try:
        compile(head, "<sample>", "exec", dont_inherit=True)
        return head
    except Exception:
        return text


# --------------------------------------------------------------------------- numbers


def _snap(x: float):
    return int(round(x)) if abs(x - round(x)) < INT_SNAP else x


def to_number(x):
    """The reference's ``_to_number``: int, float or None (step 4). Never raises: where the
    reference would crash its whole run (a string of more than 4,300 digits) this gives None."""
    if x is None:
        return None
    if isinstance(x, int):  # bool included: True -> 1
        return int(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            return None
        return _snap(float(x))
    if isinstance(x, str):
        m = _NUM_RE.search(x)
        if not m:
            return None
        s = m.group(0).replace(",", "").replace("$", "")
        try:
            return _snap(float(s)) if s.count(".") == 1 else int(s)
        except (ValueError, OverflowError):
            return None
    return None


def extract_text_answer(text: str):
    """The number the reference reads from the function's stdout when it returned none."""
    if not text:
        return None
    for pattern in _TEXT_PATTERNS:
        hits = pattern.findall(text)
        if hits:
            return to_number(hits[-1])
    hits = _NUM_RE.findall(text)
    return to_number(hits[-1]) if hits else None


def reference_gold(answer):
    """Gold number of a GSM8K answer text (the number after ``####``) or of a number."""
    if isinstance(answer, str):
        m = _GOLD_RE.search(answer)
        return to_number(m.group(1) if m else answer)
    return to_number(answer)


def numbers_equal(pred, gold) -> bool:
    """The reference's ``_numbers_equal`` (step 6)."""
    if pred is None or gold is None:
        return False
    if isinstance(pred, float) or isinstance(gold, float):
        try:
            return abs(float(pred) - float(gold)) <= FLOAT_TOL
        except OverflowError:  # an int beyond float range: the reference would crash
            return False
    return int(pred) == int(gold)


# --------------------------------------------------------------------------- child side


def run_program(src: str) -> tuple[str, str, str, str]:
    """Run one extracted program the reference's way (step 3) and return the prediction of
    step 4 as ``(status, kind, value, detail)`` for the sandbox's result line.

    ``status`` "done" with ``kind`` int / float / huge_int / none and ``detail`` "return" or
    "stdout" (where the prediction came from); otherwise syntax_error, runtime_error (detail:
    exception type), memory or no_answer (no ``simple_math_problem``). Runs in the sandboxed
    child, never in the harness.
    """
    real_import = __import__

    def limited_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "math":
            return real_import(name, globals, locals, fromlist, level)
        raise ImportError(f"Import blocked: {name}")

    import builtins

    safe = {k: getattr(builtins, k) for k in SAFE_BUILTINS}
    safe["__import__"] = limited_import
    ns = {"__builtins__": safe, "math": math}
    try:
        code = compile(src, "<string>", "exec", dont_inherit=True)
    except MemoryError:
        return "memory", "", "", "MemoryError"
    except BaseException as e:
        return "syntax_error", "", "", type(e).__name__
    captured = io.StringIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                exec(code, ns, ns)
        fn = ns.get("simple_math_problem")
        if fn is None:
            return "no_answer", "", "", "missing simple_math_problem"
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(io.StringIO()):
            out = fn()
    except MemoryError:
        return "memory", "", "", "MemoryError"
    except BaseException as e:
        return "runtime_error", "", "", type(e).__name__
    pred, source = to_number(out), "return"
    if pred is None:
        pred, source = extract_text_answer(captured.getvalue()), "stdout"
    if pred is None:
        return "done", "none", "", source
    if isinstance(pred, float):
        return "done", "float", float.__repr__(pred), source
    if pred.bit_length() > 3000:
        return "done", "huge_int", str(pred.bit_length()), source
    return "done", "int", int.__repr__(pred), source


def child_source() -> str:
    """This module's text, for the sandboxed child (see :mod:`bench.evaluate.sandbox.child`)."""
    with open(__file__, encoding="utf-8") as f:
        return f.read()


# --------------------------------------------------------------------------- verdict


def grade(res, gold) -> dict:
    """Row for one executed program (``res``: a sandbox ``ExecResult`` of :func:`run_program`)
    against ``gold`` (already :func:`reference_gold`), in :func:`bench.evaluate.gsm8k.grade`'s
    schema: status ok / wrong / no_answer / the sandbox's failure status."""
    row = {
        "status": res.status,
        "correct": False,
        "value": None,
        "value_source": "",
        "detail": res.detail,
    }
    if res.status != "done":
        return row
    source = res.detail if res.detail in ("return", "stdout") else ""
    if res.kind == "none":
        row.update(status="no_answer", value_source=source, detail="no number returned or printed")
        return row
    pred = res.value if res.kind in ("int", "float") else None
    correct = numbers_equal(pred, gold)
    row.update(
        status="ok" if correct else "wrong",
        correct=correct,
        value=res.value,
        value_source=source,
        detail="" if pred is not None else f"not a number ({res.kind})",
    )
    return row
