"""The two GSM8K graders on a table of crafted completions: the verdict each gives, and why.

``grader: standard`` is :mod:`bench.evaluate.gsm8k` (cut at the first EOS, whole standard
library, strict number types); ``grader: reference`` is :mod:`bench.evaluate.gsm8k_reference`
(the paper harness's verdict, reproduced in our sandbox). Each case is the decoded canvas as the
model wrote it, ``<|endoftext|>`` standing for the EOS token: the standard grader cuts there,
the reference grader drops the marker and reads on (the harness decodes the whole canvas with
``skip_special_tokens=True``).

Where the reference column comes from: the released harness itself. Every case's text, with
the EOS markers removed, and its answer were passed to ``sandbox_gsm8k.evaluate_samples(text,
answer, timeout_s=5.0)`` of FrankCCCCC/s-flm at its first commit (18d586f), run offline once
(Python 3.11, outside this repository); it returned exactly the ``ref`` verdicts below for all
cases. The ``std`` column is this benchmark's grader, as designed (docs/gsm8k-grader.md).
"""

from __future__ import annotations

import json

import pytest

from bench.evaluate import gsm8k_reference as R
from bench.evaluate.gsm8k import (
    DEFAULT_EOS,
    REFERENCE_RUNNER,
    evaluate_programs,
    extract_program,
    parse_gold,
)
from bench.evaluate.sandbox.runner import Sandbox, SandboxConfig

EOS = DEFAULT_EOS[0]
F = "def simple_math_problem():\n"

