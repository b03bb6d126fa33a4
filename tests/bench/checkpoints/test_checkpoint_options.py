"""Method behaviours the released S-FLM checkpoints need (docs/methods/sflm.md, flm.md):

- S-FLM ``time_convention``: "inverted" feeds the network sigma = -log(1 - alpha) (alpha = clean
  weight), in training (and so validation, which calls the same loss) and in sampling;
- FLM ``cap_order``: the sampling temperature before or after the output soft-cap;
- OWT samples holding id 50257 (the reference's added [PAD]; 50,258-class models) through the
  Gen. PPL preparation and decode, ids >= 50258 refused with one line;
- every method built with a vocabulary larger than the data's ids.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from genppl_tiny import tiny_gpt2
from helpers import make_method, make_model
from torch import nn

from bench import registry
from bench.config import ConfigError, TaskConfig
from bench.evaluate.genppl import evaluator as G
from bench.method import Batch

EOT = 50256
PAD = 50257


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "method,name,default",
    [("sflm", "time_convention", "clean"), ("flm", "cap_order", "cap_then_temperature")],
)
def test_new_options_default_to_todays_behaviour_and_are_omitted_at_default(method, name, default):
    f = {f.name: f for f in dataclasses.fields(registry.METHODS[method].Options)}[name]
    assert f.default == default and f.metadata.get("omit_default") is True
    with pytest.raises(ConfigError, match=f"{method}.options.{name}: must be one of"):
        make_method(method, {name: "nope"})


# --------------------------------------------------------------------------- S-FLM time input


class SigmaRecorder(nn.Module):
    """A stand-in denoiser: records the time input of every call, logits = z E^T."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, dim)
        self.sigmas: list[torch.Tensor] = []

    def forward(self, z, sigma):
        self.sigmas.append(sigma.detach().clone())
        return z.float() @ self.embed.weight.float().T


def _sflm(convention: str, **kw):
    # the released "fixed" file: inverted alpha_trunc 0.869 = clean-weight cap 0.131
    opts = {"alpha_trunc_inverted": 0.869, "time_convention": convention, **kw}
    return make_method("sflm", opts, vocab=11, seq_len=6)


def _expected_sigma(alpha: torch.Tensor, convention: str) -> torch.Tensor:
    a = alpha.double()
    return (-torch.log(1.0 - a) if convention == "inverted" else -torch.log(a)).float()


@pytest.mark.parametrize("convention", ["clean", "inverted"])
def test_sflm_training_feeds_the_conventions_sigma(convention):
    m, net = _sflm(convention), SigmaRecorder(11, 8)
    x = torch.randint(0, 11, (3, 6))
    b = Batch(x, torch.zeros_like(x, dtype=torch.bool), torch.ones_like(x, dtype=torch.bool))
    t = torch.tensor([0.0, 0.5, 1.0])
    out = m.loss(net, b, t)
    assert torch.isfinite(out.loss)
    (sigma,) = net.sigmas
    alpha = m.alpha(t.double())
    assert m.alpha_cap == pytest.approx(0.131)
    torch.testing.assert_close(sigma, _expected_sigma(alpha, convention), rtol=1e-6, atol=0)
    if convention == "inverted":  # sigma in [0, 0.14] for the 0.131 cap (s-flm algo.py::SFM)
        assert sigma[0] == pytest.approx(-math.log(1 - 0.131), rel=1e-5)
        assert sigma[2] == pytest.approx(-math.log(1 - 1e-3), rel=1e-5)  # schedule floor eps
        assert float(sigma.max()) < 0.141
    else:
        assert sigma[0] == pytest.approx(-math.log(0.131), rel=1e-5)
        assert sigma[2] == pytest.approx(-math.log(1e-3), rel=1e-5)


