"""``sandbox`` (opt-in): the GSM8K sandbox on the 1,319 test problems' programs.

Each GSM8K test problem becomes a program that replays its solution's calculator steps
(``<<expr=...>>``) and returns the gold answer (:func:`gsm8k_programs`); every one must grade
``ok`` with the standard grader. Rows, one sandbox per path, each a fresh
:class:`~bench.evaluate.sandbox.runner.Sandbox` with ``--sandbox-workers`` workers:

- ``warm``: the warm path (a child forked per program from a pre-imported parent inside the
  sandbox); ``cold``: a fresh interpreter per program (``--sandbox-cold``, the path used where
  the isolation level has no warm one);
- ``cache``: the same programs again through a verdict cache filled by a first pass (the
  second pass, every program a hit);
- ``hostile``: the hostile programs of tests/fixtures/gsm8k_hostile (where this checkout has
  them) on the warm path: ``unexpected`` counts programs graded outside their ``# expect:``
  statuses, ``fooled`` those graded correct that should not be.

``setup_s`` is the sandbox's start (probe, canaries, the first warm parent), ``run_s`` the
batch; the 1-minute load average is in the table's header (docs/gsm8k-sandbox.md).
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path

from bench.config import ConfigError
from bench.perf import common

HELP = "the GSM8K sandbox on the 1,319 test programs: warm, cold, cached, hostile (opt-in)"

_HOSTILE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "gsm8k_hostile"
_STEP = re.compile(r"<<([^=<>]+)=")
_ARITH = re.compile(r"[\d\s.+\-*/()%]+")
_PLACEHOLDER = re.compile(r"__[A-Z_]+__")  # filled in by the tests (a port, a file): skipped


def add_arguments(group) -> None:
    group.add_argument(
        "--sandbox-workers", type=int, default=0, help="sandbox: workers (0 = its default)"
    )
    group.add_argument(
        "--sandbox-cold",
        action="store_true",
        help="sandbox: also time the cold path (a fresh interpreter per program)",
    )
    group.add_argument(
        "--sandbox-n", type=int, default=0, help="sandbox: only the first N problems (0 = all)"
    )


def gsm8k_programs(n: int = 0) -> tuple[list[str], list]:
    """One program per GSM8K test problem (its calculator steps, then ``return gold``) and the
    golds; the first ``n`` (0 = all)."""
    from bench.data.program.gsm8k import load_gsm8k_test

    problems = load_gsm8k_test()[0]
    programs = []
    for p in problems[: n or None]:
        steps = [s.strip() for s in _STEP.findall(p.answer)]
        body = "".join(f"    s{i} = {s}\n" for i, s in enumerate(steps) if _ARITH.fullmatch(s))
        programs.append(f"import math\n\ndef simple_math_problem():\n{body}    return {p.gold!r}\n")
    return programs, [p.gold for p in problems[: n or None]]


def _timed(cfg, programs, golds) -> dict:
    from bench.evaluate.gsm8k import grade
    from bench.evaluate.sandbox.runner import Sandbox

    t0 = time.perf_counter()
    with Sandbox(cfg) as sb:
        setup = time.perf_counter() - t0
        t1 = time.perf_counter()
        res = sb.run_many(programs)
        run = time.perf_counter() - t1
        mode, isolation, workers = sb.mode, sb.isolation, sb.workers
    ok = sum(grade(r, g)["status"] == "ok" for r, g in zip(res, golds))
    return {"path": mode, "isolation": isolation, "workers": workers, "programs": len(res),
            "ok": ok, "setup_s": setup, "run_s": run, "ms_per_program": 1e3 * run / len(res),
            "cached": sum(r.cached for r in res)}  # fmt: skip


def _hostile(cfg) -> dict | None:
    from bench.evaluate.gsm8k import grade
    from bench.evaluate.sandbox.runner import Sandbox

    if not _HOSTILE.is_dir():
        return None
    with Sandbox(cfg) as sb:
        feats = set(sb.isolation.split("+"))
        have = {"nproc": bool({"uid", "userns"} & feats), "uid": "uid" in feats,
                "separate_uid_or_pidns": bool({"uid", "pidns"} & feats),
                "netns": "netns" in feats, "fsview": "bwrap" in feats}  # fmt: skip
        cases = []
        for p in sorted([*_HOSTILE.glob("*.py"), *_HOSTILE.glob("*.prog")]):
            text = p.read_text(encoding="utf-8")
            expect = set(re.search(r"^# expect: (\S+)$", text, re.M).group(1).split("|"))
            needs = re.findall(r"^# needs: (\S+)$", text, re.M)
            if all(have[n] for n in needs) and not _PLACEHOLDER.search(text):
                cases.append((text, expect))
        res = sb.run_many(t for t, _ in cases)
        mode = sb.mode
    rows = [grade(r, 42) for r in res]
    unexpected = sum(g["status"] not in e for g, (_, e) in zip(rows, cases))
    fooled = sum(g["correct"] and "ok" not in e for g, (_, e) in zip(rows, cases))
    return {"path": f"{mode} (hostile)", "programs": len(res), "unexpected": unexpected,
            "fooled": fooled}  # fmt: skip


def run(model_list, args, device) -> list[dict]:
    from bench.evaluate.sandbox.runner import SandboxConfig

    if args.sandbox_workers < 0 or args.sandbox_n < 0:
        raise ConfigError("sandbox: --sandbox-workers and --sandbox-n must be >= 0")
    programs, golds = gsm8k_programs(args.sandbox_n)
    rows = []
    with tempfile.TemporaryDirectory(prefix="sflm-perf-sandbox-") as tmp:
        base = {"workers": args.sandbox_workers, "base_dir": tmp}
        rows.append(_timed(SandboxConfig(**base), programs, golds))
        if args.sandbox_cold:
            rows.append(_timed(SandboxConfig(**base, warm=False), programs, golds))
        cached = SandboxConfig(**base, cache_dir=str(Path(tmp) / "verdicts"))
        _timed(cached, programs, golds)  # fills the cache
        rows.append({**_timed(cached, programs, golds), "path": "cache"})
        hostile = _hostile(SandboxConfig(**base, timeout_s=1.5, memory_mb=128))
        if hostile is not None:
            rows.append(hostile)
    for r in rows:
        r["bench"] = "sandbox"
        common.progress(
            "sandbox " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                   for k, v in r.items() if k != "bench")
        )  # fmt: skip
    return rows
