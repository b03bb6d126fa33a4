"""AR's draw (``baselines.ar.NextToken``: the inverse CDF of softmax(logits / T), one float64
uniform per row, since the draw left Gumbel-max): on a causal network whose logits depend on the
whole prefix, many draws pass a chi-square test against the chain rule's law enumerated here,
and a draw that forgets the temperature fails it."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import make_method
from test_sampler_laws import N_DRAWS, L, T, V, fit_p
from torch import nn

torch.set_num_threads(1)


class PrefixNet(nn.Module):
    """A causal network whose next-token logits depend on the whole prefix: one random row per
    prefix (the code of the ids read so far), so every position's law is a different row."""

    def __init__(self, seed=5):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn((V + 1) ** L, V, generator=g) * 1.5

    def forward(self, x):
        codes = torch.stack([(x[:, : i + 1] * (V + 1) ** torch.arange(i + 1)).sum(-1)
                             for i in range(x.shape[1])], 1)  # fmt: skip
        return self.table[codes]


@pytest.mark.parametrize("temperature,wrong", [(T, False), (T, True)])
def test_ar_draws_follow_the_chain_rule(temperature, wrong, monkeypatch):
    """AR's inverse-CDF draw gives the chain rule's law: position 0 given, positions 1 and 2
    drawn from softmax(logits / T) of their prefix; N_DRAWS draws pass a chi-square test against
    the enumerated law, and a draw that forgets the temperature fails it."""
    import baselines.ar as ar_mod

    net = PrefixNet()
    m = make_method("ar", vocab=V, seq_len=L)
    if wrong:
        real = ar_mod.categorical_draw
        monkeypatch.setattr(ar_mod, "categorical_draw", lambda lg, g, f: real(lg * T, g, f))
    x = torch.zeros(N_DRAWS, L, dtype=torch.long)
    pm = torch.zeros(N_DRAWS, L, dtype=torch.bool)
    pm[:, 0] = True
    out = m.sample(net, x, pm, temperature=temperature, generator=torch.Generator().manual_seed(0))
    counts: dict = {}
    for row in out[:, 1:].tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    law = {}
    for a, b in itertools.product(range(V), repeat=2):
        p1 = torch.softmax(net(torch.tensor([[0]]))[0, -1].double() / temperature, -1)[a]
        p2 = torch.softmax(net(torch.tensor([[0, a]]))[0, -1].double() / temperature, -1)[b]
        law[(a, b)] = float(p1 * p2)
    p = fit_p(counts, law)
    assert (p < 1e-6) if wrong else (p > 1e-3), p
