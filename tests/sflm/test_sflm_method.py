"""The registered S-FLM method (sflm.method) and the S-arch backbone (sflm.sarch)."""

from __future__ import annotations

import functools
import io
import math

import pytest
import torch
from helpers import make_model, sort8_accuracy, sort_train_config

import sflm.method as sm
from bench import registry
from bench.backbones.dit import resolve_size
from bench.config import BackboneConfig, ConfigError, build
from bench.method import Batch
from sflm.alpha_star import alpha_star
from sflm.geometry import normalize, slerp
from sflm.sarch import SArch

BB = BackboneConfig(size="cpu-mini")  # d = 64, 2 blocks, 4 heads


#: make(options, vocab=10, seq_len=12, backbone=BB) -> (S-FLM, backbone seeded with 0)
make = functools.partial(make_model, sm.SFLM, seq_len=12, backbone=BB)


def batch(n=8, L=12, V=10, n_clean=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (n, L), generator=g)
    clean = torch.zeros(n, L, dtype=torch.bool)
    clean[:, :n_clean] = True
    return Batch(x, clean, ~clean)


def test_registered_and_options_validated():
    assert registry.METHODS["sflm"] is sm.SFLM
    with pytest.raises(ConfigError, match="alpha_max"):
        build(sm.SFLMOptions, {"alpha_max": "half"}, where="m")
    with pytest.raises(ConfigError, match="alpha_max"):
        build(sm.SFLMOptions, {"alpha_max": 1.5}, where="m")
    with pytest.raises(ConfigError, match="not both"):
        build(sm.SFLMOptions, {"alpha_max": 0.2, "alpha_trunc_inverted": 0.879}, where="m")
    with pytest.raises(ConfigError, match="schedule"):
        build(sm.SFLMOptions, {"schedule": "cosine"}, where="m")


def test_every_option_choice_has_its_table_entry():
    """The option values the method dispatches on are looked up in tables (no comparison of
    names): each choice an option accepts has its entry, and no entry is unreachable."""
    import dataclasses

    from sflm import reference as sref
    from sflm.options import TIME_CONVENTIONS
    from sflm.sampler import FINAL_DECODES, FINAL_READS_TEMPERATURE

    choices = {f.name: f.metadata.get("choices") for f in dataclasses.fields(sm.SFLMOptions)}
    from sflm.schedule import BASE_SCHEDULES

    tables = {
        "schedule": [sref.NOISE_TYPES, BASE_SCHEDULES],
        "backbone": [sm.BACKBONES, sref.FILE_BACKBONES],
        "input_scale": [sm.INPUT_SCALES],
        "time_convention": [TIME_CONVENTIONS],
        "final_decode": [FINAL_DECODES, FINAL_READS_TEMPERATURE, sref.NOISE_REMOVALS],
        "velocity_dtype": [sm.VELOCITY_DTYPES],
    }
    for name, tabs in tables.items():
        for table in tabs:
            assert set(table) == set(choices[name]), name
    assert {f.layout for f in sm.SFLM.reference.families} == set(sm.BACKBONES)
    with pytest.raises(ConfigError, match="cannot be combined with adaptive"):
        build(sm.SFLMOptions, {"time_convention": "inverted", "adaptive": True}, where="m")


def test_truncation_cap_and_the_inverted_convention():
    m, _ = make()  # default: alpha*(0.1) for |V| = 10, d = 64
    assert m.alpha_cap == pytest.approx(alpha_star(10, 64, 0.1))
    t = torch.linspace(0, 1, 11, dtype=torch.float64)
    assert float(m.alpha(t)[0]) == pytest.approx(m.alpha_cap) and float(
        m.alpha(t)[-1]
    ) == pytest.approx(1e-3)
    m, _ = make({"alpha_trunc_inverted": 0.879})  # the paper's TinyGSM ablation notation
    assert m.alpha_cap == pytest.approx(0.121)
    m, _ = make({"alpha_max": 1.0})
    assert float(m.alpha(torch.zeros(1, dtype=torch.float64))) == pytest.approx(1.0)
    m, _ = make(
        {"alpha_max": "star", "delta": 0.01},
        vocab=12,
        backbone=BackboneConfig(size="cpu-mini", d_model=512, n_heads=8),
    )
    assert m.alpha_cap == pytest.approx(0.1109, abs=1e-4)
    assert m.describe()["alpha_cap"] == pytest.approx(m.alpha_cap)


