"""MDLM's samplers beyond ancestral (baselines/mdlm.py): ReMDM remasking, confidence-ordered
unmasking (LLaDA, Dream), semi-autoregressive blocks and MDLM's cache.

Fidelity: the reference computations transcribed here step by step (kuleshov-group/remdm
``diffusion.py::_ddpm_caching_update`` and ``_sample_categorical``; ML-GSAI/LLaDA
``generate.py::generate``, ``get_num_transfer_tokens``, ``add_gumbel_noise``) run on fixed logits
with a generator seeded as the sampler's, and every state the sampler passes through is compared
with the reference's. Properties for the rest; the learned sort-8 model for learnability (slow).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import LEARN_TARGET, make_method, make_model, sort8_outcomes
from torch import nn

from baselines.mdlm import CONFIDENCE_ORDERS, MDLM, PARALLEL, REMDM
from bench.config import ConfigError
from bench.data.toy import sort_data

torch.set_num_threads(1)

V = 6  # task vocabulary; the mask id is V
EPS = 1e-3  # MDLM's log-linear floor: alpha_t = 1 - (1 - eps) t


class Stub(nn.Module):
    """Backbone returning fixed per-position logits (1, L, V + 1), whatever its input; records
    its inputs (the canvas before each call)."""

    def __init__(self, logits):
        super().__init__()
        self.logits, self.inputs = logits, []

    def forward(self, x, sigma=None):
        self.inputs.append(x.clone())
        return self.logits.expand(x.shape[0], -1, -1).clone()


class Recorder(nn.Module):
    """A real backbone whose inputs are recorded."""

    def __init__(self, net):
        super().__init__()
        self.net, self.inputs = net, []

    def forward(self, x, sigma):
        self.inputs.append(x.clone())
        return self.net(x, sigma)


def fixed_logits(L, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, L, V + 1, generator=g) * scale


def states(method, stub, prompt, pmask, **kw):
    """Every canvas the sampler passes through: the input of each call, then its result."""
    out = method.sample_canvas(stub, prompt, pmask, **kw)
    return [*stub.inputs, out]


def scattered_prompt(n, L, seed=0, frac=0.3):
    """(prompt, prompt mask): given positions scattered as Sudoku's givens, a different number
    per row."""
    g = torch.Generator().manual_seed(seed)
    pmask = torch.rand(n, L, generator=g) < frac
    prompt = torch.randint(0, V, (n, L), generator=g)
    return prompt, pmask


def perturbed_dit(options=None, seq_len=16):
    """The cpu-mini DiT with its zero-initialised head perturbed (deterministic in eval mode)."""
    method, net = make_model("mdlm", options or {}, vocab=V, seq_len=seq_len)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return method, net.eval()


# -- ReMDM -------------------------------------------------------------------------------
def subs_p(logits, x, T):
    """The reference's p_x0 = forward(x).exp() under SUBS (MDLM sec. 3.2.3): softmax(logits / T)
    without the [MASK] class at masked positions, one-hot on the token at the others."""
    lg = logits.expand(x.shape[0], -1, -1).float() / T
    lg[..., V] = -torch.inf
    p = torch.log_softmax(lg, -1).double().exp()
    return torch.where((x == V)[..., None], p, F.one_hot(x, V + 1).double())


def sample_categorical(probs, g, x):
    """A draw of kuleshov-group/remdm diffusion.py::_sample_categorical's class (argmax p /
    Exp(1): a class of p over V + 1), in the sampler's order (the same law: test_remdm_law):
    [MASK] or not by one float64 uniform per position against its share of the mass, then a
    token by the inverse CDF of p's token part at the masked positions of ``x`` left unmasked
    (a decoded position's token part is one-hot on its token: kept)."""
    share = probs[..., V] / probs.sum(-1)
    u = torch.rand(share.shape, generator=g, dtype=torch.float64)
    out = torch.where(u < share, V, x)
    tok = (u >= share) & (x == V)
    w = probs[tok][:, :V]
    cdf = w.cumsum(-1, dtype=torch.float64)
    v = torch.rand((len(cdf), 1), generator=g, dtype=torch.float64) * cdf[:, -1:]
    out[tok] = torch.searchsorted(cdf, v, right=True).squeeze(-1)
    return out


def reference_remdm(logits, n, L, nfe, sampler, eta, T, g, t_on=0.55, t_off=0.05, a_on=0.9):
    """kuleshov-group/remdm diffusion.py::_sample with _ddpm_caching_update, transcribed (the
    canvas after each step). Two documented departures of ours are written in: alpha_t = 1 -
    (1 - eps) t (the reference's move_chance_t = t has no eps), and the last step goes to
    alpha_s = 1 (the reference stops at t = 1e-5 and adds an argmax call)."""
    x = torch.full((n, L), V)
    conf = torch.full((n, L), -torch.inf, dtype=torch.float64)  # confident_score
    ts = torch.linspace(1.0, 1e-5, nfe + 1, dtype=torch.float64)
    out = [x]
    for i in range(nfe):
        t, s, last = float(ts[i]), float(ts[i + 1]), i == nfe - 1
        p_x0 = subs_p(logits, x, T)
        copy_flag = x != V
        if sampler == "remdm-loop":
            if t > t_on or t <= t_off or last:
                if t > t_on:  # (a coarse grid's step past t_on may give mc_s < 0: kept)
                    mc_t = 1 - (1 - t) * a_on / (1 - t_on)
                    mc_s = 1 - (1 - s) * a_on / (1 - t_on)
                elif t <= t_off:
                    mc_t, mc_s = t * (1 - a_on) / t_off, s * (1 - a_on) / t_off
                else:  # ours: a last step inside the loop phase reveals from alpha_on
                    mc_t = 1 - a_on
                mc_s = 0.0 if last else mc_s
                q_xs = p_x0 * (mc_t - mc_s)  # "use MDLM"
                q_xs[..., V] = mc_s
                _x = sample_categorical(q_xs, g, x)
                xs = torch.where(copy_flag, x, _x)
            else:  # "use ReMDM"
                sigma = eta
                q_xs = p_x0 * (1 - sigma)
                q_xs[..., V] = sigma
                q_xs_2 = p_x0 * ((a_on - (1 - sigma) * a_on) / (1 - a_on))
                q_xs_2[..., V] = (1 - a_on - a_on * sigma) / (1 - a_on)
                xs = sample_categorical(torch.where(copy_flag[..., None], q_xs, q_xs_2), g, x)
            out.append(xs)
            x = xs
            continue
        move_chance_t, move_chance_s = (1 - EPS) * t, (0.0 if last else (1 - EPS) * s)
        alpha_t, alpha_s = 1 - move_chance_t, 1 - move_chance_s
        if sampler == "remdm-cap":
            sigma = min(eta, (1 - alpha_s) / alpha_t) if alpha_t > 0 else eta
        else:
            sigma_max = min(1, (1 - alpha_s) / alpha_t) if alpha_t > 0 else 1
            if sampler == "remdm-rescale":
                sigma = eta * sigma_max
            else:  # remdm-conf (the reference keeps confident_score in bfloat16; we in float64)
                eta_c = conf.softmax(dim=-1)
                eta_c[x == V] = 0
                sigma = (eta_c * sigma_max)[..., None]
        sig_m = sigma[..., 0] if torch.is_tensor(sigma) else sigma
        q_xs = p_x0 * (1 - sigma)
        q_xs[..., V] = sig_m
        q_xs_2 = p_x0 * ((alpha_s - (1 - sigma) * alpha_t) / (1 - alpha_t))
        q_xs_2[..., V] = (1 - alpha_s - sig_m * alpha_t) / (1 - alpha_t)
        xs = sample_categorical(torch.where(copy_flag[..., None], q_xs, q_xs_2), g, x)
        if sampler == "remdm-conf":  # update conf
            unmask = (x == V) & (xs != V)
            conf_values = -p_x0.gather(-1, xs[..., None]).squeeze(-1)
            conf[unmask] = conf_values[unmask]
            conf[(x != V) & (xs == V)] = -torch.inf
        out.append(xs)
        x = xs
    return out


REMDM_CASES = [
    ("remdm-cap", {"remdm_eta": 0.5}, 8),
    ("remdm-rescale", {"remdm_eta": 0.6}, 8),
    ("remdm-conf", {}, 8),
    # phases at nfe 10: t = 1 .. 0.7 MDLM (t > t_on), 0.6 .. 0.4 the loop, 0.3 .. 0.1 MDLM
    (
        "remdm-loop",
        {"remdm_eta": 0.3, "remdm_t_on": 0.65, "remdm_t_off": 0.35, "remdm_alpha_on": 0.5},
        10,
    ),
    # the script's loop at nfe 3: t = 1 and 0.67 MDLM (the second overshoots to alpha_s = 4/3),
    # then a last step inside the loop phase
    ("remdm-loop", {"remdm_eta": 0.1}, 3),
]


@pytest.mark.parametrize(
    "decoding,options,nfe", REMDM_CASES, ids=[f"{c[0]}-nfe{c[2]}" for c in REMDM_CASES]
)
def test_remdm_steps_are_the_reference_posterior(decoding, options, nfe):
    """Every ReMDM step chooses what the reference's q_xs / q_xs_2 categorical chooses on the
    same uniforms, through all nfe steps, and tokens do get remasked (the test exercises it)."""
    n, L, T = 64, 8, 0.8
    m = make_method("mdlm", options, vocab=V, seq_len=L)
    logits = fixed_logits(L, seed=1)
    ours = states(
        m,
        Stub(logits),
        torch.zeros(n, L, dtype=torch.long),
        torch.zeros(n, L, dtype=torch.bool),
        nfe=nfe,
        temperature=T,
        decoding=decoding,
        generator=torch.Generator().manual_seed(3),
    )
    kw = {k: options[f"remdm_{k}"] for k in ("t_on", "t_off") if f"remdm_{k}" in options}
    if "remdm_alpha_on" in options:
        kw["a_on"] = options["remdm_alpha_on"]
    eta = options.get("remdm_eta", 0.0)
    want = reference_remdm(
        logits, n, L, nfe, decoding, eta, T, torch.Generator().manual_seed(3), **kw
    )
    assert len(ours) == nfe + 1
    for k, (a, b) in enumerate(zip(ours, want)):
        assert torch.equal(a, b), f"{decoding}: step {k} differs in {int((a != b).sum())} places"
    remasked = sum(int(((a != V) & (b == V)).sum()) for a, b in zip(want, want[1:]))
    if nfe == 3:  # the overshoot reveals everything at its second step; the last remasks none
        assert not (want[2] == V).any() and remasked == 0
    else:
        assert remasked > 0, "no token was remasked: the test does not exercise q_xs"
    assert not (ours[-1] == V).any()


@pytest.mark.parametrize("decoding", REMDM)
@pytest.mark.parametrize("nfe", [1, 2, 3, 7, 20, 64])
def test_remdm_schedules_end_at_sigma_zero(decoding, nfe):
    """Each schedule's last step goes to alpha_s = 1 with sigma = 0 (nothing remasked, every
    mask revealed), and every step's posterior is a distribution: 0 <= sigma <= 1 and the
    masked positions' [MASK] probability 1 - alpha_s - sigma alpha_t >= 0."""
    m = MDLM(None, V, 8)
    ts = torch.linspace(1.0, 1e-5, nfe + 1, dtype=torch.float64)
    for k in range(nfe):
        last = k == nfe - 1
        a_t, a_s, sigma = m.remdm_step(decoding, float(ts[k]), float(ts[k + 1]), last)
        assert 0 <= sigma <= 1 and 0 <= a_t < 1 and a_t <= a_s + 1e-12
        assert 1 - a_s - sigma * a_t >= -1e-12, (k, a_t, a_s, sigma)
        if last:
            assert (a_s, sigma) == (1.0, 0.0)


def test_remdm_keeps_the_prompt_and_its_options_are_checked():
    """ReMDM never remasks a prompt position (the reference has none); the loop's options are
    validated (t_off after t_on; an eta that makes its [MASK] probability negative, before any
    call)."""
    n, L = 32, 10
    prompt, pmask = scattered_prompt(n, L)
    for decoding in REMDM:
        m = make_method("mdlm", {"remdm_eta": 0.9 if decoding != "remdm-loop" else 0.1}, V, L)
        stub = Stub(fixed_logits(L))
        out = m.sample(stub, prompt, pmask, nfe=12, decoding=decoding, generator=torch.Generator())
        for x in [*stub.inputs, out]:
            assert torch.equal(x[pmask], prompt[pmask]), decoding
    with pytest.raises(ConfigError, match="remdm_t_off"):
        make_method("mdlm", {"remdm_t_on": 0.2, "remdm_t_off": 0.3})
    m = make_method("mdlm", {"remdm_alpha_on": 0.95, "remdm_eta": 0.1}, V, L)  # fine for cap
    stub = Stub(fixed_logits(L))
    with pytest.raises(ValueError, match="remdm_eta"):
        m.sample(stub, prompt, pmask, nfe=4, decoding="remdm-loop")
    assert stub.inputs == []


# -- confidence orders (LLaDA, Dream) -----------------------------------------------------
def get_num_transfer_tokens(mask_index, steps):
    """ML-GSAI/LLaDA generate.py::get_num_transfer_tokens, transcribed."""
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base = mask_num // steps
    remainder = mask_num % steps
    num = torch.zeros(mask_num.size(0), steps, dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        num[i, : remainder[i]] += 1
    return num


def reference_llada(logits, prompt, gen_length, block_length, steps, T, g):
    """ML-GSAI/LLaDA generate.py::generate (remasking='low_confidence', cfg_scale 0),
    transcribed; the model's logits are MDLM's SUBS logits (the [MASK] class at -inf). The
    canvas before each step, then the result."""
    n, P = prompt.shape
    x = torch.full((n, P + gen_length), V)
    x[:, :P] = prompt
    lg = logits.expand(n, -1, -1).clone()
    lg[..., V] = -torch.inf
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps = steps // num_blocks
    out = []
    for b in range(num_blocks):
        end = P + (b + 1) * block_length
        block_mask_index = x[:, P + b * block_length : end] == V
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)
        for i in range(steps):
            out.append(x.clone())
            mask_index = x == V
            # add_gumbel_noise draws x0 ~ softmax(logits / T) everywhere; only the masked
            # positions of the block are ever kept, so the sampler draws only there, by the
            # inverse CDF (the same law: test_draws_follow_the_law): transcribed so that the
            # rule below sees the sampler's x0
            cand = mask_index.clone()
            cand[:, end:] = False
            x0 = torch.zeros_like(x)
            w = lg[cand] / T
            cdf = (w - w.amax(-1, keepdim=True)).exp().cumsum(-1, dtype=torch.float64)
            u = torch.rand((len(cdf), 1), generator=g, dtype=torch.float64) * cdf[:, -1:]
            x0[cand] = torch.searchsorted(cdf, u, right=True).squeeze(-1)
            p = F.softmax(lg, dim=-1)
            x0_p = torch.gather(p, -1, x0[..., None]).squeeze(-1)
            x0_p[:, end:] = -torch.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, -torch.inf)
            transfer = torch.zeros_like(x0, dtype=torch.bool)
            for j in range(n):
                _, select = torch.topk(confidence[j], k=int(num_transfer_tokens[j, i]))
                transfer[j, select] = True
            x[transfer] = x0[transfer]
    out.append(x)
    return out


