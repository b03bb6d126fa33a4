"""S-FLM noise schedules: base schedules, truncation, alpha*, and the adaptive refit.

Canonical convention (the whole harness): time t in [0, 1] with t = 0 clean and t = 1 pure
noise; ``alpha_t`` is the weight on the CLEAN embedding in z_t = SLERP(z_0, e_hat_x, alpha_t),
so alpha_0 ~ 1 (clean) and alpha_1 = eps (noise). This is the reference code's
``algo.invert_time_convention=false`` and the paper's table of schedules read with t -> 1 - t.
The paper's inverted notation (the TinyGSM ablation's alpha_trunc in {0.8, 0.869, 0.879, 0.9},
= 1 - clean-weight cap) is converted once, at the options boundary
(:class:`sflm.method.SFLMOptions`); see shared/research/methods.md section 8.2.

- Base schedules (reference ``noise_schedules.py``): linear (``LogLinear``)
  alpha = eps + (1 - eps)(1 - t); cos^2 (``CosineSquared``) alpha = eps + (1 - eps) sin^2(pi/2 (1 - t)).
- Truncation (``TruncatedScheduleWrapper``): rescale [base(1), base(0)] linearly onto
  [alpha_min, alpha_max], clamped at >= eps; training then only sees clean weights <= alpha_max.
- alpha*(delta) (paper eq. alpha-crit) and a Monte-Carlo check of it under the paper's random
  codebook model (appendix "Analysis under the Random Codebook Model").
- :class:`AdaptiveSchedule`: paper Algorithm "Adaptive noise schedule refit" (appendix
  "Adaptive Noise Schedule"; reference ``AdaptiveSchedule``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

# --------------------------------------------------------------------------- alpha*


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


def check_alpha_star(vocab_size: int, dim: int, delta: float, *, alpha: float | None = None,
                     n_trials: int = 100_000, method: str = "reduced", seed: int = 0,
                     chunk: int = 256) -> AlphaStarCheck:
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
    n_other = vocab_size - 1
    if method == "quadrature":
        from scipy import integrate

        beta = _coordinate_beta(dim)

        def integrand(b: float) -> float:  # b = (1 + cos w)/2 ~ Beta
            w = math.acos(min(1.0, max(-1.0, 2 * b - 1)))
            c = math.cos((1 - alpha) * w)
            return math.exp(n_other * beta.logcdf((1 + c) / 2)) * beta.pdf(b)

        lo, hi = beta.ppf(1e-12), beta.isf(1e-12)
        p, _ = integrate.quad(integrand, lo, hi, limit=200, epsabs=1e-10)
        p = float(min(1.0, max(0.0, p)))
        return AlphaStarCheck(vocab_size, dim, delta, float(alpha), p, 0.0, 0, method, p >= 1 - delta)
    rng = np.random.default_rng(seed)
    if method == "reduced":
        beta = _coordinate_beta(dim)
        cos_w = 2 * beta.rvs(size=n_trials, random_state=rng) - 1
        target = np.cos((1 - alpha) * np.arccos(np.clip(cos_w, -1, 1)))
        # max of n_other i.i.d. draws with CDF F is F^{-1}(U^{1/n_other}); the logs keep
        # U^{1/n} from rounding to 1 when n_other is large
        log_u = np.log(rng.uniform(size=n_trials)) / n_other
        best_other = 2 * beta.isf(-np.expm1(log_u)) - 1
        hits = int((target > best_other).sum())
    elif method == "codebook":
        g = torch.Generator().manual_seed(seed)
        hits = 0
        done = 0
        from sflm.geometry import slerp, uniform_sphere

        while done < n_trials:
            n = min(chunk, n_trials - done)
            book = uniform_sphere((n, vocab_size, dim), generator=g, dtype=torch.float64)
            z0 = uniform_sphere((n, dim), generator=g, dtype=torch.float64)
            z = slerp(z0, book[:, 0], alpha)  # target k = 0
            sims = torch.einsum("nd,nvd->nv", z, book)
            hits += int((sims.argmax(-1) == 0).sum())
            done += n
    else:
        raise ValueError(f"check_alpha_star: unknown method {method!r} (known: reduced, codebook, quadrature)")
    p = hits / n_trials
    stderr = math.sqrt(max(p * (1 - p), 1e-300) / n_trials)
    return AlphaStarCheck(vocab_size, dim, delta, float(alpha), p, stderr, n_trials, method, p >= 1 - delta)


def alpha_star_model(vocab_size: int, dim: int, delta: float, *, xtol: float = 1e-5) -> float:
    """The smallest alpha at which P(target is the nearest neighbour) = 1 - delta EXACTLY under
    the random codebook model (root of the quadrature of :func:`check_alpha_star`).

    eq. alpha-crit approximates this with w = pi/2 and a union bound; the two differ by a few
    thousandths to ~0.015 on the paper's grid, and the formula's value gives a probability a
    little below 1 - delta at large |V| (see :func:`alpha_star_table`)."""
    from scipy.optimize import brentq

    def gap(a: float) -> float:
        return check_alpha_star(vocab_size, dim, delta, alpha=a, method="quadrature").p_nearest - (1 - delta)

    if gap(0.0) >= 0:
        return 0.0
    return float(brentq(gap, 0.0, 1.0, xtol=xtol))


#: the paper's grid (appendix table tab:alpha-crit-grid)
PAPER_GRID = {
    "vocab_size": (12, 50_000, 100_000),
    "dim": (256, 512, 768, 1024, 4096),
    "delta": (0.1, 0.01),
}


def alpha_star_table(vocab_sizes=PAPER_GRID["vocab_size"], dims=PAPER_GRID["dim"],
                     deltas=PAPER_GRID["delta"], *, n_trials: int = 100_000, method: str = "reduced",
                     seed: int = 0, model_alpha: bool = False) -> list[dict[str, Any]]:
    """alpha*(delta) over a grid next to the Monte-Carlo probability that the target is the
    nearest neighbour at that alpha (one dict per grid point; for the report). With
    ``model_alpha`` each row also gets ``alpha_model`` (:func:`alpha_star_model`, ~3 s a row)."""
    rows = []
    for v in vocab_sizes:
        for d in dims:
            for delta in deltas:
                row = check_alpha_star(v, d, delta, n_trials=n_trials, method=method, seed=seed).row()
                if model_alpha:
                    row["alpha_model"] = alpha_star_model(v, d, delta)
                rows.append(row)
    return rows


# --------------------------------------------------------------------------- base schedules


class Schedule:
    """alpha(t) (clean weight) and alpha'(t) on tensors of times; t = 0 clean, t = 1 noise."""

    def alpha(self, t: Tensor) -> Tensor:
        raise NotImplementedError

    def dalpha(self, t: Tensor) -> Tensor:
        raise NotImplementedError

    @property
    def range(self) -> tuple[float, float]:
        """(alpha at t = 1, alpha at t = 0)."""
        one = torch.ones((), dtype=torch.float64)
        return float(self.alpha(one)), float(self.alpha(torch.zeros_like(one)))


