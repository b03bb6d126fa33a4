"""Measured numeric departures from the paper's released harness (FrankCCCCC/s-flm @ 18d586f).

Each test recomputes the reference's formula in the reference's dtype (float32 schedules,
``x - logsumexp`` SUBS, CubicSpline alpha<->gamma tables; read from noise_schedules.py,
algo.py::MDLM, samplers.py and flm_utils.py) beside ours and asserts the bound written in
docs/methods/{sflm,mdlm,flm}.md. A test also checks the difference is real (non-zero), so a bound
cannot pass by comparing our code with itself.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.interpolate import CubicSpline

from baselines.flm import AlphaGammaTable, alpha_of_gamma
from baselines.mdlm import MDLM, MDLMOptions
from sflm.sampler import step_size
from sflm.schedule import make_base_schedule

EPS = 1e-3


def _ref_base(name):
    # noise_schedules.py::LogLinear / CosineSquared, evaluated on float32 tensors
    if name == "linear":
        return lambda t: EPS + (1 - EPS) * (1 - t)
    return lambda t: EPS + (1 - EPS) * torch.sin(torch.pi / 2 * (1 - t)) ** 2


def _ref_truncated(name, cap):
    # noise_schedules.py::TruncatedScheduleWrapper: constants from float32 .item()
    base = _ref_base(name)
    hi, lo = base(torch.tensor(0.0)).item(), base(torch.tensor(1.0)).item()
    scale = (cap - lo) / (hi - lo)
    offset = lo - scale * lo
    return (lambda t: (scale * base(t) + offset).clamp(min=EPS)), scale, offset


@pytest.mark.parametrize("name", ["linear", "cos2"])
@pytest.mark.parametrize("cap", [0.121, 0.264])
def test_sflm_float32_schedule_bounds(name, cap):
    ours = make_base_schedule(name, EPS, None, cap)
    ref, scale, offset = _ref_truncated(name, cap)
    assert 0 < abs(ours.scale - scale) <= 5e-11 and abs(ours.offset - offset) <= 5e-11
    t = torch.linspace(0, 1, 100001, dtype=torch.float64)
    d = (ours.alpha(t) - ref(t.float()).double()).abs().max().item()
    assert 1e-9 < d <= 7e-8  # docs/methods/sflm.md "Schedule precision"
    for nfe in (16, 1024):  # sampler grid: float32 linspace in the reference
        a64 = ours.alpha(torch.linspace(1.0, 1e-5, nfe + 1, dtype=torch.float64))
        a32 = ref(torch.linspace(1.0, 1e-5, nfe + 1))
        assert (a64 - a32.double()).abs().max().item() <= 5e-8
        s64, s32 = step_size(a64[:-1], a64[1:]), step_size(a32[:-1], a32[1:]).double()
        rel = ((s64 - s32) / s64).abs().max().item()
        assert rel <= (2e-4 if name == "linear" else 2e-2)


@pytest.mark.parametrize("cap", [0.131, 0.2])
def test_sflm_inverted_grid_margin_bound(cap):
    # reference invert_time_convention=true: linspace(1e-5, 1) in inverted time = 1 - that in ours
    ours = make_base_schedule("linear", EPS, None, cap)
    t_ours = torch.linspace(1.0, 1e-5, 65, dtype=torch.float64)
    t_ref = 1 - torch.linspace(1e-5, 1.0, 65, dtype=torch.float64)
    d = (ours.alpha(t_ours) - ours.alpha(t_ref))[:-1].abs()  # last point is never queried
    assert torch.allclose(d, torch.full_like(d, (cap - EPS) * 1e-5), rtol=1e-6, atol=0)


@pytest.mark.parametrize("V,scale", [(12, 3.0), (50258, 5.0)])
def test_mdlm_subs_logprobs_bound(V, scale):
    g = torch.Generator().manual_seed(0)
    B, L = 2, 32
    logits = torch.randn(B, L, V + 1, generator=g) * scale
    x_t = torch.randint(0, V + 1, (B, L), generator=g)
    x_t[:, ::2] = V
    ours = MDLM(MDLMOptions(), V, L).log_probs(
        lambda x, s: logits.clone(), x_t, torch.full((B,), 0.5)
    )

    def reference(lg):  # algo.py::MDLM._process_model_output_log_probs, in lg's dtype
        ref = lg.clone()
        ref[..., V] += -1e6
        ref = ref - torch.logsumexp(ref, -1, keepdim=True)
        um = x_t != V
        ref[um] = -1e6
        ref[um, x_t[um]] = 0
        return ref

    ref, oracle = reference(logits), reference(logits.double())
    # float32 rounding of logit - logsumexp: a few ulps of the magnitudes subtracted, whatever
    # the summation order a CPU's vector width picks (AVX2 vs AVX-512 differ by ~3 ulps here)
    lse = torch.logsumexp(logits.double()[..., :V], -1, keepdim=True).abs()
    tol = 16 * torch.finfo(torch.float32).eps * (logits.double()[..., :V].abs() + lse)
    masked = x_t == V
    for got in (ours, ref):  # ours, and the reference's own float32 chain, against float64
        err = (got.double()[..., :V] - oracle[..., :V]).abs()
        assert (err[masked] <= tol[masked]).all(), (err[masked] / tol[masked]).max().item()
        assert torch.equal(got[~masked][..., :V], oracle[~masked][..., :V].float())
    assert ours[..., V].exp().max().item() == 0.0 and ref[..., V].exp().max().item() == 0.0
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_mdlm_float32_grid_bound():
    for nfe, bound in ((16, 5e-7), (1024, 2e-5)):
        t64 = torch.linspace(1.0, 1e-5, nfe + 1, dtype=torch.float64)
        a64 = 1 - (1 - EPS) * t64  # ours (bench.numerics.log_linear_alpha)
        a32 = (EPS + (1 - EPS) * (1 - torch.linspace(1.0, 1e-5, nfe + 1))).double()
        assert 0 < (a64 - a32).abs().max().item() <= 7e-8
        p64 = (a64[1:] - a64[:-1]) / (1 - a64[:-1])
        p32 = (a32[1:] - a32[:-1]) / (1 - a32[:-1])
        assert (p64 - p32)[:-1].abs().max().item() <= bound


@pytest.mark.parametrize("K,a2g_bound,g2a_bound", [(12, 3e-7, 6e-8), (50258, 1e-6, 5e-7)])
def test_flm_table_vs_reference_spline(K, a2g_bound, g2a_bound):
    # flm_utils.py::compute_alpha_exact + build_luts (CubicSplines on a 1e4-point gamma grid)
    gam = np.linspace(0.0, 1.0, 10000)
    a = np.clip(alpha_of_gamma(gam, K) + (gam - 1) * 1e-10, 0.0, 1.0)
    g2a = CubicSpline(gam, a)
    order = np.argsort(a)
    ua, ui = np.unique(a[order], return_index=True)
    a2g = CubicSpline(ua, gam[order][ui])
    tab = AlphaGammaTable(K)
    q = np.linspace(0.0, 1.0, 200001)
    d_g2a = np.abs(tab.g2a(torch.from_numpy(q)).numpy() - np.clip(g2a(q), 0, 1)).max()
    d_a2g = np.abs(tab.a2g(torch.from_numpy(q)).numpy() - np.clip(a2g(q), 0, 1)).max()
    assert 0 < d_g2a <= g2a_bound and 0 < d_a2g <= a2g_bound
