"""GSM8K-style scoring: program extraction, sandboxed execution, answer comparison, CIs.

The protocol follows the reference harness (FrankCCCCC/s-flm @ 18d586f `main.py::_gsm8k_eval`,
`sandbox_gsm8k.py::_extract_code`, `_safe_exec_no_timer`, `_numbers_equal`, after
JaeyeonKim01/PUMA):

- extraction (:func:`extract_program`): the fenced ```python block if there is one, else the
  text from the first ``def``; if that does not compile, the lines before the first
  ``SyntaxError`` line. Unlike the reference we first cut the continuation at the first EOS
  (token or string): a fixed-length diffusion canvas keeps generating after it, and a second
  ``def simple_math_problem`` in the run-on text must not replace the first.
- execution: :mod:`bench.evaluate.sandbox.runner` (a fresh interpreter per program; the reference
  ``exec``\\ s in-process with restricted builtins; we allow the whole standard library, so
  programs using ``fractions`` or ``datetime`` count, and nothing outside it is importable).
- answer (:func:`grade`): the return value must be a number (``bool`` is not); a float within
  1e-6 of an integer counts as that integer; ints compare exactly, otherwise
  ``|pred - gold| <= 1e-3`` (reference tolerance); NaN / inf are wrong. When the function
  returns ``None`` the reference parses stdout ("answer is/=/: N", "#### N", else the last
  number): kept as ``stdout_fallback`` (default on), with ``value_source`` = "stdout".
- gold (:func:`parse_gold`): the number after ``####``, commas and ``$`` stripped.
- accuracy: percentile bootstrap (:mod:`bench.evaluate.bootstrap`).

That is ``grader: standard``. ``grader: reference`` (:mod:`bench.evaluate.gsm8k_reference`)
reproduces the harness's verdict instead: the whole canvas as input, its extraction, its
namespace (``math`` pre-imported, 13 builtins, imports of ``math`` only), its number parsing
and comparison. docs/gsm8k-grader.md lists where the two differ and why.

CLI: ``python -m bench.evaluate gsm8k --programs IN.jsonl --out OUT.jsonl [--grader reference]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence

from bench.evaluate import gsm8k_reference
from bench.evaluate.bootstrap import PAPER_RESAMPLES, bootstrap_accuracy
from bench.evaluate.sandbox.runner import STATUSES, ExecResult, Sandbox, SandboxConfig, SandboxError
from bench.evaluate.usage import PROG as EVALUATE_PROG
from bench.evaluate.usage import check_out_dir, read_json_lines
from bench.usage import UsageError, usage_exit

DEFAULT_EOS = ("<|endoftext|>",)
GRADERS = ("standard", "reference")  # this module's grader; the paper harness's
REFERENCE_RUNNER = "bench.evaluate.gsm8k_reference"  # SandboxConfig.runner for "reference"
FLOAT_TOL = 1e-3  # reference: floats equal when |a - b| <= 1e-3
INT_SNAP = 1e-6  # reference: a float within 1e-6 of an integer is that integer

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\r?\n(.*?)(?:```|\Z)", re.S | re.I)
_DEF = re.compile(r"(?<![A-Za-z0-9_])def\s")
_NUM = r"-?\$?\s?(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
_GOLD_RE = re.compile(r"####\s*(" + _NUM + r")")
_STDOUT_PATTERNS = (
    re.compile(r"answer\s*(?:is|=|:)\s*(" + _NUM + r")", re.I),
    re.compile(r"####\s*(" + _NUM + r")"),
)
_ANY_NUM = re.compile(_NUM)


# --------------------------------------------------------------------------- extraction


def truncate_at_eos(text: str, eos: Sequence[str] = DEFAULT_EOS) -> str:
    """Text before the first occurrence of any EOS marker."""
    cut = len(text)
    for marker in eos:
        if marker:
            i = text.find(marker)
            if 0 <= i < cut:
                cut = i
    return text[:cut]


def extract_program(text: str, eos: Sequence[str] = DEFAULT_EOS) -> str:
    """The program in a sampled continuation (see the module docstring). Never raises on
    odd text: whatever does not compile is left for the sandbox to report."""
    text = truncate_at_eos(text, eos)
    m = _FENCE.search(text)
    if m:
        code = m.group(1)
    else:
        d = _DEF.search(text)
        code = text[d.start() :] if d else text
    try:
        compile(code, "<program>", "exec", dont_inherit=True)
        return code
    except SyntaxError as e:
        lineno = e.lineno or 0
    except Exception:  # null bytes, nesting too deep, ...
        return code
    if lineno > 1:
        code = "\n".join(code.splitlines()[: lineno - 1]) + "\n"
    return code


# --------------------------------------------------------------------------- answers


def _number(s: str) -> int | float | None:
    s = s.replace(",", "").replace("$", "").replace(" ", "")
    try:
        return int(s) if re.fullmatch(r"-?\d+", s) else float(s)
    except ValueError:
        return None


def parse_gold(answer) -> int | float:
    """The gold number: a number, a numeric string (``"1,234"``, ``"$5"``) or a GSM8K answer
    text ending in ``#### N``. Raises ValueError naming what it got."""
    if isinstance(answer, bool):
        raise ValueError(f"gold answer must be a number, got {answer!r}")
    if isinstance(answer, (int, float)):
        if isinstance(answer, float) and not math.isfinite(answer):
            raise ValueError(f"gold answer must be finite, got {answer!r}")
        return answer
    if not isinstance(answer, str):
        raise ValueError(f"gold answer must be a number or a string, got {type(answer).__name__}")
    m = _GOLD_RE.search(answer)
    v = _number(m.group(1)) if m else _number(answer.strip())
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        raise ValueError(f"no number in gold answer {answer[-80:]!r}")
    return v