# (name, completion, gold answer text, standard verdict, reference verdict, why)
CASES = [
    (
        "plain",
        F + "    eggs = 16 - 3 - 4\n    return eggs * 2\n" + EOS,
        "#### 18",
        True,
        True,
        "a plain program",
    ),
    (
        "math_not_imported",
        F + "    return math.floor(18.7)\n" + EOS,
        "#### 18",
        False,
        True,
        "reference pre-injects math; standard: NameError",
    ),
    (
        "math_import_cut",
        "import math\n" + F + "    return math.ceil(17.2)\n",
        "#### 18",
        False,
        True,
        "both slice from the first def, dropping `import math`; only the reference has math",
    ),
    (
        "math_import_inside",
        F + "    import math\n    return math.sqrt(324)\n",
        "#### 18",
        True,
        True,
        "importing math is allowed by both; 18.0 counts as 18",
    ),
    (
        "from_math",
        F + "    from math import floor\n    return floor(18.9)\n",
        "#### 18",
        True,
        True,
        "from math import: allowed by both",
    ),
    (
        "import_fractions",
        F + "    from fractions import Fraction\n    return int(Fraction(36, 2))\n",
        "#### 18",
        True,
        False,
        "reference __import__ allows math only",
    ),
    (
        "returns_fraction",
        F + "    import fractions\n    return fractions.Fraction(36, 2)\n",
        "#### 18",
        True,
        False,
        "standard turns a whole Fraction into an int; reference blocks the import",
    ),
    (
        "sorted_builtin",
        F + "    xs = sorted([18, 3, 7])\n    return xs[-1]\n",
        "#### 18",
        True,
        False,
        "reference has 13 builtins: no sorted",
    ),
    (
        "list_builtin",
        F + "    return len(list(range(18)))\n",
        "#### 18",
        True,
        False,
        "reference has no list()",
    ),
    (
        "dict_literal",
        F + "    prices = {'a': 10, 'b': 8}\n    return sum(prices.values())\n",
        "#### 18",
        True,
        True,
        "literals and methods need no builtins",
    ),
    (
        "except_named",
        F + "    try:\n        x = 18 / 0\n    except ZeroDivisionError:\n"
        "        x = 18\n    return x\n",
        "#### 18",
        True,
        False,
        "reference: the except clause's name raises NameError",
    ),
    (
        "except_bare",
        F + "    try:\n        x = 18 / 0\n    except:\n        x = 18\n    return x\n",
        "#### 18",
        True,
        True,
        "a bare except needs no builtin",
    ),
    (
        "class_def",
        F + "    class A:\n        n = 18\n    return A.n\n",
        "#### 18",
        True,
        False,
        "reference has no __build_class__",
    ),
    (
        "dunder_main",
        F + "    return 18\n\nif __name__ == '__main__':\n    print(simple_math_problem())\n",
        "#### 18",
        True,
        False,
        "reference namespace has no __name__: the module raises NameError",
    ),
    (
        "returns_bool",
        F + "    return 3 > 2\n",
        "#### 1",
        False,
        True,
        "reference reads True as 1; standard: a bool is not a number",
    ),
    (
        "returns_str_number",
        F + "    return '$1,800'\n",
        "#### 1800",
        False,
        True,
        "reference parses the first number of a string",
    ),
    (
        "returns_str_sentence",
        F + "    return f'The answer is {18} dollars'\n",
        "#### 18",
        False,
        True,
        "reference parses the first number of a string",
    ),
    (
        "returns_list",
        F + "    return [18]\n",
        "#### 18",
        False,
        False,
        "a list is no number for either (reference: then stdout, which is empty)",
    ),
    (
        "returns_list_prints",
        F + "    print(18)\n    return [18]\n",
        "#### 18",
        False,
        True,
        "reference reads stdout when the value is no number; standard only when it is None",
    ),
    (
        "returns_str_word_prints",
        F + "    print('#### 18')\n    return 'eighteen'\n",
        "#### 18",
        False,
        True,
        "a string without a number: reference falls back to stdout",
    ),
    (
        "returns_nan_prints",
        F + "    print(18)\n    return float('nan')\n",
        "#### 18",
        False,
        True,
        "reference turns NaN into no value, then reads stdout",
    ),
    (
        "none_answer_is",
        F + "    total = 18\n    print('The answer is', total)\n",
        "#### 18",
        True,
        True,
        "returns None: both read 'answer is N' from stdout",
    ),
    (
        "none_result_label",
        F + "    print('result =', 18)\n    print('for 3 friends')\n",
        "#### 18",
        False,
        True,
        "reference also reads 'result = N'; standard takes the last number",
    ),
    (
        "none_last_number",
        F + "    print('It costs 3 dollars each, 18 in total')\n",
        "#### 18",
        True,
        True,
        "both fall back to the last number printed",
    ),
    (
        "module_level_print",
        F + "    pass\n\nprint(18)\n",
        "#### 18",
        True,
        False,
        "reference discards module-level output; standard reads all of stdout",
    ),
    (
        "near_integer",
        F + "    return 0.1 * 3 * 60\n",
        "#### 18",
        True,
        True,
        "18.000000000000004 is within 1e-6 of 18",
    ),
    (
        "tol_inside",
        F + "    return 2.001\n",
        "#### 2",
        True,
        True,
        "2.001 - 2 = 0.0009999999999998899 <= 1e-3",
    ),
    (
        "tol_edge_5",
        F + "    return 5.001\n",
        "#### 5",
        False,
        False,
        "5.001 - 5 = 0.001000000000000334 > 1e-3 in binary floating point",
    ),
    (
        "tol_binary_edge",
        F + "    return 100.001\n",
        "#### 100",
        False,
        False,
        "100.001 - 100 = 0.0010000000000047748 > 1e-3 in binary floating point",
    ),
    ("tol_exact", F + "    return 0.001\n", "#### 0", True, True, "|0.001 - 0| = 1e-3 exactly"),
    (
        "tol_large",
        F + "    return 1000.001\n",
        "#### 1000",
        True,
        True,
        "1000.001 - 1000 = 0.0009999999999763531 <= 1e-3: the edge is not monotone in size",
    ),
    (
        "gold_comma",
        F + "    return 1234\n",
        "Some steps.\n#### 1,234",
        True,
        True,
        "commas dropped from the gold",
    ),
    ("negative", F + "    return 2 - 5\n", "#### -3", True, True, "signed gold"),
    ("float_division", F + "    return 36 / 2\n", "#### 18", True, True, "18.0 counts as 18"),
    ("huge_int", F + "    return 10 ** 400\n", "#### 18", False, False, "a wrong huge integer"),
    (
        "fenced",
        "Here is the code:\n```python\n" + F + "    return 18\n```\nThe answer is 3.",
        "#### 18",
        True,
        True,
        "the fenced block is the program",
    ),
    (
        "fence_unclosed",
        "```python\n" + F + "    return 18\n",
        "#### 18",
        True,
        True,
        "no closed fence: both slice from def",
    ),
    (
        "fence_py_tag",
        "```py\n" + F + "    return 18\n```",
        "#### 18",
        True,
        True,
        "reference keeps 'py' in the block, then slices from def",
    ),
    (
        "text_before_def",
        "Let me think step by step.\n" + F + "    return 18\n",
        "#### 18",
        True,
        True,
        "explanatory text before def is dropped",
    ),
    (
        "undef_word",
        "The value is undef so far.\n" + F + "    return 18\n",
        "#### 18",
        True,
        False,
        "reference's plain find('def ') matches inside 'undef ': line 1 no longer compiles",
    ),
    (
        "junk_after",
        F + "    return 18\nThe end.\n",
        "#### 18",
        True,
        True,
        "both cut at the first line that does not parse",
    ),
    (
        "identifier_after_eos",
        F + "    return 18\n" + EOS + "answer",
        "#### 18",
        True,
        False,
        "reference reads past EOS: `answer` compiles and raises NameError",
    ),
    (
        "second_def_after_eos",
        F + "    return 18\n" + EOS + F + "    return 7\n",
        "#### 18",
        True,
        False,
        "reference reads past EOS: the second definition wins",
    ),
    (
        "eos_padding",
        F + "    return 18\n" + EOS * 3,
        "#### 18",
        True,
        True,
        "nothing but EOS after the program",
    ),
    (
        "syntax_error_line1",
        "def simple_math_problem(:\n    return 18\n",
        "#### 18",
        False,
        False,
        "an error on the first line leaves nothing to run",
    ),
    (
        "takes_argument",
        "def simple_math_problem(x):\n    return 18\n",
        "#### 18",
        False,
        False,
        "called without arguments: TypeError",
    ),
    ("no_function", "x = 18\nprint(x)\n", "#### 18", False, False, "no simple_math_problem"),
    (
        "recursion",
        F + "    def f(n):\n        return f(n + 1)\n    return f(0)\n",
        "#### 18",
        False,
        False,
        "RecursionError",
    ),
    (
        "infinite_loop",
        F + "    while True:\n        pass\n",
        "#### 18",
        False,
        False,
        "the time limit",
    ),
]

