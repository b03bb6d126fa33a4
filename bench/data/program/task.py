"""The base of tasks whose answers are executed programs (GSM8K and its CPU stand-in).

:class:`ProgramTask` holds what they share: the prompt ``[BOS] question separator`` (clean, out
of the loss; ``separator`` is a task option), decoding the continuation up to the first EOS,
program extraction, the sandbox (:mod:`bench.evaluate.sandbox.runner`), and MetricValue rows
(``accuracy`` = the paper's bootstrap point estimate with its 95 % percentile CI, or the Wilson
score interval at 0 / n and n / n; ``accuracy_plain``, ``status_<s>`` fractions). A subclass
supplies the tokenizer, ``seq_len``, its data and its ``Options`` (a subclass of
:class:`ProgramOptions`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from bench.config import ConfigError
from bench.data.base import Task, TaskData, nfe_grid
from bench.evaluate import gsm8k_reference
from bench.evaluate.bootstrap import WILSON
from bench.evaluate.gsm8k import (
    DEFAULT_EOS,
    GRADERS,
    REFERENCE_RUNNER,
    evaluate_programs,
    extract_program,
    summarize,
)
from bench.evaluate.metrics import MetricValue
from bench.evaluate.sandbox.runner import STATUSES, Sandbox, SandboxConfig
from bench.options import Options, option
from bench.text.locate import data_cache_root

#: the verdict cache's folder under the data cache (bench.evaluate.sandbox.cache)
SANDBOX_CACHE = "sandbox-verdicts"


def decode_continuations(samples: Tensor, prompt_lens: list[int], tok) -> list[str]:
    """The generated text after each prompt, cut at the first EOS id (a fixed-length canvas
    keeps writing after it), special tokens dropped."""
    out = []
    specials = {tok.eos_token_id, tok.pad_token_id, tok.bos_token_id}
    for row, pl in zip(samples.tolist(), prompt_lens):
        cont = row[pl:]
        if tok.eos_token_id in cont:
            cont = cont[: cont.index(tok.eos_token_id)]
        out.append(tok.decode([i for i in cont if i not in specials], skip_special_tokens=True))
    return out


def decode_canvases(samples: Tensor, prompt_lens: list[int], tok) -> list[str]:
    """The whole generated canvas after each prompt, special tokens dropped and the text after
    an EOS kept: the paper harness's grader input (``main.py::_sample_gsm8k``)."""
    return [
        tok.decode(row[pl:], skip_special_tokens=True)
        for row, pl in zip(samples.tolist(), prompt_lens)
    ]


def accuracy_ci_method(s: dict) -> str:
    """``ci_method`` of the accuracy row of a :func:`summarize` result: the paper's percentile
    bootstrap, or the Wilson score interval at 0 / n and n / n (where the bootstrap's interval
    has zero width)."""
    if s.get("ci_method") == WILSON:
        return f"{WILSON} (0/n or n/n)"
    return f"percentile bootstrap over problems, B = {s['n_resamples']}"


def metric_values(rows: list[dict], *, n_resamples: int, seed: int) -> list[MetricValue]:
    """``accuracy`` (bootstrap point estimate + percentile CI, as the paper), ``accuracy_plain``
    and the fraction of each status."""
    s = summarize(rows, n_resamples=n_resamples, seed=seed)
    n = s["n"]
    correct = [bool(r["correct"]) for r in rows]
    out = [
        MetricValue(
            "accuracy",
            s["point"],
            n,
            s["ci_low"],
            s["ci_high"],
            accuracy_ci_method(s),
            outcomes=correct,
        ),
        MetricValue("accuracy_plain", s["accuracy"], n),
    ]
    out += [MetricValue(f"status_{k}", s["status_fractions"][k], n) for k in STATUSES]
    return out


@dataclass
class ProgramOptions(Options):
    """``task.options`` every program task has (a subclass adds its own)."""

    timeout_s: float = option(5.0, gt=0.0, help="seconds per program (reference gsm8k.timeout)")
    workers: int = option(0, ge=0, help="sandbox processes (0 = min(4 x cores, 32))")
    memory_mb: int = option(1024, gt=0, help="address-space limit per program")
    isolation: str = option(
        "auto",
        choices=("auto", "rlimits", "full"),
        help="sandbox isolation (bench.evaluate.sandbox.runner)",
    )
    bootstrap: int = option(1000, gt=0, help="bootstrap resamples B of the accuracy CI")
    stdout_fallback: bool = option(
        True, help="standard grader: read the answer from stdout when the program returns none"
    )
    grader: str = option(
        "standard",
        choices=GRADERS,
        help="standard: bench.evaluate.gsm8k; reference: the paper harness's "
        "verdict (bench.evaluate.gsm8k_reference: the whole canvas, no "
        "stdout fallback)",
    )
    separator: str = option(
        "\n",
        help="between question and program, in training and in the "
        "prompts (a newline here; GSM8K: the reference's backslash + n)",
    )


