"""CPU stand-in for TinyGSM / GSM8K: templated arithmetic word problems with their programs.

Every example is a TinyGSM-style pair: a one- or two-step word problem and a
``def simple_math_problem():`` program that names the quantities, computes ``result`` and returns
it. A tiny model must copy the numbers from the question into the program and pick the right
operations, so accuracy measures conditional generation the way GSM8K does, at a size that
trains on a laptop CPU in minutes. The sequence is ``[BOS] question \\n program [EOS]``, padded
to ``seq_len`` (64; the longest example has 51 tokens). The tokenizer
(:class:`bench.text.char.CharTokenizer`, 195 ids) has one id per character plus one per
word of the closed template vocabulary and per fixed code fragment (:func:`word_pieces`); digits
stay single characters, as in SmolLM's tokenizer, so numbers are copied digit by digit.

Splits are by **template parameters**: an example is held out when a hash of (template, numbers)
falls in the held-out bucket (``heldout_frac``), so no held-out number combination appears in
training under any name or item. Everything is a deterministic function of ``seed``.

This task is named ``arith_standin`` and is never reported as GSM8K.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bench.config import ConfigError
from bench.data.base import TaskData
from bench.data.program.task import ProgramOptions, ProgramTask
from bench.options import option
from bench.text.char import CharTokenizer


@dataclass(frozen=True)
class Template:
    """``question`` uses {N} name, {P}/{p} pronoun, {I} item and the number slots; ``names``
    are the program's variable names for the slots (in order); ``expr`` the result formula as
    written in the program and ``fn`` the same formula on the slot values (the gold answer)."""

    key: str
    question: str
    slots: tuple[str, ...]
    names: tuple[str, ...]
    expr: str
    fn: Callable[..., int]


TEMPLATES = (
    Template(
        "add",
        "{N} has {a} {I} and buys {b} more. How many {I} now?",
        ("a", "b"),
        ("have", "bought"),
        "have + bought",
        lambda a, b: a + b,
    ),
    Template(
        "sub",
        "{N} had {a} {I} and gave away {b}. How many are left?",
        ("a", "b"),
        ("had", "gave"),
        "had - gave",
        lambda a, b: a - b,
    ),
    Template(
        "mul",
        "{N} buys {a} boxes with {b} {I} each. How many {I}?",
        ("a", "b"),
        ("boxes", "each"),
        "boxes * each",
        lambda a, b: a * b,
    ),
    Template(
        "div",
        "{N} shares {a} {I} among {b} friends. How many each?",
        ("a", "b"),
        ("total", "friends"),
        "total // friends",
        lambda a, b: a // b,
    ),
    Template(
        "change",
        "{N} buys {b} {I} at ${a} each and pays ${c}. Change?",
        ("a", "b", "c"),
        ("price", "count", "paid"),
        "paid - price * count",
        lambda a, b, c: c - a * b,
    ),
    Template(
        "bags",
        "{N} has {a} bags of {b} {I} and {c} more. How many?",
        ("a", "b", "c"),
        ("bags", "size", "more"),
        "bags * size + more",
        lambda a, b, c: a * b + c,
    ),
    Template(
        "left",
        "{N} had {a} {I}, lost {b} and sold {c}. How many left?",
        ("a", "b", "c"),
        ("had", "lost", "sold"),
        "had - lost - sold",
        lambda a, b, c: a - b - c,
    ),
    Template(
        "rate",
        "{N} reads {a} pages a day for {b} days, then {c}. Total?",
        ("a", "b", "c"),
        ("daily", "days", "extra"),
        "daily * days + extra",
        lambda a, b, c: a * b + c,
    ),
)
TEMPLATE_KEYS = tuple(t.key for t in TEMPLATES)

PEOPLE = (
    ("Tom", "He", "he"),
    ("Ann", "She", "she"),
    ("Liam", "He", "he"),
    ("Mia", "She", "she"),
    ("Omar", "He", "he"),
    ("Sara", "She", "she"),
    ("Ben", "He", "he"),
    ("Lily", "She", "she"),
    ("Raj", "He", "he"),
    ("Zoe", "She", "she"),
)
ITEMS = ("apples", "pens", "books", "cards", "stamps", "shells", "cookies", "eggs")
CODE_PIECES = (
    "def simple_math_problem():",
    "\n    ",
    " = ",
    " + ",
    " - ",
    " * ",
    " // ",
    "return ",
)


def word_pieces() -> tuple[str, ...]:
    """The tokenizer's multi-character pieces: every word of the templates (with its leading
    space), names, items, the program's variable names and its fixed code fragments. Digits,
    punctuation and anything else stay single characters."""
    words: list[str] = []
    for t in TEMPLATES:
        words += re.findall(r" ?[A-Za-z]{2,}", re.sub(r"\{\w\}", "", t.question))
        words += [*t.names, "result"]
    for w in [p[0] for p in PEOPLE] + list(ITEMS):
        words += [w, f" {w}"]
    return tuple(dict.fromkeys([*CODE_PIECES, *words]))


def _numbers(t: Template, rng: random.Random) -> tuple[int, ...]:
    """The slot values of one problem. Every slot has a fixed number of digits (two; one for
    small factors; three for a total to be divided), so a template's token layout is fixed and
    copying a number into the program is a fixed-offset look-up. Copying the digits exactly is
    what tiny diffusion models learn last (one run each, ``cpu-mini``, batch 32, MDLM: 12.5 %
    held-out accuracy after 1,800 steps with fixed widths, 3.9 % with widths of 1-2 digits; AR
    reaches > 95 % in 800 steps either way)."""
    r = rng.randint
    if t.key == "add":
        return r(10, 99), r(10, 99)
    if t.key == "sub":
        a = r(20, 99)
        return a, r(10, a - 10)
    if t.key == "mul":
        return r(2, 9), r(10, 99)
    if t.key == "div":  # a three-digit total that divides evenly
        b = r(2, 9)
        return b * r(-(-100 // b), 999 // b), b
    if t.key == "change":
        a, b = r(2, 9), r(2, 9)
        return a, b, r(max(10, a * b + 1), 99)
    if t.key == "bags":
        return r(2, 9), r(2, 9), r(10, 99)
    if t.key == "left":
        a = r(50, 99)
        b = r(10, a // 2)
        return a, b, r(10, a - b - 1)
    if t.key == "rate":
        return r(10, 30), r(2, 9), r(10, 50)
    raise KeyError(t.key)


def _answer(t: Template, nums: tuple[int, ...]) -> int:
    return int(t.fn(*nums))


def is_heldout(t: Template, nums: tuple[int, ...], frac: float) -> bool:
    """Stable bucket of (template, numbers): the split never depends on names or items."""
    h = hashlib.sha256(f"{t.key}:{nums}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < frac


def program_text(t: Template, nums: tuple[int, ...]) -> str:
    lines = ["def simple_math_problem():"]
    lines += [f"    {name} = {v}" for name, v in zip(t.names, nums)]
    lines += [f"    result = {t.expr}", "    return result"]
    return "\n".join(lines)


def make_example(t: Template, nums: tuple[int, ...], rng: random.Random) -> dict:
    name, pron, pron_l = rng.choice(PEOPLE)
    question = t.question.format(
        N=name, P=pron, p=pron_l, I=rng.choice(ITEMS), **dict(zip(t.slots, nums))
    )
    return {
        "template": t.key,
        "numbers": list(nums),
        "question": question,
        "code": program_text(t, nums),
        "answer": _answer(t, nums),
    }


def generate(
    n: int,
    *,
    split: str,
    seed: int,
    heldout_frac: float = 0.1,
    templates: tuple[str, ...] = TEMPLATE_KEYS,
) -> list[dict]:
    """``n`` examples of ``split`` ("train" or "heldout"); held-out examples are distinct
    parameter combinations (no duplicates), training ones may repeat a combination with other
    names. Deterministic in (seed, split)."""
    if split not in ("train", "heldout"):
        raise ValueError(f"arith: split must be train or heldout, got {split!r}")
    chosen = [t for t in TEMPLATES if t.key in templates]
    if len(chosen) != len(set(templates)):
        raise ValueError(f"arith: unknown template(s) in {templates} (known: {TEMPLATE_KEYS})")
    rng = random.Random(f"arith:{seed}:{split}")
    want_heldout = split == "heldout"
    out, seen = [], set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 200 * n + 10_000:
            raise ValueError(
                f"arith: cannot draw {n} distinct {split} problems (the held-out "
                f"space is too small: raise heldout_frac or lower n)"
            )
        t = rng.choice(chosen)
        nums = _numbers(t, rng)
        if is_heldout(t, nums, heldout_frac) != want_heldout:
            continue
        if want_heldout:
            if (t.key, nums) in seen:
                continue
            seen.add((t.key, nums))
        out.append(make_example(t, nums, rng))
    return out


def example_lengths(tok, templates: tuple[str, ...], separator: str) -> dict[str, int]:
    """Tokens of an example of each template (``[BOS] question separator program [EOS]``, as
    :meth:`ArithTask._encode` encodes it). A template's length is fixed (every slot has a fixed
    number of digits, :func:`_numbers`; names and items are one piece each), so one example of
    each gives the longest a split can hold, without generating one."""
    from bench.data.program.tinygsm import encode_pair

    rng = random.Random(0)
    ex = [make_example(t, _numbers(t, rng), rng) for t in TEMPLATES if t.key in templates]
    ids, _ = encode_pair(tok, [e["question"] for e in ex], [e["code"] for e in ex], separator)
    return {e["template"]: len(i) for e, i in zip(ex, ids)}


@dataclass
class ArithOptions(ProgramOptions):
    """``task.options`` of ``arith_standin`` (plus :class:`ProgramOptions`)."""

    seq_len: int = option(64, gt=0, help="tokens per example (the longest has 51)")
    train_on_pad: bool = option(
        True, help="PAD after EOS counts in the loss (as the paper's TinyGSM runs)"
    )
    heldout_frac: float = option(
        0.1, gt=0.0, lt=1.0, help="fraction of parameter combinations held out for evaluation"
    )
    templates: list[str] = option(
        factory=lambda: list(TEMPLATE_KEYS),
        nonempty=True,
        each_choices=TEMPLATE_KEYS,
        help="problem templates to use",
    )


class ArithTask(ProgramTask):
    """The stand-in task (name ``arith_standin``): train on generated TinyGSM-style pairs,
    evaluate by executing the sampled programs on held-out parameter combinations.

    Options: :class:`ArithOptions` (``separator`` stays a newline: the stand-in keeps the
    newline its smoke numbers were measured with; GSM8K defaults to the reference's backslash +
    n). ``n_train`` examples are generated for training; ``eval_data(group, n)`` gives the first
    ``n`` held-out problems.
    """

    name = "arith_standin"
    stand_in_for = "GSM8K"
    Options = ArithOptions
    #: the shortest prompt of a batch of 128 held-out problems (an AR sampler makes 46 calls
    #: at the default 64 positions)
    cost_prompt_tokens = 18
    opts: ArithOptions

    def __init__(self, cfg):
        super().__init__(cfg)
        self.tokenizer = CharTokenizer(words=word_pieces())
        self.vocab_size = len(self.tokenizer)
        self.seq_len = self.opts.seq_len
        self.templates = tuple(self.opts.templates)
        self.heldout_frac = self.opts.heldout_frac

    def groups(self) -> list[str]:
        return ["heldout"]

    def validate_plan(self, *, backbone, train, sample) -> None:
        super().validate_plan(backbone=backbone, train=train, sample=sample)
        lengths = example_lengths(self.tokenizer, self.templates, self.opts.separator)
        key, longest = max(lengths.items(), key=lambda kv: kv[1])
        if longest > self.seq_len:  # _encode's rule, which training would hit at its start
            raise ConfigError(
                f"task.options.seq_len: {self.seq_len} is shorter than the {longest} tokens of a "
                f"{key!r} example; raise it to at least {longest}"
            )

    def _examples(self, split: str, n: int) -> list[dict]:
        return generate(
            n,
            split=split,
            seed=self.cfg.seed,
            heldout_frac=self.heldout_frac,
            templates=self.templates,
        )

    def train_data(self, groups: list[str]) -> TaskData:
        return self._encode(self._examples("train", self.cfg.n_train))

    def heldout_data(self, groups: list[str], n: int) -> TaskData:
        """The first ``n`` held-out problems with their programs, as training encodes them."""
        return self._encode(self._examples("heldout", n))

    def _encode(self, ex: list[dict]) -> TaskData:
        """Question + program rows packed as training data."""
        from bench.data.program.tinygsm import encode_pair, pack

        tok = self.tokenizer
        ids, pl = encode_pair(
            tok,
            [e["question"] for e in ex],
            [e["code"] for e in ex],
            self.opts.separator,
        )
        longest = max(len(s) for s in ids)
        if longest > self.seq_len:
            raise ValueError(
                f"arith_standin: an example has {longest} tokens > seq_len "
                f"{self.seq_len}; raise task.options.seq_len"
            )
        x, clean, loss = pack(
            ids,
            pl,
            max_len=self.seq_len,
            pad_id=tok.pad_token_id,
            eos_id=tok.eos_token_id,
            train_on_pad=self.opts.train_on_pad,
        )
        return TaskData(
            torch.from_numpy(x).long(),
            torch.from_numpy(clean),
            torch.from_numpy(loss),
            meta={"answer": [e["answer"] for e in ex]},
        )

    def eval_data(self, group: str, n: int) -> TaskData:
        if group != "heldout":
            raise ValueError(f"arith_standin: unknown group {group!r} (groups: heldout)")
        ex = self._examples("heldout", n)
        return self.prompt_data(
            [e["question"] for e in ex],
            [e["answer"] for e in ex],
            [f"{e['template']}:{i}" for i, e in enumerate(ex)],
        )

    def reference_completions(self, data: TaskData) -> torch.Tensor:
        """(N, L) ids with each gold program written after the prompt and EOS (then PAD):
        evaluating these must give accuracy 1 (an end-to-end check of the pipeline)."""
        by_q = {}
        for e in self._examples("heldout", len(data)):
            by_q[e["question"]] = e["code"]
        tok = self.tokenizer
        x = data.x.clone()
        for i, (q, pl) in enumerate(zip(data.meta["question"], data.meta["prompt_len"])):
            code = tok.encode(by_q[q]) + [tok.eos_token_id]
            x[i, pl : pl + len(code)] = torch.tensor(code)
        return x