TIMEOUT_S = 3.0  # a test budget; the verdicts do not depend on it (no case runs 0.1 s .. 5 s)


def _reference_input(text: str) -> str:
    return text.replace(EOS, "")


@pytest.fixture(scope="module")
def verdicts():
    """Both graders on every case, each in its own sandbox."""
    golds = [c[2] for c in CASES]
    out = {}
    with Sandbox(SandboxConfig(timeout_s=TIMEOUT_S, isolation="rlimits")) as sb:
        rows = evaluate_programs(
            [extract_program(c[1], DEFAULT_EOS) for c in CASES],
            [parse_gold(g) for g in golds],
            sandbox=sb,
        )
        out["standard"] = rows
    with Sandbox(
        SandboxConfig(timeout_s=TIMEOUT_S, isolation="rlimits", runner=REFERENCE_RUNNER)
    ) as sb:
        rows = evaluate_programs(
            [R.extract_code(_reference_input(c[1])) for c in CASES],
            golds,
            sandbox=sb,
            grader="reference",
        )
        out["reference"] = rows
    return out


def test_table_size_and_names():
    assert len(CASES) >= 30
    assert len({c[0] for c in CASES}) == len(CASES)
    # the table exercises disagreements both ways, not only agreements
    assert any(c[3] and not c[4] for c in CASES) and any(c[4] and not c[3] for c in CASES)


@pytest.mark.parametrize("grader, col", [("standard", 3), ("reference", 4)])
def test_verdicts(verdicts, grader, col):
    wrong = [
        f"{c[0]}: expected {c[col]}, got {r['correct']} ({r['status']} {r['detail']}; {c[5]})"
        for c, r in zip(CASES, verdicts[grader])
        if r["correct"] is not c[col]
    ]
    assert not wrong, "\n".join(wrong)


