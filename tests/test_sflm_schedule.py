"""S-FLM schedules (sflm.schedule): alpha*, its Monte-Carlo check, truncation, adaptive refit."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from sflm.schedule import (
    AdaptiveSchedule,
    Cos2Schedule,
    LinearSchedule,
    TruncatedSchedule,
    alpha_star,
    alpha_star_model,
    alpha_star_table,
    check_alpha_star,
    make_base_schedule,
)

# ------------------------------------------------------------------ alpha*


@pytest.mark.parametrize(
    "V,d,delta,expected",
    [
        (12, 512, 0.1, 0.0927),  # methods.md 8.2 / Sudoku alpha_max 0.093
        (12, 512, 0.01, 0.1109),
        (50_000, 768, 0.1, 0.1215),  # TinyGSM / OWT 0.121 (ablation: 1 - 0.121 = 0.879)
        (50_000, 768, 0.01, 0.1314),  # 1 - 0.131 = 0.869
        (49_153, 768, 0.1, 0.1214),  # SmolLM vocabulary
        (10, 64, 0.1, 0.264),  # cpu-calibration.md
    ],
)
def test_alpha_star_values(V, d, delta, expected):
    assert alpha_star(V, d, delta) == pytest.approx(expected, abs=6e-4)


def test_alpha_star_paper_grid():
    """Every entry of the paper's table tab:alpha-crit-grid (3 decimals)."""
    table = {
        12: [(256, 0.132, 0.158), (512, 0.093, 0.111), (768, 0.076, 0.090), (1024, 0.065, 0.078), (4096, 0.033, 0.039)],
        50_000: [(256, 0.213, 0.231), (512, 0.149, 0.161), (768, 0.121, 0.131), (1024, 0.105, 0.114), (4096, 0.052, 0.057)],
        100_000: [(256, 0.219, 0.236), (512, 0.153, 0.165), (768, 0.125, 0.134), (1024, 0.108, 0.116), (4096, 0.054, 0.058)],
    }
    for V, rows in table.items():
        for d, a1, a01 in rows:
            assert round(alpha_star(V, d, 0.1), 3) == pytest.approx(a1, abs=1.1e-3)
            assert round(alpha_star(V, d, 0.01), 3) == pytest.approx(a01, abs=1.1e-3)


def test_alpha_star_monotone_and_errors():
    assert alpha_star(12, 256, 0.1) > alpha_star(12, 512, 0.1)  # more room in higher d
    assert alpha_star(50_000, 512, 0.1) > alpha_star(12, 512, 0.1)  # more competitors
    assert alpha_star(12, 512, 0.01) > alpha_star(12, 512, 0.1)  # higher confidence
    assert alpha_star(10, 4, 0.1) == 1.0  # vacuous bound -> no truncation
    for bad in [(1, 64, 0.1), (10, 0, 0.1), (10, 64, 0.0), (10, 64, 1.5)]:
        with pytest.raises(ValueError, match="alpha_star"):
            alpha_star(*bad)


def test_monte_carlo_reduction_matches_literal_codebooks():
    """The reduced sampler (no vectors) and the quadrature reproduce a literal simulation with
    explicit random codebooks, at alpha* and at a smaller alpha where the bound fails."""
    V, d = 12, 64
    for alpha in (alpha_star(V, d, 0.1), 0.1):
        lit = check_alpha_star(V, d, 0.1, alpha=alpha, n_trials=4000, method="codebook", seed=1)
        red = check_alpha_star(V, d, 0.1, alpha=alpha, n_trials=40_000, method="reduced", seed=2)
        quad = check_alpha_star(V, d, 0.1, alpha=alpha, method="quadrature")
        tol = 4 * math.hypot(lit.stderr, red.stderr)
        assert abs(lit.p_nearest - red.p_nearest) < tol
        assert abs(quad.p_nearest - red.p_nearest) < 4 * red.stderr + 1e-3
    assert check_alpha_star(V, d, 0.1, alpha=0.1, method="quadrature").p_nearest < 0.9  # below alpha*: fails


def test_alpha_star_probability_near_one_minus_delta():
    """At alpha*(delta) the target is the nearest neighbour with probability close to 1 - delta.
    Measured (quadrature = Monte-Carlo): |V| = 12, d = 512: 0.942 (delta 0.1), 0.985 (0.01);
    |V| = 50,000, d = 768: 0.875 / 0.948; |V| = 100,000, d = 4096, delta 0.01: 0.926. The formula
    is an approximation (w = pi/2, union bound): it holds at small |V| for delta = 0.1 and the
    failure rate reaches a few times delta at large |V| and small delta."""
    for V, d, delta in [(12, 512, 0.1), (12, 512, 0.01), (50_000, 768, 0.1), (100_000, 4096, 0.01)]:
        r = check_alpha_star(V, d, delta, n_trials=20_000, seed=3)
        q = check_alpha_star(V, d, delta, method="quadrature")
        assert abs(r.p_nearest - q.p_nearest) < 4 * r.stderr + 1e-3
        assert 0.3 * delta < 1 - q.p_nearest < 8 * delta, q
        assert r.holds == (r.p_nearest >= 1 - delta)
    assert check_alpha_star(12, 512, 0.1, method="quadrature").holds
    assert not check_alpha_star(50_000, 768, 0.1, method="quadrature").holds
    chance = check_alpha_star(12, 512, 0.1, alpha=0.0, method="quadrature").p_nearest
    assert chance == pytest.approx(1 / 12, abs=2e-3)


