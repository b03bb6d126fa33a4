"""alpha*: the clean weight above which the target token is the nearest neighbour (theory + check).

Paper eq. alpha-crit gives alpha*(delta) under the random codebook model (appendix "Analysis
under the Random Codebook Model"); :func:`check_alpha_star` estimates the nearest-neighbour
probability at a given alpha by Monte Carlo (literal codebooks or the exact Beta-law reduction)
or by quadrature, :func:`alpha_star_model` solves the model's condition exactly, and
:func:`alpha_star_table` tabulates the paper's grid (appendix table tab:alpha-crit-grid).
S-FLM truncates its schedule at alpha_max = alpha* (:mod:`sflm.schedule`, :mod:`sflm.method`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


def alpha_star(vocab_size: int, dim: int, delta: float) -> float:
    """alpha*(delta) = (2/pi) arcsin( sqrt( 2 log(2(|V|-1)/delta) / d ) )  (paper eq. alpha-crit).

    The smallest clean weight at which, under a random codebook of ``vocab_size`` unit vectors
    in ``dim`` dimensions, the target embedding is the nearest neighbour of
    SLERP(z_0, e_hat_k, alpha) with probability >= 1 - delta (high-dimensional approximation).
    Values: |V| = 12, d = 512: 0.0927 (delta 0.1), 0.1109 (0.01); |V| = 50,000, d = 768: 0.1215.
    When the square root exceeds 1 (tiny d) the bound is vacuous and 1.0 (no truncation) is
    returned.
    """
    if int(vocab_size) != vocab_size or vocab_size < 2:
        raise ValueError(f"alpha_star: vocab_size must be an integer >= 2, got {vocab_size!r}")
    if int(dim) != dim or dim < 1:
        raise ValueError(f"alpha_star: dim must be a positive integer, got {dim!r}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"alpha_star: delta must be in (0, 1), got {delta!r}")
    r = math.sqrt(2.0 * math.log(2.0 * (vocab_size - 1) / delta) / dim)
    return 1.0 if r >= 1.0 else (2.0 / math.pi) * math.asin(r)


@dataclass
class AlphaStarCheck:
    """Result of :func:`check_alpha_star`; ``row()`` is one tidy table row.

    Attributes:
        vocab_size, dim, delta: the grid point.
        alpha: the clean weight tested (alpha*(delta) unless given).
        p_nearest: estimated P(target is the nearest neighbour of z_alpha) under the model.
        stderr: binomial standard error of ``p_nearest`` (0 for the quadrature estimator).
        n_trials: Monte-Carlo trials (0 for quadrature).
        method: ``"reduced"``, ``"codebook"`` or ``"quadrature"`` (see :func:`check_alpha_star`).
        holds: p_nearest >= 1 - delta.
    """

    vocab_size: int
    dim: int
    delta: float
    alpha: float
    p_nearest: float
    stderr: float
    n_trials: int
    method: str
    holds: bool

    def row(self) -> dict[str, Any]:
        return asdict(self)


def _coordinate_beta(dim: int):
    """Law of <x, y> for x uniform on S^{d-1}, y fixed: (1 + <x,y>)/2 ~ Beta((d-1)/2, (d-1)/2)."""
    from scipy import stats

    a = (dim - 1) / 2.0
    return stats.beta(a, a)


def check_alpha_star(
    vocab_size: int,
    dim: int,
    delta: float,
    *,
    alpha: float | None = None,
    n_trials: int = 100_000,
    method: str = "reduced",
    seed: int = 0,
    chunk: int = 256,
) -> AlphaStarCheck:
    """Monte-Carlo check of alpha* under the paper's random codebook model.

    Model (paper box "Tractable model of the sampling dynamics"): embeddings e_1..e_|V| and
    z_0 i.i.d. uniform on S^{d-1}; target k; z_alpha = SLERP(z_0, e_k, alpha). Estimates
    P(argmax_v <z_alpha, e_v> = k) at ``alpha`` (default alpha*(delta)); alpha* is validated
    when the probability is >= 1 - delta.

    Methods:
      - ``"codebook"``: literal simulation (draw the codebook, z_0, SLERP, nearest neighbour);
        memory |V| d per trial chunk, for small grids.
      - ``"reduced"`` (default): the same law without materialising vectors. <z_alpha, e_k> =
        cos((1 - alpha) w) with cos w = <z_0, e_k> (paper eq. app-slerp-clean-score), and given
        z_alpha the |V| - 1 other similarities are i.i.d. with the law of one coordinate of a
        uniform unit vector, 2 Beta((d-1)/2, (d-1)/2) - 1; their maximum is drawn exactly as
        F^{-1}(U^{1/(|V|-1)}). Cost O(n_trials) for any |V| and d.
      - ``"quadrature"``: the exact probability E_w[ F(cos((1 - alpha) w))^{|V|-1} ] by
        numerical integration over the law of cos w (no sampling noise).
    """
    if alpha is None:
        alpha = alpha_star(vocab_size, dim, delta)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"check_alpha_star: alpha must be in [0, 1], got {alpha!r}")
    if dim < 2:
        raise ValueError(f"check_alpha_star: dim must be >= 2, got {dim!r}")
    estimate = CHECK_METHODS.get(method)
    if estimate is None:
        raise ValueError(
            f"check_alpha_star: unknown method {method!r} (known: reduced, codebook, quadrature)"
        )
    p, stderr, n = estimate(vocab_size, dim, float(alpha), n_trials, seed, chunk)
    return AlphaStarCheck(
        vocab_size, dim, delta, float(alpha), p, stderr, n, method, p >= 1 - delta
    )


def _monte_carlo(hits: int, n_trials: int) -> tuple[float, float, int]:
    """(p, its standard error, n_trials) of ``hits`` in ``n_trials`` draws."""
    p = hits / n_trials
    return p, math.sqrt(max(p * (1 - p), 1e-300) / n_trials), n_trials


def _quadrature(vocab_size, dim, alpha, n_trials, seed, chunk) -> tuple[float, float, int]:
    """The exact probability E_w[ F(cos((1 - alpha) w))^{|V|-1} ] (no sampling noise)."""
    from scipy import integrate

    n_other = vocab_size - 1
    beta = _coordinate_beta(dim)

    def integrand(b: float) -> float:  # b = (1 + cos w)/2 ~ Beta
        w = math.acos(min(1.0, max(-1.0, 2 * b - 1)))
        c = math.cos((1 - alpha) * w)
        return math.exp(n_other * beta.logcdf((1 + c) / 2)) * beta.pdf(b)

    lo, hi = beta.ppf(1e-12), beta.isf(1e-12)
    p, _ = integrate.quad(integrand, lo, hi, limit=200, epsabs=1e-10)
    return float(min(1.0, max(0.0, p))), 0.0, 0


def _reduced(vocab_size, dim, alpha, n_trials, seed, chunk) -> tuple[float, float, int]:
    """The target's similarity and the maximum of the |V| - 1 others, drawn from their laws."""
    rng = np.random.default_rng(seed)
    n_other = vocab_size - 1
    beta = _coordinate_beta(dim)
    cos_w = 2 * beta.rvs(size=n_trials, random_state=rng) - 1
    target = np.cos((1 - alpha) * np.arccos(np.clip(cos_w, -1, 1)))
    # max of n_other i.i.d. draws with CDF F is F^{-1}(U^{1/n_other}); the logs keep
    # U^{1/n} from rounding to 1 when n_other is large
    log_u = np.log(rng.uniform(size=n_trials)) / n_other
    best_other = 2 * beta.isf(-np.expm1(log_u)) - 1
    return _monte_carlo(int((target > best_other).sum()), n_trials)