def test_reference_value_sources(verdicts):
    by_name = {c[0]: r for c, r in zip(CASES, verdicts["reference"])}
    assert by_name["returns_list_prints"]["value_source"] == "stdout"
    assert by_name["returns_bool"]["value"] == 1
    assert by_name["returns_str_number"]["value"] == 1800
    assert by_name["infinite_loop"]["status"] == "timeout"
    assert by_name["import_fractions"]["detail"] == "ImportError"
    assert by_name["second_def_after_eos"]["value"] == 7


# --------------------------------------------------------------------------- pure functions


@pytest.mark.parametrize(
    "x, want",
    [
        (None, None),
        (True, 1),
        (7, 7),
        (2.0000001, 2),
        (2.5, 2.5),
        (float("inf"), None),
        (float("nan"), None),
        ("$1,234", 1234),
        ("-3.50 dollars", -3.5),
        ("5.", 5),
        ("+7", 7),
        ("no digits", None),
        ("1e5", 1),
        ([1], None),
        ("9" * 5000, None),
    ],
)
def test_to_number(x, want):
    got = R.to_number(x)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize(
    "text, want",
    [
        ("Final answer: 12\nanswer = 13\n7", 13),  # last hit of the first pattern that hits
        ("#### 5\nthen 9", 5),
        ("The answer is: 4 apples and 6 pears", 6),  # 'is:' fits no pattern: last number
        ("result is $1,000", 1000),
        ("", None),
        ("nothing", None),
    ],
)
def test_extract_text_answer(text, want):
    assert R.extract_text_answer(text) == want


def test_extract_code_rules():
    # the first closed fence wins, even before a def outside it
    assert R.extract_code("```\nx = 1\n```\ndef f():\n  pass") == "x = 1"
    # cut before the first line that fails, when that prefix compiles
    assert R.extract_code("def f():\n    return 1\n)junk\nmore") == "def f():\n    return 1"
    # the prefix does not compile either: the text is returned whole
    src = "def f():\n    return (1 +\n)junk junk"
    assert R.extract_code(src) == src
    assert R.extract_code("   ") == ""


def test_numbers_equal_rules():
    assert R.numbers_equal(5, 5) and not R.numbers_equal(5, 6)
    assert R.numbers_equal(2.001, 2) and not R.numbers_equal(5.001, 5)
    assert not R.numbers_equal(None, 5) and not R.numbers_equal(5, None)
    assert not R.numbers_equal(10**400, 5.0)  # the reference would raise OverflowError
    assert R.reference_gold("steps\n#### 1,234") == 1234 and R.reference_gold(18.0) == 18


def test_evaluate_programs_checks_the_runner():
    with Sandbox(SandboxConfig(isolation="rlimits")) as sb:
        with pytest.raises(ValueError, match="runner"):
            evaluate_programs(["x"], [1], sandbox=sb, grader="reference")


def test_cli_reference_grader(tmp_path, capsys):
    from bench.evaluate.__main__ import main

    src = tmp_path / "in.jsonl"
    lines = [
        {
            "id": "a",
            "completion": "import math\n" + F + "    return math.ceil(17.2)\n",
            "answer": "#### 18",
        },
        {"id": "b", "completion": F + "    return 18\n" + EOS + F + "    return 7\n", "answer": 18},
    ]
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    common = ["gsm8k", "--programs", str(src), "--workers", "2", "--isolation", "rlimits"]
    out = {}
    for grader in ("standard", "reference"):
        dst, summ = tmp_path / f"{grader}.jsonl", tmp_path / f"{grader}.json"
        assert main([*common, "--out", str(dst), "--summary", str(summ), "--grader", grader]) == 0
        out[grader] = [json.loads(x) for x in dst.read_text().splitlines()]
        assert json.loads(summ.read_text())["grader"] == grader
    assert [r["correct"] for r in out["standard"]] == [False, True]
    assert [r["correct"] for r in out["reference"]] == [True, False]
    assert out["reference"][1]["value"] == 7  # read past the EOS marker
    bad = ["--out", str(tmp_path / "x.jsonl"), "--grader", "reference", "--no-stdout-fallback"]
    assert main([*common, *bad]) == 2
    assert "stdout" in capsys.readouterr().err
