"""Geometry of the unit hypersphere S^{d-1}: pure functions on the last axis.

Paper section 2.2 ("Geometry of the Hypersphere"):
- geodesic distance d(p, q) = arccos(p.q) in [0, pi];
- exp_p(v) = cos(|v|) p + sin(|v|) v / |v|                      (eq. exp-map);
- log_p(q) = w / sin(w) (q - cos(w) p), w = d(p, q)               (eq. log-map);
- SLERP(p, q, t) = sin((1-t) w)/sin(w) p + sin(t w)/sin(w) q = exp_p(t log_p(q))  (eq. slerp);
- uniform sampling: eps ~ N(0, I_d), eps / |eps| (Muller 1959).

Numerics (the reference, FrankCCCCC/s-flm @ 18d586f `samplers.py::sfm_compute_velocity`, clamps
the cosine to [-1 + eps, 1 - eps] and takes arccos). Here angles are computed with atan2 from the
tangent component u = q - (p.q) p (|u| = sin w for unit vectors) instead of arccos of a
clamped cosine: this is accurate to machine precision at p = q (where arccos loses half the
digits) and near-antipodal points, and |log_p(q)| = w holds exactly by construction.
Ratios w/sin w and sin|v|/|v| use their limit 1 at 0 with gradient-safe denominators, so
nothing is NaN at p = q. At exactly antipodal points log_p(q) is undefined (paper footnote):
the tangent component vanishes and the function returns the zero vector there. Callers that
need precision pass float64 tensors (S-FLM does its SLERP and velocities in float64, like the
reference ``algo.slerp_precision=float64``).
"""

from __future__ import annotations

import torch
from torch import Tensor

#: floor for norms used as denominators (reference ``algo.eps`` / ``justnorm`` eps)
EPS = 1e-6


def normalize(x: Tensor, eps: float = EPS) -> Tensor:
    """Project onto the unit sphere along the last axis: x / max(|x|, eps)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


def uniform_sphere(
    shape: tuple[int, ...],
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Uniform samples on S^{d-1}, ``shape = (..., d)``: Gaussian draws normalised (Muller 1959)."""
    eps = torch.randn(shape, generator=generator, device=device, dtype=dtype)
    return normalize(eps)


def _safe_ratio(num: Tensor, den: Tensor, limit: float = 1.0) -> Tensor:
    """num / den where den > 0, else ``limit``; no NaN in the forward or backward pass."""
    ok = den > 0
    return torch.where(
        ok, num / torch.where(ok, den, torch.ones_like(den)), torch.full_like(num, limit)
    )


def geodesic_distance(p: Tensor, q: Tensor) -> Tensor:
    """Angle between unit vectors, shape ``p.shape[:-1]``, in [0, pi].

    Equals arccos(p.q) (paper sec. 2.2); computed as 2 atan2(|p - q|, |p + q|), which is
    exact to rounding everywhere, including p = q and p = -q.
    """
    return 2 * torch.atan2((p - q).norm(dim=-1), (p + q).norm(dim=-1))


def _angle_and_tangent(p: Tensor, q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(w, u, |u|) with c = p.q, u = q - c p (tangent at p), w = atan2(|u|, c)."""
    c = (p * q).sum(-1, keepdim=True)
    u = q - c * p
    nu = u.norm(dim=-1, keepdim=True)
    return torch.atan2(nu, c), u, nu


def log_map(p: Tensor, q: Tensor) -> Tensor:
    """log_p(q): the tangent vector at p pointing to q with norm d(p, q) (paper eq. log-map).

    Written as w * u / |u| with u = q - (p.q) p, which equals w / sin(w) (q - cos(w) p) for
    unit inputs. Zero at p = q; zero (undefined direction) at exactly antipodal points.
    """
    w, u, nu = _angle_and_tangent(p, q)
    return _safe_ratio(w, nu, 1.0) * u


def exp_map(p: Tensor, v: Tensor) -> Tensor:
    """exp_p(v) = cos(|v|) p + sin(|v|) v / |v| (paper eq. exp-map); exp_p(0) = p."""
    n = v.norm(dim=-1, keepdim=True)
    return torch.cos(n) * p + _safe_ratio(torch.sin(n), n, 1.0) * v


def slerp(p: Tensor, q: Tensor, t: Tensor | float) -> Tensor:
    """SLERP(p, q, t) (paper eq. slerp): p at t = 0, q at t = 1, constant angular speed d(p, q).

    ``t`` is a float or a tensor broadcastable to ``p.shape[:-1]``. Computed as
    exp_p(t log_p(q)) (the paper's equivalent form), which is stable at p = q.
    """
    if not torch.is_tensor(t):
        t = torch.tensor(t, dtype=p.dtype, device=p.device)
    t = t.to(p.dtype)[..., None]
    return exp_map(p, t * log_map(p, q))


def conditional_velocity(
    z_t: Tensor, z_1: Tensor, alpha: Tensor | float, dalpha: Tensor | float
) -> Tensor:
    """u_{t|1}(z_t | z_1) = alpha'_t / (1 - alpha_t) log_{z_t}(z_1)
    (paper eq. spherical-conditional-vf, derived in appendix "Deriving the Conditional Velocity
    Fields"): the time derivative of z_t = SLERP(z_0, z_1, alpha_t). ``alpha`` / ``dalpha``
    broadcast to ``z_t.shape[:-1]``."""
    a = torch.as_tensor(alpha, dtype=z_t.dtype, device=z_t.device)[..., None]
    da = torch.as_tensor(dalpha, dtype=z_t.dtype, device=z_t.device)[..., None]
    return da / (1 - a) * log_map(z_t, z_1)


def tangent_project(p: Tensor, v: Tensor) -> Tensor:
    """Component of v orthogonal to p (projection onto T_p S^{d-1} for unit p)."""
    return v - (p * v).sum(-1, keepdim=True) * p