def parse_stdout_answer(stdout: str) -> int | float | None:
    """Reference fallback when the function returns None: "answer is/=/: N", then "#### N",
    else the last number printed."""
    for pat in _STDOUT_PATTERNS:
        hits = pat.findall(stdout)
        if hits:
            return _number(hits[-1])
    hits = _ANY_NUM.findall(stdout)
    return _number(hits[-1]) if hits else None


def answers_match(pred, gold, tol: float = FLOAT_TOL) -> bool:
    """Numeric equality as the reference: ints exact, else absolute tolerance; bools, strings,
    NaN / inf and anything that is not a plain int / float are never equal."""
    if type(pred) not in (int, float) or type(gold) not in (int, float):
        return False
    if isinstance(pred, float):
        if not math.isfinite(pred):
            return False
        if abs(pred - round(pred)) <= INT_SNAP:
            pred = int(round(pred))
    if isinstance(pred, int) and isinstance(gold, int):
        return pred == gold
    try:
        return abs(pred - gold) <= tol
    except OverflowError:
        return False


def grade(res: ExecResult, gold, *, stdout_fallback: bool = True) -> dict:
    """Status / correctness of one executed program against ``gold``."""
    row = {
        "status": res.status,
        "correct": False,
        "value": None,
        "value_source": "",
        "detail": res.detail,
    }
    if res.status != "done":
        return row
    value, source = res.value, "return"
    if res.kind == "none":
        fallback = parse_stdout_answer(res.stdout) if stdout_fallback else None
        if fallback is None:
            row.update(status="no_answer", detail="returned None")
            return row
        value, source = fallback, "stdout"
    correct = res.kind in ("int", "float", "none") and answers_match(value, gold)
    row.update(
        status="ok" if correct else "wrong", correct=correct, value=value, value_source=source
    )
    if res.kind not in ("int", "float", "none"):
        row["detail"] = f"not a number ({res.kind})"
    return row


# --------------------------------------------------------------------------- batches


#: characters of a program's stdout / stderr kept in its row (the last ones)
OUTPUT_EXCERPT = 400


def evaluate_programs(
    programs: Sequence[str],
    golds: Sequence,
    *,
    sandbox: Sandbox,
    stdout_fallback: bool = True,
    on_row: Callable[[int, dict], None] | None = None,
    grader: str = "standard",
) -> list[dict]:
    """Run and grade programs (any order of completion; rows returned in input order).

    ``grader="reference"`` needs a sandbox built with ``runner=REFERENCE_RUNNER``; its golds may
    be numbers or GSM8K answer texts (read the reference's way)."""
    if len(programs) != len(golds):
        raise ValueError(f"{len(programs)} programs but {len(golds)} gold answers")
    if grader not in GRADERS:
        raise ValueError(f"grader: must be one of {', '.join(GRADERS)}, got {grader!r}")
    if (grader == "reference") != (sandbox.cfg.runner == REFERENCE_RUNNER):
        raise ValueError(
            f"grader {grader!r} needs a sandbox with runner="
            f"{REFERENCE_RUNNER if grader == 'reference' else ''!r}, got {sandbox.cfg.runner!r}"
        )
    rows: list[dict | None] = [None] * len(programs)

    def done(i: int, res: ExecResult) -> None:
        if grader == "reference":
            row = gsm8k_reference.grade(res, gsm8k_reference.reference_gold(golds[i]))
        else:
            row = grade(res, golds[i], stdout_fallback=stdout_fallback)
        row["elapsed_s"] = round(res.elapsed_s, 4)
        row["isolation"] = res.isolation
        row["cached"] = res.cached
        # the end of what the program printed (per-item records: bench.records)
        row["stdout"] = res.stdout[-OUTPUT_EXCERPT:]
        row["stderr"] = res.stderr[-OUTPUT_EXCERPT:]
        rows[i] = row
        if on_row is not None:
            on_row(i, row)

    sandbox.run_many(programs, callback=done)
    return rows  # type: ignore[return-value]