class Capture(torch.nn.Module):
    """Wraps a backbone and records its inputs."""

    def __init__(self, net):
        super().__init__()
        self.net, self.inputs = net, []
        self.embed = net.embed

    def forward(self, x, sigma):
        self.inputs.append((x.detach().clone(), sigma.detach().clone()))
        return self.net(x, sigma)


def test_loss_noises_with_slerp_and_keeps_clean_positions(monkeypatch):
    m, net = make({"alpha_max": 0.3})
    cap = Capture(net)
    b = batch()
    drawn = []
    real = sm.uniform_sphere

    def spy(*a, **k):
        z = real(*a, **k)
        drawn.append(z)
        return z

    monkeypatch.setattr(sm, "uniform_sphere", spy)
    t = torch.linspace(0.05, 0.95, len(b))
    out = m.loss(cap, b, t)
    z_in, sigma = cap.inputs[0]
    alpha = m.alpha(t.double())
    e_hat = normalize(net.embed.weight.detach()[b.x])
    expect = slerp(
        drawn[0], e_hat.double(), alpha[:, None]
    ).float()  # z_t = SLERP(z_0, e_hat, alpha)
    assert torch.allclose(z_in[~b.clean_mask], expect[~b.clean_mask], atol=1e-6)
    assert torch.allclose(z_in[b.clean_mask], e_hat[b.clean_mask], atol=1e-7)
    assert torch.allclose(
        z_in.norm(dim=-1), torch.ones(z_in.shape[:2]), atol=1e-5
    )  # unit latents (reference)
    assert torch.allclose(sigma, -torch.log(alpha).float())
    # plain CE, token mean over the loss mask
    logits = net(z_in, sigma).float()
    nll = -torch.log_softmax(logits, -1).gather(-1, b.x[..., None]).squeeze(-1)
    assert float(out.loss.detach()) == pytest.approx(float(nll[b.loss_mask].mean()), rel=1e-5)


def test_sqrt_d_input_scale():
    m, net = make({"input_scale": "sqrt_d"})
    cap = Capture(net)
    m.loss(cap, batch(), torch.rand(8))
    assert torch.allclose(
        cap.inputs[0][0].norm(dim=-1), torch.full((8, 12), math.sqrt(64)), atol=1e-3
    )


@pytest.mark.parametrize("backbone", ["dit", "sarch"])
def test_gradient_reaches_the_embedding_table_through_slerp(backbone):
    m, net = make({"backbone": backbone})
    if backbone == "dit":  # the zero-initialised head blocks every gradient at step 0
        torch.nn.init.normal_(net.head.weight, std=0.1)
    b = batch()
    b = Batch(
        b.x, torch.zeros_like(b.clean_mask), torch.ones_like(b.loss_mask)
    )  # all positions noised
    m.loss(net, b, torch.rand(8)).loss.backward()
    g = net.embed.weight.grad
    used = torch.unique(b.x)
    assert g is not None and float(g[used].abs().sum(-1).min()) > 0
    # the gradient of a normalised row is tangent to the row (paper eq. grad-unnormalized)
    w = net.embed.weight.detach()
    assert float((g * w).sum(-1).abs().max()) < 1e-5 * float(g.norm())


