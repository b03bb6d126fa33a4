"""Conformance + learnability suite, parametrised over every registered method.

A new method registered in bench.registry is tested here automatically. A method class may
declare ``conformance_variants`` (list of option dicts, default ``[{}]``) to test several
variants, and ``learnability_options`` (dict of method options) for the sort-8 learnability run;
the training budget of that run is the same for every method (``LEARNABILITY_TRAIN``).
"""

from __future__ import annotations

import time

import pytest
import torch
from helpers import make_model
from lightning.pytorch.callbacks import Callback

from bench import registry
from bench.config import TaskConfig, TrainConfig, build
from bench.data.toy import SortTask, sort_data
from bench.method import Batch, antithetic_times
from bench.train import fit

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
    positions unchanged, exactly nfe_for(nfe) calls through Method.call, and the same samples for
    the same generator seed."""
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
            assert method.nfe_counter == method.nfe_for(nfe, pmask), (
                f"{decoding}: wrong number of backbone calls"
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


#: the same training budget for every method (no per-method overrides: a fair, equal test).
#: EMA 0.99 smooths the noisy curves of the uniform-state / continuous methods (Duo and FLM hover
#: at 0.85-0.9 without it); early stopping at the target keeps fast learners at a few hundred steps.
LEARNABILITY_TRAIN = {
    "steps": 3000,
    "batch_size": 256,
    "lr": 1e-3,
    "warmup_steps": 50,
    "ema": 0.99,
    "checkpoint_every": 10_000,
    "threads": 2,
}


class _EvalStop(Callback):
    """Evaluate exact match every ``every`` steps; stop at >= target."""

    def __init__(self, method, every, target, nfe=8):
        self.method, self.every, self.target, self.nfe = method, every, target, nfe
        self.best, self.history = 0.0, []
        self.valid = sort_data(256, seed=12345)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step % self.every:
            return
        net = pl_module.forward_backbone()
        net.eval()
        g = torch.Generator().manual_seed(0)
        decoding = self.method.decodings[0]
        out = self.method.sample(
            net,
            self.valid.x,
            self.valid.clean_mask,
            nfe=self.nfe,
            temperature=1.0,
            decoding=decoding,
            generator=g,
        )
        net.train()
        acc = float((out == self.valid.x).all(-1).float().mean())
        self.history.append((step, acc))
        self.best = max(self.best, acc)
        if acc >= self.target:
            trainer.should_stop = True


@pytest.mark.slow
@pytest.mark.parametrize("name,variant", CASES)
def test_learns_sort8(name, variant, tmp_path):
    """Trained by the shared trainer with one budget for every method (LEARNABILITY_TRAIN: at
    most 3000 steps, EMA 0.99, evaluated on the EMA weights every 100 steps), every method must
    reach >= 90 % exact match on sorting 8 digits."""
    cls = registry.METHODS[name]
    extra = getattr(cls, "learnability_options", {})
    method, backbone = make_model(name, {**variant, **extra})
    task = SortTask(build(TaskConfig, {"name": "sort", "n_train": 50_000, "seed": 0}))
    cfg = build(TrainConfig, LEARNABILITY_TRAIN)
    stop = _EvalStop(method, every=100, target=0.9)
    t0 = time.time()
    fit(
        method,
        backbone,
        task.train_data(["sort8"]),
        cfg,
        tmp_path,
        progress=False,
        callbacks=[stop],
    )
    assert stop.best >= 0.9, (
        f"{name} {variant}: best exact match {stop.best:.3f} after {time.time() - t0:.0f}s; "
        f"curve {stop.history}"
    )
