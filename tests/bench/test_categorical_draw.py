"""bench.method.categorical_draw, the inverse-CDF draw every sampler now makes where it used a
Gumbel-max over the whole canvas (MDLM, Duo, CANDI, S-FLM's stochastic step and final
sample): its law against softmax(logits) by chi-square, classes at -inf never drawn, empty
inputs; and CANDI's nocache discrete step, which draws the hit first and the token only where
a position is hit, against the reference's categorical over [p (t - s), s]."""

from __future__ import annotations

import pytest
import torch
from helpers import make_method
from scipy.stats import chisquare

from baselines.candi_samplers import NoCacheDecoding
from bench.method import categorical_draw

N = 20_000


@pytest.mark.parametrize("float64", [True, False])
def test_draws_follow_the_softmax(float64):
    g = torch.Generator().manual_seed(0)
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0, -torch.inf], [-3.0, -3.0, 1.0, 4.0, 0.0]])
    rows = logits.repeat_interleave(N, 0)
    got = categorical_draw(rows, g, float64).view(2, N)
    p = torch.softmax(logits.double(), -1)
    for i in range(2):
        obs = torch.bincount(got[i], minlength=5).double()
        keep = p[i] > 0
        assert obs[~keep].sum() == 0  # -inf: never
        assert chisquare(obs[keep], p[i][keep] * N).pvalue > 1e-3
    # a wrong law (the second row's softmax at T = 2) is rejected on the same draws
    wrong = torch.softmax(logits[1].double() / 2, -1) * N
    assert chisquare(torch.bincount(got[1], minlength=5).double(), wrong).pvalue < 1e-6


def test_one_class_and_no_rows():
    g = torch.Generator().manual_seed(1)
    one = torch.full((50, 4), -torch.inf)
    one[:, 2] = 0.0
    assert (categorical_draw(one, g) == 2).all()
    assert categorical_draw(torch.zeros(0, 7), g).shape == (0,)


def test_candi_hit_first_is_the_reference_categorical():
    """CANDI nocache's discrete step: not clean positions become token v w.p. p_v (t - s)/t and
    stay masked w.p. s/t (candi-diffusion ``_discrete_step``: a draw over [p (t - s), s]);
    clean positions keep their token."""
    V = 4
    m = make_method("candi", {}, V, 8)
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64).expand(N, V)
    z = torch.nn.functional.one_hot(torch.full((N,), 1), V).double()
    clean = torch.zeros(N, dtype=torch.bool)
    clean[:100] = True
    t, dt = torch.tensor(0.6, dtype=torch.float64), 0.2
    g = torch.Generator().manual_seed(2)
    _, new_clean, tokens = NoCacheDecoding.discrete_step(m, z, p, t, dt, clean, g, True)
    assert (tokens[:100] == 1).all() and new_clean[:100].all()
    free = ~clean
    s = t - dt
    cls = torch.where(new_clean[free], tokens[free], V)  # V: stayed masked
    obs = torch.bincount(cls, minlength=V + 1).double()
    want = torch.cat([p[0] * (t - s) / t, (s / t).reshape(1)]) * int(free.sum())
    assert chisquare(obs, want).pvalue > 1e-3
    # a wrong law: the hit w.p. t - s (the division by t forgotten)
    wrong = torch.cat([p[0] * (t - s), (1 - (t - s)).reshape(1)]) * int(free.sum())
    assert chisquare(obs, wrong).pvalue < 1e-6
