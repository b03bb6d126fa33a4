"""GSM8K scoring: extraction, gold parsing, comparison, bootstrap CIs and the CLI."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bench.evaluate.__main__ import main
from bench.evaluate.bootstrap import bootstrap_accuracy, paired_bootstrap_difference
from bench.evaluate.gsm8k import (
    answers_match,
    extract_program,
    grade,
    parse_gold,
    parse_stdout_answer,
)
from bench.evaluate.sandbox.runner import ExecResult

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = ROOT / "tests" / "fixtures" / "gsm8k_hostile"

PROG = "def simple_math_problem():\n    a = 3\n    result = a * 4\n    return result\n"


# --------------------------------------------------------------------------- extraction


def test_extract_from_first_def_and_cut_at_eos():
    text = "Let me solve it.\n" + PROG + "<|endoftext|>def simple_math_problem():\n    return 99\n"
    assert extract_program(text) == PROG


def test_extract_second_def_after_eos_is_ignored_even_if_valid():
    # a fixed-length canvas keeps writing after EOS: the first program is the answer
    run_on = PROG + "<|endoftext|>\ndef simple_math_problem():\n    return 0\n" * 3
    g: dict = {}
    exec(extract_program(run_on), g)
    assert g["simple_math_problem"]() == 12


def test_extract_fenced_block_wins():
    text = "def helper(): pass\n```python\n" + PROG + "```\nmore words def x"
    assert extract_program(text) == PROG
    unterminated = "Here:\n```python\n" + PROG
    assert extract_program(unterminated) == PROG


def test_extract_keeps_lines_before_first_syntax_error():
    text = PROG + "The answer is 12 because three times four.\nmore prose"
    code = extract_program(text)
    assert code == PROG.rstrip("\n") + "\n"
    compile(code, "x", "exec")


def test_extract_never_raises_on_odd_text():
    for text in ["", "no code here", "(" * 5000, "def \x00 x", "```", "def"]:
        assert isinstance(extract_program(text), str)


def test_extract_custom_eos():
    assert extract_program(PROG + "[EOS]garbage(", eos=("[EOS]",)) == PROG


# --------------------------------------------------------------------------- answers


def test_parse_gold():
    assert parse_gold("She has 3 left.\n#### 1,234") == 1234
    assert parse_gold("#### -10") == -10
    assert parse_gold("#### $5") == 5
    assert parse_gold("2.5") == 2.5 and parse_gold(7) == 7 and parse_gold("1,250") == 1250
    for bad in (True, None, "no number", float("nan"), "#### abc"):
        with pytest.raises(ValueError):
            parse_gold(bad)


def test_answers_match_reference_rules():
    assert answers_match(18, 18) and not answers_match(17, 18)
    assert answers_match(18.0000001, 18)  # float within 1e-6 of an int is that int
    assert answers_match(2.5004, 2.5) and not answers_match(2.502, 2.5)  # |a-b| <= 1e-3
    assert answers_match(18.0009, 18) and not answers_match(18.002, 18)
    for bad in (True, False, "18", None, float("nan"), float("inf"), [18], 18 + 0j):
        assert not answers_match(bad, 18), bad
    assert not answers_match(10**400, 1.5)  # no OverflowError
    assert answers_match(10**30, 10**30) and not answers_match(10**30 + 1, 10**30)


def test_stdout_fallback_parsing():
    assert parse_stdout_answer("step 1: 5\nThe answer is $1,250.") == 1250
    assert parse_stdout_answer("x = 3\n#### 42\n7") == 42
    assert parse_stdout_answer("3 apples and 4.5 pears") == 4.5
    assert parse_stdout_answer("nothing") is None


def test_grade_statuses():
    assert grade(ExecResult("done", kind="int", value=5), 5)["status"] == "ok"
    assert grade(ExecResult("done", kind="int", value=4), 5)["status"] == "wrong"
    row = grade(ExecResult("done", kind="none", stdout="answer: 5"), 5)
    assert row["correct"] and row["value_source"] == "stdout"
    off = grade(ExecResult("done", kind="none", stdout="answer: 5"), 5, stdout_fallback=False)
    assert off["status"] == "no_answer" and not off["correct"]
    assert grade(ExecResult("done", kind="str", value="5"), 5)["status"] == "wrong"
    assert grade(ExecResult("done", kind="float", value="nan"), 5)["status"] == "wrong"
    assert grade(ExecResult("timeout"), 5) == {
        "status": "timeout",
        "correct": False,
        "value": None,
        "value_source": "",
        "detail": "",
    }


# --------------------------------------------------------------------------- statistics


def test_bootstrap_matches_paper_definition_and_is_seeded():
    x = np.arange(1319) < 237  # 18.0 %
    ci = bootstrap_accuracy(x, seed=3)
    assert ci.n_resamples == 1000 and ci.n == 1319
    assert ci.accuracy == pytest.approx(237 / 1319)
    assert ci.low < ci.accuracy < ci.high
    assert abs(ci.point - ci.accuracy) < 0.003  # mean of bootstrap accuracies
    half = 1.96 * math.sqrt(ci.accuracy * (1 - ci.accuracy) / 1319)  # normal approximation
    assert (ci.high - ci.low) / 2 == pytest.approx(half, rel=0.15)
    assert bootstrap_accuracy(x, seed=3) == ci
    assert bootstrap_accuracy(x, seed=4) != ci
    # an independent percentile bootstrap over the same resampled indices
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 1319, size=(1000, 1319))
    accs = x[idx].mean(axis=1)
    lo, hi = np.percentile(accs, [2.5, 97.5])
    assert ci.low == pytest.approx(lo, abs=0.01) and ci.high == pytest.approx(hi, abs=0.01)


def test_bootstrap_degenerate_and_tiny():
    # every outcome equal: the percentile interval would be [v, v]; the Wilson interval instead
    # (z^2 / (n + z^2) is its bound at 0 / n, n / (n + z^2) at n / n)
    z2 = 1.959963984540054**2
    for v, lo, hi in ((0.0, 0.0, z2 / (50 + z2)), (1.0, 50 / (50 + z2), 1.0)):
        ci = bootstrap_accuracy(np.full(50, v))
        assert (ci.accuracy, ci.point, ci.method) == (v, v, "Wilson score interval")
        assert (ci.low, ci.high) == pytest.approx((lo, hi), abs=1e-12)
    one = bootstrap_accuracy([1])
    assert one.low == pytest.approx(1 / (1 + z2)) and one.high == 1.0
    assert math.isnan(bootstrap_accuracy([]).accuracy)
    with pytest.raises(ValueError, match="0/1"):
        bootstrap_accuracy([0.5, 1])


def test_paired_bootstrap_difference():
    rng = np.random.default_rng(0)
    a = rng.random(1000) < 0.5
    b = a.copy()
    flip = rng.choice(1000, 60, replace=False)
    b[flip[:50]] = False  # B loses 50 problems A solves ...
    b[flip[50:]] = True  # ... and gains up to 10
    d = paired_bootstrap_difference(a, b, seed=1)
    assert d.accuracy == pytest.approx(a.mean() - b.mean())
    assert d.low > 0  # clearly better when paired
    # pairing matters: the unpaired spread of two ~50 % accuracies is much wider
    unpaired = bootstrap_accuracy(a, seed=1)
    assert (d.high - d.low) < 0.5 * 2 * (unpaired.high - unpaired.low)
    with pytest.raises(ValueError, match="same problems"):
        paired_bootstrap_difference(a, b[:-1])


# --------------------------------------------------------------------------- CLI


def _cli(*args, cwd=None):
    """The real CLI in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "bench.evaluate", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _main(capsys, *args):
    """The same entry point in-process (fast): (exit status, stdout, stderr)."""
    try:
        rc = main(list(args))
    except SystemExit as e:
        rc = e.code
    cap = capsys.readouterr()
    return SimpleNamespace(returncode=rc, stdout=cap.out, stderr=cap.err)


