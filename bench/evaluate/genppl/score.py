"""Gen. PPL scoring proper: running the reference LM over prepared samples, and the cell values.

- :func:`score_prepared`: (summed NLL, scored targets) per :class:`Prepared` sample. A sequence
  longer than the reference model's context ``C`` is scored in chunks ``[0, C), [C-1, 2C-1),
  ...``: consecutive chunks share one token, so every target is scored exactly once with at least
  one token of context (the reference code splits into disjoint chunks and never scores the
  first token of each chunk; with its ``max_length = 1024`` truncation there is one chunk).
  Chunks of all samples are sorted by length and batched up to ``batch_tokens`` tokens, run under
  ``torch.no_grad`` in bf16 on GPU (the model's weights are loaded in bf16; log-probabilities in
  fp32) and fp32 on CPU.
- :func:`summarize`: per-sample mean Gen. PPL, pooled Gen. PPL and mean unigram entropy with
  95 % percentile-bootstrap intervals over samples
  (:func:`bench.evaluate.bootstrap.bootstrap_statistic`, seeded; the pooled value resamples (nll, n)
  pairs jointly; NaN for fewer than 2 samples), and the fraction of degenerate samples
  (:mod:`bench.evaluate.degenerate`: empty after the first end-of-text, one repeated token,
  unigram entropy below ln 2) with the same interval; :func:`metric_values` turns them into
  results-store rows.

What is scored, and why, is :mod:`bench.evaluate.genppl.evaluator`'s docstring.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bench.evaluate import degenerate as dg
from bench.evaluate.bootstrap import (
    PAPER_RESAMPLES,
    SAMPLES_CI_METHOD,
    WILSON,
    bootstrap_accuracy,
    bootstrap_statistic,
)
from bench.evaluate.metrics import MetricValue
from bench.text.reference_lm import RefLM


@dataclass
class Prepared:
    """One sample in the reference tokenizer: ``ids`` and, per position j >= 1, whether target
    ``ids[j]`` is scored (``scored[0]`` is always False)."""

    ids: list[int]
    scored: list[bool]
    retokenized: bool
    dropped_ids: int = 0  # "paper" mode: [PAD] ids (reference_pad_id) left out of the scored text


# --------------------------------------------------------------------------- forward passes


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


# --------------------------------------------------------------------------- cell values


def _interval(data: tuple, statistic, *, n_resamples: int, seed: int) -> tuple[float, float]:
    """(low, high) 95 % percentile interval; NaN for < 2 samples."""
    if data[0].shape[0] < 2:
        return float("nan"), float("nan")
    ci = bootstrap_statistic(
        data, statistic, paired=len(data) > 1, n_resamples=n_resamples, seed=seed
    )
    return ci.low, ci.high


def summarize(
    nll_sum,
    n_scored,
    entropy,
    *,
    degenerate=None,
    n_resamples: int = PAPER_RESAMPLES,
    seed: int = 0,
) -> dict:
    """Cell values from per-sample (nll_sum, n_scored, entropy), with bootstrap CIs.
    ``degenerate``: per sample, whether it is degenerate (a reason string or a bool; None:
    judged from its entropy and, for "empty", from ``n_scored == 0``, which is "nothing before
    the first end-of-text" in the paper's masking)."""
    nll = np.asarray(nll_sum, np.float64)
    n = np.asarray(n_scored, np.float64)
    ent = np.asarray(entropy, np.float64)
    if degenerate is None:
        degenerate = [dg.sample_reason(e, int(k)) for e, k in zip(ent, n)]
    deg = np.asarray([bool(d) for d in degenerate], np.float64)
    if deg.shape != n.shape:
        raise ValueError(f"degenerate: {deg.shape[0]} flags for {n.shape[0]} samples")
    ok = n > 0
    ppl = np.exp(nll[ok] / n[ok])
    out: dict[str, Any] = {
        "n": int(len(n)),
        "n_scored_samples": int(ok.sum()),
        "empty_frac": float(1 - ok.mean()) if len(n) else float("nan"),
        "tokens_per_sample": float(n.mean()) if len(n) else float("nan"),
    }
    out["gen_ppl"] = float(ppl.mean()) if ok.any() else float("nan")
    out["gen_ppl_ci"] = _interval(
        (ppl,), lambda a, axis: a.mean(axis=axis), n_resamples=n_resamples, seed=seed
    )
    out["gen_ppl_pooled"] = float(np.exp(nll[ok].sum() / n[ok].sum())) if ok.any() else float("nan")
    out["gen_ppl_pooled_ci"] = _interval(
        (nll[ok], n[ok]),
        lambda a, b, axis: np.exp(a.sum(axis=axis) / b.sum(axis=axis)),
        n_resamples=n_resamples,
        seed=seed,
    )
    fin = ent[np.isfinite(ent)]
    out["entropy"] = float(fin.mean()) if fin.size else float("nan")
    out["entropy_ci"] = _interval(
        (fin,), lambda a, axis: a.mean(axis=axis), n_resamples=n_resamples, seed=seed
    )
    out["degenerate_fraction"] = float(deg.mean()) if len(deg) else float("nan")
    # a proportion: the same percentile bootstrap, Wilson at 0 / n and n / n (never zero-width)
    d = bootstrap_accuracy(deg, n_resamples=n_resamples, seed=seed)
    out["degenerate_fraction_ci"] = (d.low, d.high)
    out["degenerate_fraction_ci_method"] = (
        f"{WILSON} (0/n or n/n)" if d.method == WILSON else SAMPLES_CI_METHOD
    )
    return out


def metric_values(s: dict) -> list:
    """:class:`bench.evaluate.metrics.MetricValue` rows of a :func:`summarize` result."""
    n, ns = s["n"], s["n_scored_samples"]
    return [
        MetricValue("gen_ppl", s["gen_ppl"], ns, *s["gen_ppl_ci"], SAMPLES_CI_METHOD),
        MetricValue(
            "gen_ppl_pooled", s["gen_ppl_pooled"], ns, *s["gen_ppl_pooled_ci"], SAMPLES_CI_METHOD
        ),
        MetricValue("entropy", s["entropy"], n, *s["entropy_ci"], SAMPLES_CI_METHOD),
        MetricValue("gen_ppl_tokens_per_sample", s["tokens_per_sample"], n),
        MetricValue("gen_ppl_empty_frac", s["empty_frac"], n),
        MetricValue(
            dg.METRIC,
            s["degenerate_fraction"],
            n,
            *s["degenerate_fraction_ci"],
            s.get("degenerate_fraction_ci_method"),
        ),
    ]