class LinearSchedule(Schedule):
    """alpha_t = eps + (1 - eps)(1 - t) (reference ``noise_schedules.py::LogLinear``; paper table
    tab:noise-schedules "Linear" alpha_t = t in the inverted time)."""

    def __init__(self, eps: float = 1e-3):
        self.eps = eps

    def alpha(self, t: Tensor) -> Tensor:
        return self.eps + (1 - self.eps) * (1 - t)

    def dalpha(self, t: Tensor) -> Tensor:
        return torch.full_like(t, -(1 - self.eps))


class Cos2Schedule(Schedule):
    """alpha_t = eps + (1 - eps) sin^2(pi/2 (1 - t)) (reference ``CosineSquared``; paper table
    tab:noise-schedules "Cosine^2" sin^2(pi t / 2) in the inverted time)."""

    def __init__(self, eps: float = 1e-3):
        self.eps = eps

    def alpha(self, t: Tensor) -> Tensor:
        return self.eps + (1 - self.eps) * torch.sin(math.pi / 2 * (1 - t)) ** 2

    def dalpha(self, t: Tensor) -> Tensor:
        a = math.pi / 2 * (1 - t)
        return -(1 - self.eps) * math.pi * torch.sin(a) * torch.cos(a)


class TruncatedSchedule(Schedule):
    """Linear rescale of ``base`` from [base(1), base(0)] onto [alpha_min, alpha_max], clamped at
    >= eps (reference ``TruncatedScheduleWrapper``)."""

    def __init__(self, base: Schedule, alpha_min: float, alpha_max: float, eps: float = 1e-3):
        if not 0.0 <= alpha_min < alpha_max <= 1.0:
            raise ValueError(f"truncation needs 0 <= alpha_min < alpha_max <= 1, got {alpha_min}, {alpha_max}")
        self.base, self.eps = base, eps
        lo, hi = base.range
        self.scale = (alpha_max - alpha_min) / (hi - lo)
        self.offset = alpha_min - self.scale * lo

    def alpha(self, t: Tensor) -> Tensor:
        return (self.scale * self.base.alpha(t) + self.offset).clamp_min(self.eps)

    def dalpha(self, t: Tensor) -> Tensor:
        return self.scale * self.base.dalpha(t)


