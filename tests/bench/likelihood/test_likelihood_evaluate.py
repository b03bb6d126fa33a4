"""bench.likelihood.evaluate with a fake method (its "bound": a function of the ids plus a
uniform draw per draw): nll pooled over tokens, ppl = exp(nll), bpd = nll / ln 2 with consistent
bootstrap intervals that cover the point estimate, the Monte-Carlo standard error, a result that
is a function of the seed, one record per sequence, and refusals (no bound, blocks too long)
before any work."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from bench.config import ConfigError
from bench.data.base import TaskData
from bench.likelihood.evaluate import evaluate, summarize
from bench.method import BOUND_ELBO, BOUND_EXACT, Method


class Fake(Method):
    name = "fake"
    bound_kind = BOUND_ELBO

    def __init__(self, seq_len=8, bound_kind=BOUND_ELBO):
        super().__init__(None, 10, seq_len)
        self.bound_kind = bound_kind
        self.calls = 0

    def build_backbone(self, cfg):
        return nn.Identity()

    def nll_bound(self, backbone, batch, *, n_draws, generator):
        self.calls += 1
        base = ((batch.x.double() + 1) * 0.1 * batch.loss_mask).sum(-1)
        if self.bound_kind == BOUND_EXACT:
            return base[None]
        noise = torch.rand((n_draws, len(batch)), generator=generator, dtype=torch.float64)
        return base[None] + noise


def blocks(n=24, L=8, seed=0) -> TaskData:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 10, (n, L), generator=g)
    clean = torch.zeros_like(x, dtype=torch.bool)
    clean[:, :2] = True
    loss = ~clean
    loss[::3, -1] = False  # unequal token counts
    return TaskData(x, clean, loss)


def run(method, data, **kw):
    args = {"n_draws": 4, "batch_size": 5, "seed": 0, "device": "cpu"} | kw
    return evaluate(method, nn.Identity(), data, **args)


def test_metrics_are_consistent_and_the_ci_covers_the_estimate():
    data = blocks()
    m, recs = run(Fake(), data, decode=lambda ids: " ".join(map(str, ids)))
    v = {x.metric: x for x in m}
    tokens = int(data.loss_mask.sum())
    assert v["tokens"].value == tokens and v["nll"].n == len(data) == len(recs)
    assert v["nll"].value == pytest.approx(sum(r["nll"] for r in recs) / tokens)
    assert v["ppl"].value == pytest.approx(math.exp(v["nll"].value))
    assert v["bpd"].value == pytest.approx(v["nll"].value / math.log(2))
    for name, f in (("ppl", math.exp), ("bpd", lambda a: a / math.log(2))):
        assert v[name].ci_low == pytest.approx(f(v["nll"].ci_low))
        assert v[name].ci_high == pytest.approx(f(v["nll"].ci_high))
    for name in ("nll", "ppl", "bpd"):
        assert v[name].ci_low < v[name].value < v[name].ci_high
        assert "bootstrap" in v[name].ci_method
    # the MC s.e.: sqrt(sum of per-sequence variances of the mean) / tokens
    se = [r["mc_se"] for r in recs]
    assert v["nll_mc_se"].value == pytest.approx(math.sqrt(sum(s * s for s in se)) / tokens)
    assert 0 < v["nll_mc_se"].value < 0.05
    r = recs[3]
    assert r["index"] == 3 and r["draws"] == 4 and r["n_tokens"] == int(data.loss_mask[3].sum())
    assert r["nll_per_token"] == pytest.approx(r["nll"] / r["n_tokens"])
    assert r["text"] == " ".join(map(str, data.x[3].tolist()))


def test_a_function_of_the_seed():
    data = blocks()
    a = run(Fake(), data, seed=3)
    assert run(Fake(), data, seed=3) == a
    other = run(Fake(), data, seed=4)[1]
    assert [r["nll"] for r in other] != [r["nll"] for r in a[1]]


def test_an_exact_method_has_no_monte_carlo_error():
    m, recs = run(Fake(bound_kind=BOUND_EXACT), blocks(), n_draws=8)
    v = {x.metric: x for x in m}
    assert v["nll_mc_se"].value == 0 and {r["draws"] for r in recs} == {1}
    m1, _ = run(Fake(), blocks(), n_draws=1)  # one draw of a bound: its error is unknown
    assert {x.metric: x for x in m1}["nll_mc_se"].value is None


def test_no_bound_and_too_long_blocks_are_refused_before_any_work():
    f = Fake(bound_kind="")
    with pytest.raises(ConfigError, match="fake: no likelihood bound") as e:
        run(f, blocks())
    assert "\n" not in str(e.value) and f.calls == 0
    short = Fake(seq_len=4)
    with pytest.raises(ValueError, match="longer than the model's 4 positions"):
        run(short, blocks())
    assert short.calls == 0


def test_summarize_pools_tokens_not_sequences():
    S, T = np.array([20.0, 1.0]), np.array([10, 1])
    v = {m.metric: m.value for m in summarize(S, np.zeros(2), T)}
    assert v["nll"] == pytest.approx(21 / 11)  # not the mean of per-sequence values, 1.5