def _hostile_rows():
    rows = []
    for p in sorted(HOSTILE.glob("*.py")):
        text = p.read_text()
        if "# needs:" in text:  # isolation-dependent ones are covered by test_sandbox.py
            continue
        expect = text.split("# expect: ", 1)[1].split("\n", 1)[0].split("|")
        rows.append(({"id": p.stem, "program": text, "answer": 42}, expect))
    return rows


def test_cli_hostile_batch_exit_0_every_row_in_order(tmp_path):
    rows = _hostile_rows()
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r, _ in rows))
    out = tmp_path / "out.jsonl"
    summary = tmp_path / "summary.json"
    r = _cli(
        "gsm8k",
        "--programs",
        str(inp),
        "--out",
        str(out),
        "--timeout",
        "1.5",
        "--workers",
        "4",
        "--memory-mb",
        "128",  # small: the memory bombs touch every page they get before they fail
        "--summary",
        str(summary),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["id"] for g in got] == [row["id"] for row, _ in rows]
    for g, (_, expect) in zip(got, rows):
        assert g["status"] in expect, g
        assert g["correct"] == (g["status"] == "ok")
        assert set(g) >= {"id", "correct", "status", "value", "isolation"}
    assert not (tmp_path / "out.jsonl.partial").exists()
    s = json.loads(summary.read_text())
    n_ok = sum(g["correct"] for g in got)
    assert s["accuracy"] == pytest.approx(n_ok / len(got)) and s["n"] == len(got)
    assert s["ci_low"] <= s["accuracy"] <= s["ci_high"]
    assert "accuracy" in r.stdout and "95% CI" in r.stdout


