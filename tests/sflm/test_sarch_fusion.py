"""The S-arch's speed paths: the in-place foreach re-projection of its matrices is
bit-identical to the per-matrix ``copy_(justnorm(w))`` it replaced, and the folded logit
scale (s~_z on the head's rows instead of the logits) gives the logits and gradients of the
logit-side scale up to float rounding."""

import torch

from bench.backbones.dit import resolve_size
from bench.config import BackboneConfig
from sflm.sarch import SArch, justnorm

SIZE = resolve_size(BackboneConfig(size="cpu-mini"))  # d = 64, 2 blocks


def _reference_renormalize(net: SArch, embeddings: bool) -> None:
    """The per-matrix re-projection as it was before the foreach form."""
    with torch.no_grad():
        if embeddings:
            net.embed.weight.copy_(justnorm(net.embed.weight))
        net.lm_head.weight.copy_(justnorm(net.lm_head.weight))
        for blk in net.blocks:
            for lin in (blk.query, blk.key, blk.value, blk.c_fc):
                lin.weight.copy_(justnorm(lin.weight))
            for lin in (blk.att_out, blk.mlp_out):
                lin.weight.copy_(justnorm(lin.weight.T).T)


def _perturbed(seed: int = 0) -> SArch:
    torch.manual_seed(seed)
    net = SArch(23, SIZE)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn_like(p))  # off the sphere, as after an optimiser step
    return net


def test_foreach_renormalize_is_bitwise_the_per_matrix_one():
    for embeddings in (False, True):
        a, b = _perturbed(), _perturbed()
        a.renormalize_weights(embeddings=embeddings)
        _reference_renormalize(b, embeddings)
        for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(pa, pb), name
        rows, cols = a.sphere_matrices(embeddings)
        assert len(rows) + len(cols) == 6 * len(a.blocks) + 1 + embeddings
        for w in rows:
            assert torch.allclose(w.norm(dim=-1), torch.ones(w.shape[0]), atol=1e-5)
        for w in cols:
            assert torch.allclose(w.norm(dim=0), torch.ones(w.shape[1]), atol=1e-5)
    # the table is left alone without embeddings=True
    a = _perturbed()
    before = a.embed.weight.clone()
    a.renormalize_weights()
    assert torch.equal(a.embed.weight, before)


def test_folded_logit_scale_matches_the_logit_side_scale():
    assert SArch.fold_logit_scale  # default: the folded scale (the logit-side one selectable)
    net = _perturbed(1)
    z = justnorm(torch.randn(3, 7, 64, generator=torch.Generator().manual_seed(2)))
    sigma = torch.rand(3, generator=torch.Generator().manual_seed(3))
    target = torch.randint(0, 23, (3, 7), generator=torch.Generator().manual_seed(4))
    out = {}
    for fold in (False, True):
        net.fold_logit_scale = fold
        net.zero_grad()
        logits = net(z, sigma)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
        loss.backward()
        grads = [None if p.grad is None else p.grad.clone() for p in net.parameters()]
        out[fold] = (logits.detach(), grads)
    (l0, g0), (l1, g1) = out[False], out[True]
    assert torch.allclose(l0, l1, rtol=1e-5, atol=1e-5)
    for (name, _), a, b in zip(net.named_parameters(), g0, g1):
        if name == "embed.weight":  # latents in, the table is not used
            assert a is None and b is None
            continue
        # float rounding relative to the gradient's scale (measured <= 6e-7: elementwise
        # tolerances fail on some CPUs where tiny entries of a large tensor differ by 1e-6)
        assert (a - b).abs().max() <= 1e-5 * b.abs().max(), name
    # the scale matters: a wrong fold (e.g. on the columns) would fail the check above
    assert float(net.s_z.grad.abs().max()) > 0
