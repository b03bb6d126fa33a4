"""Geometry of S^{d-1} (sflm.geometry): identities that fail for a wrong formula."""

from __future__ import annotations

import math

import pytest
import torch

from sflm.geometry import (
    conditional_velocity,
    exp_map,
    geodesic_distance,
    log_map,
    normalize,
    slerp,
    tangent_project,
    uniform_sphere,
)


def pair(n=64, d=16, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (
        uniform_sphere((n, d), generator=g, dtype=dtype),
        uniform_sphere((n, d), generator=g, dtype=dtype),
    )


def test_uniform_sphere_unit_norm_and_isotropic():
    g = torch.Generator().manual_seed(1)
    x = uniform_sphere((20_000, 8), generator=g, dtype=torch.float64)
    assert torch.allclose(x.norm(dim=-1), torch.ones(20_000, dtype=torch.float64), atol=1e-12)
    # mean ~ 0 and E[x x^T] = I / d for the uniform law
    assert x.mean(0).abs().max() < 0.02
    cov = x.T @ x / len(x)
    assert torch.allclose(cov, torch.eye(8, dtype=torch.float64) / 8, atol=0.01)


def test_geodesic_distance_is_arccos_and_symmetric():
    p, q = pair()
    d = geodesic_distance(p, q)
    assert torch.allclose(d, torch.acos((p * q).sum(-1)), atol=1e-10)
    assert torch.allclose(d, geodesic_distance(q, p), atol=0)
    assert float(geodesic_distance(p, p).abs().max()) < 1e-7
    assert torch.allclose(
        geodesic_distance(p, -p), torch.full((len(p),), math.pi, dtype=p.dtype), atol=1e-7
    )


def test_exp_log_inverse_and_log_properties():
    p, q = pair()
    v = log_map(p, q)
    # tangent, norm = geodesic distance, exp undoes log
    assert float((p * v).sum(-1).abs().max()) < 1e-12
    assert torch.allclose(v.norm(dim=-1), geodesic_distance(p, q), atol=1e-12)
    assert torch.allclose(exp_map(p, v), q, atol=1e-12)
    # the paper's closed form w / sin w (q - cos w p)
    w = torch.acos((p * q).sum(-1, keepdim=True))
    assert torch.allclose(v, w / torch.sin(w) * (q - torch.cos(w) * p), atol=1e-12)


def test_log_exp_inverse_for_tangent_vectors():
    p, q = pair(seed=3)
    v = tangent_project(p, q)
    v = (
        v / v.norm(dim=-1, keepdim=True) * torch.linspace(0.0, 3.0, len(p), dtype=p.dtype)[:, None]
    )  # |v| < pi
    assert torch.allclose(log_map(p, exp_map(p, v)), v, atol=1e-10)
    assert torch.allclose(exp_map(p, v).norm(dim=-1), torch.ones(len(p), dtype=p.dtype), atol=1e-12)


def test_stable_at_equal_points_with_finite_gradients():
    p, _ = pair()
    p = p.clone().requires_grad_(True)
    q = p.detach().clone().requires_grad_(True)
    v = log_map(p, q)
    assert torch.isfinite(v).all() and float(v.detach().abs().max()) < 1e-7
    out = slerp(p, q, 0.3)
    assert torch.allclose(out, p.detach(), atol=1e-7)
    (out.sum() + v.sum()).backward()
    assert torch.isfinite(p.grad).all() and torch.isfinite(q.grad).all()
    z = torch.zeros_like(p)
    assert torch.equal(exp_map(p.detach(), z), p.detach())


def test_near_antipodal_is_finite_and_bounded():
    p, q = pair(n=8)
    qn = normalize(-p + 1e-9 * q)  # almost -p
    v = log_map(p, qn)
    assert torch.isfinite(v).all()
    assert float(v.norm(dim=-1).max()) <= math.pi + 1e-6
    assert torch.allclose(exp_map(p, v), qn, atol=1e-6)


def test_slerp_endpoints_constant_speed_and_paper_formula():
    p, q = pair()
    assert torch.allclose(slerp(p, q, 0.0), p, atol=1e-12)
    assert torch.allclose(slerp(p, q, 1.0), q, atol=1e-12)
    w = geodesic_distance(p, q)
    ts = torch.linspace(0, 1, 11, dtype=p.dtype)
    pts = [slerp(p, q, float(t)) for t in ts]
    for a, b in zip(pts[:-1], pts[1:]):  # equal arcs of w / 10
        assert torch.allclose(geodesic_distance(a, b), w / 10, atol=1e-10)
    t = 0.37
    ref = (torch.sin((1 - t) * w) / torch.sin(w))[:, None] * p + (torch.sin(t * w) / torch.sin(w))[
        :, None
    ] * q
    assert torch.allclose(slerp(p, q, t), ref, atol=1e-12)
    # per-row t broadcasts over the leading axes
    tt = torch.rand(len(p), dtype=p.dtype)
    rows = torch.stack([slerp(p[i], q[i], float(tt[i])) for i in range(len(p))])
    assert torch.allclose(slerp(p, q, tt), rows, atol=1e-12)


def test_float32_matches_float64():
    p, q = pair(n=256, d=64, seed=5)
    p32, q32 = p.float(), q.float()
    assert torch.allclose(log_map(p32, q32).double(), log_map(p, q), atol=2e-6)
    assert torch.allclose(slerp(p32, q32, 0.25).double(), slerp(p, q, 0.25), atol=2e-6)
    assert torch.allclose(geodesic_distance(p32, q32).double(), geodesic_distance(p, q), atol=2e-6)
    v = 0.5 * log_map(p, q)
    assert torch.allclose(exp_map(p32, v.float()).double(), exp_map(p, v), atol=2e-6)


def test_conditional_velocity_matches_finite_differences():
    """d/dt SLERP(z0, z1, alpha_t) = alpha'_t / (1 - alpha_t) log_{z_t}(z1) (paper eq.
    spherical-conditional-vf), checked with a central difference on a non-linear schedule."""
    z0, z1 = pair(n=32, d=12, seed=9)

    def alpha(t):
        return math.sin(math.pi / 2 * t) ** 2  # cos^2-type schedule

    def dalpha(t):
        return math.pi / 2 * math.sin(math.pi * t)

    for t in (0.2, 0.5, 0.8):
        h = 1e-6
        fd = (slerp(z0, z1, alpha(t + h)) - slerp(z0, z1, alpha(t - h))) / (2 * h)
        zt = slerp(z0, z1, alpha(t))
        u = conditional_velocity(zt, z1, alpha(t), dalpha(t))
        assert torch.allclose(u, fd, atol=1e-6, rtol=1e-6)
    # a wrong factor (e.g. alpha' without 1 / (1 - alpha)) would not match
    zt = slerp(z0, z1, alpha(0.5))
    wrong = dalpha(0.5) * log_map(zt, z1)
    fd = (slerp(z0, z1, alpha(0.5 + 1e-6)) - slerp(z0, z1, alpha(0.5 - 1e-6))) / 2e-6
    assert not torch.allclose(wrong, fd, atol=1e-3)


@pytest.mark.parametrize("shape", [(5, 3), (2, 4, 7)])
def test_shapes_on_last_axis(shape):
    g = torch.Generator().manual_seed(0)
    p, q = uniform_sphere(shape, generator=g), uniform_sphere(shape, generator=g)
    assert log_map(p, q).shape == shape
    assert geodesic_distance(p, q).shape == shape[:-1]
    assert slerp(p, q, torch.full(shape[:-1], 0.5)).shape == shape