def _codebook(vocab_size, dim, alpha, n_trials, seed, chunk) -> tuple[float, float, int]:
    """The literal simulation: codebook, z_0, SLERP, nearest neighbour, ``chunk`` trials a time."""
    import torch  # only the literal simulation needs torch (the report's table does not)

    from sflm.geometry import slerp, uniform_sphere

    g = torch.Generator().manual_seed(seed)
    hits = 0
    done = 0
    while done < n_trials:
        n = min(chunk, n_trials - done)
        book = uniform_sphere((n, vocab_size, dim), generator=g, dtype=torch.float64)
        z0 = uniform_sphere((n, dim), generator=g, dtype=torch.float64)
        z = slerp(z0, book[:, 0], alpha)  # target k = 0
        sims = torch.einsum("nd,nvd->nv", z, book)
        hits += int((sims.argmax(-1) == 0).sum())
        done += n
    return _monte_carlo(hits, n_trials)


#: :func:`check_alpha_star`'s ``method`` -> (p, stderr, trials) of (|V|, d, alpha, n_trials,
#: seed, chunk)
CHECK_METHODS = {"reduced": _reduced, "codebook": _codebook, "quadrature": _quadrature}


def alpha_star_model(vocab_size: int, dim: int, delta: float, *, xtol: float = 1e-5) -> float:
    """The smallest alpha at which P(target is the nearest neighbour) = 1 - delta EXACTLY under
    the random codebook model (root of the quadrature of :func:`check_alpha_star`).

    eq. alpha-crit approximates this with w = pi/2 and a union bound; the two differ by a few
    thousandths to ~0.015 on the paper's grid, and the formula's value gives a probability a
    little below 1 - delta at large |V| (see :func:`alpha_star_table`)."""
    from scipy.optimize import brentq

    def gap(a: float) -> float:
        return check_alpha_star(vocab_size, dim, delta, alpha=a, method="quadrature").p_nearest - (
            1 - delta
        )

    if gap(0.0) >= 0:
        return 0.0
    return float(brentq(gap, 0.0, 1.0, xtol=xtol))


#: the paper's grid (appendix table tab:alpha-crit-grid)
PAPER_GRID = {
    "vocab_size": (12, 50_000, 100_000),
    "dim": (256, 512, 768, 1024, 4096),
    "delta": (0.1, 0.01),
}


def alpha_star_table(
    vocab_sizes=PAPER_GRID["vocab_size"],
    dims=PAPER_GRID["dim"],
    deltas=PAPER_GRID["delta"],
    *,
    n_trials: int = 100_000,
    method: str = "reduced",
    seed: int = 0,
    model_alpha: bool = False,
) -> list[dict[str, Any]]:
    """alpha*(delta) over a grid next to the Monte-Carlo probability that the target is the
    nearest neighbour at that alpha (one dict per grid point; for the report). With
    ``model_alpha`` each row also gets ``alpha_model`` (:func:`alpha_star_model`, ~3 s a row)."""
    rows = []
    for v in vocab_sizes:
        for d in dims:
            for delta in deltas:
                row = check_alpha_star(
                    v, d, delta, n_trials=n_trials, method=method, seed=seed
                ).row()
                if model_alpha:
                    row["alpha_model"] = alpha_star_model(v, d, delta)
                rows.append(row)
    return rows