def test_alpha_star_model_solves_the_exact_condition():
    a = alpha_star_model(50_000, 768, 0.1)
    assert a == pytest.approx(0.1242, abs=1e-3)  # vs the formula's 0.1215
    p = check_alpha_star(50_000, 768, 0.1, alpha=a, method="quadrature").p_nearest
    assert p == pytest.approx(0.9, abs=1e-4)


def test_alpha_star_table_rows():
    rows = alpha_star_table((12,), (256, 512), (0.1,), n_trials=2000)
    assert [(r["vocab_size"], r["dim"], r["delta"]) for r in rows] == [(12, 256, 0.1), (12, 512, 0.1)]
    assert rows[1]["alpha"] == pytest.approx(alpha_star(12, 512, 0.1))
    assert set(rows[0]) >= {"p_nearest", "stderr", "holds", "n_trials", "method"}


# ------------------------------------------------------------------ base + truncation


def test_base_schedules_endpoints_and_derivatives():
    t = torch.linspace(0, 1, 101, dtype=torch.float64)
    for s in (LinearSchedule(1e-3), Cos2Schedule(1e-3)):
        a = s.alpha(t)
        assert float(a[0]) == pytest.approx(1.0) and float(a[-1]) == pytest.approx(1e-3)
        assert (a[1:] < a[:-1]).all()  # clean weight decreases with noise
        h = 1e-6
        fd = (s.alpha(t[1:-1] + h) - s.alpha(t[1:-1] - h)) / (2 * h)
        assert torch.allclose(s.dalpha(t[1:-1]), fd, atol=1e-6)
    # paper tab:noise-schedules in the inverted time u = 1 - t: linear u, cos^2 sin^2(pi u / 2)
    u = 1 - t
    assert torch.allclose(Cos2Schedule(0.0).alpha(t), torch.sin(math.pi * u / 2) ** 2, atol=1e-12)
    assert torch.allclose(LinearSchedule(0.0).alpha(t), u, atol=1e-12)


def test_truncation_maps_onto_range():
    t = torch.linspace(0, 1, 51, dtype=torch.float64)
    for base in (LinearSchedule(1e-3), Cos2Schedule(1e-3)):
        tr = TruncatedSchedule(base, 1e-3, 0.0927, 1e-3)
        a = tr.alpha(t)
        assert float(a[0]) == pytest.approx(0.0927) and float(a[-1]) == pytest.approx(1e-3)
        assert (a[1:] < a[:-1]).all()
        # shape of the base is kept (affine rescale)
        lo, hi = base.range
        assert torch.allclose((a - 1e-3) / (0.0927 - 1e-3), (base.alpha(t) - lo) / (hi - lo), atol=1e-12)
    assert isinstance(make_base_schedule("linear", 1e-3, None, 1.0), LinearSchedule)  # untruncated
    with pytest.raises(ValueError, match="truncation"):
        TruncatedSchedule(LinearSchedule(), 0.5, 0.2)
    with pytest.raises(ValueError, match="unknown schedule"):
        make_base_schedule("cosine", 1e-3, None, 0.1)


# ------------------------------------------------------------------ adaptive