@pytest.mark.parametrize("block_length,nfe", [(0, 5), (4, 6), (2, 8)])
def test_low_confidence_is_llada(block_length, nfe):
    """``confidence`` (block_length 0: one block; 4 and 2: LLaDA's semi-AR low-confidence
    remasking) takes, step by step, the tokens and positions LLaDA's generate takes on the same
    fixed logits and uniforms."""
    n, P, G, T = 16, 3, 8, 0.7
    L = P + G
    logits = fixed_logits(L, seed=2)
    prompt = torch.randint(0, V, (n, P), generator=torch.Generator().manual_seed(5))
    full = torch.cat([prompt, torch.zeros(n, G, dtype=torch.long)], 1)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    pmask[:, :P] = True
    m = make_method("mdlm", {"block_length": block_length}, V, L)
    ours = states(
        m,
        Stub(logits),
        full,
        pmask,
        nfe=nfe,
        temperature=T,
        decoding="confidence",
        generator=torch.Generator().manual_seed(9),
    )
    want = reference_llada(
        logits, prompt, G, block_length or G, nfe, T, torch.Generator().manual_seed(9)
    )
    assert len(ours) == len(want) == nfe + 1
    for k, (a, b) in enumerate(zip(ours, want)):
        assert torch.equal(a, b), f"step {k} differs in {int((a != b).sum())} places"


