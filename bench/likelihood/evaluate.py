"""A model's likelihood on a set of blocks: the method's :meth:`~bench.method.Method.nll_bound`
per batch, reduced to the numbers the MDLM / Duo tables report.

Per sequence i (``loss_mask`` positions scored given the others): the draws of the bound (D_i of
them; an exact method gives one) in nats; its value S_i is their mean, its Monte-Carlo standard
error sqrt(var_i / D_i) (sample variance over draws; 0 for an exact method, unknown with one draw
of a bound), its token count T_i the number of positions the bound sums over
(:func:`scored_positions`: ``loss_mask`` and not ``clean_mask``; AR also leaves out position 0).
The dataset's

- ``nll`` = sum S_i / sum T_i nats/token (the MDLM / Duo aggregation: pooled over tokens, not a
  mean of per-sequence values), ``ppl`` = exp(nll), ``bpd`` = nll / ln 2; each with a 95 %
  percentile-bootstrap interval over sequences of that ratio (``scipy.stats.bootstrap``, paired,
  seeded), ppl's and bpd's the same interval transformed;
- ``nll_mc_se`` = sqrt(sum var_i / D_i) / sum T_i: the Monte-Carlo standard error of ``nll`` (how
  much another set of draws would move it; the bootstrap interval is about the choice of
  sequences);
- ``tokens`` = sum T_i.

Batches: ``batch_size`` sequences per call, each call's generator seeded from ``seed`` and the
batch's first index (:func:`batch_seed`, as sampling seeds its batches), so a run is reproducible.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from bench.config import ConfigError
from bench.evaluate.bootstrap import bootstrap_ratio
from bench.evaluate.metrics import MetricValue
from bench.method import BOUND_EXACT, Batch

N_RESAMPLES = 1000
CONFIDENCE = 0.95
CI_METHOD = (
    "95 % percentile bootstrap over sequences of sum(nll) / sum(tokens) "
    f"(scipy.stats.bootstrap, paired, B = {N_RESAMPLES}, seeded)"
)
EXCERPT_TOKENS = 200
METRICS = ("nll", "ppl", "bpd", "nll_mc_se", "tokens")


def batch_seed(seed: int, start: int) -> int:
    """The generator seed of the batch that starts at sequence ``start``
    (bench.kinds.sample.batch_seed's rule)."""
    return seed * 1_000_003 + start


def check_bound(method) -> None:
    """ConfigError (one line, naming the method) when ``method`` has no likelihood bound."""
    if not getattr(method, "bound_kind", ""):
        raise ConfigError(
            f"{method.name}: no likelihood bound (Method.bound_kind is empty); its likelihood is "
            "not evaluated (docs/likelihood.md)"
        )


def ratio_ci(num: np.ndarray, den: np.ndarray, seed: int) -> tuple[float | None, float | None]:
    """Percentile bootstrap over items of sum(num) / sum(den) (None, None with < 2 items)."""
    return bootstrap_ratio(num, den, n_resamples=N_RESAMPLES, confidence=CONFIDENCE, seed=seed)


def scored_positions(method, batch: Batch) -> torch.Tensor:
    """(B, L) bool: the positions the method's bound sums over
    (:meth:`~bench.method.Method.bound_positions`: ``loss_mask`` and not ``clean_mask``; AR also
    leaves out position 0, which nothing predicts)."""
    fn = getattr(method, "bound_positions", None)
    return fn(batch) if fn is not None else batch.loss_mask & ~batch.clean_mask


def _draws(method, backbone, batch: Batch, n_draws: int, gen) -> torch.Tensor:
    with torch.no_grad():
        out = method.nll_bound(backbone, batch, n_draws=n_draws, generator=gen)
    out = out.detach().to("cpu", torch.float64)
    if out.ndim != 2 or out.shape[1] != len(batch) or out.shape[0] < 1:
        raise ValueError(
            f"{method.name}.nll_bound: expected (n_draws, {len(batch)}), got {tuple(out.shape)}"
        )
    return out


def evaluate(
    method,
    backbone,
    blocks,
    *,
    n_draws: int,
    batch_size: int,
    seed: int,
    device,
    decode=None,
    progress: bool = False,
    timing: dict | None = None,
) -> tuple[list[MetricValue], list[dict]]:
    """Metrics (module docstring) and one record per sequence (``index``, ``n_tokens``, ``nll``
    nats summed, ``nll_per_token``, ``mc_se`` nats, ``draws``, ``text``: ``decode`` of the first
    200 ids, when given). ``blocks``: a :class:`~bench.data.base.TaskData`. Refuses, before any
    work, a method without a bound (ConfigError) and blocks longer than the method's positions
    (ValueError). ``timing``: a dict that gets ``bound_s``, the seconds of the bounds of every
    batch (read back to the CPU; the metrics' bootstrap and the records not included)."""
    check_bound(method)
    L = blocks.x.shape[1]
    if L > method.seq_len:
        raise ValueError(
            f"likelihood: blocks of {L} tokens are longer than the model's {method.seq_len} "
            "positions"
        )
    if n_draws < 1 or batch_size < 1:
        raise ValueError(f"likelihood: draws and batch size must be >= 1 ({n_draws}, {batch_size})")
    from tqdm import tqdm

    exact = method.bound_kind == BOUND_EXACT
    backbone.eval()
    N = len(blocks)
    S, V, D = np.zeros(N), np.zeros(N), np.zeros(N, dtype=np.int64)
    T = np.zeros(N, dtype=np.int64)
    t0 = time.perf_counter()
    for start in tqdm(range(0, N, batch_size), desc="likelihood", disable=not progress):
        sl = slice(start, min(start + batch_size, N))
        batch = Batch(blocks.x[sl], blocks.clean_mask[sl], blocks.loss_mask[sl]).to(device)
        gen = torch.Generator(device=device).manual_seed(batch_seed(seed, start))
        out = _draws(method, backbone, batch, n_draws, gen)
        T[sl] = scored_positions(method, batch).sum(-1).cpu().numpy()
        k = out.shape[0]
        S[sl] = out.mean(0).numpy()
        V[sl] = 0.0 if exact else (out.var(0).numpy() / k if k > 1 else np.nan)
        D[sl] = k
    if timing is not None:
        timing["bound_s"] = time.perf_counter() - t0
    metrics = summarize(S, V, T, seed=seed)
    records = []
    for i in range(N):
        rec = {
            "index": i,
            "n_tokens": int(T[i]),
            "nll": float(S[i]),
            "nll_per_token": float(S[i] / T[i]) if T[i] else None,
            "mc_se": math.sqrt(V[i]) if np.isfinite(V[i]) else None,
            "draws": int(D[i]),
        }
        if decode is not None:
            rec["text"] = decode([int(t) for t in blocks.x[i, :EXCERPT_TOKENS].tolist()])
        records.append(rec)
    return metrics, records


def summarize(S: np.ndarray, V: np.ndarray, T: np.ndarray, *, seed: int = 0) -> list[MetricValue]:
    """The dataset's metrics from per-sequence nats ``S``, Monte-Carlo variances of them ``V``
    (NaN: unknown) and token counts ``T`` (module docstring)."""
    n, tokens = len(S), float(T.sum())
    if tokens == 0:
        raise ValueError("likelihood: no scored token (every loss_mask is empty)")
    nll = float(S.sum() / tokens)
    lo, hi = ratio_ci(S, T.astype(np.float64), seed)
    se = math.sqrt(V.sum()) / tokens if np.all(np.isfinite(V)) else None

    def ci(f):
        return (f(lo), f(hi)) if lo is not None else (None, None)

    return [
        MetricValue("nll", nll, n, *ci(float), CI_METHOD if lo is not None else None),
        MetricValue("ppl", math.exp(nll), n, *ci(math.exp), CI_METHOD if lo is not None else None),
        MetricValue(
            "bpd",
            nll / math.log(2),
            n,
            *ci(lambda v: v / math.log(2)),
            CI_METHOD if lo is not None else None,
        ),  # fmt: skip
        MetricValue("nll_mc_se", se, n),
        MetricValue("tokens", tokens, n),
    ]
