"""Duo's training objective, the closed-form continuous-time UDLM NELBO (Duo eq. 9; reference
s-sahoo/duo `algo.py::DUO_BASE.nll_per_token`, FrankCCCCC/s-flm @ 18d586f the same), in two
implementations of one formula:

- ``reference``: :func:`udlm_nelbo` on ``log_softmax(logits)``, term by term as the reference
  code writes it: a chain of elementwise passes over (B, L, V) tensors, each a full read and
  write of the largest tensor of the step, and autograd keeps ~6 of them for the backward. It
  is the test oracle (``Duo`` option ``nelbo: reference``).
- ``fused`` (the default): :func:`udlm_nelbo_fused`. The only (B, L, V) quantities of the
  formula are S = sum_v log xbar_theta_v and the two gathered probabilities p_theta(x_t),
  p_theta(x_0), with xbar_theta = V alpha_t p_theta + (1 - alpha_t); :class:`_UDLMBlockwise`
  computes them, and their gradient, a few rows at a time (softmax, xbar, log, sum on a (rows, V)
  block that stays in the CPU cache), keeps no (B, L, V) tensor for the backward (it recomputes
  the block's softmax from the logits) and writes the gradient once. The per-position algebra
  on top is :func:`udlm_nelbo`'s, one shared function. Equal to the reference up to float rounding,
  gradients included (tests/baselines/test_duo_loss.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

#: bytes of one (rows, V) block of the fused NELBO on CPU: a block and its softmax stay in the
#: L2 cache, so each elementwise pass runs from the cache instead of memory (4-8 rows at
#: |V| ~ 50k measured fastest, 1 row and 32 rows ~10 % slower; docs/measurements/
#: cpu_loss_fusion.md); on CUDA blocks of up to CUDA_BLOCK_BYTES (the whole batch, mostly)
CPU_BLOCK_BYTES = 1 << 20
#: upper bound on one block's bytes on CUDA (the fused path's only workspace besides the gradient)
CUDA_BLOCK_BYTES = 1 << 30


def udlm_nelbo(
    log_p: Tensor,
    x_t: Tensor,
    x0: Tensor,
    alpha_t: Tensor,
    dalpha_t: Tensor,
    vocab_size: int,
    low_var: bool = False,
) -> Tensor:
    """Per-token continuous-time UDLM NELBO integrand (Duo eq. 9 / `DUO_BASE.nll_per_token`).

    Args:
        log_p: (B, L, V) log p_theta(x_0 | x_t) ("mean" parameterisation).
        x_t, x0: (B, L) noisy and clean ids.
        alpha_t, dalpha_t: broadcastable to (B, L): alpha_t and d alpha_t / dt (< 0).
        low_var: drop term1 (reference ``loss_type=low_var``; not an ELBO any more).
    Returns (B, L): the integrand; E_{t ~ U[0,1], x_t}[it] is the diffusion part of the NELBO.
    """
    V = vocab_size
    a = alpha_t
    xbar_theta = V * a[..., None] * log_p.exp() + (
        1 - a[..., None]
    )  # V alpha_t x_theta + (1 - alpha_t)
    xbar_theta_xt = xbar_theta.gather(-1, x_t[..., None]).squeeze(-1)
    xbar_theta_x0 = xbar_theta.gather(-1, x0[..., None]).squeeze(-1)
    s = torch.log(xbar_theta).sum(-1)
    return _per_position(s, xbar_theta_xt, xbar_theta_x0, x_t, x0, a, dalpha_t, V, low_var)


def _per_position(
    s: Tensor,
    xbar_theta_xt: Tensor,
    xbar_theta_x0: Tensor,
    x_t: Tensor,
    x0: Tensor,
    a: Tensor,
    dalpha_t: Tensor,
    V: int,
    low_var: bool,
) -> Tensor:
    """The per-position algebra of Duo eq. 9 (`DUO_BASE.nll_per_token`) on the only (B, L, V)
    quantities it needs: ``s`` = sum_v log xbar_theta_v and xbar_theta at x_t and at x_0."""
    eq = (x0 == x_t).to(s.dtype)
    neq = 1 - eq
    xbar_xt = (1 - a) + V * a * eq
    term1 = 0.0 if low_var else V * (1 / xbar_xt - 1 / xbar_theta_xt)
    c = (1 - a) / (V * a + 1 - a)
    offset = ((V - 1) * c * eq - neq / c) * torch.log(c)
    log_xbar_theta_xt = torch.log(xbar_theta_xt)
    term2 = (
        -(eq * c + neq) * (s - V * log_xbar_theta_xt)
        - V * a / (1 - a) * (torch.log(xbar_theta_x0) - log_xbar_theta_xt) * neq
        + offset
    )
    return dalpha_t / (V * a) * (term1 - term2)


def udlm_nelbo_reference(
    logits: Tensor,
    x_t: Tensor,
    x0: Tensor,
    alpha_t: Tensor,
    dalpha_t: Tensor,
    vocab_size: int,
    low_var: bool = False,
) -> Tensor:
    """The reference chain from the logits: :func:`udlm_nelbo` of ``log_softmax(logits)``."""
    return udlm_nelbo(
        torch.log_softmax(logits, -1), x_t, x0, alpha_t, dalpha_t, vocab_size, low_var=low_var
    )


def block_rows(n: int, vocab: int, dtype: torch.dtype, device: torch.device) -> int:
    """Rows of (., V) per block of :class:`_UDLMBlockwise`: ``CPU_BLOCK_BYTES`` of rows on CPU
    (at least one), the whole batch on CUDA up to ``CUDA_BLOCK_BYTES``."""
    row = vocab * torch.empty((), dtype=dtype).element_size()
    budget = CUDA_BLOCK_BYTES if device.type == "cuda" else CPU_BLOCK_BYTES
    return max(1, min(n, budget // row))


class _UDLMBlockwise(torch.autograd.Function):
    """(S, p_theta(x_t), p_theta(x_0)) from (N, V) logits, S = sum_v log xbar_v with
    xbar = k p + b, p = softmax(logits), k = V alpha_t, b = 1 - alpha_t (per row), a block of
    ``rows`` rows at a time in one reused (rows, V) buffer.

    Gradient w.r.t. logit u (r = k p / xbar):
    dS/dl_u = r_u - p_u sum_v r_v and dp_y/dl_u = p_y (delta_uy - p_u), so
    grad_u = g_S r_u - p_u (g_S sum_v r_v + g_t p_t + g_0 p_0) + g_t p_t [u = x_t]
    + g_0 p_0 [u = x_0]. The backward recomputes each block's softmax (the same kernel on the
    same input: the same p as the forward) and writes the gradient block in place."""

    @staticmethod
    def forward(ctx, logits: Tensor, x_t: Tensor, x0: Tensor, a: Tensor, rows: int):
        n, V = logits.shape
        k, b = (V * a)[:, None], (1 - a)[:, None]
        s = logits.new_empty(n)
        p_t, p_0 = logits.new_empty(n), logits.new_empty(n)
        buf = logits.new_empty(min(rows, n), V)
        with torch.autocast(logits.device.type, enabled=False):  # float32 / float64 as given
            for i in range(0, n, rows):
                j = min(n, i + rows)
                p = buf[: j - i]
                torch.softmax(logits[i:j], -1, out=p)
                torch.gather(p, -1, x_t[i:j, None], out=p_t[i:j, None])
                torch.gather(p, -1, x0[i:j, None], out=p_0[i:j, None])
                torch.addcmul(b[i:j], p, k[i:j], out=p)  # xbar = k p + b
                torch.sum(p.log_(), -1, out=s[i:j])
        ctx.save_for_backward(logits, x_t, x0, a, p_t, p_0)
        ctx.rows = rows
        return s, p_t, p_0

    @staticmethod
    def backward(ctx, g_s: Tensor, g_t: Tensor, g_0: Tensor):
        logits, x_t, x0, a, p_t, p_0 = ctx.saved_tensors
        n, V = logits.shape
        rows = ctx.rows
        k, b = (V * a)[:, None], (1 - a)[:, None]
        gt_pt, g0_p0 = g_t * p_t, g_0 * p_0
        grad = torch.empty_like(logits)
        buf = logits.new_empty(min(rows, n), V)
        with torch.autocast(logits.device.type, enabled=False):
            for i in range(0, n, rows):
                j = min(n, i + rows)
                p, r = buf[: j - i], grad[i:j]
                torch.softmax(logits[i:j], -1, out=p)
                torch.addcmul(b[i:j], p, k[i:j], out=r)  # xbar
                torch.div(p, r, out=r)  # r / k = p / xbar (not 1 - b / xbar: no cancellation)
                gsk = g_s[i:j, None] * k[i:j]
                coef = gsk.squeeze(-1) * r.sum(-1) + gt_pt[i:j] + g0_p0[i:j]
                r.mul_(gsk)
                torch.addcmul(r, p, coef[:, None], value=-1.0, out=r)  # g_S r - coef p
        grad.scatter_add_(-1, x_t[:, None], gt_pt[:, None])
        grad.scatter_add_(-1, x0[:, None], g0_p0[:, None])
        return grad, None, None, None, None


def udlm_nelbo_fused(
    logits: Tensor,
    x_t: Tensor,
    x0: Tensor,
    alpha_t: Tensor,
    dalpha_t: Tensor,
    vocab_size: int,
    low_var: bool = False,
    rows: int | None = None,
) -> Tensor:
    """:func:`udlm_nelbo_reference`, equal up to float rounding (values and gradients), with the
    (B, L, V) work in :class:`_UDLMBlockwise`. ``logits``: (B, L, V); alpha_t, dalpha_t: (B, 1)
    or (B, L); ``rows``: rows per block (None: :func:`block_rows`; the result does not depend
    on it beyond float rounding of the row sums)."""
    V = vocab_size
    shape = x_t.shape
    flat = logits.reshape(-1, logits.shape[-1])
    a = alpha_t.to(logits.dtype).expand(shape)
    if rows is None:
        rows = block_rows(flat.shape[0], flat.shape[1], flat.dtype, flat.device)
    s, p_t, p_0 = _UDLMBlockwise.apply(
        flat, x_t.reshape(-1), x0.reshape(-1), a.reshape(-1).contiguous(), int(rows)
    )
    s, p_t, p_0 = s.view(shape), p_t.view(shape), p_0.view(shape)
    # xbar_theta(y) = V alpha_t p_theta(y) + (1 - alpha_t) at the two gathered ids
    xbar_theta_xt = V * a * p_t + (1 - a)
    xbar_theta_x0 = V * a * p_0 + (1 - a)
    return _per_position(s, xbar_theta_xt, xbar_theta_x0, x_t, x0, a, dalpha_t, V, low_var)


#: ``Duo`` option ``nelbo`` -> implementation (same signature: logits first)
NELBO = {"fused": udlm_nelbo_fused, "reference": udlm_nelbo_reference}