@pytest.mark.parametrize("convention", ["clean", "inverted"])
def test_sflm_sampler_feeds_the_conventions_sigma(convention):
    m, net = _sflm(convention), SigmaRecorder(11, 8)
    prompt = torch.zeros(2, 6, dtype=torch.long)
    pmask = torch.zeros(2, 6, dtype=torch.bool)
    nfe = 4
    g = torch.Generator().manual_seed(0)
    out = m.sample(net, prompt, pmask, nfe=nfe, decoding="exact", generator=g)
    assert out.shape == (2, 6) and len(net.sigmas) == nfe
    alphas = m.alpha(torch.linspace(1.0, 1e-5, nfe + 1, dtype=torch.float64))
    for k, sigma in enumerate(net.sigmas):
        assert sigma.shape == (2,)
        want = _expected_sigma(alphas[k].expand(2), convention)
        torch.testing.assert_close(sigma, want, rtol=1e-6, atol=0)


def test_sflm_conventions_share_schedule_and_only_differ_in_the_time_input():
    x = torch.randint(0, 11, (2, 6))
    b = Batch(x, torch.zeros_like(x, dtype=torch.bool), torch.ones_like(x, dtype=torch.bool))
    t = torch.tensor([0.3, 0.8])
    losses, alphas = {}, {}
    for conv in ("clean", "inverted"):
        m, net = _sflm(conv), SigmaRecorder(11, 8)
        torch.manual_seed(1)  # same z_0
        losses[conv] = float(m.loss(net, b, t).loss.detach())  # the recorder ignores sigma
        alphas[conv] = m.alpha(t.double())
    assert torch.equal(alphas["clean"], alphas["inverted"])
    assert losses["clean"] == losses["inverted"]


def test_sflm_without_time_conditioning_feeds_zero_in_both_conventions():
    m, net = _sflm("inverted", time_conditioning=False), SigmaRecorder(11, 8)
    x = torch.randint(0, 11, (2, 6))
    b = Batch(x, torch.zeros_like(x, dtype=torch.bool), torch.ones_like(x, dtype=torch.bool))
    m.loss(net, b, torch.tensor([0.2, 0.9]))
    assert torch.equal(net.sigmas[0], torch.zeros(2))


def test_sflm_inverted_refuses_the_adaptive_schedule():
    # as the reference (s-flm algo.py::SFM._validate_configuration)
    with pytest.raises(ConfigError, match="sflm.options.time_convention: 'inverted' cannot"):
        make_method("sflm", {"time_convention": "inverted", "adaptive": True})


def test_sflm_inverted_runs_on_the_real_backbones():
    for backbone in ("dit", "sarch"):
        m, net = make_model(
            "sflm", {"time_convention": "inverted", "backbone": backbone}, vocab=11, seq_len=6
        )
        x = torch.randint(0, 11, (2, 6))
        b = Batch(x, torch.zeros_like(x, dtype=torch.bool), torch.ones_like(x, dtype=torch.bool))
        assert torch.isfinite(m.loss(net, b, torch.tensor([0.2, 0.9])).loss)


# --------------------------------------------------------------------------- FLM cap order


def _flm(order: str, cap: float = 2.0):
    return make_method("flm", {"output_cap": cap, "cap_order": order}, vocab=7, seq_len=4)


def test_flm_cap_orders_follow_their_formulas():
    torch.manual_seed(0)
    raw = 6.0 * torch.randn(3, 4, 7)
    c, T = 2.0, 0.5
    a = _flm("cap_then_temperature").process_logits(raw, T)
    b = _flm("temperature_then_cap").process_logits(raw, T)
    torch.testing.assert_close(a, c * torch.tanh(raw / c) / T)  # this harness's order
    torch.testing.assert_close(b, c * torch.tanh((raw / T) / c))  # reference TrainerBase.forward
    assert (a - b).abs().max() > 0.1
    # T = 1, or no cap: the orders agree exactly
    assert torch.equal(
        _flm("cap_then_temperature").process_logits(raw, 1.0),
        _flm("temperature_then_cap").process_logits(raw, 1.0),
    )
    assert torch.equal(
        _flm("cap_then_temperature", cap=0.0).process_logits(raw, T),
        _flm("temperature_then_cap", cap=0.0).process_logits(raw, T),
    )


class FixedLogits(nn.Module):
    """A stand-in FLM denoiser returning the same raw logits R (L, V) for every input."""

    def __init__(self, raw: torch.Tensor):
        super().__init__()
        self.embed = nn.Embedding(raw.shape[-1], 8)
        self.raw = raw

    def forward(self, h, s):
        return self.raw.expand(h.shape[0], -1, -1).clone()


