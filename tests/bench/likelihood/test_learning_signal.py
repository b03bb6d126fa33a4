"""The bound measures learning: AR (exact) and MDLM (NELBO) trained on sort-4 score its held-out
data well below their initialisation (log 10 per token: a zero-initialised head is uniform),
while the same models trained as long on targets that cannot be learned (random digits instead
of the sorted ones) do not get below it."""

from __future__ import annotations

import math

import pytest
import torch

from bench import registry
from bench.config import BackboneConfig, TaskConfig
from bench.data.toy import sort_data
from bench.likelihood.evaluate import evaluate
from bench.method import Batch

STEPS = 150


def _train(name: str, shuffled: bool):
    task = registry.make_task(TaskConfig(name="sort", n_train=512, options={"n_digits": 4}))
    torch.manual_seed(0)
    method = registry.make_method(name, {}, task)
    backbone = method.build_backbone(BackboneConfig(size="cpu-mini"))
    data = sort_data(512, 4, seed=1)
    x = data.x.clone()
    if shuffled:  # the targets: random digits, independent of the prompt
        x[:, 4:] = torch.randint(0, 10, (512, 4), generator=torch.Generator().manual_seed(2))
    opt = torch.optim.AdamW(backbone.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(3)
    for _ in range(STEPS):
        idx = torch.randint(0, 512, (64,), generator=g)
        batch = Batch(x[idx], data.clean_mask[idx], data.loss_mask[idx])
        t = torch.rand(64, generator=g) if method.uses_time else None
        loss = method.loss(backbone, batch, t).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    backbone.eval()
    held = sort_data(256, 4, seed=7)  # never trained on
    metrics, _ = evaluate(method, backbone, held, n_draws=16, batch_size=128, seed=0, device="cpu")
    by = {m.metric: m for m in metrics}
    return by["nll"].value, by["nll_mc_se"].value


@pytest.mark.parametrize("name", ["ar", "mdlm"])
def test_only_a_model_that_learned_gets_below_its_initialisation(name):
    learned, se_l = _train(name, shuffled=False)
    noise, se_n = _train(name, shuffled=True)
    uniform = math.log(10)
    assert learned < uniform - 0.3, (learned, uniform)
    # random targets: the best a model can do is the uniform distribution over digits
    assert noise > uniform - 0.05 - 4 * se_n, (noise, uniform, se_n)
    assert learned < noise - 0.25