def dream_confidence(probs, kind):
    """Dream generation_utils.py::sample_tokens' ``margin_confidence`` / ``neg_entropy``."""
    if kind == "margin":
        sorted_probs, _ = torch.sort(probs, dim=-1, descending=True)
        return sorted_probs[..., 0] - sorted_probs[..., 1]
    return torch.sum(probs * torch.log(probs + 1e-10), dim=-1)


@pytest.mark.parametrize("kind", ["margin", "entropy"])
@pytest.mark.parametrize("options", [{}, {"top_k": 3}], ids=["plain", "top3"])
def test_margin_and_entropy_reveal_the_scheduled_count_most_confident_first(kind, options):
    """With fixed logits the Dream confidences are fixed per position, so each step reveals the
    next positions in descending confidence (computed on the tempered, filtered probabilities as
    Dream does), as many as LLaDA's even split schedules. The logits are chosen so that the top-1
    probability, the other order and the unfiltered probabilities would reveal other sets."""
    n, L, nfe, T = 4, 12, 4, 0.6
    logits = fixed_logits(L, seed=0, scale=1.0)
    lg = logits[0].double() / T
    lg[:, V] = -torch.inf
    raw = torch.softmax(lg, -1)
    if options.get("top_k"):  # Dream top_k_logits
        kth = torch.topk(lg, options["top_k"])[0][..., -1, None]
        lg = lg.masked_fill(lg < kth, -torch.inf)
    probs = torch.softmax(lg, -1)
    counts = get_num_transfer_tokens(torch.ones(n, L, dtype=torch.bool), nfe)[0].tolist()

    def step_sets(conf):
        order, out, done = conf.argsort(descending=True), [], 0
        for c in counts:
            out.append(set(order[done : done + c].tolist()))
            done += c
        return out

    want = step_sets(dream_confidence(probs, kind))
    other = "entropy" if kind == "margin" else "margin"
    assert want != step_sets(dream_confidence(probs, other))
    assert want != step_sets(probs.max(-1).values)  # top-1 probability (maskgit_plus at T = 0)
    if options:
        assert want != step_sets(dream_confidence(raw, kind))
    m = make_method("mdlm", options, V, L)
    seen = states(
        m,
        Stub(logits),
        torch.zeros(n, L, dtype=torch.long),
        torch.zeros(n, L, dtype=torch.bool),
        nfe=nfe,
        temperature=T,
        decoding=kind,
        generator=torch.Generator().manual_seed(0),
    )
    for k in range(nfe):
        new = (seen[k] == V) & (seen[k + 1] != V)
        for row in new:
            assert set(row.nonzero().flatten().tolist()) == want[k], (k, row)
    assert not (seen[-1] == V).any()