def test_renorm_option_and_sarch_reprojection():
    m, net = make({"renorm": False})
    with torch.no_grad():
        net.embed.weight.mul_(3.0)
    m.on_after_optimizer_step(net)
    assert float(net.embed.weight.norm(dim=-1).min()) > 2.0  # untouched by default
    m, net = make({"renorm": True})
    with torch.no_grad():
        net.embed.weight.mul_(3.0)
    m.on_after_optimizer_step(net)
    assert torch.allclose(net.embed.weight.norm(dim=-1), torch.ones(10), atol=1e-6)
    # S-arch: matrices are re-projected after every step even with renorm off; the table is not
    m, net = make({"backbone": "sarch"})
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    m.loss(net, batch(), torch.rand(8)).loss.backward()
    opt.step()
    assert float((net.blocks[0].query.weight.norm(dim=1) - 1).abs().max()) > 1e-3
    row_norm0 = net.embed.weight.norm(dim=-1).clone()
    m.on_after_optimizer_step(net)
    for blk in net.blocks:
        for lin in (blk.query, blk.key, blk.value, blk.c_fc):
            assert torch.allclose(
                lin.weight.norm(dim=1), torch.ones(lin.weight.shape[0]), atol=1e-5
            )
        for lin in (blk.att_out, blk.mlp_out):
            assert torch.allclose(
                lin.weight.norm(dim=0), torch.ones(lin.weight.shape[1]), atol=1e-5
            )
    assert torch.allclose(net.lm_head.weight.norm(dim=1), torch.ones(10), atol=1e-5)
    assert torch.equal(net.embed.weight.norm(dim=-1), row_norm0)


def test_sarch_initial_state():
    net = SArch(10, resolve_size(BB))
    d = 64
    b = 1 / math.sqrt(d)
    blk = net.blocks[0]
    assert torch.allclose(blk.query.weight.norm(dim=1), torch.ones(d), atol=1e-5)
    assert torch.allclose(blk.mlp_out.weight.norm(dim=0), torch.ones(4 * d), atol=1e-5)  # columns
    assert float(blk.delta.weight.abs().max()) == 0.0  # zero-init gate modulation
    t_emb = torch.randn(3, 64)
    delta_a, _ = blk.delta(t_emb).chunk(2, -1)
    assert torch.allclose(
        blk._gate(blk.gamma_attn, delta_a), torch.full((3, 1, d), 0.05)
    )  # gamma_init
    assert torch.allclose(blk.s_qk / b, torch.ones(d)) and torch.allclose(
        net.s_z / b, torch.ones(10)
    )
    z = normalize(torch.randn(2, 5, d))
    logits = net(z, torch.rand(2))
    assert logits.shape == (2, 5, 10)
    assert float(logits.abs().max()) <= 1.0 + 1e-5  # |cos| <= 1 times s_z / b = 1 at init
    # ids go through the normalised table
    ids = torch.randint(0, 10, (2, 5))
    assert torch.allclose(
        net(ids, torch.zeros(2)), net(normalize(net.embed(ids)), torch.zeros(2)), atol=1e-6
    )


def test_sample_contract_and_decodings():
    m, net = make({"top_k": 3})
    net.eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))
    b = batch(n=4)
    for dec in ("exact", "stochastic", "top1", "topk", "top2", "default"):
        m.nfe_counter = 0
        out = m.sample(
            net, b.x, b.clean_mask, nfe=4, decoding=dec, generator=torch.Generator().manual_seed(0)
        )
        assert m.nfe_counter == 4 and out.shape == b.x.shape
        assert torch.equal(out[b.clean_mask], b.x[b.clean_mask])
    with pytest.raises(ValueError, match="unknown decoding"):
        m.sample(net, b.x, b.clean_mask, nfe=2, decoding="greedy")
    assert m.resolve_decoding("default") == "exact"
    assert m.temperature_free == ("top1",)
    m2, _ = make({"final_decode": "sample"})
    assert m2.temperature_free == ()


def test_sampler_uses_the_methods_schedule():
    m, net = make({"alpha_max": 0.2, "schedule": "cos2"})
    cap = Capture(net)
    b = batch(n=2)
    m.sample(cap, b.x, b.clean_mask, nfe=5, generator=torch.Generator().manual_seed(0))
    ts = torch.linspace(1.0, 1e-5, 6, dtype=torch.float64)
    expect = -torch.log(m.alpha(ts[:5])).float()
    got = torch.stack([s[0] for _, s in cap.inputs])
    assert torch.allclose(got, expect, atol=1e-6)


def adaptive_method(**kw):
    opts = {
        "adaptive": True,
        "adaptive_warmup": 0,
        "adaptive_refit_every": 2,
        "alpha_max": 0.25,
        **kw,
    }
    return make(opts)


