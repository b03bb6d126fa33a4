"""baselines/duo_loss.py: the blockwise fused NELBO (Duo's default) against the reference chain
(``udlm_nelbo`` on ``log_softmax``, the test oracle): values and gradients on random inputs, in
float64 (to 1e-12) and float32 (no further from the float64 oracle than the float32 reference
chain is), at masked and unmasked positions (x_t = x_0 and x_t != x_0), at the edge times
t = 1e-3 and t = 1, for every block size; and the ``nelbo`` option of the method."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import make_model

from baselines.duo_loss import block_rows, udlm_nelbo_fused, udlm_nelbo_reference
from bench.config import ConfigError
from bench.method import Batch, antithetic_times
from bench.numerics import log_linear_alpha

EPS = 1e-3


def _problem(B=3, L=10, V=97, dtype=torch.float64, seed=0, scale=4.0):
    """Random logits and ids; half the positions have x_t = x_0; times cover both edges."""
    g = torch.Generator().manual_seed(seed)
    logits = (scale * torch.randn(B, L, V, generator=g)).to(dtype)
    logits[0, 0] = 0.0  # a uniform row
    logits[0, 1, 5] = 40.0  # a nearly one-hot row
    x0 = torch.randint(0, V, (B, L), generator=g)
    x0[0, 1] = 5
    noise = torch.randint(0, V, (B, L), generator=g)
    x_t = torch.where(torch.rand(B, L, generator=g) < 0.5, x0, noise)
    x_t[0, :2] = x0[0, :2]  # equal at the uniform and the confident row
    x_t[1, :2] = (x0[1, :2] + 1) % V  # and two different ones
    t = torch.linspace(EPS, 1.0, B, dtype=dtype)  # t = 1e-3 (alpha ~ 1) ... t = 1 (alpha = eps)
    alpha = log_linear_alpha(t, EPS)[:, None]
    dalpha = torch.full_like(alpha, -(1 - EPS))
    w = torch.randn(B, L, generator=g).to(dtype)  # a random cotangent: every position counts
    return logits, x_t, x0, alpha, dalpha, w, V


def _value_and_grad(fn, logits, *args, w, **kw):
    z = logits.clone().requires_grad_()
    out = fn(z, *args, **kw)
    (out * w).sum().backward()
    return out.detach(), z.grad


@pytest.mark.parametrize("low_var", [False, True])
@pytest.mark.parametrize("rows", [None, 1, 4, 30])
def test_fused_equals_the_reference_chain_in_float64(low_var, rows):
    logits, x_t, x0, a, da, w, V = _problem()
    ref = _value_and_grad(udlm_nelbo_reference, logits, x_t, x0, a, da, V, w=w, low_var=low_var)
    new = _value_and_grad(
        udlm_nelbo_fused, logits, x_t, x0, a, da, V, w=w, low_var=low_var, rows=rows
    )
    assert torch.isfinite(ref[0]).all() and ref[0].abs().max() > 1.0
    for r, n in zip(ref, new):
        torch.testing.assert_close(n, r, rtol=1e-12, atol=1e-12 * r.abs().max().item())
    # both kinds of positions and both edge times carry a non-trivial loss and gradient
    eq = x_t == x0
    assert ref[0][eq].abs().min() > 0 and ref[0][~eq].abs().min() > 0
    assert (ref[1][0].abs().sum(-1) > 0).all() and (ref[1][-1].abs().sum(-1) > 0).all()


# scale 60: p_theta one-hot to float32 precision (1 - b / xbar in place of k p / xbar fails here)
@pytest.mark.parametrize("V,scale", [(5003, 4.0), (211, 60.0)])
def test_fused_float32_is_as_close_to_float64_as_the_reference_chain(V, scale):
    logits, x_t, x0, a, da, w, V = _problem(B=4, L=16, V=V, seed=3, scale=scale)
    exact = _value_and_grad(udlm_nelbo_reference, logits, x_t, x0, a, da, V, w=w)
    f32 = [t.float() for t in (logits, a, da, w)]
    ref = _value_and_grad(udlm_nelbo_reference, f32[0], x_t, x0, f32[1], f32[2], V, w=f32[3])
    new = _value_and_grad(udlm_nelbo_fused, f32[0], x_t, x0, f32[1], f32[2], V, w=f32[3])
    assert new[0].dtype == new[1].dtype == torch.float32
    for e, r, n in zip(exact, ref, new):
        scale = e.abs().max().item()
        err_ref = (r.double() - e).abs().max().item()
        err_new = (n.double() - e).abs().max().item()
        assert err_new <= 2 * err_ref + 1e-7 * scale, (err_new, err_ref, scale)
        assert err_new < 1e-4 * scale


def test_fused_gradcheck():
    logits, x_t, x0, a, da, _, V = _problem(B=2, L=3, V=7, seed=1, scale=2.0)
    for rows in (1, 4):
        assert torch.autograd.gradcheck(
            lambda z, rows=rows: udlm_nelbo_fused(z, x_t, x0, a, da, V, rows=rows),
            (logits.clone().requires_grad_(),),
        )


def test_per_position_alpha_and_any_batch_shape():
    logits, x_t, x0, a, da, w, V = _problem(B=2, L=5, V=11, seed=2)
    a_full = a.expand(2, 5) * torch.linspace(0.5, 1.0, 5, dtype=a.dtype)  # (B, L) alpha_t
    ref = _value_and_grad(udlm_nelbo_reference, logits, x_t, x0, a_full, da, V, w=w)
    new = _value_and_grad(udlm_nelbo_fused, logits, x_t, x0, a_full, da, V, w=w)
    for r, n in zip(ref, new):
        torch.testing.assert_close(n, r, rtol=1e-12, atol=1e-12 * r.abs().max().item())


def test_block_rows():
    cpu = torch.device("cpu")
    assert block_rows(1000, 49_153, torch.float32, cpu) == (1 << 20) // (49_153 * 4)
    assert block_rows(1000, 49_153, torch.float64, cpu) == (1 << 20) // (49_153 * 8)
    assert block_rows(3, 12, torch.float32, cpu) == 3  # never more than the rows
    assert block_rows(10, 10**7, torch.float64, cpu) == 1  # never fewer than one


# --------------------------------------------------------------------------- the method option


def _batch(V, L, B=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (B, L), generator=g)
    clean = torch.zeros(B, L, dtype=torch.bool)
    clean[:, : L // 4] = True  # given positions: never noised, out of the loss
    return Batch(x, clean, ~clean)


def _loss_and_grads(m, bb, batch, t, seen):
    bb.zero_grad()
    torch.manual_seed(5)
    out = m.loss(bb, batch, t)
    out.loss.backward()
    logits = seen[-1][0]
    return out, logits.detach(), logits.grad, [p.grad.clone() for p in bb.parameters()]


@pytest.mark.parametrize(
    "opts", [{}, {"loss_type": "low_var"}, {"curriculum_end": 1000, "curriculum_start": 10}]
)
def test_method_nelbo_option_fused_equals_reference(opts, monkeypatch):
    """Duo.loss with ``nelbo: fused`` (default) and ``reference``: the same loss, and gradients
    w.r.t. the logits no further from a float64 evaluation of the reference chain than the
    float32 reference chain's own (at t ~ 0 the NELBO's 1 / (1 - alpha_t) weight amplifies
    float32 rounding in both), hence the same backbone gradients."""
    from baselines import duo_loss

    V, L = 211, 16
    m, bb = make_model("duo", opts, vocab=V, seq_len=L)
    for p in bb.parameters():  # leave the zero-initialised head: non-trivial logits
        torch.nn.init.normal_(p, std=0.3) if p.dim() > 1 else None
    seen = []
    for name, fn in list(duo_loss.NELBO.items()):

        def spy(logits, *args, fn=fn, **kw):
            logits.retain_grad()
            seen.append((logits, args, kw))
            return fn(logits, *args, **kw)

        monkeypatch.setitem(duo_loss.NELBO, name, spy)
    batch = _batch(V, L)
    t = antithetic_times(6, generator=torch.Generator().manual_seed(2))
    t[0], t[-1] = EPS, 1.0  # the edge times
    assert m.opts.nelbo == "fused"  # the default
    new, logits, g_new, p_new = _loss_and_grads(m, bb, batch, t, seen)
    m.opts = dataclasses.replace(m.opts, nelbo="reference")
    old, logits_old, g_old, p_old = _loss_and_grads(m, bb, batch, t, seen)
    assert torch.equal(logits, logits_old)  # same noise, same network input
    assert new.loss.item() > 0
    torch.testing.assert_close(new.loss, old.loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(new.per_sample, old.per_sample, rtol=1e-5, atol=1e-6)
    # the float64 oracle of the logits' gradient: the same reduction in float64
    z = logits.double().requires_grad_()
    _, args, kw = seen[-1]
    args = [a.double() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
    per_token = udlm_nelbo_reference(z, *args, **kw) * ~batch.clean_mask
    m_ = batch.loss_mask.double()
    ((per_token * m_).sum() / m_.sum()).backward()
    err_new = (g_new.double() - z.grad).abs().max().item()
    err_old = (g_old.double() - z.grad).abs().max().item()
    assert err_new <= 2 * err_old + 1e-6 * z.grad.abs().max().item(), (err_new, err_old)
    assert g_new[batch.clean_mask].abs().max() == 0  # given positions: out of the loss
    rel = max((a - b).norm() / b.norm() for a, b in zip(p_new, p_old) if b.norm() > 0)
    assert rel < 1e-3, rel  # the backbone gradients follow (same backward from the logits)


def test_nelbo_option_is_declared_omit_default_and_validated():
    from helpers import make_method

    from baselines.duo import DuoOptions

    f = {f.name: f for f in dataclasses.fields(DuoOptions)}["nelbo"]
    assert f.default == "fused" and f.metadata.get("omit_default") is True
    assert make_method("duo", {"nelbo": "reference"}).opts.nelbo == "reference"
    with pytest.raises(ConfigError, match="duo.options.nelbo: must be one of"):
        make_method("duo", {"nelbo": "compiled"})