def summarize(rows: Sequence[dict], *, n_resamples: int = PAPER_RESAMPLES, seed: int = 0) -> dict:
    """Accuracy with its percentile-bootstrap CI and the fraction of each status."""
    ci = bootstrap_accuracy([bool(r["correct"]) for r in rows], n_resamples=n_resamples, seed=seed)
    counts = Counter(r["status"] for r in rows)
    n = len(rows)
    return {
        "n": n,
        "accuracy": ci.accuracy,
        "point": ci.point,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "n_resamples": ci.n_resamples,
        "ci_method": ci.method,  # WILSON where every problem has the same outcome
        "seed": seed,
        "status_counts": {s: counts.get(s, 0) for s in STATUSES},
        "status_fractions": {s: (counts.get(s, 0) / n if n else 0.0) for s in STATUSES},
        "isolation": sorted({r.get("isolation", "") for r in rows}),
    }


def format_summary(s: dict, name: str = "gsm8k") -> str:
    pct = lambda v: f"{100 * v:.1f}%"  # noqa: E731
    st = " ".join(f"{k}={v}" for k, v in s["status_counts"].items() if v)
    return (
        f"{name}: accuracy {pct(s['accuracy'])} (95% CI {pct(s['ci_low'])}-"
        f"{pct(s['ci_high'])}, bootstrap mean {pct(s['point'])}, B={s['n_resamples']}, "
        f"seed {s['seed']}) over {s['n']} programs; isolation {','.join(s['isolation'])}; "
        f"{st}"
    )


# --------------------------------------------------------------------------- CLI

CLI_HELP = "run model-written programs in the sandbox and score them against gold answers"
PROG = f"{EVALUATE_PROG} gsm8k"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--programs",
        required=True,
        metavar="IN.jsonl",
        help="one JSON object per line: program (or completion, extracted first), "
        "answer (number or GSM8K answer text), optional id",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="OUT.jsonl",
        help="one row per input, in input order (streamed to OUT.partial first)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="programs at once (0 = min(4 x CPU cores, 32): runs are latency-bound)",
    )
    p.add_argument("--timeout", type=float, default=5.0, help="wall-clock seconds per program")
    p.add_argument("--memory-mb", type=int, default=1024, help="address-space limit per program")
    p.add_argument("--isolation", choices=("auto", "rlimits", "full"), default="auto")
    p.add_argument("--bootstrap", type=int, default=PAPER_RESAMPLES, help="bootstrap resamples B")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument(
        "--no-stdout-fallback",
        action="store_true",
        help="do not parse stdout when the function returns None",
    )
    p.add_argument(
        "--eos",
        action="append",
        default=None,
        help=f"EOS marker cut before extracting a completion (default {DEFAULT_EOS})",
    )
    p.add_argument("--summary", default="", metavar="PATH", help="also write the summary JSON")
    p.add_argument(
        "--cache-dir",
        default="",
        metavar="DIR",
        help="verdict cache: programs already run under these settings are not run again "
        "(default: none; bench.evaluate.sandbox.cache)",
    )
    p.add_argument(
        "--cold",
        action="store_true",
        help="a fresh interpreter per program even where the warm path is available",
    )
    p.add_argument(
        "--grader",
        choices=GRADERS,
        default="standard",
        help="standard: this benchmark's grader; reference: the paper harness's verdict "
        "(completions are read whole, EOS markers dropped; docs/gsm8k-grader.md)",
    )