def test_cli_completions_and_gold_text(tmp_path, capsys):
    """A raw completion is reduced to its program before grading, a gold answer may be text
    ("#### 12", "$13"), blank lines are skipped and a row without an id is named by its line."""
    inp = tmp_path / "in.jsonl"
    rows = [
        {
            "id": "c",
            "completion": "Sure.\n```python\n" + PROG + "```\nrun-on(",
            "answer": "So 3*4 = 12.\n#### 12",
        },
        {"program": PROG, "answer": "$13"},
    ]
    inp.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    r = _main(capsys, "gsm8k", "--programs", str(inp), "--out", str(tmp_path / "o.jsonl"))
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [(g["id"], g["status"], g["value"]) for g in got] == [("c", "ok", 12), (2, "wrong", 12)]


def test_cli_cache_dir_serves_a_second_run_and_cold_runs_fresh_interpreters(tmp_path, capsys):
    """``--cache-dir``: the second run of the same programs comes from the cache, rows and
    verdicts unchanged; ``--cold`` names the cold path in the summary."""
    inp = tmp_path / "in.jsonl"
    rows = [{"id": i, "program": PROG, "answer": 12 + i} for i in range(3)]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["gsm8k", "--programs", str(inp), "--cache-dir", str(tmp_path / "cache")]
    outs = []
    for n in range(2):
        out = tmp_path / f"o{n}.jsonl"
        r = _main(capsys, *args, "--out", str(out), "--summary", str(tmp_path / f"s{n}.json"))
        assert r.returncode == 0, r.stderr
        outs.append([json.loads(line) for line in out.read_text().splitlines()])
    # the repeats inside the first run are run once; the second run has every row cached
    assert [g["cached"] for g in outs[0]] == [False, True, True]
    assert [g["cached"] for g in outs[1]] == [True, True, True]
    assert [(g["status"], g["value"]) for g in outs[1]] == [
        (g["status"], g["value"]) for g in outs[0]
    ]
    assert [g["status"] for g in outs[0]] == ["ok", "wrong", "wrong"]
    assert json.loads((tmp_path / "s1.json").read_text())["cached"] == 3
    r = _main(capsys, "gsm8k", "--programs", str(inp), "--out", str(tmp_path / "c.jsonl"), "--cold")
    assert r.returncode == 0 and "(cold path, 0 from the cache)" in r.stdout, r.stdout


@pytest.mark.parametrize(
    "content,needle",
    [
        ('{"program": "x", "answer": 1}\nnot json\n', ":2: not valid JSON"),
        ('{"program": "x"}\n', ":1: missing field 'answer'"),
        ('{"answer": 3}\n', ":1: missing string field 'program'"),
        ("[1, 2]\n", ":1: expected a JSON object"),
        ('{"program": "x", "answer": "seven"}\n', ":1: answer: no number"),
        ("\n\n", "no programs"),
    ],
)
def test_cli_bad_input_exit_2_one_line(tmp_path, capsys, content, needle):
    inp = tmp_path / "in.jsonl"
    inp.write_text(content)
    r = _main(capsys, "gsm8k", "--programs", str(inp), "--out", str(tmp_path / "o.jsonl"))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_cli_usage_errors_exit_2(tmp_path, capsys):
    for args in (
        [],
        ["gsm8k"],
        ["nosuch"],
        ["gsm8k", "--programs", str(tmp_path / "missing"), "--out", str(tmp_path / "o.jsonl")],
        ["gsm8k", "--programs", str(tmp_path / "missing"), "--out", "/nonexistent/o"],
    ):
        r = _main(capsys, *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
