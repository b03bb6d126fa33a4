"""S-FLM noise schedules: base schedules, truncation and the adaptive refit.

Canonical convention (the whole harness): time t in [0, 1] with t = 0 clean and t = 1 pure
noise; ``alpha_t`` is the weight on the CLEAN embedding in z_t = SLERP(z_0, e_hat_x, alpha_t),
so alpha_0 ~ 1 (clean) and alpha_1 = eps (noise). This is the reference code's
``algo.invert_time_convention=false`` and the paper's table of schedules read with t -> 1 - t.
The paper's inverted notation (the TinyGSM ablation's alpha_trunc in {0.8, 0.869, 0.879, 0.9},
= 1 - clean-weight cap) is converted once, at the options boundary
(:class:`sflm.method.SFLMOptions`). In the reference (FrankCCCCC/s-flm @ 18d586f) the switch
is ``algo.invert_time_convention`` (default true = inverted): the fixed-truncation TinyGSM
script (`scripts/train/tinygsm/sfm_sphere_dit_truncated_fixed_no_renorm.sh`) sets
``noise.alpha_min=0.869`` (= 1 - alpha*(0.01)), the adaptive ones set
``invert_time_convention=false`` and ``noise.alpha_max=0.121`` (= alpha*(0.1)).

- Base schedules (reference ``noise_schedules.py``): linear (``LogLinear``)
  alpha = eps + (1 - eps)(1 - t); cos^2 (``CosineSquared``)
  alpha = eps + (1 - eps) sin^2(pi/2 (1 - t)).
- Truncation (``TruncatedScheduleWrapper``): rescale [base(1), base(0)] linearly onto
  [alpha_min, alpha_max], clamped at >= eps; training then only sees clean weights <= alpha_max.
- alpha*(delta) (paper eq. alpha-crit), the truncation point, and its Monte-Carlo check live in
  :mod:`sflm.alpha_star`.
- :class:`AdaptiveSchedule`: paper Algorithm "Adaptive noise schedule refit" (appendix
  "Adaptive Noise Schedule"; reference ``AdaptiveSchedule``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

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
            raise ValueError(
                f"truncation needs 0 <= alpha_min < alpha_max <= 1, got {alpha_min}, {alpha_max}"
            )
        self.base, self.eps = base, eps
        lo, hi = base.range
        self.scale = (alpha_max - alpha_min) / (hi - lo)
        self.offset = alpha_min - self.scale * lo

    def alpha(self, t: Tensor) -> Tensor:
        return (self.scale * self.base.alpha(t) + self.offset).clamp_min(self.eps)

    def dalpha(self, t: Tensor) -> Tensor:
        return self.scale * self.base.dalpha(t)


#: the ``schedule`` option -> its base schedule class (of the floor eps)
BASE_SCHEDULES = {"linear": LinearSchedule, "cos2": Cos2Schedule}


def make_base_schedule(
    name: str, eps: float, alpha_min: float | None, alpha_max: float
) -> Schedule:
    """``linear`` | ``cos2`` (:data:`BASE_SCHEDULES`), truncated to [alpha_min (default eps),
    alpha_max] unless that is the whole base range."""
    if name not in BASE_SCHEDULES:
        raise ValueError(f"schedule: unknown schedule {name!r} (known: linear, cos2)")
    base: Schedule = BASE_SCHEDULES[name](eps)
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

    def __init__(
        self,
        base: Schedule | None = None,
        *,
        buffer_size: int = 0,
        refit_every: int = 50,
        warmup: int = 1000,
        ema: float = 0.9,
        uniform_mix: float = 1e-3,
        n_grid: int = 1000,
        n_knots: int = 20,
        degree: int = 3,
        ridge: float = 1e-3,
    ):
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
        # (buffer position, t, loss) recorded but not yet copied to the host buffer: the copy (a
        # host sync on GPU) waits for the next refit or state read, not every step
        self._pending: list[tuple[int, Tensor, Tensor]] = []

    def get_extra_state(self) -> dict:
        self._flush()

        def arr(a):
            return None if a is None else torch.from_numpy(np.asarray(a, dtype=np.float64).copy())

        return {
            "t_buf": arr(self.t_buf),
            "loss_buf": arr(self.loss_buf),
            "buf_pos": int(self.buf_pos),
            "buf_filled": bool(self.buf_filled),
            "ema_vals": arr(self.ema_vals),
            "alpha_vals": arr(self.alpha_vals),
            "refit_count": int(self.refit_count),
            "n_grid": int(self.n_grid),
        }

    def set_extra_state(self, state: dict) -> None:
        if int(state.get("n_grid", self.n_grid)) != self.n_grid:
            raise ValueError(
                f"adaptive schedule: checkpoint has n_grid={state['n_grid']}, "
                f"options say {self.n_grid}"
            )

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
        """Append (t, loss) pairs (ignored before ``warmup``); refit when due. Returns True on
        refit.

        ``step`` is the number of optimiser steps already taken (Lightning ``global_step``)."""
        if step < self.warmup:
            return False
        t, loss = _gather(t.detach()).reshape(-1), _gather(loss.detach()).reshape(-1)
        if self.t_buf is None:
            size = self.buffer_size or self.refit_every * len(t)  # paper: R x batch size
            self.t_buf, self.loss_buf = np.zeros(size), np.zeros(size)
        size = len(self.t_buf)
        if len(t) >= size:
            t, loss = t[-size:], loss[-size:]
        self._pending.append((self.buf_pos, t, loss))  # written by _flush, in order
        end = self.buf_pos + len(t)
        self.buf_filled = self.buf_filled or end >= size
        self.buf_pos = end % size
        if self.buf_filled and step % self.refit_every == 0:
            self.refit()
            return True
        return False

    def _flush(self) -> None:
        """Copy the pending (t, loss) pairs into the host ring buffer (one host sync on GPU)."""
        pending, self._pending = self._pending, []
        for pos, t, loss in pending:
            t_np, l_np = t.double().cpu().numpy(), loss.double().cpu().numpy()
            idx = (pos + np.arange(len(t_np))) % len(self.t_buf)
            self.t_buf[idx], self.loss_buf[idx] = t_np, l_np

    def refit(self, t: np.ndarray | None = None, loss: np.ndarray | None = None) -> np.ndarray:
        """One refit from the buffer (or from explicit ``t``, ``loss`` arrays); returns alpha on
        the grid."""
        from scipy.interpolate import PchipInterpolator
        from sklearn.linear_model import Ridge
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import SplineTransformer

        if self.base is None:
            raise RuntimeError("adaptive schedule: no base schedule set")
        self._flush()
        t = self.t_buf if t is None else np.asarray(t, dtype=np.float64)
        loss = self.loss_buf if loss is None else np.asarray(loss, dtype=np.float64)
        # 1. loss profile: cubic spline basis + ridge (Alg. line 1)
        model = make_pipeline(
            SplineTransformer(n_knots=self.n_knots, degree=self.degree, extrapolation="continue"),
            Ridge(alpha=self.ridge),
        )
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
            self._coef[key] = (
                torch.as_tensor(spline.x, dtype=dtype, device=device),
                torch.as_tensor(spline.c, dtype=dtype, device=device),
            )
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
