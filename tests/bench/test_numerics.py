"""The shared numerics (bench/numerics.py): interpolation, Gauss-Hermite, the log-linear
schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

from bench.numerics import (
    gaussian_argmax_probability,
    interp,
    log_linear_alpha,
    log_linear_dalpha,
    normal_expectation_nodes,
    sigma_of_alpha,
)

# ------------------------------------------------------------------ interp


@pytest.mark.parametrize("right", [False, True])
def test_interp_matches_numpy_inside_and_clamps_outside(right):
    rng = np.random.default_rng(0)
    xp = np.sort(rng.uniform(-3, 5, 50))
    fp = np.sin(xp) + xp**2
    x = rng.uniform(-5, 7, 2000)  # some below xp[0], some above xp[-1]: numpy clamps to the ends
    got = interp(torch.from_numpy(x), torch.from_numpy(xp), torch.from_numpy(fp), right=right)
    np.testing.assert_allclose(got.numpy(), np.interp(x, xp, fp), rtol=1e-13, atol=1e-13)
    assert got.dtype == torch.float64 and got.shape == (2000,)


def test_interp_at_knots_right_is_exact():
    """``right=True`` returns fp[j] bit for bit at a knot; ``right=False`` (the segment on the left)
    agrees to rounding. The two are kept because callers pinned their outputs with one or the
    other."""
    xp = torch.linspace(0.0, 1.0, 11, dtype=torch.float64) ** 2
    fp = torch.exp(3 * xp) / 7
    assert torch.equal(interp(xp, xp, fp, right=True), fp)
    torch.testing.assert_close(interp(xp, xp, fp), fp, rtol=1e-15, atol=0)


def test_interp_casts_to_the_table_dtype_and_keeps_the_query_shape():
    xp = torch.tensor([0.0, 1.0, 2.0])
    fp = torch.tensor([0.0, 10.0, 40.0])
    x = torch.tensor([[0.5, 1.5], [-1.0, 3.0]], dtype=torch.float64).t()  # non-contiguous
    got = interp(x, xp, fp)
    assert got.dtype == torch.float32 and got.shape == (2, 2)
    assert got.tolist() == [[5.0, 0.0], [25.0, 40.0]]


# ------------------------------------------------------------------ Gauss-Hermite


def test_normal_expectation_nodes_give_known_gaussian_moments():
    z, w = normal_expectation_nodes(20)
    assert w.sum() == pytest.approx(1.0, abs=1e-14)
    assert (w * z).sum() == pytest.approx(0.0, abs=1e-14)
    assert (w * z**2).sum() == pytest.approx(1.0, abs=1e-13)
    assert (w * z**4).sum() == pytest.approx(3.0, abs=1e-12)
    assert (w * z**6).sum() == pytest.approx(15.0, abs=1e-11)
    assert (w * np.exp(z)).sum() == pytest.approx(math.exp(0.5), rel=1e-12)  # E e^z = e^{1/2}
    assert (w * np.cos(z)).sum() == pytest.approx(math.exp(-0.5), rel=1e-12)


def test_argmax_probability_closed_forms():
    m = np.linspace(-2.0, 4.0, 25)
    # V = 2: P[z1 + m > z2] = Phi(m / sqrt 2)
    np.testing.assert_allclose(
        gaussian_argmax_probability(m, 2), norm.cdf(m / np.sqrt(2)), atol=1e-12
    )
    # margin 0: by symmetry every coordinate is the argmax with probability 1 / V (100 nodes:
    # relative error 1.4e-6 at V = 100, where Phi^99 is far from a polynomial)
    for V in (2, 3, 10, 100):
        assert float(gaussian_argmax_probability(0.0, V)) == pytest.approx(1 / V, rel=1e-5)


def test_argmax_probability_against_monte_carlo_and_shape():
    V, margins = 10, np.array([[0.3, 1.0], [2.0, 3.5]])
    p = gaussian_argmax_probability(margins, V)
    assert p.shape == (2, 2) and (np.diff(p.reshape(-1)) > 0).all()
    rng = np.random.default_rng(1)
    noise = rng.standard_normal((200_000, V))
    for m, pm in zip(margins.reshape(-1), p.reshape(-1)):
        wins = (noise[:, 0] + m > noise[:, 1:].max(axis=1)).mean()
        assert abs(wins - pm) < 5 * math.sqrt(pm * (1 - pm) / len(noise))


# ------------------------------------------------------------------ log-linear schedule


def test_log_linear_schedule_endpoints_slope_and_monotonicity():
    eps = 1e-3
    t = torch.linspace(0, 1, 1001, dtype=torch.float64)
    a = log_linear_alpha(t, eps)
    assert float(a[0]) == 1.0 and float(a[-1]) == pytest.approx(eps, abs=1e-15)
    assert (a.diff() < 0).all()
    slope = log_linear_dalpha(eps)
    assert slope == -(1 - eps)
    torch.testing.assert_close(a.diff() / t.diff(), torch.full((1000,), slope, dtype=torch.float64))
    assert log_linear_alpha(0.25, eps) == pytest.approx(1 - 0.999 * 0.25)  # plain floats too
    sigma = sigma_of_alpha(a)  # the time input -log alpha_t: 0 at t = 0, increasing, -log eps at 1
    assert float(sigma[0]) == 0.0 and (sigma.diff() > 0).all()
    assert float(sigma[-1]) == pytest.approx(-math.log(eps))
    assert torch.equal(sigma_of_alpha(a, time_conditioning=False), torch.zeros_like(a))