class ProgramTask(Task):
    """Base for tasks whose answers are executed programs (see the module docstring);
    ``task.options``: :class:`ProgramOptions` or a subclass of it."""

    #: accuracy with its bootstrap CI; the "program" report adds the CI table and figure
    headline_metric = "accuracy"
    report_kind = "program"
    Options = ProgramOptions
    opts: ProgramOptions

    def __init__(self, cfg):
        super().__init__(cfg)
        self._sb: Sandbox | None = None
        self.last_rows: list[dict] = []

    # -- pieces subclasses use -----------------------------------------------------------
    def protocol(self) -> str:
        sep = {"\n": "newline", "\\n": "backslash-n"}.get(
            self.opts.separator, repr(self.opts.separator)
        )
        return f"grader={self.opts.grader}; separator={sep}"

    def prompt_data(self, questions: list[str], golds: list, ids: list) -> TaskData:
        """``[BOS] question separator`` then PAD to ``seq_len`` (the separator is the task's
        ``separator`` option, as in training); the prompt is clean, the rest is for the
        sampler to fill (``loss_mask`` marks it, for a validation loss if wanted)."""
        tok, L = self.tokenizer, self.seq_len
        enc = tok([q.strip() for q in questions], add_special_tokens=False)["input_ids"]
        sep = tok(self.opts.separator, add_special_tokens=False)["input_ids"]
        x = torch.full((len(questions), L), tok.pad_token_id, dtype=torch.long)
        prompt_lens = []
        for i, q in enumerate(enc):
            p = [tok.bos_token_id, *q, *sep]
            if len(p) >= L:
                raise ValueError(
                    f"{self.name}: problem {ids[i]}: prompt of {len(p)} tokens does "
                    f"not fit seq_len {L}"
                )
            x[i, : len(p)] = torch.tensor(p)
            prompt_lens.append(len(p))
        clean = torch.arange(L)[None, :] < torch.tensor(prompt_lens)[:, None]
        return TaskData(
            x,
            clean,
            ~clean,
            meta={
                "answer": list(golds),
                "prompt_len": prompt_lens,
                "question": list(questions),
                "id": list(ids),
            },
        )

    # -- planning (bench.plan) ------------------------------------------------------------
    def sweep_defaults(self) -> dict:
        """NFE 8, 16, ... up to twice the sequence length: the paper's GSM8K grid (8 ... 1024 at
        L = 512, sweeps/gsm8k_nfe.yaml), scaled to this task's length."""
        return {"sample": {"nfe": nfe_grid(8, 2 * self.seq_len)}}

    #: the shortest prompt of a sampling batch, in tokens (an AR sampler starts there):
    #: :meth:`cost_profile`'s estimate, set by each task
    cost_prompt_tokens: int = 32

    def cost_profile(self) -> dict:
        """Every item's program runs in the sandbox; generation starts after the shortest
        prompt of the batch (:attr:`cost_prompt_tokens`)."""
        return {"prompt_tokens": self.cost_prompt_tokens, "scorer": "sandbox"}

    def validate_plan(self, *, backbone, train, sample) -> None:
        try:  # the sandbox's own rules (e.g. a finite timeout), checked when evaluate() runs
            self.sandbox_config()
        except ValueError as e:
            raise ConfigError(f"task.options: {e}") from None

    def sandbox_config(self) -> SandboxConfig:
        """The sandbox settings of this task's options (:meth:`sandbox`; its constructor
        checks them), with the verdict cache under the data cache (``sandbox-verdicts``)."""
        o = self.opts
        return SandboxConfig(
            timeout_s=o.timeout_s,
            workers=o.workers,
            memory_mb=o.memory_mb,
            isolation=o.isolation,
            runner=REFERENCE_RUNNER if o.grader == "reference" else "",
            # repeats within and across cells and re-scores are served from the data cache
            cache_dir=str(data_cache_root(self.cfg.data_dir) / SANDBOX_CACHE),
        )

    def sandbox(self) -> Sandbox:
        if self._sb is None:
            self._sb = Sandbox(self.sandbox_config())
            self._sb.self_test()
        return self._sb

    @property
    def isolation(self) -> str:
        """The sandbox isolation level the last evaluation ran under."""
        return self.sandbox().isolation

    def eos_id(self) -> int | None:
        """The tokenizer's EOS: a program ends there (``[BOS] question separator program EOS``)."""
        return int(self.tokenizer.eos_token_id)

    # -- text and records (bench.records, bench.generate) ---------------------------------
    def decode_text(self, ids: list[int]) -> str:
        """The text of ``ids`` up to the first EOS, special tokens dropped (what the standard
        grader reads of a continuation)."""
        return decode_continuations(
            torch.tensor([list(ids)], dtype=torch.long), [0], self.tokenizer
        )[0]

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def text_canvas(self, prompt: str, suffix: str, length: int) -> TaskData:
        """``[BOS] prompt separator`` as in the task's prompts, ``length`` positions to fill,
        then the suffix (clean)."""
        if length < 1:
            raise ValueError(f"--length: must be >= 1, got {length}")
        d = self.prompt_data([prompt], [None], ["prompt"])
        pl = d.meta["prompt_len"][0]
        s = self.encode_text(suffix) if suffix else []
        x = torch.cat(
            [
                d.x[0, :pl],
                torch.full((length,), self.tokenizer.pad_token_id),
                torch.tensor(s, dtype=torch.long),
            ]
        )[None].long()
        clean = torch.ones_like(x, dtype=torch.bool)
        clean[0, pl : pl + length] = False
        return TaskData(x, clean, ~clean, meta={"prompt_len": [pl]})

    def record_fields(self, samples: Tensor, data: TaskData, group: str) -> list[dict]:
        """From the evaluation just run (``last_rows``; the question is the record's ``prompt``):
        ``program`` (as
        extracted), ``answer`` (the executed value), ``gold``, ``status``, ``detail``,
        ``stdout`` / ``stderr`` (their last characters), ``run_s``, the ``grader`` and its
        ``verdict``; ``target`` is the gold answer. (The reference grader reads the whole canvas,
        text after the EOS too: its ``program`` shows what it extracted from it, and the canvas is
        ``prompt_ids`` + ``output_ids``; the text is not kept twice.)"""
        if len(self.last_rows) != len(data):
            raise ValueError(f"{self.name}: record_fields needs the evaluation of these samples")
        out = []
        for r in self.last_rows:
            rec = {
                "target": None if r["gold"] is None else str(r["gold"]),
                "gold": r["gold"],
                "program": r["program"],
                "answer": r.get("value"),
                "status": r["status"],
                "detail": r.get("detail", ""),
                "stdout": r.get("stdout", ""),
                "stderr": r.get("stderr", ""),
                "run_s": r.get("elapsed_s"),
                "grader": self.opts.grader,
                "verdict": bool(r["correct"]),
            }
            out.append(rec)
        return out

    def record_answer(self, record: dict):
        """maj@k's vote: the executed answer (None: the program gave none, so no vote)."""
        return record.get("answer")

    def evaluate(self, samples: Tensor, data: TaskData, group: str) -> list[MetricValue]:
        """Decode, extract, execute and grade one program per problem. Per-problem rows
        (completion, program, status, value, isolation) are kept in ``self.last_rows``."""
        if samples.shape[0] != len(data):
            raise ValueError(f"{self.name}: {samples.shape[0]} samples for {len(data)} problems")
        grader = self.opts.grader
        if grader == "reference":
            texts = decode_canvases(samples, data.meta["prompt_len"], self.tokenizer)
            programs = [gsm8k_reference.extract_code(t) for t in texts]
        else:
            texts = decode_continuations(samples, data.meta["prompt_len"], self.tokenizer)
            programs = [extract_program(t, DEFAULT_EOS) for t in texts]
        rows = evaluate_programs(
            programs,
            data.meta["answer"],
            sandbox=self.sandbox(),
            stdout_fallback=self.opts.stdout_fallback,
            grader=grader,
        )
        self.last_rows = [
            {
                "id": data.meta["id"][i],
                "group": group,
                "gold": data.meta["answer"][i],
                "completion": texts[i],
                "program": programs[i],
                **r,
            }
            for i, r in enumerate(rows)
        ]
        return metric_values(rows, n_resamples=self.opts.bootstrap, seed=self.cfg.seed)
