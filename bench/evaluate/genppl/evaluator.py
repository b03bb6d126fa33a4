"""Generative perplexity (Gen. PPL) and unigram entropy of unconditional samples.

Paper, appendix "Gen. PPL / Entropy Frontier Protocol" (after PGM): every sample of a cell is
scored by a pretrained reference LM (GPT-2 large) and by its unigram entropy.

- **Gen. PPL, per sample** (paper eq.): ``exp(-(1/n) sum_i log p_ref(x_i | x_<i))`` over the
  sample's scored tokens, "masking tokens at or after the first end-of-text"; the cell value
  ``gen_ppl`` is the mean over samples (samples with no scored token are left out and counted
  in ``gen_ppl_empty_frac``).
- **Gen. PPL, pooled** (``gen_ppl_pooled``): ``exp(sum nll / sum n)`` over every scored token of
  every sample: what the reference code computes (kuleshov-group/mdlm
  ``diffusion.py::compute_generative_perplexity`` and s-sahoo/duo
  ``metrics.py::record_generative_perplexity`` feed a torchmetrics ``MeanMetric`` weighted by
  the token mask). Both are stored; the per-sample mean (the paper's text) is the headline.
- **Unigram entropy** (paper eq., duo ``metrics.py::record_entropy``):
  ``-sum_v c(v)/L log(c(v)/L)`` in nats over all L generator ids of a sample (special ids
  included), averaged over samples (``entropy``).
- **Degenerate samples** (:mod:`bench.evaluate.degenerate`): per sample, ``degenerate`` names
  why it is (``empty``: nothing before the first end-of-text; ``repeated``: one token over the
  whole sample; ``low_entropy``: unigram entropy below ln 2 nats) or is ``""``; the cell value
  ``degenerate_fraction`` is the fraction of such samples (a cell with half or more is flagged
  degenerate by the frontier report, :mod:`bench.report.frontier.section`).
- Bootstrap 95 % percentile intervals over samples (:mod:`bench.evaluate.bootstrap`, seeded;
  ``scipy.stats.bootstrap``, ``method="percentile"``) for Gen. PPL, pooled Gen. PPL, entropy and
  the degenerate fraction; the pooled value resamples (nll, n) pairs jointly.

Which tokens are scored (``mode``):

- ``"paper"`` (default): a sample's leading end-of-text ids (the BOS of MDLM's wrapped blocks)
  are dropped, the rest is cut at its first end-of-text id; the reference LM's BOS (else its
  EOS) is prepended as context and every token of the remaining text is scored.
- ``"reference"``: the reference code: the whole sample is decoded with special tokens kept as
  text and re-encoded; targets 1..n-1 are scored when they are not end-of-text, plus the first
  end-of-text (so text after the first end-of-text IS scored, despite the comments there).

The added ``[PAD]`` id: the reference harness gives every tokenizer without a pad token a
``[PAD]`` special token at the next id (s-flm ``dataloader.py::get_tokenizer``; GPT-2: id 50257,
``len`` 50258), and its OWT Duo / FLM / S-FLM models have 50,258 classes with that id a real
class (MDLM / AR use the same id as their mask). So a sample may hold id ``len(tokenizer)``
(:func:`reference_pad_id`) when the sample tokenizer has no pad token; it is read as that
``[PAD]`` token, as the reference's decode does: ``"paper"`` mode decodes without special tokens,
so it is dropped (not scored; counted in ``dropped_ids``); ``"reference"`` mode keeps special
tokens as text (``batch_decode`` default), so it becomes the literal text ``"[PAD]"`` and the
reference LM scores its re-encoding (GPT-2: ``[``, ``P``, ``AD``, ``]``); such a sample is always
decoded and re-encoded, even when the two tokenizers are the same (the reference re-encodes
every sample). A larger id (GPT-2: >= 50258) is an error (:func:`check_sample_ids`).

Retokenisation: when the reference tokenizer maps text to other ids than the samples'
(:func:`bench.text.fingerprint.ids_fingerprint`), ids are decoded to text
(``clean_up_tokenization_spaces=False``; transformers 4.x cleaned spaces before punctuation by
default, 5.x does not) and re-encoded by the reference tokenizer; otherwise the ids are scored as
they are.

The parts: this module prepares samples (:class:`Preparer`) and holds the evaluator
(:class:`GenPPL`); :mod:`bench.evaluate.genppl.score` runs the reference LM over prepared samples
(chunking, batching) and computes the cell values; :mod:`bench.text.reference_lm` loads the
reference LM (default ``gpt2-large``, the paper's; offline ``smollm2-135m``);
:mod:`bench.evaluate.genppl.command` is the command line.

CLI: ``python -m bench.evaluate genppl --samples IN.jsonl --out OUT.jsonl [--ref-model ID]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bench.evaluate import degenerate as dg
from bench.evaluate.bootstrap import PAPER_RESAMPLES
from bench.evaluate.genppl.score import (
    Prepared,
    ScoreStats,
    metric_values,
    score_prepared,
    summarize,
)
from bench.text.bpe import PAD_TOKEN
from bench.text.fingerprint import ids_fingerprint
from bench.text.reference_lm import (
    AUTO,
    OFFLINE_REF,
    PAPER_REF,
    ReferenceModelError,
    RefLM,
    load_reference,
    wrap_model,
)

# the Gen. PPL scorer's public names, its scoring and reference-LM parts included
__all__ = [
    "AUTO",
    "MODES",
    "OFFLINE_REF",
    "PAPER_REF",
    "PAPER_RESAMPLES",
    "GenPPL",
    "Prepared",
    "Preparer",
    "RefLM",
    "ReferenceModelError",
    "ScoreStats",
    "check_sample_ids",
    "ids_note",
    "load_reference",
    "metric_values",
    "reference_pad_id",
    "sample_id_limit",
    "score_prepared",
    "summarize",
    "unigram_entropy",
    "wrap_model",
]

MODES = ("paper", "reference")
#: the pad token the reference harness adds (s-flm dataloader.py::get_tokenizer)
PAD_TEXT = PAD_TOKEN


# --------------------------------------------------------------------------- entropy


def unigram_entropy(ids) -> float:
    """Unigram entropy in nats of one sample: ``-sum_v (c_v/L) log(c_v/L)`` over its L ids
    (paper eq. "Unigram entropy"; duo ``metrics.py::record_entropy``)."""
    a = np.asarray(ids).reshape(-1)
    if a.size == 0:
        return float("nan")
    _, counts = np.unique(a, return_counts=True)
    p = counts / a.size
    return float(-(p * np.log(p)).sum())


# --------------------------------------------------------------------------- preparation


def reference_pad_id(tok) -> int | None:
    """The id of the ``[PAD]`` special token the reference harness adds to a tokenizer that has
    no pad token: ``len(tok)`` (GPT-2: 50257; s-flm dataloader.py::get_tokenizer,
    ``add_special_tokens({'pad_token': '[PAD]'})``; s-flm dataloader.py::get_tokenizer). None when
    the tokenizer has its own pad token (its id is then below ``len(tok)``)."""
    if tok is None or getattr(tok, "pad_token_id", None) is not None:
        return None
    return len(tok)


def sample_id_limit(tok) -> int:
    """Sample ids must lie in ``[0, limit)``: the tokenizer's ids plus the reference's added
    ``[PAD]`` (:func:`reference_pad_id`) where it has none (GPT-2: 50258)."""
    return len(tok) + (1 if reference_pad_id(tok) is not None else 0)


def check_sample_ids(samples, tok, where: str = "genppl") -> None:
    """Raise ValueError (one line) for the first id outside ``[0, sample_id_limit(tok))``."""
    limit = sample_id_limit(tok)
    if isinstance(samples, torch.Tensor):
        bad_mask = (samples < 0) | (samples >= limit)
        bad = int(samples[bad_mask][0]) if bool(bad_mask.any()) else None
    else:
        bad = next((int(t) for s in samples for t in s if not 0 <= int(t) < limit), None)
    if bad is not None:
        raise ValueError(
            f"{where}: sample id {bad} outside the samples' vocabulary {ids_note(tok)}"
        )


def ids_note(tok) -> str:
    """``(50257 ids + the reference's added [PAD] = 50257)``: the accepted ids, for errors."""
    pad = reference_pad_id(tok)
    extra = f" + the reference's added {PAD_TEXT} = {pad}" if pad is not None else ""
    return f"({len(tok)} ids{extra})"


def _strip_and_cut(ids: list[int], eot: int) -> list[int]:
    """Drop leading end-of-text ids (a BOS), then cut at the first end-of-text."""
    i = 0
    while i < len(ids) and ids[i] == eot:
        i += 1
    rest = ids[i:]
    return rest[: rest.index(eot)] if eot in rest else rest


def _strip_and_cut_text(text: str, eot: str) -> str:
    while text.startswith(eot):
        text = text[len(eot) :]
    k = text.find(eot)
    return text if k < 0 else text[:k]


def _reference_mask(ids: list[int], eot: int) -> list[bool]:
    """mdlm/duo: target j >= 1 is scored if it is not end-of-text or it is the first one."""
    first = ids.index(eot) if eot in ids else -1
    return [False] + [t != eot or j == first for j, t in enumerate(ids) if j > 0]


def _decode(tok, ids: list[int], keep_special: bool, pad_id: int | None = None) -> str:
    """Sample ids -> text with the samples' tokenizer. ``pad_id``: the reference's added
    ``[PAD]`` id (:func:`reference_pad_id`), which ``tok`` itself does not know: dropped like
    every special token without ``keep_special``, else written as the text ``"[PAD]"`` between
    the decoded runs around it. That is what the reference tokenizer (``tok`` with ``[PAD]``
    added) decodes to, except where a multi-byte character's bytes straddle a ``[PAD]`` id
    (both give replacement characters there)."""

    def dec(part: list[int]) -> str:
        return tok.decode(
            part, skip_special_tokens=not keep_special, clean_up_tokenization_spaces=False
        )

    if pad_id is None or pad_id not in ids:
        return dec(ids)
    if not keep_special:
        return dec([t for t in ids if t != pad_id])
    runs, cur = [], []
    for t in ids:
        if t == pad_id:
            runs.append(cur)
            cur = []
        else:
            cur.append(t)
    runs.append(cur)
    return PAD_TEXT.join(dec(r) if r else "" for r in runs)


def _encode(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


class Preparer:
    """Turns samples (generator ids or text) into :class:`Prepared` for one reference LM."""

    def __init__(self, ref: RefLM, sample_tokenizer=None, mode: str = "paper"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
        self.ref, self.sample_tok, self.mode = ref, sample_tokenizer, mode
        self.same = sample_tokenizer is not None and (
            ids_fingerprint(sample_tokenizer) == ids_fingerprint(ref.tokenizer)
        )
        self.sample_eot = getattr(sample_tokenizer, "eos_token_id", None)
        self.sample_eot_text = getattr(sample_tokenizer, "eos_token", None) or getattr(
            ref.tokenizer, "eos_token", None
        )
        self.vocab = len(sample_tokenizer) if sample_tokenizer is not None else 0
        self.pad_id = reference_pad_id(sample_tokenizer)

    def __call__(self, sample) -> Prepared:
        ref = self.ref
        if isinstance(sample, str):
            if self.mode == "paper":
                text = (
                    _strip_and_cut_text(sample, self.sample_eot_text)
                    if self.sample_eot_text
                    else sample
                )
                body = _encode(ref.tokenizer, text)
                return Prepared([ref.context_id, *body], [False] + [True] * len(body), True)
            ids = _encode(ref.tokenizer, sample)
            return Prepared(ids, _reference_mask(ids, ref.eot_id), True)
        if self.sample_tok is None:
            raise ValueError("token-id samples need the samples' tokenizer")
        ids = [int(t) for t in sample]
        check_sample_ids([ids], self.sample_tok)
        pad = self.pad_id
        if self.mode == "paper":
            body = _strip_and_cut(ids, self.sample_eot)
            dropped = body.count(pad) if pad is not None else 0
            if self.same:  # decoding without special tokens drops the added [PAD]
                body = [t for t in body if t != pad] if dropped else body
            else:
                text = _decode(self.sample_tok, body, keep_special=False, pad_id=pad)
                body = _encode(ref.tokenizer, text)
            return Prepared(
                [ref.context_id, *body], [False] + [True] * len(body), not self.same, dropped
            )
        # the reference decodes with special tokens kept: an added [PAD] becomes its text, which
        # the reference LM's tokenizer re-encodes (so that sample is re-encoded even if same)
        retok = not self.same or (pad is not None and pad in ids)
        if retok:
            text = _decode(self.sample_tok, ids, keep_special=True, pad_id=pad)
            ids = _encode(ref.tokenizer, text)
        return Prepared(ids, _reference_mask(ids, ref.eot_id), retok)


# --------------------------------------------------------------------------- evaluator


@dataclass
class GenPPL:
    """Scores samples under one reference LM (loaded on first use)."""

    ref_model: str = AUTO
    sample_tokenizer: Any = None
    mode: str = "paper"
    batch_tokens: int = 8192
    device: str | None = None
    data_dir: str = ""
    max_context: int = 0
    n_resamples: int = PAPER_RESAMPLES
    seed: int = 0
    progress: bool = True
    ref: RefLM | None = None
    stats: ScoreStats = field(default_factory=ScoreStats)
    _prep: Preparer | None = None

    def reference(self) -> RefLM:
        if self.ref is None:
            self.ref = load_reference(
                self.ref_model,
                device=self.device,
                data_dir=self.data_dir,
                max_context=self.max_context,
            )
        return self.ref

    def preparer(self) -> Preparer:
        if self._prep is None:
            self._prep = Preparer(self.reference(), self.sample_tokenizer, self.mode)
        return self._prep

    def score(self, samples, desc: str = "gen ppl") -> list[dict]:
        """Per-sample rows for token-id rows (a tensor or lists) or strings."""
        if isinstance(samples, torch.Tensor):
            samples = samples.tolist()
        prep = self.preparer()
        items = [prep(s) for s in samples]
        nll, cnt = score_prepared(
            self.reference(),
            items,
            batch_tokens=self.batch_tokens,
            progress=self.progress,
            stats=self.stats,
            desc=desc,
        )
        rows = []
        for s, it, a, c in zip(samples, items, nll, cnt):
            gen_ids = _encode(self.sample_tokenizer, s) if isinstance(s, str) else s
            entropy = unigram_entropy(gen_ids)
            content = dg.content_before_eot(gen_ids, prep.sample_eot, prep.pad_id)
            rows.append(
                {
                    "ref_model": self.reference().name,
                    "mode": self.mode,
                    "retokenized": it.retokenized,
                    "n_tokens": len(gen_ids),
                    "n_ref_tokens": len(it.ids),
                    "n_scored": int(c),
                    "nll_sum": float(a),
                    "ppl": math.exp(a / c) if c else None,
                    "entropy": entropy,
                    "dropped_ids": it.dropped_ids,
                    "degenerate": dg.sample_reason(entropy, content),
                }
            )
        return rows

    def summarize(self, rows: list[dict]) -> dict:
        """Cell values of per-sample rows. A row without ``degenerate`` (scored before it
        existed, e.g. resumed from a CLI output) is judged from its entropy and, in "paper"
        mode, from ``n_scored == 0`` (nothing before the first end-of-text)."""

        def reason(r: dict) -> str:
            if "degenerate" in r:
                return r["degenerate"]
            paper = r.get("mode", self.mode) == "paper"
            return dg.sample_reason(r["entropy"], int(r["n_scored"]) if paper else None)

        s = summarize(
            [r["nll_sum"] for r in rows],
            [r["n_scored"] for r in rows],
            [r["entropy"] for r in rows],
            degenerate=[reason(r) for r in rows],
            n_resamples=self.n_resamples,
            seed=self.seed,
        )
        s["ref_model"] = self.reference().name
        s["mode"] = self.mode
        return s