# -- semi-autoregressive blocks -------------------------------------------------------------
def block_index(pmask, bl):
    """Each generated position's block: its place among its row's generated positions // bl."""
    return ((~pmask).long().cumsum(-1) - 1) // bl


@pytest.mark.parametrize("decoding", ["ancestral", "greedy", *CONFIDENCE_ORDERS])
def test_blocks_go_left_to_right_with_the_calls_split_evenly(decoding):
    """With block_length: the calls split over ceil(most generated / block_length) blocks, the
    first nfe % blocks one more; no position of block b + 1 is revealed before block b is
    complete and block b is complete after its calls; the confidence orders reveal, per step and
    row, the count LLaDA schedules for the block."""
    n, L, bl = 24, 14, 3
    prompt, pmask = scattered_prompt(n, L, seed=1)
    gen = ~pmask
    n_blocks = math.ceil(int(gen.sum(-1).max()) / bl)
    nfe = 2 * n_blocks + 2  # an uneven split: the first two blocks take one call more
    assert n_blocks >= 3 and gen.sum(-1).min() < gen.sum(-1).max()  # rows differ in length
    calls = [nfe // n_blocks + (b < nfe % n_blocks) for b in range(n_blocks)]
    ends = torch.tensor(calls).cumsum(0).tolist()  # the call index after which block b is done
    m = make_method("mdlm", {"block_length": bl}, V, L)
    plan = m.blocks(gen, nfe)
    assert [c for _, c in plan] == calls
    blk = torch.where(gen, block_index(pmask, bl), -1)
    seen = states(
        m,
        Stub(fixed_logits(L, seed=6)),
        prompt,
        pmask,
        nfe=nfe,
        decoding=decoding,
        generator=torch.Generator().manual_seed(2),
    )
    assert len(seen) == nfe + 1
    for b in range(n_blocks):
        for i, x in enumerate(seen):
            masked = x == V
            if i <= ends[b]:  # inputs up to block b's last call: later blocks untouched
                assert masked[blk > b].all(), (decoding, b, i)
            if i >= ends[b]:  # from then on block b is complete
                assert not masked[blk == b].any(), (decoding, b, i)
    if decoding in CONFIDENCE_ORDERS:
        starts = [0, *ends[:-1]]
        for b in range(n_blocks):
            sched = get_num_transfer_tokens((blk == b) & gen, calls[b])
            for k in range(calls[b]):
                i = starts[b] + k
                got = ((seen[i] == V) & (seen[i + 1] != V)).sum(-1)
                assert torch.equal(got, sched[:, k]), (decoding, b, k)


@pytest.mark.parametrize("decoding", ["ancestral", "cached", "confidence", "entropy"])
def test_one_block_is_the_decoding_without_blocks(decoding):
    """A block_length at least the generated length makes one block: the same samples as
    block_length 0 for the same generator."""
    n, L = 8, 12
    prompt, pmask = scattered_prompt(n, L, seed=3)
    outs = []
    for bl in (0, L, 50):
        m = make_method("mdlm", {"block_length": bl}, V, L)
        g = torch.Generator().manual_seed(1)
        outs.append(
            m.sample(Stub(fixed_logits(L)), prompt, pmask, nfe=5, decoding=decoding, generator=g)
        )
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_too_few_calls_for_the_blocks_is_an_error_naming_block_length():
    """nfe below the number of blocks, or blocks with a ReMDM decoding: a ValueError naming
    block_length, raised before any backbone call."""
    L = 12
    pm = torch.zeros(2, L, dtype=torch.bool)
    m = make_method("mdlm", {"block_length": 4}, V, L)  # 3 blocks
    stub = Stub(fixed_logits(L))
    for decoding, nfe in (("ancestral", 2), ("confidence", 1), ("remdm-cap", 8)):
        with pytest.raises(ValueError, match="block_length"):
            m.sample(stub, torch.zeros(2, L, dtype=torch.long), pm, nfe=nfe, decoding=decoding)
        assert stub.inputs == [] and m.nfe_counter == 0
    m.sample(stub, torch.zeros(2, L, dtype=torch.long), pm, nfe=3, decoding="confidence")
    assert len(stub.inputs) == 3


# -- MDLM's cache ---------------------------------------------------------------------------
def test_cached_is_ancestral_with_fewer_calls():
    """``cached`` gives ``ancestral``'s samples for the same generator (a deterministic network)
    and calls the network once, then once after each step that changed the batch: fewer than
    nfe where steps reveal nothing."""
    L, nfe = 16, 32
    data = sort_data(2, n_digits=8, seed=3)
    method, net = perturbed_dit(seq_len=L)
    prompt, pmask = data.x.clamp_max(V - 1), data.clean_mask
    rec = Recorder(net)
    kw = {"nfe": nfe, "temperature": 1.0}
    want = method.sample(
        rec, prompt, pmask, decoding="ancestral", generator=torch.Generator().manual_seed(4), **kw
    )
    trajectory = [*rec.inputs, want]
    changed = sum(not torch.equal(a, b) for a, b in zip(trajectory[:-2], trajectory[1:-1]))
    expected_calls = 1 + changed
    method.nfe_counter = 0
    got = method.sample(
        net, prompt, pmask, decoding="cached", generator=torch.Generator().manual_seed(4), **kw
    )
    assert torch.equal(got, want)
    assert method.nfe_counter == expected_calls < nfe


def test_cached_calls_every_step_when_time_conditioned():
    """A time-conditioned network is called at every step (the reference disables its cache),
    with ancestral's samples."""
    L, nfe = 16, 24
    data = sort_data(2, n_digits=8, seed=3)
    method, net = perturbed_dit({"time_conditioning": True}, seq_len=L)
    prompt, pmask = data.x.clamp_max(V - 1), data.clean_mask
    g = torch.Generator().manual_seed(4)
    want = method.sample(net, prompt, pmask, nfe=nfe, decoding="ancestral", generator=g)
    method.nfe_counter = 0
    g = torch.Generator().manual_seed(4)
    got = method.sample(net, prompt, pmask, nfe=nfe, decoding="cached", generator=g)
    assert torch.equal(got, want) and method.nfe_counter == nfe
    assert set(MDLM.call_skipping) == {"cached", *PARALLEL}


# -- every decoding --------------------------------------------------------------------------
def _every_case():
    for decoding in MDLM.decodings:
        yield decoding, {}
        if decoding not in REMDM:
            yield decoding, {"block_length": 3}


@pytest.mark.parametrize("decoding,options", list(_every_case()))
def test_every_decoding_ends_with_no_mask(decoding, options):
    """The canvas each decoding leaves (before sample's guard) holds no [MASK] id, prompt kept,
    for several NFE, on scattered prompts; exactly nfe calls (``cached``: at most)."""
    n, L = 16, 12
    prompt, pmask = scattered_prompt(n, L, seed=2)
    m = make_method("mdlm", options, V, L)
    for nfe in (4, 5, 9):  # block_length 3: up to 4 blocks
        stub = Stub(fixed_logits(L, seed=nfe))
        g = torch.Generator().manual_seed(nfe)
        out = m.sample_canvas(stub, prompt, pmask, nfe=nfe, decoding=decoding, generator=g)
        assert not (out == V).any(), (decoding, nfe)
        assert torch.equal(out[pmask], prompt[pmask])
        calls = len(stub.inputs)
        assert calls <= nfe if decoding == "cached" else calls == nfe


def test_new_options_leave_cell_ids_unchanged():
    """Every sampling option is declared omit_default, so the cells planned before they
    existed keep their ids."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(MDLM.Options)}
    for name in MDLM.sampling_options:
        assert fields[name].metadata.get("omit_default"), name


# -- learnability ---------------------------------------------------------------------------
#: The session model (best EMA weights; training stops at the first evaluation where
#: ``ancestral`` >= LEARN_TARGET: 0.902 at step 900 here, 0.883 .. 0.918 over sampling seeds 0-4)
#: sits on the bar, so a sampler as good as ancestral falls just under it about half the time. A
#: new decoding passes when it reaches LEARN_TARGET, or when it is not below the same model's
#: ancestral sampler by more than three standard errors of their paired difference (the same 256
#: items at sampling seeds 0-2, each decoding's own draws). Measured on a 2-core AMD EPYC, torch 1
#: thread (exact match at seed 0, the mean over seeds 0-4): margin 0.898 / 0.895, entropy 0.906 /
#: 0.897, remdm-cap 0.887 / 0.896, remdm-rescale 0.891 / 0.898, remdm-conf 0.906 / 0.891,
#: remdm-loop 0.895 / 0.895, confidence 0.930 / 0.921, cached 0.902 / 0.902.
SEEDS = (0, 1, 2)
#: semi-autoregressive blocks on sort-8 lose to the whole canvas (a block is filled before the
#: digits after it are seen): measured 0.852 / 0.866 (ancestral, blocks of 4) and 0.891 / 0.871
#: (confidence, blocks of 2) against ancestral's 0.902 / 0.902; a real property of block decoding
#: on this task, not a defect of the sampler (its fidelity tests are above)
REAL_DROP = {
    "ancestral-bl4": "0.852 at seed 0, mean 0.866 over seeds 0-4",
    "confidence-bl2": "0.891 at seed 0, mean 0.871 over seeds 0-4",
}


def _learn_case(decoding, options):
    name = f"{decoding}-bl{options['block_length']}" if options else decoding
    marks = ()
    if name in REAL_DROP:
        why = f"blocks on sort-8 lose to the whole canvas: measured {REAL_DROP[name]}"
        marks = pytest.mark.xfail(reason=why, strict=False)
    return pytest.param(decoding, options, id=name, marks=marks)


LEARN_CASES = [
    _learn_case(decoding, options)
    for decoding, options in [
        ("cached", {}),
        ("confidence", {}),
        ("margin", {}),
        ("entropy", {}),
        ("remdm-cap", {}),
        ("remdm-rescale", {}),
        ("remdm-conf", {}),
        ("remdm-loop", {}),
        ("ancestral", {"block_length": 4}),
        ("confidence", {"block_length": 4}),
        ("confidence", {"block_length": 2}),
    ]
]


@pytest.mark.slow
@pytest.mark.learns_sort8("mdlm", {})
@pytest.mark.parametrize("decoding,options", LEARN_CASES)
def test_new_decodings_on_the_learned_sort8_model(decoding, options, learned_sort8):
    """The session's learned MDLM sort-8 model (the conformance learnability run, trained once)
    sampled with each new decoding at the learnability NFE (helpers.LEARN_NFE, T = 1) reaches
    the learnability target, or is within three standard errors of the same model's ancestral
    sampler on the same items (block comment above)."""
    method, net = learned_sort8.model()
    sampler = make_method("mdlm", options)
    sampler.load_state_dict(method.state_dict())
    new = torch.cat(
        [sort8_outcomes(sampler, net, decoding, seed=s, temperature=1.0) for s in SEEDS]
    )
    base = torch.cat(
        [sort8_outcomes(method, net, "ancestral", seed=s, temperature=1.0) for s in SEEDS]
    )
    d = new.double() - base.double()
    se = float(d.std()) / math.sqrt(len(d))
    acc, diff = float(new.double().mean()), float(d.mean())
    assert acc >= LEARN_TARGET or diff >= -3 * se, (
        f"{decoding} {options}: exact match {acc:.3f}, {diff:+.3f} against ancestral "
        f"(3 s.e. = {3 * se:.3f})"
    )
