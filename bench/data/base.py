"""The task interface: what a sweep needs from a dataset and its evaluator.

A task turns a :class:`bench.config.TaskConfig` into tensors for the trainer and the
sampler, and scores generated ids. Tasks are registered by name in :mod:`bench.registry`.

A task's ``task.options`` are its own ``Options`` dataclass (:mod:`bench.options`: defaults,
help and rules beside each field), built and checked when the task is constructed: an unknown
key, a wrong type or a value out of range is a ConfigError naming ``task.options.<key>``.
Construction is cheap (no data, no tokenizer): the planner builds the task to learn its groups,
``vocab_size`` and ``seq_len``; data loads when ``train_data`` / ``eval_data`` are called.

Two optional hooks serve the planner (:mod:`bench.plan`; docs/adding-a-task.md):
:meth:`Task.sweep_defaults` gives task-sized defaults (e.g. an NFE grid sized to the generated
length) for the sweep fields a file leaves unset, and :meth:`Task.validate_plan` rejects, while
the sweep is planned, the values this task's jobs would reject later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from bench.config import BackboneConfig, ConfigError, SampleConfig, TrainConfig, build
from bench.evaluate.metrics import MetricValue
from bench.options import Options


@dataclass
class TaskData:
    """Fixed-length examples.

    Attributes:
        x: (N, L) token ids (prompt + target).
        clean_mask: (N, L) bool, True on positions never noised (prompt / givens).
        loss_mask: (N, L) bool, True on positions that count in the loss.
        meta: per-example extras (e.g. gold answers), lists of length N.
    """

    x: Tensor
    clean_mask: Tensor
    loss_mask: Tensor
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.x.shape[0]

    def subset(self, idx) -> TaskData:
        idx = torch.as_tensor(idx, dtype=torch.long)
        meta = {k: [v[i] for i in idx.tolist()] for k, v in self.meta.items()}
        return TaskData(self.x[idx], self.clean_mask[idx], self.loss_mask[idx], meta)


def nfe_grid(lo: int, hi: int) -> list[int]:
    """``lo``, ``2 lo``, ``4 lo``, ... below ``hi``, then ``hi`` ([hi] when lo >= hi): an NFE grid
    that doubles up to a length of the task (:meth:`Task.sweep_defaults`)."""
    out, k = [], max(1, lo)
    while k < hi:
        out.append(k)
        k *= 2
    return [*out, hi]


class Task:
    """Base class; see bench/data/sudoku/task.py for the reference implementation."""

    name: str = ""
    vocab_size: int = 0
    seq_len: int = 0
    # what the report shows (rows carry it: bench.results.task_columns / sample_columns)
    #: the metric of the headline tables and figures; secondary ones get a table each, in order
    headline_metric: str = "exact_match"
    secondary_metrics: tuple[str, ...] = ()
    #: display order of the evaluation groups (others follow, by name)
    subset_order: tuple[str, ...] = ()
    #: extra report renderers by kind (bench/report/renderers.py); "generic" adds none
    report_kind: str = "generic"
    #: display name ("" = ``name``); ``stand_in_for``: the benchmark a CPU stand-in replaces
    title: str = ""
    stand_in_for: str = ""
    #: the dataclass of ``task.options`` (none by default: any key is unknown)
    Options: type[Options] = Options
    #: whether samples are free text a held-out text can be compared with (MAUVE: OWT's options
    #: :data:`bench.evaluate.mauve_score.OPTIONS`; on any other task they are an error)
    free_text: bool = False

    def __init__(self, cfg):
        self.cfg = cfg
        if not self.free_text:
            from bench.evaluate.mauve_score import OPTIONS as MAUVE_OPTIONS

            asked = [k for k in (cfg.options or {}) if k in MAUVE_OPTIONS]
            if asked:
                raise ConfigError(
                    f"task.options.{asked[0]}: MAUVE compares free text with held-out text; task "
                    f"{self.name or cfg.name!r} does not generate free text (the owt task does)"
                )
        self.opts = build(self.Options, cfg.options, where="task.options")

    def protocol(self) -> str:
        """The options that decide which items and which grader a number comes from, as one
        short string every row carries (``task_protocol``); "" when the task has none."""
        return ""

    # -- planning (bench.plan) ----------------------------------------------------------
    def sweep_defaults(self) -> dict[str, dict[str, Any]]:
        """Task-sized defaults of the sweep sections: ``{"sample": {...}, "train": {...},
        "backbone": {...}}``, each a mapping of fields of :class:`~bench.config.SampleConfig`,
        :class:`~bench.config.TrainConfig` or :class:`~bench.config.BackboneConfig` (checked by
        their rules). The planner uses a value only where the sweep file leaves that field unset
        (:func:`bench.config.is_set`; a method entry's ``train:`` overrides count as set), so a
        value the file writes always wins and a sweep that sets everything plans as before.
        Declare here what is a property of the task rather than of the harness: an NFE grid sized
        to the generated length, the size of the evaluation split, the paper's recipe for it.
        Cheap: the planner calls it on every plan. Default: none (the dataclass defaults)."""
        return {}

    def validate_plan(
        self, *, backbone: BackboneConfig, train: TrainConfig, sample: SampleConfig
    ) -> None:
        """Reject, while the sweep is planned, what this task's jobs would reject later (in
        ``train_data``, ``eval_data``, ``evaluate``) and the constructor has not checked: raise
        :class:`~bench.config.ConfigError` whose message starts with the key from the sweep
        file's root (``task.options.seq_len: ...``, ``sample.n_samples: ...``); the planner adds
        the file's name and ``python -m bench.sweep`` exits 2 before anything is written. The
        sections are the sweep's, task defaults applied. Prefer calling the function the job
        calls to restating its rule. Pure and cheap: no data, no tokenizer download, no
        network; a file named by an option may be looked at (``stat``), not read. Default:
        nothing to check."""

    def groups(self) -> list[str]:
        """Evaluation groups (Sudoku: difficulties). Results rows carry the group name."""
        raise NotImplementedError

    def train_data(self, groups: list[str]) -> TaskData:
        """Training examples for a model trained on ``groups``."""
        raise NotImplementedError

    def eval_data(self, group: str, n: int) -> TaskData:
        """The first ``n`` held-out examples of ``group`` (deterministic)."""
        raise NotImplementedError

    def heldout_data(self, groups: list[str], n: int) -> TaskData | None:
        """Up to ``n`` held-out examples in the training format (prompt and target, the training
        loss mask), deterministic, never trained on, for the trainer's validation loss
        (``train.val_every``) of a model trained on ``groups``. None: the task has none, and its
        runs log no validation loss."""
        return None

    def evaluate(self, samples: Tensor, data: TaskData, group: str) -> list[MetricValue]:
        """Score (N, L) generated ids against ``data``."""
        raise NotImplementedError

    def record_fields(self, samples: Tensor, data: TaskData, group: str) -> list[dict]:
        """The task's own fields of each item's record (:mod:`bench.records`), one dict per item
        of ``data``, merged into the common fields (a key here replaces a common one, e.g.
        ``target``). Called right after :meth:`evaluate` on the same samples, so a task may hand
        over what scoring computed (program tasks: the sandbox's verdicts) instead of computing
        it again. Values: JSON-able (numbers, strings, lists, flat dicts); keep them bounded (an
        excerpt, not a whole log). Default: none (the common fields only)."""
        return []

    def generated_length(self) -> int | None:
        """The positions every item generates, when it is the same for all (the planner checks
        that a semi-autoregressive ``block_length`` divides it, as LLaDA's ``generate`` asserts);
        None when it differs between items (a prompt of its own length, Sudoku's givens): a
        row's last block may then be shorter. Cheap: no data. Default: None."""
        return None

    def eos_id(self) -> int | None:
        """The id that ends a generated text (a sampler may stop a row at it: ``sample.eos_stop``;
        the cost columns count a row's tokens up to it), or None when the task has none (Sudoku:
        its tokenizer's ``eos_token_id`` is the row separator). Default: none."""
        return None

    def generated_tokens(self, samples: Tensor, data: TaskData) -> list[int]:
        """Each item's generated tokens in ``samples`` (n, L): the positions its prompt mask does
        not give, up to and with the first :meth:`eos_id` among them (never the prompt, never
        what follows the EOS: padding or a filled canvas); what ``tokens_per_s``,
        ``tokens_per_call`` and ``tokens_per_fe`` count."""
        gen = ~data.clean_mask.bool()
        eos = self.eos_id()
        if eos is None:
            return [int(k) for k in gen.sum(-1)]
        hit = gen & (samples == eos)
        # positions up to the first generated EOS (with it); every generated one when none
        before = (hit.long().cumsum(-1) - hit.long()) == 0
        return [int(k) for k in (gen & before).sum(-1)]

    def record_answer(self, record: dict):
        """The answer an item's record (:mod:`bench.records`) gives, for maj@k's vote over the
        draws of an item (:mod:`bench.evaluate.passk`): hashable, or None for no answer (no
        vote). Default: the whole output text (Sudoku: the grid); program tasks: the executed
        answer."""
        return record.get("output")

    # -- cost (bench.cost.model: the --dry-run prediction) ----------------------------------
    def cost_profile(self) -> dict[str, Any]:
        """What the cost model needs to know about this task's jobs beyond its shapes
        (``seq_len``, ``vocab_size``); every key is optional:

        - ``prompt_tokens``: positions given before the first generated one in a batch (a
          KV-cached AR sampler reads them in one call, then makes ``seq_len - prompt_tokens``
          calls: :meth:`bench.method.Method.nfe_for`); default 1;
        - ``scorer``: ``"sandbox"`` (each item's program runs in the GSM8K sandbox),
          ``"genppl"`` (a reference LM scores each sample, ``seq_len`` tokens), or ``"light"``
          (the default: scoring costs little per item);
        - ``scorer_passes``: reference-LM passes over ``seq_len`` tokens per sample of a
          ``"genppl"`` scorer; default 1 (OWT with MAUVE: 3, the sample's Gen. PPL, its
          features and its reference's);
        - ``tokenizer``: True when each phase of a job (training, sampling, likelihood) loads a
          hub tokenizer (the task builds it on first use); default False;
        - ``prepare_s`` / ``prepare_tokenizer_loads``: what the first job of a sweep spends
          building the task's data caches when they are missing (an estimate, and the tokenizer
          loads it makes); default none.

        Pure and cheap like :meth:`sweep_defaults` (the planner's ``--dry-run`` calls it)."""
        return {}

    # -- text (per-item records: bench.records; bench.generate) ---------------------------
    def decode_text(self, ids: list[int]) -> str:
        """Token ids (a prompt, or what a model wrote) as text for a person to read. Default: the
        ids separated by spaces, the id ``vocab_size`` (no token of the task) as ``[PAD]``: it is
        the reference's pad class, the one class an imported model may have beyond the task's
        vocabulary (bench.plan); a task with a tokenizer decodes them (special tokens dropped).
        Text only: the ids and the scores are unchanged."""
        from bench.text.bpe import PAD_TOKEN

        return " ".join(PAD_TOKEN if int(i) == self.vocab_size else str(int(i)) for i in ids)

    def encode_text(self, text: str) -> list[int]:
        """Text a user typed as token ids (``bench.generate``). Default: whitespace-separated
        integers below ``vocab_size``; ValueError (one line) on anything else."""
        out = []
        for w in text.split():
            if not w.lstrip("-").isdigit() or not 0 <= int(w) < self.vocab_size:
                raise ValueError(
                    f"task {self.name}: text is read as token ids 0..{self.vocab_size - 1} "
                    f"separated by spaces; got {w!r}"
                )
            out.append(int(w))
        return out

    def prompt_length(self, data: TaskData, i: int) -> int:
        """Where item ``i``'s prompt ends: ``data.meta["prompt_len"][i]`` when the task records
        it, else the first position that is not clean (0: unconditional generation)."""
        pl = data.meta.get("prompt_len")
        if pl is not None:
            return int(pl[i])
        free = (~data.clean_mask[i]).nonzero()
        return int(free[0]) if len(free) else int(data.x.shape[1])

    def text_canvas(self, prompt: str, suffix: str, length: int) -> TaskData:
        """One row for ``bench.generate``: the prompt's ids, ``length`` positions to generate,
        then the suffix's ids (infilling); prompt and suffix clean. Length = their sum."""
        p = self.encode_text(prompt) if prompt else []
        s = self.encode_text(suffix) if suffix else []
        if length < 1:
            raise ValueError(f"--length: must be >= 1, got {length}")
        x = torch.tensor([[*p, *([0] * length), *s]], dtype=torch.long)
        clean = torch.ones_like(x, dtype=torch.bool)
        clean[0, len(p) : len(p) + length] = False
        return TaskData(x, clean, ~clean, meta={"prompt_len": [len(p)]})

    # ------------------------------------------------------------------ optional hooks
    # None here means "this task has none"; callers test ``is not None``, never hasattr.

    #: ``data_reference(n) -> list[MetricValue]``: a held-out reference point scored like a
    #: model's samples (OWT: held-out text under the Gen. PPL / entropy scorer). The first job
    #: that samples a subset writes it once as store rows with ``method = "data"`` and
    #: ``kind = "reference"`` (``bench.results.rows.reference_rows``); the frontier report draws it.
    data_reference = None
    #: ``reference_completions(data) -> Tensor``: the gold completions of ``data`` as (N, L) ids
    #: when ``data.x`` itself is not what a perfect model writes (program tasks: the gold
    #: programs); the task conformance suite scores them and expects ``conformance_top``.
    reference_completions = None
    #: the task conformance suite's case (tests/bench/data/test_task_conformance.py): a dict of
    #: TaskConfig fields giving a small, fast instance; a plug-in task declares it to be tested
    #: like the built-ins (which have theirs in that file's CASES)
    conformance_config: dict | None = None
    #: the headline value the gold completions score under ``evaluate`` (1.0: every item right)
    conformance_top: float = 1.0