@pytest.mark.parametrize("order", ["cap_then_temperature", "temperature_then_cap"])
def test_flm_sampler_uses_the_cap_order(order, monkeypatch):
    from baselines import flm as flm_mod

    torch.manual_seed(0)
    raw = 6.0 * torch.randn(4, 7)
    seen = []
    real = flm_mod.FLM.euler_step

    def spy(z, x_hat, gamma, gamma_next, eps=1e-5):
        seen.append(x_hat.clone())
        return real(z, x_hat, gamma, gamma_next, eps)

    monkeypatch.setattr(flm_mod.FLM, "euler_step", staticmethod(spy))
    m = _flm(order)
    T = 0.5
    m.sample(
        FixedLogits(raw),
        torch.zeros(2, 4, dtype=torch.long),
        torch.zeros(2, 4).bool(),
        nfe=2,
        temperature=T,
        generator=torch.Generator().manual_seed(0),
    )
    (x_hat,) = seen
    c = 2.0
    logits = (
        c * torch.tanh(raw / c) / T
        if order == "cap_then_temperature"
        else (c * torch.tanh(raw / T / c))
    )
    want = torch.softmax(logits.double(), -1).expand(2, -1, -1)
    torch.testing.assert_close(x_hat, want)


# --------------------------------------------------------------------------- OWT id 50257


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    from bench.text.gpt2 import load_gpt2_tokenizer

    return load_gpt2_tokenizer("whisper", str(tmp_path_factory.mktemp("sflm-data")))


@pytest.fixture(scope="module")
def padded(gpt2):
    """The reference harness's tokenizer: GPT-2 with "[PAD]" added as a special token."""
    tok = copy.deepcopy(gpt2)
    tok.add_special_tokens({"pad_token": "[PAD]"})
    assert (len(tok), tok.pad_token_id) == (50258, PAD)
    return tok


@pytest.fixture(scope="module")
def ref_same(gpt2):
    return G.wrap_model(tiny_gpt2(50257, n_positions=64, eos=EOT), gpt2, "tiny-gpt2", device="cpu")


def _sample(gpt2):
    a, b = gpt2.encode("Hello world. The city"), gpt2.encode(" council met on Tuesday.")
    return torch.tensor([EOT, *a, PAD, *b, PAD, PAD, EOT])


def test_pad_id_is_the_reference_added_token(gpt2):
    assert G.reference_pad_id(gpt2) == PAD and G.sample_id_limit(gpt2) == 50258


def test_decode_reads_50257_as_the_reference_tokenizer_does(gpt2, padded):
    ids = _sample(gpt2).tolist()
    for keep in (True, False):
        got = G._decode(gpt2, ids, keep_special=keep, pad_id=PAD)
        want = padded.decode(ids, skip_special_tokens=not keep, clean_up_tokenization_spaces=False)
        assert got == want
    assert "city[PAD] council" in G._decode(gpt2, ids, keep_special=True, pad_id=PAD)
    assert "[PAD]" not in G._decode(gpt2, ids, keep_special=False, pad_id=PAD)


def test_reference_mode_scores_pad_as_its_text(gpt2, padded, ref_same):
    sample = _sample(gpt2)
    prep = G.Preparer(ref_same, gpt2, mode="reference")
    assert prep.same  # same tokenizer, but a [PAD] sample is re-encoded, as the reference does
    p = prep(sample.tolist())
    text = padded.decode(sample.tolist(), skip_special_tokens=False)  # batch_decode default
    assert p.ids == gpt2(text, add_special_tokens=False)["input_ids"] and p.retokenized
    assert max(p.ids) < 50257 and [58, 47, 2885] == p.ids[p.ids.index(58) :][:3]
    row = G.GenPPL(
        ref=ref_same, ref_model="tiny", sample_tokenizer=gpt2, mode="reference", progress=False
    ).score(sample[None])[0]
    assert row["n_scored"] > 0 and math.isfinite(row["nll_sum"])
    # entropy over the generator's ids, the [PAD] id included
    assert row["entropy"] == pytest.approx(G.unigram_entropy(sample.tolist()))


