"""MAUVE of unconditional samples against held-out text (Pillutla et al. 2021, NeurIPS, "MAUVE:
Measuring the Gap Between Neural Text and Human Text"), the third OpenWebText metric of ReMDM
(``main.py``) and SDTT (``run_eval.py``, repeated over k-means seeds) beside Gen. PPL and entropy.

- **Texts.** A sample's text is its whole canvas, as ReMDM and SDTT featurize whole samples:
  its ids after the leading end-of-text ids (a BOS), the reference harness's added ``[PAD]``
  dropped, later end-of-text ids kept (:func:`text_ids`; Gen. PPL, by contrast, scores only up
  to the first end-of-text), at most the L - 1 ids a held-out block holds after its own. Samples
  with no text are left out (n counts the others).
- **References, cut to each sample's length** (the pitfall of unequal lengths, yxuansu/SimCTG#7:
  the last token's feature of a long text differs from a short one's whatever their quality):
  held-out blocks read the same way, from the last block backwards (the frontier's "data" point
  scores the first blocks as samples: :func:`reference_pool` leaves them out); sample i takes the
  next block of at least its length and is compared with that block's first ``length`` ids
  (:func:`pair_references`); :func:`check_equal_lengths` refuses a pairing whose lengths differ.
  Too few held-out blocks is an error, never a shorter reference.
- **Features** (:func:`featurize`): the featurizer's last-layer hidden state at the last token
  (Pillutla et al. 2021, section 4: GPT-2 large's terminal hidden state; mauve-text
  ``utils.py::featurize_tokens_from_model``), each text prefixed by the featurizer's BOS (else
  its EOS) as Gen. PPL prefixes it, and cut to the featurizer's context.
- **MAUVE** (:func:`mauve_values`): ``mauve.compute_mauve(p_features=references,
  q_features=samples)`` (mauve-text: ``p`` the human text, ``q`` the model's; PCA to 90 % of the
  variance, k-means with ``num_buckets = "auto"`` = n / 10 buckets, 5 re-runs, scaling c = 5, the
  package's defaults) once per k-means seed ``25, 26, ...`` (mauve-text's default seed first),
  the features fixed. The value is the mean over seeds, ``mauve_seed_sd`` their standard
  deviation, and the interval a 95 % t-interval of that mean over the seeds
  (:data:`CI_METHOD`): it covers the quantization's randomness, not the choice of samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from bench.evaluate.metrics import MetricValue

METRIC = "mauve"
SPREAD = "mauve_seed_sd"
#: the OWT task options that configure MAUVE; any of them on another task is an error
OPTIONS = ("mauve", "mauve_featurizer", "mauve_seeds")
#: mauve-text's default k-means seed (``compute_mauve(seed=25)``): the first of ours
FIRST_SEED = 25
INSTALL = "pip install -e '.[mauve]' (mauve-text, faiss-cpu)"


def ci_method(n_seeds: int) -> str:
    """The ``ci_method`` of a MAUVE row."""
    return (
        f"95 % t-interval of the mean over {n_seeds} k-means seeds (features fixed; "
        "the quantization's randomness, not the samples')"
    )


def check_installed() -> None:
    """Raise ImportError (one line) when mauve-text or faiss-cpu is missing."""
    import importlib.util

    missing = [m for m in ("mauve", "faiss") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"MAUVE needs {', '.join(missing)}: {INSTALL}")


# --------------------------------------------------------------------------- references


def text_ids(ids, eot: int | None, pad: int | None) -> list[int]:
    """A sample's text as MAUVE reads it: its ids after the leading end-of-text ids (a BOS), the
    added ``[PAD]`` id dropped, later end-of-text ids kept (the whole canvas, as ReMDM and SDTT
    featurize whole samples)."""
    a = [int(t) for t in ids]
    i = 0
    while eot is not None and i < len(a) and a[i] == eot:
        i += 1
    return [t for t in a[i:] if t != pad]


@dataclass(frozen=True)
class Reference:
    """A held-out text: block ``block`` of the held-out split, after its leading end-of-text."""

    block: int
    ids: tuple[int, ...]


def reference_pool(blocks, eot: int, skip_first: int = 0) -> Iterator[Reference]:
    """The held-out ``blocks`` (in file order; a memory map is read only as far as they are
    used) from the last backwards, leading end-of-text ids dropped, leaving out blocks
    ``[0, skip_first)`` (the data point's samples)."""
    for b in range(len(blocks) - 1, skip_first - 1, -1):
        yield Reference(b, tuple(text_ids(np.asarray(blocks[b]).tolist(), eot, None)))


def pair_references(lengths: list[int], pool: Iterable[Reference]) -> list[tuple[Reference, list]]:
    """Each sample length (> 0) paired with the next held-out text of at least that many ids,
    cut to it. ValueError when the pool runs out."""
    pool = iter(pool)
    out = []
    for i, n in enumerate(lengths):
        if n <= 0:
            raise ValueError(f"mauve: sample {i} has no text (left out before pairing)")
        r = next((r for r in pool if len(r.ids) >= n), None)
        if r is None:
            raise ValueError(
                f"mauve: no held-out block left for sample {i} of {len(lengths)} ({n} tokens): "
                "hold out more documents (task.options.valid_docs)"
            )
        out.append((r, list(r.ids[:n])))
    return out


def check_equal_lengths(samples: list[list[int]], references: list[list[int]]) -> None:
    """ValueError naming the first pair whose lengths differ (the references must be cut to their
    samples' lengths)."""
    if len(samples) != len(references):
        raise ValueError(f"mauve: {len(samples)} samples, {len(references)} references")
    for i, (s, r) in enumerate(zip(samples, references)):
        if len(s) != len(r):
            raise ValueError(
                f"mauve: sample {i} has {len(s)} tokens, its reference {len(r)} "
                "(references are cut to their samples' lengths)"
            )


# --------------------------------------------------------------------------- features


@torch.no_grad()
def featurize(ref, texts: list[list[int]], *, batch_tokens: int = 8192) -> np.ndarray:
    """(n, d) float64 features of texts in the featurizer's ids (``ref``: a
    :class:`bench.text.reference_lm.RefLM`): the last layer's hidden state at the last token of
    ``[BOS] + text`` (module docstring), cut to the featurizer's context."""
    seqs = [[ref.context_id, *t][: ref.context] for t in texts]
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    out: list = [None] * len(seqs)
    base = ref.model.base_model  # the transformer under the LM head: its final-norm output
    use_bf16 = ref.device.type == "cuda" and ref.dtype == torch.bfloat16
    k = 0
    while k < len(order):
        T = len(seqs[order[k]])
        rows = order[k : k + max(1, batch_tokens // T)]
        x = torch.full((len(rows), T), ref.context_id, dtype=torch.long)
        att = torch.zeros((len(rows), T), dtype=torch.long)
        for r, i in enumerate(rows):
            x[r, : len(seqs[i])] = torch.tensor(seqs[i])
            att[r, : len(seqs[i])] = 1
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
            h = base(input_ids=x.to(ref.device), attention_mask=att.to(ref.device))
        h = h.last_hidden_state.float().cpu()
        for r, i in enumerate(rows):
            out[i] = h[r, len(seqs[i]) - 1].double().numpy()
        k += len(rows)
    return np.stack(out) if out else np.zeros((0, 0))


# --------------------------------------------------------------------------- MAUVE


@dataclass
class MauveResult:
    """MAUVE per k-means seed and the cell values."""

    per_seed: list[float]
    seeds: list[int]
    n: int  # samples (= references) compared

    @property
    def mean(self) -> float:
        return float(np.mean(self.per_seed)) if self.per_seed else float("nan")

    @property
    def sd(self) -> float:
        return float(np.std(self.per_seed, ddof=1)) if len(self.per_seed) > 1 else float("nan")

    def interval(self) -> tuple[float | None, float | None]:
        """95 % t-interval of the mean over seeds, within [0, 1]; (None, None) for fewer than two
        seeds."""
        k = len(self.per_seed)
        if k < 2:
            return None, None
        from scipy.stats import t

        half = float(t.ppf(0.975, k - 1)) * self.sd / math.sqrt(k)
        return max(0.0, self.mean - half), min(1.0, self.mean + half)  # MAUVE lies in (0, 1]

    def metric_values(self) -> list[MetricValue]:
        lo, hi = self.interval()
        k = len(self.per_seed)
        return [
            MetricValue(
                METRIC, self.mean, self.n, lo, hi, ci_method(k) if lo is not None else None
            ),
            MetricValue(SPREAD, self.sd, k),
        ]


def mauve_values(p_features: np.ndarray, q_features: np.ndarray, n_seeds: int) -> MauveResult:
    """MAUVE of samples ``q_features`` against references ``p_features`` (the mauve-text
    convention: p human, q model) for k-means seeds ``FIRST_SEED, FIRST_SEED + 1, ...``; NaN
    for fewer than two samples."""
    n = int(q_features.shape[0])
    seeds = [FIRST_SEED + j for j in range(n_seeds)]
    if n < 2 or p_features.shape[0] < 2:
        return MauveResult([], seeds, n)
    import mauve

    vals = [
        float(mauve.compute_mauve(p_features=p_features, q_features=q_features, seed=s).mauve)
        for s in seeds
    ]
    return MauveResult(vals, seeds, n)