def synthetic_pairs(n=20_000, seed=0, center=0.3, width=0.05):
    """Loss rises steeply (a sigmoid in t) around ``center``, flat elsewhere."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(1e-3, 1, n)
    loss = 2.3 / (1 + np.exp(-(t - center) / width)) + 0.02 * rng.normal(size=n)
    return t, loss


def fitted(ema=0.0, **kw):
    base = TruncatedSchedule(LinearSchedule(1e-3), 1e-3, 0.2, 1e-3)
    s = AdaptiveSchedule(base, warmup=0, ema=ema, **kw)
    t, loss = synthetic_pairs()
    s.refit(t, loss)
    return s, base


def test_adaptive_monotone_range_and_concentration():
    s, base = fitted()
    t = torch.linspace(0, 1, 2001, dtype=torch.float64)
    a = s.alpha(t)
    assert (a[1:] <= a[:-1] + 1e-12).all(), "adaptive alpha must decrease with t"
    lo, hi = 1e-3, 0.2
    assert float(a.min()) >= lo - 1e-9 and float(a.max()) <= hi + 1e-9
    assert float(a[0]) == pytest.approx(hi, abs=1e-3) and float(a[-1]) == pytest.approx(lo, abs=1e-6)
    # uniform training times land where the loss is steep: base alpha at t in [0.2, 0.4]
    steep = (base.alpha(torch.tensor(0.4)), base.alpha(torch.tensor(0.2)))
    frac = float(((a >= steep[0]) & (a <= steep[1])).double().mean())
    assert frac > 0.6, f"only {frac:.2f} of the mass in the steep region (base: 0.2)"
    # derivative is the derivative of the fitted spline
    h = 1e-5
    tm = t[100:-100]
    fd = (s.alpha(tm + h) - s.alpha(tm - h)) / (2 * h)
    assert torch.allclose(s.dalpha(tm), fd, atol=1e-4, rtol=1e-3)


def test_adaptive_flat_loss_gives_base_schedule():
    """mu > 0 and a flat profile: the importance is uniform, the schedule equals the base."""
    base = TruncatedSchedule(LinearSchedule(1e-3), 1e-3, 0.2, 1e-3)
    s = AdaptiveSchedule(base, warmup=0, ema=0.0)
    rng = np.random.default_rng(0)
    t = rng.uniform(0, 1, 5000)
    s.refit(t, 1.0 - 0.5 * t)  # loss DEcreasing with noise: slope clamped to 0
    grid = torch.linspace(0, 1, 101, dtype=torch.float64)
    assert torch.allclose(s.alpha(grid), base.alpha(grid), atol=2e-3)


def test_adaptive_ema_bias_correction():
    """The first refit is unbiased (abar / (1 - beta)); later ones average successive fits."""
    s1, _ = fitted(ema=0.0)
    s2, _ = fitted(ema=0.9)
    assert np.allclose(s1.alpha_vals, s2.alpha_vals, atol=1e-12)
    t2, l2 = synthetic_pairs(center=0.7, seed=1)
    a_first = s2.alpha_vals.copy()
    new = AdaptiveSchedule(s2.base, warmup=0, ema=0.0)
    a_new = new.refit(t2, l2)
    s2.refit(t2, l2)
    expect = (0.9 * 0.1 * a_first + 0.1 * a_new) / (1 - 0.9**2)
    assert np.allclose(s2.alpha_vals, expect, atol=1e-12)


def test_adaptive_recording_warmup_and_refit_cadence():
    base = TruncatedSchedule(LinearSchedule(1e-3), 1e-3, 0.2, 1e-3)
    s = AdaptiveSchedule(base, warmup=10, refit_every=5, ema=0.9)
    gen = torch.Generator().manual_seed(0)
    refits = []
    for step in range(40):
        t = torch.rand(64, generator=gen)
        loss = torch.sigmoid((t - 0.3) / 0.05)
        if s.record(t, loss, step):
            refits.append(step)
    assert s.t_buf is not None and len(s.t_buf) == 5 * 64  # paper: R x batch
    # recording starts at step 10, the buffer is full after 5 batches (step 14), refits at 15, 20, ...
    # (the fill step is 4 mod 5: s-flm 18d586f's per-write `end >= size` check never refits here)
    assert refits == [15, 20, 25, 30, 35]
    assert s.refit_count == 5 and s.fitted
    before = AdaptiveSchedule(base, warmup=10, refit_every=5)
    assert not before.record(torch.rand(64), torch.rand(64), 3) and before.t_buf is None


def test_adaptive_state_round_trip():
    s, base = fitted(ema=0.9, refit_every=5)
    gen = torch.Generator().manual_seed(0)
    for step in range(12):
        s.record(torch.rand(32, generator=gen), torch.rand(32, generator=gen), step)
    buf = io.BytesIO()
    torch.save(s.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)  # plain tensors / ints only
    fresh = AdaptiveSchedule(base, warmup=0, ema=0.9, refit_every=5)
    t = torch.linspace(0, 1, 301, dtype=torch.float64)
    assert not torch.allclose(fresh.alpha(t), s.alpha(t))
    fresh.load_state_dict(sd)
    assert torch.allclose(fresh.alpha(t), s.alpha(t), atol=0)
    assert fresh.refit_count == s.refit_count and fresh.buf_pos == s.buf_pos
    assert np.array_equal(fresh.t_buf, s.t_buf) and np.array_equal(fresh.ema_vals, s.ema_vals)
    # the restored EMA continues exactly like the original
    tt, ll = synthetic_pairs(seed=4)
    assert np.allclose(fresh.refit(tt, ll), s.refit(tt, ll), atol=0)


def test_adaptive_torch_evaluation_matches_scipy():
    from scipy.interpolate import PchipInterpolator

    s, _ = fitted()
    t = np.random.default_rng(0).uniform(0, 1, 500)
    ref = PchipInterpolator(s.grid, s.alpha_vals)(t)
    got = s.alpha(torch.from_numpy(t)).numpy()
    assert np.allclose(got, ref, atol=1e-12)
    got32 = s.alpha(torch.from_numpy(t).float()).double().numpy()
    assert np.allclose(got32, ref, atol=1e-5)