def test_paper_mode_drops_pad_like_skip_special_tokens(gpt2, ref_same):
    sample = _sample(gpt2)
    ev = G.GenPPL(ref=ref_same, ref_model="tiny", sample_tokenizer=gpt2, progress=False)
    with_pad, without = ev.score([sample.tolist(), [t for t in sample.tolist() if t != PAD]])
    assert with_pad["dropped_ids"] == 3 and without["dropped_ids"] == 0
    assert with_pad["n_scored"] == without["n_scored"] > 0
    assert with_pad["nll_sum"] == pytest.approx(without["nll_sum"], rel=1e-6)


def test_ids_above_the_added_pad_are_one_line_errors(gpt2, ref_same):
    bad = _sample(gpt2)
    bad[3] = 50258
    with pytest.raises(
        ValueError, match=r"sample id 50258 outside .*50257 ids .*\[PAD\] = 50257\)$"
    ):
        G.Preparer(ref_same, gpt2)(bad.tolist())
    with pytest.raises(ValueError, match="owt: sample id 50258"):
        G.check_sample_ids(bad[None], gpt2, where="owt")
    G.check_sample_ids(_sample(gpt2)[None], gpt2)  # 50257 is fine
    neg = _sample(gpt2)
    neg[1] = -1
    with pytest.raises(ValueError, match="sample id -1"):
        G.check_sample_ids(neg[None], gpt2)


def test_owt_evaluate_accepts_pad_and_refuses_larger_ids(tmp_path, gpt2, ref_same):
    from bench.data.owt.task import OWTTask

    corpus = tmp_path / "c.txt"
    corpus.write_text("the river city.\n")
    task = OWTTask(
        TaskConfig(
            name="owt",
            data_dir=str(tmp_path),
            options={"corpus": str(corpus), "seq_len": 16, "bootstrap": 20},
        ),
        tokenizer=gpt2,
    )
    task._genppl = G.GenPPL(
        ref=ref_same, ref_model="tiny", sample_tokenizer=gpt2, progress=False, n_resamples=20
    )
    g = task.groups()[0]
    x = torch.cat([_sample(gpt2), torch.tensor([262])])[:16].repeat(2, 1)
    assert (x == PAD).any()
    m = {v.metric: v for v in task.evaluate(x, task.eval_data(g, 2), g)}
    assert math.isfinite(m["gen_ppl"].value) and task.last_rows[0]["dropped_ids"] >= 1
    x[0, 5] = 50258
    with pytest.raises(ValueError, match="owt: sample id 50258 outside"):
        task.evaluate(x, task.eval_data(g, 2), g)


# --------------------------------------------------------------------------- method vocabulary


@pytest.mark.parametrize("name", sorted(registry.METHODS))
def test_methods_use_their_own_vocabulary_not_the_data(name):
    """A method built for V = 13 (a released file's classes) on data whose ids stay < 12 (the
    task's vocabulary): the backbone, loss and sampler all work in the method's V."""
    V, L = 13, 8
    m, net = make_model(name, {}, vocab=V, seq_len=L)
    out_dim = {"mdlm": V + 1}.get(name, V)
    x = torch.randint(0, V - 1, (4, L))
    clean = torch.zeros_like(x, dtype=torch.bool)
    b = Batch(x, clean, ~clean)
    t = torch.tensor([0.2, 0.4, 0.6, 0.8]) if m.uses_time else None
    assert torch.isfinite(m.loss(net, b, t).loss)
    with torch.no_grad():
        if name in ("flm", "sflm"):
            logits = net(torch.randn(2, L, net.embed.weight.shape[-1]), torch.zeros(2))
        else:
            logits = net(x[:2], torch.zeros(2))
    assert logits.shape[-1] == out_dim
    pmask = torch.zeros(2, L, dtype=torch.bool)
    pmask[:, 0] = True
    s = m.sample(net, x[:2], pmask, nfe=2, generator=torch.Generator().manual_seed(0))
    assert s.shape == (2, L) and int(s.min()) >= 0 and int(s.max()) < V
    if name == "flm":  # the alpha <-> gamma table is built for the method's V
        from baselines.flm import AlphaGammaTable

        ref = AlphaGammaTable(V, m.opts.lut_points, m.opts.gh_nodes)._np
        assert all((a == b).all() for a, b in zip(m.table._np, ref))