def make_base_schedule(name: str, eps: float, alpha_min: float | None, alpha_max: float) -> Schedule:
    """``linear`` | ``cos2``, truncated to [alpha_min (default eps), alpha_max] unless that is the
    whole base range."""
    base: Schedule
    if name == "linear":
        base = LinearSchedule(eps)
    elif name == "cos2":
        base = Cos2Schedule(eps)
    else:
        raise ValueError(f"schedule: unknown schedule {name!r} (known: linear, cos2)")
    lo, hi = base.range
    a_min = lo if alpha_min is None else alpha_min
    if a_min == lo and alpha_max >= hi:
        return base
    return TruncatedSchedule(base, a_min, alpha_max, eps)


# --------------------------------------------------------------------------- adaptive


class AdaptiveSchedule(nn.Module):
    """Paper Algorithm "Adaptive noise schedule refit" (reference ``AdaptiveSchedule``).

    Collects (t, per-sample loss) pairs in a ring buffer after ``warmup`` steps; once the buffer
    has filled, every ``refit_every`` steps:
      1. fit L_hat(t) = SplineTransformer(n_knots, degree, extrapolation='continue') + Ridge(ridge);
      2. g = max(dL_hat/dt, 0) on the grid t_j = linspace(0, 1, n_grid) (np.gradient);
      3. w = (1 - mu) g + mu; F = cumsum(w) / sum(w);
      4. t~_j = F^{-1}(t_j) by PCHIP through (F, t);
      5. abar <- beta abar + (1 - beta) base(t~_j); alpha_final = abar / (1 - beta^n)  (n = refits);
      6. alpha_adapt(t) = PCHIP through (t_j, alpha_final).
    Before the first refit alpha(t) is the base schedule. The same object serves training and
    sampling. Its state (buffer, EMA, refit count, fitted values) is the module's extra state,
    so it travels in Lightning checkpoints and ``weights.pt``.

    Deviations from the reference, both harmless: t~ is clipped to [0, 1] (PCHIP extrapolation
    of F^{-1} below F(t_0) could step a fraction of a grid cell outside the truncated range), and
    the fitted PCHIP is evaluated with torch from scipy's coefficients (same values, on device,
    no host round trip). Under DDP the (t, loss) pairs are all-gathered, as in the reference.
    The refit trigger follows the paper: "filled" is remembered (``buf_filled``). The reference's
    first commit tested ``end >= buffer_size`` on the current write only. With W = 1000, R = 50
    and buffer R x batch that never coincides with ``step % R == 0``, so it never refits (fixed
    upstream in 308d78e; docs/methods/sflm.md).
    """

    def __init__(self, base: Schedule | None = None, *, buffer_size: int = 0, refit_every: int = 50,
                 warmup: int = 1000, ema: float = 0.9, uniform_mix: float = 1e-3, n_grid: int = 1000,
                 n_knots: int = 20, degree: int = 3, ridge: float = 1e-3):
        super().__init__()
        self.base = base
        self.buffer_size, self.refit_every, self.warmup = buffer_size, refit_every, warmup
        self.ema, self.uniform_mix = ema, uniform_mix
        self.n_grid, self.n_knots, self.degree, self.ridge = n_grid, n_knots, degree, ridge
        self.grid = np.linspace(0.0, 1.0, n_grid)
        self._reset_state()

    # -- state ------------------------------------------------------------------
    def _reset_state(self) -> None:
        self.t_buf: np.ndarray | None = None
        self.loss_buf: np.ndarray | None = None
        self.buf_pos = 0
        self.buf_filled = False
        self.ema_vals = np.zeros(self.n_grid)
        self.alpha_vals: np.ndarray | None = None
        self.refit_count = 0
        self._coef: dict[tuple, tuple[Tensor, Tensor]] = {}

    def get_extra_state(self) -> dict:
        def arr(a):
            return None if a is None else torch.from_numpy(np.asarray(a, dtype=np.float64).copy())

        return {"t_buf": arr(self.t_buf), "loss_buf": arr(self.loss_buf), "buf_pos": int(self.buf_pos),
                "buf_filled": bool(self.buf_filled), "ema_vals": arr(self.ema_vals),
                "alpha_vals": arr(self.alpha_vals), "refit_count": int(self.refit_count),
                "n_grid": int(self.n_grid)}

    def set_extra_state(self, state: dict) -> None:
        if int(state.get("n_grid", self.n_grid)) != self.n_grid:
            raise ValueError(f"adaptive schedule: checkpoint has n_grid={state['n_grid']}, options say {self.n_grid}")

        def arr(a):
            return None if a is None else torch.as_tensor(a).cpu().numpy().astype(np.float64)

        self._reset_state()
        self.t_buf, self.loss_buf = arr(state["t_buf"]), arr(state["loss_buf"])
        self.buf_pos, self.buf_filled = int(state["buf_pos"]), bool(state["buf_filled"])
        self.ema_vals = arr(state["ema_vals"])
        self.alpha_vals = arr(state["alpha_vals"])
        self.refit_count = int(state["refit_count"])

    @property
    def fitted(self) -> bool:
        return self.alpha_vals is not None

    # -- recording and refit ------------------------------------------------------
    def record(self, t: Tensor, loss: Tensor, step: int, global_batch: int | None = None) -> bool:
        """Append (t, loss) pairs (ignored before ``warmup``); refit when due. Returns True on refit.

        ``step`` is the number of optimiser steps already taken (Lightning ``global_step``)."""
        if step < self.warmup:
            return False
        t, loss = _gather(t.detach()), _gather(loss.detach())
        t_np = t.double().cpu().numpy().reshape(-1)
        l_np = loss.double().cpu().numpy().reshape(-1)
        if self.t_buf is None:
            size = self.buffer_size or self.refit_every * len(t_np)  # paper: R x batch size
            self.t_buf, self.loss_buf = np.zeros(size), np.zeros(size)
        size = len(self.t_buf)
        if len(t_np) >= size:
            t_np, l_np = t_np[-size:], l_np[-size:]
        idx = (self.buf_pos + np.arange(len(t_np))) % size
        self.t_buf[idx], self.loss_buf[idx] = t_np, l_np
        end = self.buf_pos + len(t_np)
        self.buf_filled = self.buf_filled or end >= size
        self.buf_pos = end % size
        if self.buf_filled and step % self.refit_every == 0:
            self.refit()
            return True
        return False

    def refit(self, t: np.ndarray | None = None, loss: np.ndarray | None = None) -> np.ndarray:
        """One refit from the buffer (or from explicit ``t``, ``loss`` arrays); returns alpha on the grid."""
        from scipy.interpolate import PchipInterpolator
        from sklearn.linear_model import Ridge
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import SplineTransformer

        if self.base is None:
            raise RuntimeError("adaptive schedule: no base schedule set")
        t = self.t_buf if t is None else np.asarray(t, dtype=np.float64)
        loss = self.loss_buf if loss is None else np.asarray(loss, dtype=np.float64)
        # 1. loss profile: cubic spline basis + ridge (Alg. line 1)
        model = make_pipeline(SplineTransformer(n_knots=self.n_knots, degree=self.degree, extrapolation="continue"),
                              Ridge(alpha=self.ridge))
        model.fit(t.reshape(-1, 1), loss)
        smooth = model.predict(self.grid.reshape(-1, 1))
        # 2. clamp the slope: the loss must grow with noise (Alg. line 2)
        g = np.maximum(np.gradient(smooth, self.grid), 0.0)
        # 3. uniform mix keeps the CDF invertible (Alg. lines 3-4)
        w = (1 - self.uniform_mix) * g + self.uniform_mix
        cdf = np.cumsum(w)
        cdf = cdf / cdf[-1]
        # 4. inverse CDF by PCHIP (Alg. line 5)
        t_tilde = np.clip(PchipInterpolator(cdf, self.grid)(self.grid), 0.0, 1.0)
        a = self.base.alpha(torch.from_numpy(t_tilde)).double().numpy()
        # 5. EMA with Adam-style bias correction (Alg. lines 6-7)
        self.refit_count += 1
        if self.ema > 0:
            self.ema_vals = self.ema * self.ema_vals + (1 - self.ema) * a
            a = self.ema_vals / (1 - self.ema**self.refit_count)
        self.alpha_vals = np.asarray(a, dtype=np.float64)
        self._coef = {}
        return self.alpha_vals

    # -- evaluation -------------------------------------------------------------------
    def _coefficients(self, device, dtype, derivative: bool) -> tuple[Tensor, Tensor]:
        key = (str(device), dtype, derivative)
        if key not in self._coef:
            from scipy.interpolate import PchipInterpolator

            spline = PchipInterpolator(self.grid, self.alpha_vals)
            if derivative:
                spline = spline.derivative()
            self._coef[key] = (torch.as_tensor(spline.x, dtype=dtype, device=device),
                               torch.as_tensor(spline.c, dtype=dtype, device=device))
        return self._coef[key]

    def _eval(self, t: Tensor, derivative: bool) -> Tensor:
        dtype = t.dtype if t.dtype == torch.float64 else torch.float32
        x, c = self._coefficients(t.device, dtype, derivative)
        tt = t.to(dtype)
        i = (torch.searchsorted(x, tt.contiguous(), right=True) - 1).clamp(0, x.numel() - 2)
        dx = tt - x[i]
        out = torch.zeros_like(tt)
        for k in range(c.shape[0]):  # Horner on the local polynomial (scipy PPoly layout)
            out = out * dx + c[k][i]
        return out.to(t.dtype)

    def alpha(self, t: Tensor) -> Tensor:
        if not self.fitted:
            return self.base.alpha(t)
        return self._eval(t, derivative=False)

    def dalpha(self, t: Tensor) -> Tensor:
        if not self.fitted:
            return self.base.dalpha(t)
        return self._eval(t, derivative=True)


def _gather(x: Tensor) -> Tensor:
    """All-gather a 1-D tensor across DDP ranks (identity without torch.distributed)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(out, x.contiguous())
    return torch.cat(out)
