"""The base of tasks whose answers are executed programs (GSM8K and its CPU stand-in).

:class:`ProgramTask` holds what they share: the prompt ``[BOS] question \\n`` (clean, out of the
loss), decoding the continuation up to the first EOS, program extraction, the sandbox
(:mod:`bench.evaluate.sandbox`), and MetricValue rows (``accuracy`` = the paper's bootstrap point
estimate with its 95 % percentile CI, ``accuracy_plain``, ``status_<s>`` fractions). A subclass
supplies the tokenizer, ``seq_len``, its data and its own ``task_options``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from bench.config import ConfigError
from bench.data.base import Task, TaskData
from bench.evaluate.gsm8k import DEFAULT_EOS, evaluate_programs, extract_program, summarize
from bench.evaluate.metrics import MetricValue
from bench.evaluate.sandbox import STATUSES, Sandbox, SandboxConfig


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


def metric_values(rows: list[dict], *, n_resamples: int, seed: int) -> list[MetricValue]:
    """``accuracy`` (bootstrap point estimate + percentile CI, as the paper), ``accuracy_plain``
    and the fraction of each status."""
    s = summarize(rows, n_resamples=n_resamples, seed=seed)
    n = s["n"]
    out = [
        MetricValue("accuracy", s["point"], n, s["ci_low"], s["ci_high"]),
        MetricValue("accuracy_plain", s["accuracy"], n),
    ]
    out += [MetricValue(f"status_{k}", s["status_fractions"][k], n) for k in STATUSES]
    return out


class ProgramTask(Task):
    """Base for tasks whose answers are executed programs (see the module docstring).

    Options shared by subclasses (``task.options``): ``timeout_s`` (5.0, reference
    ``gsm8k.timeout``), ``workers`` (0 = min(4 x cores, 32)), ``memory_mb`` (1024), ``isolation``
    ("auto"), ``bootstrap`` (B = 1000), ``stdout_fallback`` (True).
    """

    #: accuracy with its bootstrap CI; the "program" report adds the CI table and figure
    headline_metric = "accuracy"
    report_kind = "program"
    common_options: dict[str, Any] = {
        "timeout_s": 5.0,
        "workers": 0,
        "memory_mb": 1024,
        "isolation": "auto",
        "bootstrap": 1000,
        "stdout_fallback": True,
    }
    task_options: dict[str, Any] = {}

    def __init__(self, cfg):
        super().__init__(cfg)
        known = {**self.common_options, **self.task_options}
        given = dict(cfg.options or {})
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ConfigError(
                f"task.options.{unknown[0]}: unknown option for task {self.name} "
                f"(known: {', '.join(sorted(known))})"
            )
        self.opts = {**known, **given}
        self._sb: Sandbox | None = None
        self.last_rows: list[dict] = []
        self.tokenizer = None

    # -- pieces subclasses use -----------------------------------------------------------
    def prompt_data(self, questions: list[str], golds: list, ids: list) -> TaskData:
        """``[BOS] question \\n`` then PAD to ``seq_len``; the prompt is clean, the rest is for
        the sampler to fill (``loss_mask`` marks it, for a validation loss if wanted)."""
        tok, L = self.tokenizer, self.seq_len
        enc = tok([q.strip() for q in questions], add_special_tokens=False)["input_ids"]
        nl = tok("\n", add_special_tokens=False)["input_ids"]
        x = torch.full((len(questions), L), tok.pad_token_id, dtype=torch.long)
        prompt_lens = []
        for i, q in enumerate(enc):
            p = [tok.bos_token_id, *q, *nl]
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

    def sandbox(self) -> Sandbox:
        if self._sb is None:
            o = self.opts
            self._sb = Sandbox(
                SandboxConfig(
                    timeout_s=float(o["timeout_s"]),
                    workers=int(o["workers"]),
                    memory_mb=int(o["memory_mb"]),
                    isolation=str(o["isolation"]),
                )
            )
            self._sb.self_test()
        return self._sb

    @property
    def isolation(self) -> str:
        """The sandbox isolation level the last evaluation ran under."""
        return self.sandbox().isolation

    def evaluate(self, samples: Tensor, data: TaskData, group: str) -> list[MetricValue]:
        """Decode, extract, execute and grade one program per problem. Per-problem rows
        (completion, program, status, value, isolation) are kept in ``self.last_rows``."""
        if samples.shape[0] != len(data):
            raise ValueError(f"{self.name}: {samples.shape[0]} samples for {len(data)} problems")
        texts = decode_continuations(samples, data.meta["prompt_len"], self.tokenizer)
        programs = [extract_program(t, DEFAULT_EOS) for t in texts]
        rows = evaluate_programs(
            programs,
            data.meta["answer"],
            sandbox=self.sandbox(),
            stdout_fallback=bool(self.opts["stdout_fallback"]),
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
        return metric_values(rows, n_resamples=int(self.opts["bootstrap"]), seed=self.cfg.seed)
