"""The training losses' fused forms give the losses and gradients of the unfused forms they
replaced, on a fixed batch: cross-entropy instead of log_softmax + gather and MDLM without its
carry-over buffers bit-identical; FLM's and CANDI's noised input taken without the (B, L, V)
one-hot / mixture and over the noised rows only, within float rounding (the same noise drawn).
Duo's fused NELBO: tests/baselines/test_duo_loss.py."""

import copy
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


def _close(new, old, rtol):
    """Loss and every gradient equal up to ``rtol`` of the largest magnitude of each."""
    (ln, gn), (lo, go) = new, old
    assert len(gn) == len(go) > 0 and lo.item() > 0
    assert (ln - lo).abs().item() <= rtol * lo.abs().item()
    for a, b in zip(gn, go):
        assert (a - b).abs().max().item() <= rtol * b.abs().max().item()


def _old_flm_loss(m):
    """FLM.loss before the fused input: the (B, L, V) one-hot, mixture and ``where``, z @ E."""
    from bench.method import token_mean

    def loss(backbone, batch, t):
        s = 1.0 - t
        gamma = m.table.a2g(s).to(torch.float32)[:, None, None]
        onehot = F.one_hot(batch.x, m.vocab_size).to(torch.float32)
        z = (1 - gamma) * torch.randn_like(onehot) + gamma * onehot
        z = torch.where(batch.clean_mask[..., None], onehot, z)
        logits = m._logits(backbone, z, s)
        ce = F.cross_entropy(logits.flatten(0, 1), batch.x.flatten(), reduction="none")
        return token_mean(ce.view_as(batch.x) * ~batch.clean_mask, batch.loss_mask)

    return loss


def _old_candi_input(m):
    """CANDI.training_input before the row selection: eps @ Ehat over every row."""

    def training_input(backbone, x0, revealed, sigma_c):
        e_hat, m_hat = m.embeddings(backbone)
        eps = torch.randn(*x0.shape, m.vocab_size, device=x0.device, dtype=e_hat.dtype)
        cont = e_hat[x0] + sigma_c[:, None, None].to(e_hat.dtype) * (eps @ e_hat)
        return m.net_input(e_hat, m_hat, x0, cont, revealed, sigma_c)

    return training_input


def _mixed_batch(name, opts, givens=True):
    """A batch with a row without givens and one all given; ``givens=False``: no givens at all
    (the product then runs on every row, the path CUDA always takes)."""
    m, bb, batch = _setup(name, opts)
    batch.clean_mask[1] = False
    batch.clean_mask[2] = True
    if not givens:
        batch.clean_mask[:] = False
    batch.loss_mask = ~batch.clean_mask
    return m, bb, batch


CASES = [
    ("flm", {}, "loss"),
    ("flm", {"output_cap": 30.0}, "loss"),
    ("candi", {}, "training_input"),
    ("candi", {"pure_gaussian": True}, "training_input"),
]


@pytest.mark.parametrize("givens", [True, False])
@pytest.mark.parametrize("name,opts,patch", CASES)
def test_fused_noised_input_trains_like_the_dense_form(name, opts, patch, givens):
    """End to end: the same loss and gradients (float32 through the network: the input's last
    bits move the backbone gradients by up to ~2e-4 of their largest; the input itself is pinned
    in float64 terms below) and the same random draws."""
    m, bb, batch = _mixed_batch(name, opts, givens)
    new = _loss_and_grads(m, bb, batch)
    after_new = torch.rand(3)  # the generator's state after the loss: the same draws
    setattr(m, patch, _old_flm_loss(m) if name == "flm" else _old_candi_input(m))
    old = _loss_and_grads(m, bb, batch)
    assert torch.equal(after_new, torch.rand(3))
    _close(new, old, 1e-3)


@pytest.mark.parametrize("name,opts,patch", CASES)
def test_fused_noised_input_is_as_exact_as_the_dense_form(name, opts, patch):
    """The network input and its gradient w.r.t. the embedding table, fused and dense, against
    the float64 evaluation of the dense form: the fused error is at most the dense one's."""
    m, bb, batch = _mixed_batch(name, opts)
    w = torch.randn(*batch.x.shape, bb.embed.weight.shape[-1], generator=torch.Generator())
    table = bb.embed.weight

    def run(fn_name):
        bb.zero_grad()
        torch.manual_seed(3)
        if name == "flm":
            gamma = torch.linspace(0.1, 0.9, batch.x.shape[0])
            torch.manual_seed(11)
            if fn_name == "new":
                h = m.noisy_input(bb, batch.x, batch.clean_mask, gamma)
            else:
                onehot = F.one_hot(batch.x, m.vocab_size).float()
                g = gamma[:, None, None]
                z = (1 - g) * torch.randn_like(onehot) + g * onehot
                z = torch.where(batch.clean_mask[..., None], onehot, z)
                h = z @ table.float()
        else:
            revealed, sigma = m.corrupt(batch.x, batch.clean_mask, torch.linspace(0.2, 1.0, 4))
            torch.manual_seed(11)
            fn = m.training_input if fn_name == "new" else _old_candi_input(m)
            h = fn(bb, batch.x, revealed, sigma)
        (h * w).sum().backward()
        return h.detach(), table.grad.clone()

    new, old = run("new"), run("old")
    # the float64 oracle: the dense form in float64 on the same noise and weights
    bb64 = copy.deepcopy(bb).double()
    m64 = copy.deepcopy(m).double()
    if name == "flm":
        gamma = torch.linspace(0.1, 0.9, batch.x.shape[0]).double()
        torch.manual_seed(11)
        eps = torch.randn(*batch.x.shape, m.vocab_size).double()
        onehot = F.one_hot(batch.x, m.vocab_size).double()
        g = gamma[:, None, None]
        z = torch.where(batch.clean_mask[..., None], onehot, (1 - g) * eps + g * onehot)
        h64 = z @ bb64.embed.weight
    else:
        torch.manual_seed(3)
        revealed, sigma = m.corrupt(batch.x, batch.clean_mask, torch.linspace(0.2, 1.0, 4))
        torch.manual_seed(11)
        eps = torch.randn(*batch.x.shape, m.vocab_size).double()
        e_hat, m_hat = m64.embeddings(bb64)
        cont = e_hat[batch.x] + sigma.double()[:, None, None] * (eps @ e_hat)
        h64 = m64.net_input(e_hat, m_hat, batch.x, cont, revealed, sigma)
    (h64 * w.double()).sum().backward()
    for i, exact in enumerate((h64.detach(), bb64.embed.weight.grad)):
        err_new = (new[i].double() - exact).abs().max().item()
        err_old = (old[i].double() - exact).abs().max().item()
        assert err_new <= 2 * err_old + 1e-7 * exact.abs().max().item(), (i, err_new, err_old)


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
