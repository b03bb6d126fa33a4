"""The training losses' fused forms (cross-entropy instead of log_softmax + gather, MDLM without
its carry-over buffers, Duo's NELBO through one autograd Function) give the losses and
gradients of the unfused forms they replaced, on a fixed batch: bit-identical for the cross-entropy
and MDLM forms (the defaults), within float rounding for Duo's opt-in fused NELBO."""

import types

import pytest
import torch
import torch.nn.functional as F

from bench import registry
from bench.config import BackboneConfig, build
from bench.method import Batch, antithetic_times

V, L, B = 37, 16, 4


def _setup(name, opts=None):
    cls = registry.METHODS[name]
    m = cls(build(cls.Options, opts or {}, where=name), V, L)
    torch.manual_seed(0)
    bb = m.build_backbone(BackboneConfig(size="cpu-mini"))
    for p in bb.parameters():  # leave the zero-initialised head: non-trivial logits
        torch.nn.init.normal_(p, std=0.3) if p.dim() > 1 else None
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, V, (B, L), generator=g)
    clean = torch.zeros(B, L, dtype=torch.bool)
    clean[:, : L // 4] = True
    return m, bb, Batch(x, clean, ~clean)


def _loss_and_grads(m, bb, batch):
    bb.zero_grad()
    torch.manual_seed(5)
    t = antithetic_times(B)
    loss = m.loss(bb, batch, t).loss
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in bb.parameters() if p.grad is not None]


def _unfused_ce(logits, target, reduction="none"):
    """The replaced form: -log_softmax(logits).gather(target)."""
    assert reduction == "none"
    return -torch.log_softmax(logits, -1).gather(-1, target[:, None]).squeeze(-1)


def _compare(new, old, tol):
    (ln, gn), (lo, go) = new, old
    assert len(gn) == len(go) > 0
    assert (ln - lo).abs().item() <= tol
    assert max((a - b).abs().max().item() for a, b in zip(gn, go)) <= tol


@pytest.mark.parametrize(
    "name,module", [("candi", "baselines.candi"), ("sflm", "sflm.method"), ("flm", "baselines.flm")]
)
def test_cross_entropy_equals_log_softmax_gather(name, module, monkeypatch):
    import importlib

    m, bb, batch = _setup(name)
    new = _loss_and_grads(m, bb, batch)
    mod = importlib.import_module(module)
    monkeypatch.setattr(
        mod, "F", types.SimpleNamespace(**{**vars(F), "cross_entropy": _unfused_ce})
    )
    old = _loss_and_grads(m, bb, batch)
    _compare(new, old, 0.0)  # bit-identical (same log_softmax kernel)


def test_mdlm_loss_equals_carry_over_log_probs():
    m, bb, batch = _setup("mdlm")
    new = _loss_and_grads(m, bb, batch)

    def old_loss(backbone, batch, t):  # the pre-fusion MDLM.loss, verbatim in substance
        alpha_t = m.alpha(t)
        u = torch.rand(batch.x.shape)
        masked = (u < (1 - alpha_t)[:, None]) & ~batch.clean_mask
        x_t = torch.where(masked, torch.full_like(batch.x, m.mask_id), batch.x)
        logp = m.log_probs(backbone, x_t, alpha_t)
        logp_x0 = logp.gather(-1, batch.x[..., None]).squeeze(-1)
        weight = (1 - m.opts.eps) / (1 - alpha_t)
        from bench.method import token_mean

        return token_mean(-logp_x0 * weight[:, None] * masked, batch.loss_mask)

    m.loss = old_loss
    old = _loss_and_grads(m, bb, batch)
    assert new[0].item() > 0
    _compare(new, old, 0.0)  # bit-identical


@pytest.mark.parametrize("loss_type", ["elbo", "low_var"])
def test_duo_fused_nelbo_matches_udlm_nelbo(loss_type, monkeypatch):
    import baselines.duo as duo

    m, bb, batch = _setup("duo", {"loss_type": loss_type})
    assert not duo.Duo.fused_nelbo  # default: the reference chain (bit-identical results)
    old = _loss_and_grads(m, bb, batch)
    m.fused_nelbo = True
    new = _loss_and_grads(m, bb, batch)
    assert new[0].item() > 0
    _compare(new, old, 1e-5)


def test_duo_fused_terms_gradcheck():
    from baselines.duo import udlm_nelbo_from_logits

    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(2, 5, 11, generator=g, dtype=torch.float64)).requires_grad_()
    x0 = torch.randint(0, 11, (2, 5), generator=g)
    xt = torch.where(
        torch.rand(2, 5, generator=g) < 0.5, x0, torch.randint(0, 11, (2, 5), generator=g)
    )
    a = torch.rand(2, 1, generator=g, dtype=torch.float64) * 0.9 + 0.05
    assert torch.autograd.gradcheck(
        lambda z: udlm_nelbo_from_logits(z, xt, x0, a, torch.full_like(a, -0.999), 11), (logits,)
    )


@pytest.mark.parametrize("decoding", ["greedy", "sample"])
def test_ar_kv_cache_same_tokens_and_nfe_as_recompute(decoding):
    m, bb, _ = _setup("ar")
    bb.eval()
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, V, (3, 24), generator=g)
    pmask = torch.zeros(3, 24, dtype=torch.bool)
    pmask[:, :5] = True
    pmask[0, 9] = True  # a given inside the generated region (teacher-forced)
    out = {}
    for cached in (True, False):
        m.kv_cache, m.nfe_counter = cached, 0
        out[cached] = (
            m.sample(
                bb, prompt, pmask, decoding=decoding, generator=torch.Generator().manual_seed(7)
            ),
            m.nfe_counter,
        )
    assert out[True][1] == out[False][1] == 24 - 5
    assert torch.equal(out[True][0], out[False][0])
    assert len(set(out[True][0][:, 5:].flatten().tolist())) > 3  # not a constant sequence
