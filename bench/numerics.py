"""Numerical pieces that several methods share: one copy each (tests:
tests/bench/test_numerics.py).

- :func:`log_linear_alpha`, :func:`log_linear_dalpha`: the log-linear masking / uniform-state
  schedule alpha_t = 1 - (1 - eps) t of MDLM, Duo and CANDI (reference
  `noise_schedules.py::LogLinear`; MDLM eq. 10 uses alpha'_t = -(1 - eps)), and
  :func:`sigma_of_alpha`, their network time input sigma = -log alpha_t.
- :func:`interp`: piecewise-linear interpolation of a table on the device (torch has no
  ``interp``), used by CANDI's sigma(rate) inverse, Duo's curriculum table and FLM's
  alpha <-> gamma table.
- :func:`normal_expectation_nodes`, :func:`gaussian_argmax_probability`: Gauss-Hermite quadrature
  for E_{z ~ N(0, 1)}[f(z)], and with it the probability that a coordinate ahead by a margin m
  stays the argmax of V coordinates under unit Gaussian noise, E_z[Phi(z + m)^(V-1)]
  (Duo eq. 10's I(gamma); FLM `utils.py::compute_alpha_exact`'s P_gamma).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def log_linear_alpha(t, eps: float):
    """alpha_t = 1 - (1 - eps) t: 1 at t = 0 (clean), eps at t = 1 (reference
    `noise_schedules.py::LogLinear`; works on tensors and floats alike)."""
    return 1 - (1 - eps) * t


def log_linear_dalpha(eps: float) -> float:
    """alpha'_t = -(1 - eps), the constant slope of :func:`log_linear_alpha`."""
    return -(1 - eps)


def sigma_of_alpha(alpha_t: Tensor, time_conditioning: bool = True) -> Tensor:
    """The network's time input sigma = -log alpha_t (reference `Diffusion._sigma_from_alphat`);
    zeros without time conditioning."""
    if not time_conditioning:
        return torch.zeros_like(alpha_t)
    return -torch.log(alpha_t)


def interp(x: Tensor, xp: Tensor, fp: Tensor, *, right: bool = False) -> Tensor:
    """Piecewise-linear interpolation of the table (xp increasing, fp) at x, clamped to
    [xp[0], xp[-1]] (``numpy.interp``'s values inside the table, on the device).

    ``x`` is cast to the table's dtype. ``right`` picks the segment of an x that equals a knot
    xp[j] (``torch.searchsorted``'s ``right``): True gives fp[j] exactly, False gives
    f_{j-1} + (f_j - f_{j-1}), which can differ from fp[j] in the last bit.
    """
    x = x.to(xp.dtype).clamp(xp[0], xp[-1]).contiguous()
    i = torch.searchsorted(xp, x, right=right).clamp(1, len(xp) - 1)
    x0, x1, f0, f1 = xp[i - 1], xp[i], fp[i - 1], fp[i]
    return f0 + (x - x0) / (x1 - x0) * (f1 - f0)


def normal_expectation_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(z, w) with E_{z ~ N(0, 1)}[f(z)] ~ sum_i w_i f(z_i): Gauss-Hermite nodes x_i and weights
    h_i for the weight exp(-x^2) (``numpy.polynomial.hermite.hermgauss``) under the change of
    variable z = sqrt(2) x, w = h / sqrt(pi). Exact for polynomials of degree < 2n."""
    from numpy.polynomial.hermite import hermgauss

    x, h = hermgauss(n)
    return np.sqrt(2.0) * x, h / np.sqrt(np.pi)


def gaussian_argmax_probability(margin, vocab_size: int, n_nodes: int = 100) -> np.ndarray:
    """P[the true coordinate is the argmax] = E_z[Phi(z + m)^(V-1)] for V coordinates with i.i.d.
    N(0, 1) noise, the true one ahead by ``margin`` m (any shape; elementwise), by
    ``n_nodes``-point Gauss-Hermite quadrature; Phi^(V-1) is taken as exp((V-1) log Phi) so that
    large V does not underflow. Duo eq. 10 (m = exp(-gamma / 2)); FLM
    `utils.py::compute_alpha_exact` (m = gamma / (1 - gamma))."""
    from scipy.special import log_ndtr

    m = np.asarray(margin, dtype=np.float64)
    z, w = normal_expectation_nodes(n_nodes)
    logcdf = log_ndtr(z[None, :] + m.reshape(-1, 1))
    return np.sum(w * np.exp((vocab_size - 1) * logcdf), axis=-1).reshape(m.shape)