def read_inputs(path: str, eos: Sequence[str], grader: str = "standard") -> list[dict]:
    """Parse IN.jsonl; any problem raises UsageError naming the line. With the reference
    grader a completion is the harness's input (the canvas decoded without special tokens:
    EOS markers are dropped, the text after them kept) and golds are read its way."""
    items = []
    for lineno, obj in read_json_lines(path, "--programs"):
        where = f"{path}:{lineno}"
        if isinstance(obj.get("program"), str):
            program = obj["program"]
        elif isinstance(obj.get("completion"), str) and grader == "reference":
            text = obj["completion"]
            for marker in eos:
                text = text.replace(marker, "") if marker else text
            program = gsm8k_reference.extract_code(text)
        elif isinstance(obj.get("completion"), str):
            program = extract_program(obj["completion"], eos)
        else:
            raise UsageError(f"{where}: missing string field 'program' (or 'completion')")
        if "answer" not in obj:
            raise UsageError(f"{where}: missing field 'answer'")
        try:
            gold = parse_gold(obj["answer"])
        except ValueError as e:
            raise UsageError(f"{where}: answer: {e}") from None
        if grader == "reference":
            gold = gsm8k_reference.reference_gold(obj["answer"])
            if gold is None:
                raise UsageError(f"{where}: answer: no number the reference can read")
        items.append({"id": obj.get("id", lineno), "program": program, "gold": gold})
    return items


def _write_json(path: str, obj) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> int:
    """The ``gsm8k`` subcommand. Exit 0 whatever the programs do; 2 for bad input; 1 when the
    sandbox itself is broken (canary failed)."""
    eos = tuple(args.eos) if args.eos else DEFAULT_EOS
    try:
        if args.workers < 0 or args.bootstrap < 1 or not (args.timeout > 0):
            raise UsageError("--workers must be >= 0, --bootstrap >= 1, --timeout > 0")
        if args.grader == "reference" and args.no_stdout_fallback:
            raise UsageError("--no-stdout-fallback: the reference grader always reads stdout")
        items = read_inputs(args.programs, eos, args.grader)
        if not items:
            raise UsageError(f"{args.programs}: no programs (the file has no JSON lines)")
        check_out_dir("--out", args.out)
        check_out_dir("--summary", args.summary)
        cfg = SandboxConfig(
            timeout_s=args.timeout,
            memory_mb=args.memory_mb,
            isolation=args.isolation,
            workers=args.workers,
            runner=REFERENCE_RUNNER if args.grader == "reference" else "",
            warm=not args.cold,
            cache_dir=args.cache_dir,
        )
    except (UsageError, ValueError) as e:
        return usage_exit(e, PROG)
    t0 = time.monotonic()
    partial = args.out + ".partial"
    try:
        with Sandbox(cfg) as sb:
            sb.self_test()
            pending: dict[int, dict] = {}
            next_i = 0
            with open(partial, "w", encoding="utf-8") as f:

                def on_row(i: int, row: dict) -> None:
                    nonlocal next_i
                    pending[i] = {
                        "id": items[i]["id"],
                        "correct": row["correct"],
                        "status": row["status"],
                        "value": row["value"],
                        "gold": items[i]["gold"],
                        **{
                            k: row[k]
                            for k in ("value_source", "detail", "elapsed_s", "isolation", "cached")
                        },
                    }
                    while next_i in pending:  # input order, flushed as soon as possible
                        f.write(json.dumps(pending.pop(next_i)) + "\n")
                        next_i += 1
                    f.flush()

                rows = evaluate_programs(
                    [it["program"] for it in items],
                    [it["gold"] for it in items],
                    sandbox=sb,
                    stdout_fallback=not args.no_stdout_fallback,
                    on_row=on_row,
                    grader=args.grader,
                )
            os.replace(partial, args.out)
            workers, child_python, mode = sb.workers, sb.child_python, sb.mode
    except SandboxError as e:
        print(f"{PROG}: sandbox broken: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        return usage_exit(f"cannot write {partial}: {e}", PROG)
    summary = summarize(rows, n_resamples=args.bootstrap, seed=args.seed)
    summary["wall_s"] = round(time.monotonic() - t0, 2)
    summary["workers"] = workers
    summary["python"] = child_python
    summary["path"] = mode
    summary["cached"] = sum(bool(r.get("cached")) for r in rows)
    summary["grader"] = args.grader
    print(
        format_summary(summary)
        + f"; grader {args.grader}; {summary['wall_s']} s with {workers} workers ({mode} path, "
        f"{summary['cached']} from the cache); programs ran on Python {child_python}"
    )
    if args.summary:
        _write_json(args.summary, summary)
    return 0
