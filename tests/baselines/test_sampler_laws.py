"""The laws of MDLM's decodings after their draws moved to the positions they keep (an ancestral
step chooses the revealed positions, then draws there; the confidence orders draw only at the
masked positions of the block, by the inverse CDF): on a canvas-dependent stub network small
enough to enumerate, the exact law of the final sample is computed here from each decoding's
definition (not from its code), and many draws at a fixed seed pass a chi-square test against
it, while a deliberately wrong variant (the temperature forgotten in the draw) fails it. Then
the parallel decodings: the positions a threshold / factor step reveals on fixed confidences
against the reference rules transcribed (ties included), and a run on a trained model making
fewer calls than its budget."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from helpers import make_method, make_model, sort_train_config, train_sort_mdlm
from scipy.stats import chisquare
from torch import nn

import baselines.duo as duo
import baselines.mdlm_samplers as ms
from baselines.duo import uniform_posterior_probs
from bench.data.toy import sort_data

torch.set_num_threads(1)

V, L, T = 3, 3, 0.7  # real tokens, canvas, temperature; the mask id is V
N_DRAWS = 6000


class TableNet(nn.Module):
    """A network whose logits (n, L, V + 1) depend on the whole canvas: one random row per
    canvas state ((V + 1)^L of them), so the order of reveals matters to the law."""

    def __init__(self, seed=0, scale=1.5, out=V + 1):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn((V + 1) ** L, L, out, generator=g) * scale

    def code(self, x):
        return (x * (V + 1) ** torch.arange(L)).sum(-1)

    def forward(self, x, sigma=None):
        return self.table[self.code(x)]


def probs(net, x, temperature):
    """p_theta at every position of canvas ``x`` (a tuple): softmax over the real tokens."""
    lg = net.table[int(net.code(torch.tensor(x)))][:, :V].double()
    return torch.softmax(lg / temperature, -1)


def alpha(t):
    return 1 - (1 - 1e-3) * t


def ancestral_law(net, x0, nfe, temperature, greedy=False) -> dict:
    """The absorbing posterior step by step (MDLM): each masked position revealed w.p.
    (alpha_s - alpha_t) / (1 - alpha_t) with a token of p_theta(x_t); last step alpha_s = 1
    (``greedy``: argmax there)."""
    ts = torch.linspace(1.0, 1e-5, nfe + 1, dtype=torch.float64).tolist()
    law = {tuple(x0): 1.0}
    for k in range(nfe):
        last = k == nfe - 1
        a_t, a_s = alpha(ts[k]), 1.0 if last else alpha(ts[k + 1])
        pr = (a_s - a_t) / (1 - a_t)
        new: dict = {}
        for x, px in law.items():
            q = probs(net, x, temperature)
            choices = []
            for i in range(L):
                if x[i] != V:
                    choices.append([(x[i], 1.0)])
                elif last and greedy:
                    choices.append([(int(q[i].argmax()), 1.0)])
                else:
                    stay = [] if last else [(V, 1 - pr)]
                    choices.append(stay + [(v, pr * float(q[i, v])) for v in range(V)])
            for combo in itertools.product(*choices):
                y = tuple(c[0] for c in combo)
                new[y] = new.get(y, 0.0) + px * math.prod(c[1] for c in combo)
        law = new
    return law


def llada_counts(masked, nfe):
    """LLaDA get_num_transfer_tokens: masked // nfe per step, the first masked % nfe one more."""
    return [masked // nfe + (k < masked % nfe) for k in range(nfe)]


def confidence_law(net, x0, nfe, temperature, score, extra=lambda conf: 0) -> dict:
    """LLaDA low-confidence remasking step by step: every masked position draws x0 ~ p_theta at
    T; ``score(q_T, q_1, i, token)`` its confidence; the n most confident (ties: the lower
    position) revealed, n = max(the even split's count, ``extra(confidences)``)."""
    masked = sum(v == V for v in x0)
    sched = llada_counts(masked, nfe)
    law = {tuple(x0): 1.0}
    for k in range(nfe):
        new: dict = {}
        for x, px in law.items():
            qt, q1 = probs(net, x, temperature), probs(net, x, 1.0)
            where = [i for i in range(L) if x[i] == V]
            if not where:
                new[x] = new.get(x, 0.0) + px
                continue
            for draw in itertools.product(range(V), repeat=len(where)):
                p = px * math.prod(float(qt[i, d]) for i, d in zip(where, draw))
                conf = {i: score(qt, q1, i, d) for i, d in zip(where, draw)}
                n = max(sched[k], extra(list(conf.values())))
                ranked = sorted(where, key=lambda i: (-conf[i], i))[:n]
                y = list(x)
                for i, d in zip(where, draw):
                    if i in ranked:
                        y[i] = d
                new[tuple(y)] = new.get(tuple(y), 0.0) + p
        law = new
    return law


def low_confidence(qt, q1, i, d):
    return float(q1[i, d])


def margin(qt, q1, i, d):
    top = qt[i].sort(descending=True).values
    return float(top[0] - top[1])


def neg_entropy(qt, q1, i, d):
    return float((qt[i] * torch.log(qt[i] + 1e-10)).sum())


def draws(decoding, nfe, net, x0, options=None, seed=0):
    """N_DRAWS samples of ``decoding`` in one batch, counted per final canvas."""
    m = make_method("mdlm", options or {}, V, L)
    prompt = torch.tensor(x0).expand(N_DRAWS, L).clone()
    pmask = prompt != V
    g = torch.Generator().manual_seed(seed)
    out = m.sample_canvas(net, prompt, pmask, nfe=nfe, temperature=T, decoding=decoding,
                          generator=g)  # fmt: skip
    assert m.nfe_counter <= nfe
    counts: dict = {}
    for row in out.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    return counts, m.nfe_counter


def fit_p(counts, law) -> float:
    """Chi-square p-value of ``counts`` against ``law``, bins of expected count < 5 pooled."""
    assert abs(sum(law.values()) - 1) < 1e-9
    assert set(counts) <= {k for k, v in law.items() if v > 0}, "a sample the law forbids"
    n = sum(counts.values())
    obs, exp, pool_o, pool_e = [], [], 0, 0.0
    for k, v in law.items():
        if n * v < 5:
            pool_o, pool_e = pool_o + counts.get(k, 0), pool_e + n * v
        else:
            obs.append(counts.get(k, 0))
            exp.append(n * v)
    if pool_e > 0:
        obs.append(pool_o)
        exp.append(pool_e)
    exp = [e * sum(obs) / sum(exp) for e in exp]
    return float(chisquare(obs, exp).pvalue)


X0 = (V, 1, V)  # one given token between two masks
X0_ALL = (V, V, V)

LAW_CASES = [
    ("ancestral", 3, X0_ALL, lambda net, x, n: ancestral_law(net, x, n, T)),
    ("ancestral", 2, X0, lambda net, x, n: ancestral_law(net, x, n, T)),
    ("greedy", 3, X0_ALL, lambda net, x, n: ancestral_law(net, x, n, T, greedy=True)),
    ("cached", 4, X0_ALL, lambda net, x, n: ancestral_law(net, x, n, T)),
    ("confidence", 2, X0_ALL, lambda net, x, n: confidence_law(net, x, n, T, low_confidence)),
    ("margin", 2, X0_ALL, lambda net, x, n: confidence_law(net, x, n, T, margin)),
    ("entropy", 3, X0_ALL, lambda net, x, n: confidence_law(net, x, n, T, neg_entropy)),
]


@pytest.mark.parametrize("decoding,nfe,x0,law", LAW_CASES, ids=lambda c: str(c))
def test_draws_follow_the_law(decoding, nfe, x0, law):
    """Each decoding's final canvas is distributed as its definition says (p > 1e-3 over
    N_DRAWS draws at a fixed seed), with exactly nfe calls (``cached``: at most)."""
    net = TableNet(seed=1)
    counts, calls = draws(decoding, nfe, net, x0)
    assert calls == nfe or decoding == "cached"
    assert fit_p(counts, law(net, x0, nfe)) > 1e-3


def remdm_law(m, net, x0, nfe, decoding, temperature) -> dict:
    """ReMDM's q_sigma step by step (kuleshov-group/remdm ``_ddpm_caching_update``: q_xs for a
    decoded token, keep 1 - sigma / [MASK] sigma; q_xs_2 for a masked one, token v
    p_theta(v) (a_s - (1 - sigma) a_t) / (1 - a_t) / [MASK] (1 - a_s - sigma a_t) / (1 - a_t)),
    on the schedule's (alpha_t, alpha_s, sigma) (``MDLM.remdm_step``)."""
    ts = torch.linspace(1.0, 1e-5, nfe + 1, dtype=torch.float64).tolist()
    law = {tuple(x0): 1.0}
    for k in range(nfe):
        a_t, a_s, sg = m.remdm_step(decoding, ts[k], ts[k + 1], k == nfe - 1)
        new: dict = {}
        for x, px in law.items():
            q = probs(net, x, temperature)
            opts = []
            for i in range(L):
                if x[i] != V:
                    opts.append([(x[i], 1 - sg), (V, sg)])
                else:
                    tok = (a_s - (1 - sg) * a_t) / (1 - a_t)
                    opts.append([(V, (1 - a_s - sg * a_t) / (1 - a_t))]
                                + [(v, tok * float(q[i, v])) for v in range(V)])  # fmt: skip
            for combo in itertools.product(*opts):
                y = tuple(c[0] for c in combo)
                new[y] = new.get(y, 0.0) + px * math.prod(max(c[1], 0.0) for c in combo)
        law = new
    return law


REMDM_LAWS = [("remdm-cap", {"remdm_eta": 0.5}, 3), ("remdm-loop", {"remdm_eta": 0.1}, 3)]


@pytest.mark.parametrize("decoding,options,nfe", REMDM_LAWS)
def test_remdm_draws_follow_the_law(decoding, options, nfe):
    """ReMDM ([MASK] or not first, a token only where revealed) follows q_sigma step by step."""
    net = TableNet(seed=4)
    counts, calls = draws(decoding, nfe, net, X0_ALL, options)
    m = make_method("mdlm", options, V, L)
    assert calls == nfe and fit_p(counts, remdm_law(m, net, X0_ALL, nfe, decoding, T)) > 1e-3


@pytest.mark.parametrize("decoding", ["ancestral", "confidence"])
def test_a_wrong_draw_fails_the_law(decoding, monkeypatch):
    """The test has the power to see a wrong law: the same draws with the temperature left out
    of the token draw (a plausible slip of the restricted draw) are rejected (p < 1e-6)."""
    net = TableNet(seed=1)
    real = ms.token_logits
    monkeypatch.setattr(ms, "token_logits", lambda m, raw, w, t: real(m, raw, w, 1.0))
    counts, _ = draws(decoding, 3, net, X0_ALL)
    if decoding == "ancestral":
        law = ancestral_law(net, X0_ALL, 3, T)
    else:
        law = confidence_law(net, X0_ALL, 3, T, low_confidence)
    assert fit_p(counts, law) < 1e-6


def duo_law(m, net, nfe, temperature, greedy=False) -> dict:
    """Duo's ancestral sampler step by step: x_1 uniform over V^L, then at each step every
    position draws x_s from the uniform-state posterior q(x_s | x_t, x_hat = p_theta(x_t)) (Duo
    eq. 5: :func:`uniform_posterior_probs`, the dense formula), the last step to alpha_s = 1
    (``greedy``: argmax p_theta there)."""
    ts = torch.linspace(1.0, 1e-5, nfe + 1, dtype=torch.float64)
    law = {x: V**-L for x in itertools.product(range(V), repeat=L)}
    for k in range(nfe):
        last = k == nfe - 1
        a_t = m.alpha(ts[k]).reshape(1, 1).expand(1, L)
        a_s = torch.ones_like(a_t) if last else m.alpha(ts[k + 1]).reshape(1, 1).expand(1, L)
        new: dict = {}
        for x, px in law.items():
            xh = probs(net, x, temperature)
            if last and greedy:
                y = tuple(int(v) for v in xh.argmax(-1))
                new[y] = new.get(y, 0.0) + px
                continue
            q = uniform_posterior_probs(xh[None], torch.tensor([x]), a_s, a_t)[0]
            for y in itertools.product(range(V), repeat=L):
                p = px * math.prod(float(q[i, y[i]]) for i in range(L))
                new[y] = new.get(y, 0.0) + p
        law = new
    return law


def duo_draws(nfe, net, decoding="ancestral", seed=0):
    m = make_method("duo", {}, V, L)
    prompt = torch.zeros(N_DRAWS, L, dtype=torch.long)
    pmask = torch.zeros(N_DRAWS, L, dtype=torch.bool)
    g = torch.Generator().manual_seed(seed)
    out = m.sample(net, prompt, pmask, nfe=nfe, temperature=T, decoding=decoding, generator=g)
    assert m.nfe_counter == nfe
    counts: dict = {}
    for row in out.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    return m, counts


@pytest.mark.parametrize("decoding,nfe", [("ancestral", 2), ("ancestral", 3), ("greedy", 2)])
def test_duo_draws_follow_the_posterior(decoding, nfe):
    """Duo's steps (x_hat drawn only where the threshold picks it) follow Duo eq. 5 step by
    step: the final canvas's law by enumeration, chi-square over N_DRAWS draws."""
    net = TableNet(seed=3, out=V)
    m, counts = duo_draws(nfe, net, decoding)
    assert fit_p(counts, duo_law(m, net, nfe, T, greedy=decoding == "greedy")) > 1e-3


def test_duo_wrong_temperature_fails_the_law(monkeypatch):
    """The Duo law test rejects a step that forgets the temperature (p < 1e-6)."""
    net = TableNet(seed=3, out=V)
    real = duo.psi_step
    monkeypatch.setattr(duo, "psi_step", lambda *a: real(*a[:7], 1.0, *a[8:]))
    m, counts = duo_draws(3, net)
    assert fit_p(counts, duo_law(m, net, 3, T)) < 1e-6


# -- the parallel rules -------------------------------------------------------------------------
def reference_confidence(conf):
    """Fast-dLLM's confidence on ConfNet's logits: x0 = argmax (the draw with top_k 1), its
    ``F.softmax(logits.to(torch.float64))`` probability."""
    lg = ConfNet(conf)(None)
    x0 = lg.argmax(-1, keepdim=True)
    return torch.softmax(lg.double(), -1).gather(-1, x0).squeeze(-1)


def fastdllm_threshold(conf, masked, tau):
    """NVlabs/Fast-dLLM llada/generate.py::get_transfer_index with ``threshold``, transcribed
    from its description: rank every masked position by confidence (topk over the masked
    count); the first is transferred, each later one only if its confidence is not below tau.
    Ties: the lower position first (torch.topk leaves their order unspecified)."""
    out = torch.zeros_like(masked)
    for j in range(conf.shape[0]):
        idx = [i for i in range(conf.shape[1]) if masked[j, i]]
        idx.sort(key=lambda i: (-float(conf[j, i]), i))
        for r, i in enumerate(idx):
            if r == 0 or float(conf[j, i]) >= tau:
                out[j, i] = True
    return out


def dllm_factor(conf, masked, factor):
    """ZHZisZZ/dllm pipelines/fastdllm/llada/sampler.py ``_get_transfer_index`` (factor),
    transcribed from its description: sort descending; rank r = 1, 2, ... passes when its value
    is >= 1 - factor / (r + 1), rank 1 always; k = the ranks passing (at most the masked count);
    the k first of the order. Ties: the lower position first."""
    out = torch.zeros_like(masked)
    for j in range(conf.shape[0]):
        idx = [i for i in range(conf.shape[1]) if masked[j, i]]
        idx.sort(key=lambda i: (-float(conf[j, i]), i))
        k = sum(
            1 for r, i in enumerate(idx, start=1) if r == 1 or conf[j, i] >= 1 - factor / (r + 1)
        )
        for i in idx[:k]:
            out[j, i] = True
    return out


VC = 10  # the parallel rules' vocabulary: the top class of each position is class 0


class ConfNet(nn.Module):
    """Logits whose top class at position i is class 0 with p_theta = conf[i] (>= 0.3, the
    other VC - 1 classes share the rest), so that with ``top_k`` 1 the draw is class 0 and its
    confidence (p_theta at T = 1, unfiltered) is conf[i]."""

    def __init__(self, conf):
        super().__init__()
        self.conf, self.inputs = conf, []

    def forward(self, x, sigma=None):
        if x is not None:
            self.inputs.append(x.clone())
        c = self.conf.double()
        lg = torch.log((1 - c) / (VC - 1))[..., None].expand(*c.shape, VC + 1).clone()
        lg[..., 0] = torch.log(c)
        lg[..., VC] = -torch.inf  # SUBS: the [MASK] class never drawn
        return lg.float()


def revealed_first_step(decoding, conf, options, nfe):
    """The positions the first step of ``decoding`` reveals on confidences ``conf`` (n, L)."""
    n, width = conf.shape
    m = make_method("mdlm", {**options, "top_k": 1}, VC, width)
    x = torch.full((n, width), VC)
    block = torch.ones(n, width, dtype=torch.bool)
    net = ConfNet(conf)
    out = m.DECODINGS[decoding].run(m, net, x, block, nfe, 1.0, True, None)
    after = net.inputs[1] if len(net.inputs) > 1 else out  # the second call's input
    return after != VC


def tied_confidences():
    g = torch.Generator().manual_seed(3)
    conf = torch.rand(12, 10, generator=g) * 0.5 + 0.5
    conf = (conf * 8).round() / 8  # many ties, some exactly at tau or a factor bound
    conf[0] = 0.3  # nothing above tau: one forced, ties among all
    conf[1, :4] = 0.9
    return conf.clamp(0.3, 0.99)


@pytest.mark.parametrize("tau", [0.5, 0.625, 0.9, 1.0])
def test_threshold_reveals_fastdllm_positions(tau):
    """``threshold``'s first step at nfe = the width (the floor one position, as Fast-dLLM's at
    steps = gen_length) reveals Fast-dLLM's positions, ties and values equal to tau included."""
    conf = tied_confidences()
    got = revealed_first_step("threshold", conf, {"tau": tau}, conf.shape[1])
    want = fastdllm_threshold(
        reference_confidence(conf), torch.ones_like(conf, dtype=torch.bool), tau
    )
    assert torch.equal(got, want)
    assert got.sum(-1).min() >= 1


@pytest.mark.parametrize("factor", [0.5, 1.0, 2.0, 4.0])
def test_factor_reveals_dllm_positions(factor):
    """``factor``'s first step reveals dllm's factor positions, ties included."""
    conf = tied_confidences()
    got = revealed_first_step("factor", conf, {"factor": factor}, conf.shape[1])
    want = dllm_factor(reference_confidence(conf), torch.ones_like(conf, dtype=torch.bool), factor)
    assert torch.equal(got, want)


def exact_confidences():
    """Confidences with exact ties, values exactly at the taus and factor bounds tested (1 -
    f/(r + 1) for f = 1: 2/3 at rank 2, 3/4 at rank 3), rows with no candidate and one."""
    g = torch.Generator().manual_seed(4)
    grid = torch.tensor([0.25, 0.5, 2 / 3, 0.75, 0.8, 0.9, 1.0], dtype=torch.float64)
    conf = grid[torch.randint(0, len(grid), (40, 9), generator=g)]
    masked = torch.rand(40, 9, generator=g) < 0.7
    masked[0] = False
    masked[1] = False
    masked[1, 4] = True
    return torch.where(masked, conf, -torch.inf), masked


RULES = [("tau", 0.5), ("tau", 0.75), ("tau", 0.9), ("tau", 1.0)]
RULES += [("factor", 1.0), ("factor", 0.5), ("factor", 3.0)]


@pytest.mark.parametrize("rule,value", RULES)
def test_rules_on_exact_confidences(rule, value):
    """The positions chosen by the ``threshold`` / ``factor`` rule (floor 0) on exact float64
    confidences equal the transcribed reference rules, values on the bounds and ties included."""
    conf, masked = exact_confidences()
    m = make_method("mdlm", {rule: value}, VC, conf.shape[1])
    name = "threshold" if rule == "tau" else "factor"
    floor = torch.zeros(conf.shape[0], dtype=torch.long)
    got = ms.DECODINGS[name].chosen(conf, floor, m.opts) & masked
    ref = fastdllm_threshold if rule == "tau" else dllm_factor
    assert torch.equal(got, ref(conf, masked, value))


def test_the_budget_floor_is_llada_count():
    """Below the width the even split is the floor: nfe 2 over 10 positions reveals at least
    5 per row in the first step, and more where more pass tau."""
    conf = tied_confidences()
    got = revealed_first_step("threshold", conf, {"tau": 0.6}, 2)
    masked = torch.ones_like(conf, dtype=torch.bool)
    rule = fastdllm_threshold(reference_confidence(conf), masked, 0.6).sum(-1)
    assert torch.equal(got.sum(-1), torch.maximum(rule, torch.full_like(rule, 5)))


def test_threshold_law_at_the_floor():
    """The threshold decoding's law is LLaDA's with n = max(schedule, over-threshold count)."""
    net = TableNet(seed=2, scale=3.0)
    tau = 0.6

    def extra(confs):
        return max(1, sum(c >= tau for c in confs))

    counts, calls = draws("threshold", 3, net, X0_ALL, {"tau": tau})
    law = confidence_law(net, X0_ALL, 3, T, low_confidence, extra)
    assert calls <= 3
    assert fit_p(counts, law) > 1e-3


def test_threshold_makes_fewer_calls_on_a_trained_model(tmp_path):
    """On MDLM trained briefly on sort-8 (150 steps), ``threshold`` (tau 0.5) at a budget of
    one call per generated position: each row's recorded calls are within what the batch made,
    which is within the budget, most rows need fewer, and a batch of 4 stops before its budget;
    every position ends revealed. ``confidence`` spends the budget."""
    from bench.weights import load_weights

    res = train_sort_mdlm(tmp_path, sort_train_config(150, lr=3e-3, batch_size=32))
    m, net = make_model("mdlm", {"tau": 0.5}, vocab=10, seq_len=16)
    load_weights(m, net, res.weights)
    net.eval()
    data = sort_data(16, seed=99)
    nfe = int((~data.clean_mask).sum(-1).max())
    g = torch.Generator().manual_seed(0)
    out = m.sample(net, data.x, data.clean_mask, nfe=nfe, decoding="threshold", generator=g)
    assert (out != m.mask_id).all()
    rows = m.row_calls.sum(-1)  # [full, partial] per row: no partial call without a cache
    assert int(rows.max()) == m.nfe_counter <= nfe and int(rows.min()) >= 1
    assert float(rows.float().mean()) < nfe - 1, rows
    made = []
    for i in range(0, 16, 4):
        m.nfe_counter = 0
        m.sample(net, data.x[i : i + 4], data.clean_mask[i : i + 4], nfe=nfe,
                 decoding="threshold", generator=torch.Generator().manual_seed(i))  # fmt: skip
        made.append(m.nfe_counter)
    assert max(made) <= nfe and min(made) < nfe, made
    m.nfe_counter = 0
    m.sample(net, data.x, data.clean_mask, nfe=nfe, decoding="confidence", generator=g)
    assert m.nfe_counter == nfe
