"""Conformance + learnability suite, parametrised over every registered method.

A new method registered in bench.registry is tested here automatically. A method class may
declare ``conformance_variants`` (list of option dicts, default ``[{}]``) to test several
variants, and ``learnability_options`` (dict of method options) for the sort-8 learnability run;
the training budget of that run is the same for every method (``helpers.LEARNABILITY_TRAIN``).
"""

from __future__ import annotations

import pytest
import torch
from helpers import LEARN_TARGET, make_model

from bench import registry
from bench.data.toy import sort_data
from bench.method import Batch, antithetic_times

CASES = [
    pytest.param(name, variant, id=f"{name}-{i}" if i else name)
    for name, cls in sorted(registry.METHODS.items())
    for i, variant in enumerate(getattr(cls, "conformance_variants", [{}]))
]


@pytest.fixture(scope="module")
def data():
    return sort_data(32, seed=3)


@pytest.mark.parametrize("name,variant", CASES)
def test_loss_finite_and_differentiable(name, variant, data):
    """A finite scalar loss, one per-sample value per sequence, and finite, non-zero gradients
    reaching the backbone."""
    method, backbone = make_model(name, variant)
    b = Batch(data.x, data.clean_mask, data.loss_mask)
    t = antithetic_times(len(b)) if method.uses_time else None
    out = method.loss(backbone, b, t)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    assert out.per_sample.shape == (len(b),)
    out.loss.backward()
    grads = [p.grad for p in backbone.parameters() if p.grad is not None]
    assert grads, "no parameter received a gradient"
    assert all(torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0


@pytest.mark.parametrize("name,variant", CASES)
def test_loss_is_zero_without_counted_positions(name, variant, data):
    """With an all-false loss_mask the loss is exactly 0: nothing outside the mask is scored."""
    method, backbone = make_model(name, variant)
    b = Batch(data.x, data.clean_mask, torch.zeros_like(data.loss_mask))
    t = antithetic_times(len(b)) if method.uses_time else None
    assert float(method.loss(backbone, b, t).loss.detach()) == 0.0


@pytest.mark.parametrize("name,variant", CASES)
def test_sample_contract(name, variant, data):
    """For every decoding and nfe in {1, 5}: (n, L) long ids inside the vocabulary, prompt
    positions unchanged, exactly nfe_for(nfe) calls through Method.call (at most, for a decoding
    in call_skipping), and the same samples for the same generator seed."""
    method, backbone = make_model(name, variant)
    backbone.eval()
    # perturb the zero-initialised head so samples depend on the weights
    with torch.no_grad():
        for p in backbone.parameters():
            p.add_(0.05 * torch.randn_like(p))
    prompt, pmask = data.x, data.clean_mask
    for decoding in method.decodings:
        for nfe in (1, 5):
            method.nfe_counter = 0
            g = torch.Generator().manual_seed(7)
            out = method.sample(
                backbone, prompt, pmask, nfe=nfe, temperature=1.0, decoding=decoding, generator=g
            )
            assert out.shape == prompt.shape and out.dtype == torch.long
            assert int(out.min()) >= 0 and int(out.max()) < method.vocab_size, (
                "ids outside the task vocabulary"
            )
            assert torch.equal(out[pmask], prompt[pmask]), "prompt positions changed"
            calls, want = method.nfe_counter, method.nfe_for(nfe, pmask)
            skipping = decoding in method.call_skipping  # a cache: at most nfe_for calls
            assert calls <= want if skipping else calls == want, (
                f"{decoding}: wrong number of backbone calls ({calls}, nfe_for {want})"
            )
            g2 = torch.Generator().manual_seed(7)
            again = method.sample(
                backbone, prompt, pmask, nfe=nfe, temperature=1.0, decoding=decoding, generator=g2
            )
            assert torch.equal(out, again), f"{decoding}: same seed gave different samples"


@pytest.mark.parametrize("name,variant", CASES)
def test_temperature_changes_samples(name, variant, data):
    """T = 0.05 and T = 100 give different samples for the first decoding that is not
    temperature-free (skipped when every decoding is)."""
    method, backbone = make_model(name, variant)
    backbone.eval()
    with torch.no_grad():
        for p in backbone.parameters():
            p.add_(0.05 * torch.randn_like(p))
    decoding = next((d for d in method.decodings if d not in method.temperature_free), None)
    if decoding is None:
        pytest.skip("all decodings are temperature-free")
    outs = []
    for T in (0.05, 100.0):
        g = torch.Generator().manual_seed(1)
        outs.append(
            method.sample(
                backbone,
                data.x,
                data.clean_mask,
                nfe=4,
                temperature=T,
                decoding=decoding,
                generator=g,
            )
        )
    assert not torch.equal(outs[0], outs[1]), "temperature has no effect on sampling"


def _learn_case(name, variant, i):
    options = {**variant, **getattr(registry.METHODS[name], "learnability_options", {})}
    return pytest.param(
        name,
        variant,
        id=f"{name}-{i}" if i else name,
        marks=pytest.mark.learns_sort8(name, options),
    )


LEARN_CASES = [
    _learn_case(name, variant, i)
    for name, cls in sorted(registry.METHODS.items())
    for i, variant in enumerate(getattr(cls, "conformance_variants", [{}]))
]


@pytest.mark.slow
@pytest.mark.parametrize("name,variant", LEARN_CASES)
def test_learns_sort8(name, variant, learned_sort8):
    """Trained by the shared trainer with one budget for every method (LEARNABILITY_TRAIN: at
    most 3000 steps, EMA 0.99, evaluated on the EMA weights every 100 steps), every method must
    reach >= 90 % exact match on sorting 8 digits. The model is trained once per session, in the
    background (tests/conftest.py), and shared with the other tests that assert on it."""
    run = learned_sort8
    assert run.best >= LEARN_TARGET, (
        f"{name} {variant}: best exact match {run.best:.3f} after {run.seconds:.0f}s; "
        f"curve {run.history}"
    )