def test_adaptive_state_travels_in_the_method_state_dict():
    m, net = adaptive_method()
    gen = torch.Generator().manual_seed(0)
    for step in range(7):
        t = torch.rand(64, generator=gen)
        m.record_losses(t, torch.sigmoid((t - 0.4) / 0.05), step)
    assert m.adaptive.fitted and m.adaptive.refit_count == 3  # refits at steps 2, 4, 6
    ts = torch.linspace(1.0, 1e-5, 9, dtype=torch.float64)
    base = m.base_schedule.alpha(ts)
    assert not torch.allclose(m.alpha(ts), base, atol=1e-4)  # the schedule changed
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2, _ = adaptive_method()
    assert torch.allclose(m2.alpha(ts), base)
    m2.load_state_dict(torch.load(buf, weights_only=True))
    assert torch.equal(m2.alpha(ts), m.alpha(ts))
    # the sampler then follows the restored schedule
    cap = Capture(net)
    b = batch(n=2)
    m2.sample(cap, b.x, b.clean_mask, nfe=8, generator=torch.Generator().manual_seed(0))
    got = torch.stack([s[0] for _, s in cap.inputs])
    assert torch.allclose(got, -torch.log(m.alpha(ts[:8])).float(), atol=1e-6)


def test_adaptive_schedule_through_the_trainer_checkpoint(tmp_path):
    """Lightning fit -> weights.pt and last.ckpt carry the refitted schedule."""
    from bench.data.toy import sort_data
    from bench.train import fit
    from bench.weights import load_weights

    m, net = adaptive_method()
    cfg = sort_train_config(
        6, batch_size=32, warmup_steps=0, ema=0.0, checkpoint_every=1000, seed=0
    )
    fit(m, net, sort_data(256, seed=0), cfg, tmp_path, progress=False)
    assert m.adaptive.fitted and m.adaptive.refit_count >= 2
    ts = torch.linspace(1.0, 1e-5, 17, dtype=torch.float64)
    m2, net2 = adaptive_method()
    load_weights(m2, net2, tmp_path / "weights.pt")
    assert torch.equal(m2.alpha(ts), m.alpha(ts))
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    state = {
        k[len("method.") :]: v for k, v in ckpt["state_dict"].items() if k.startswith("method.")
    }
    m3, _ = adaptive_method()
    m3.load_state_dict(state)
    assert torch.equal(m3.alpha(ts), m.alpha(ts))


@pytest.mark.slow
@pytest.mark.learns_sort8("sflm", sm.SFLM.learnability_options)
def test_learns_sort8_with_every_velocity_and_a_flipped_sampler_fails(learned_sort8, monkeypatch):
    """S-FLM (DiT, alpha_max 0.2) trained on sort-8 until the exact velocity reaches 90 % exact
    match (the model of tests/bench/test_conformance.py::test_learns_sort8[sflm], trained once per
    session: EMA weights of its stopping evaluation); then every velocity must be close, and the
    same model sampled with the step sign flipped (walking the flow backwards) must fail the
    90 % bar."""
    m, net = learned_sort8.model()

    def acc(decoding, **kw):
        return sort8_accuracy(m, net, decoding, **kw)

    assert acc("exact") >= 0.9
    for dec in ("stochastic", "top1", "top3"):
        assert acc(dec) >= 0.8, dec
    assert acc("top1", temperature=0.3) == acc("top1", temperature=3.0)
    good = acc("exact")
    monkeypatch.setattr(
        sm, "sample_sphere_flow", functools.partial(sm.sample_sphere_flow, sign=-1.0)
    )
    flipped = acc("exact")
    # The flipped walk must fail the 90 % bar and be clearly worse: > 0.08 = 4 binomial sd at
    # n = 256. Measured: 0.93 vs 0.57 (stochastic / top1 / top3: 0.95 / 0.96 / 0.93); sort-8's
    # answer is a function of the prompt, so the last (decode-only) call recovers part of it
    # from the prompt alone whatever the walk did; the walk away from the posterior costs the
    # rest.
    assert flipped < 0.9 and good - flipped > 0.08, (good, flipped)
