"""Typed task options: every registered task declares ``Options`` (bench.options), built and
checked when the task is constructed; a bad key, type or value is one ConfigError line naming
``task.options.<key>`` (and the sweep file, exit 2, from the CLI). Constructing a task loads
no data and no tokenizer, so a sweep plans offline."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from bench import registry
from bench.config import ConfigError, TaskConfig, build
from bench.options import Options

ROOT = Path(__file__).resolve().parents[2]


def _task(name: str, **options):
    return registry.make_task(build(TaskConfig, {"name": name, "options": options}, where="task"))


@pytest.mark.parametrize("name", sorted(registry.TASKS))
def test_every_task_declares_typed_options_with_defaults(name):
    cls = registry.TASKS[name]
    assert issubclass(cls.Options, Options) and dataclasses.is_dataclass(cls.Options)
    task = _task(name)
    assert task.opts == cls.Options()  # {} gives the defaults
    with pytest.raises(ConfigError, match=r"^task\.options\.bogus: unknown key \(known: "):
        _task(name, bogus=1)


BAD = [
    ("sudoku", {"workers": 0}, r"task\.options\.workers: must be >= 1, got 0"),
    ("sudoku", {"workers": "4"}, r"task\.options\.workers: expected an integer"),
    ("sudoku", {"generator": "slow"}, r"task\.options\.generator: must be one of"),
    ("sort", {"n_digits": 0}, r"task\.options\.n_digits: must be > 0"),
    ("arith_standin", {"heldout_frac": 1.0}, r"task\.options\.heldout_frac: must be < 1"),
    ("arith_standin", {"templates": ["nope"]}, r"task\.options\.templates\[0\]: must be one of"),
    ("arith_standin", {"grader": "lenient"}, r"task\.options\.grader: must be one of"),
    (
        "arith_standin",
        {"stdout_fallback": "yes"},
        r"task\.options\.stdout_fallback: expected true/false",
    ),
    ("gsm8k", {"max_len": 4}, r"task\.options\.max_len: must be >= 8"),
    ("gsm8k", {"tokenizer_source": "pip"}, r"task\.options\.tokenizer_source: must be one of"),
    ("gsm8k", {"isolation": "none"}, r"task\.options\.isolation: must be one of"),
]


@pytest.mark.parametrize("name,options,needle", BAD)
def test_bad_task_options_name_the_key(name, options, needle):
    with pytest.raises(ConfigError, match=needle):
        _task(name, **options)


def test_options_reach_the_task():
    t = _task(
        "arith_standin", seq_len=80, templates=["add", "mul"], timeout_s=2, grader="reference"
    )
    assert (t.seq_len, t.templates, t.opts.timeout_s, t.opts.grader) == (
        80,
        ("add", "mul"),
        2.0,
        "reference",
    )
    assert _task("arith_standin").opts.separator == "\n"  # the stand-in keeps a newline
    assert _task("gsm8k").opts.separator == "\\n"  # GSM8K: the reference's backslash + n
    s = _task("sort", n_digits=5)
    assert (
        s.seq_len == 10 and s.groups() == ["sort5"] and s.eval_data("sort5", 3).x.shape == (3, 10)
    )
    assert _task("sudoku", workers=3).workers == 3


def test_gsm8k_plans_without_its_tokenizer(monkeypatch):
    """SmolLM's size is declared, so building the task (the planner does) loads nothing; another
    tokenizer is loaded to be counted."""
    from bench.text import smollm as tokenizers

    def _no_load(*a, **k):
        raise AssertionError("the tokenizer was loaded")

    monkeypatch.setattr(tokenizers, "load_smollm_tokenizer", _no_load)
    t = _task("gsm8k")
    assert (t.vocab_size, t.seq_len) == (tokenizers.SMOLLM_VOCAB_SIZE, 512)
    with pytest.raises(AssertionError, match="loaded"):
        _ = _task("gsm8k", tokenizer="someone/else").vocab_size


def test_declared_smollm_size_is_the_tokenizers():
    from bench.text import smollm as tokenizers

    try:
        tok = tokenizers.load_smollm_tokenizer(source="gguf")
    except RuntimeError as e:
        pytest.skip(f"no offline SmolLM tokenizer: {e}")
    assert len(tok) == tokenizers.SMOLLM_VOCAB_SIZE
    t = registry.TASKS["gsm8k"](TaskConfig(name="gsm8k"), tokenizer=tok)
    assert t.vocab_size == len(tok)


def test_sweep_cli_bad_task_option_exits_2(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(
        f"results_dir: {tmp_path / 'r'}\ntask: {{name: sudoku, options: {{workers: -2}}}}\n"
        "methods: [{method: mdlm}]\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "bench.sweep", str(path), "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {path}: task.options.workers: must be >= 1, got -2"
    assert not (tmp_path / "r").exists()
