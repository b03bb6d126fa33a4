"""Checks of the test helper ``checkpoints_ref`` itself: the tiny reference-format checkpoints
have the released files' container, keys, shapes, vocabulary rows and EMA layout (the reference
harness's, docs/checkpoints.md), and the reference forward runs for every
kind, deterministically, with each family's post-processing."""

from __future__ import annotations

import pickle
import sys

import checkpoints_ref as R
import pytest
import torch

TOP_LEVEL = {
    "epoch",
    "global_step",
    "pytorch-lightning_version",
    "state_dict",
    "loops",
    "callbacks",
    "optimizer_states",
    "lr_schedulers",
    "hparams_name",
    "hyper_parameters",
    "ema",
    "sampler",
}
#: rows of the input table per layout (s-flm dataloader.py at tiny scale, base vocabulary 11)
ROWS = {
    "tinygsm": {"ar": 13, "mdlm": 13, "candi": 13},
    "owt": {"ar": 12, "mdlm": 12, "candi": 13},
}
#: shadow tensors at 2 blocks (s-flm models/ema.py): 1 + 4 + N x 10 + 5, 1 + N x 8 + 3,
#: 2 + 4 + N x 14 + 1
N_SHADOW = {"ar": 20, "sfm_arch_adaptive": 35}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """{(kind, vocab): (info, checkpoint dict)} for every kind in both layouts."""
    root = tmp_path_factory.mktemp("refckpt")
    out = {}
    for vocab in ("tinygsm", "owt"):
        for kind in R.KINDS:
            path = root / f"{kind}-{vocab}.ckpt"
            info = R.write_reference_checkpoint(path, kind, vocab=vocab)
            with R.stub_dataloader_module():
                ckpt = torch.load(path, map_location="cpu", weights_only=False)
            out[kind, vocab] = info, ckpt
    return out


def _load_fails_without_dataloader(path):
    assert "dataloader" not in sys.modules
    with pytest.raises(ModuleNotFoundError, match="dataloader"):
        torch.load(path, map_location="cpu", weights_only=False)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, map_location="cpu", weights_only=True)


@pytest.mark.parametrize("kind,vocab", [("mdlm", "tinygsm"), ("sfm_arch_adaptive", "tinygsm"),
                                        ("duo", "owt"), ("flm_owt", "owt")])  # fmt: skip
def test_fixture_needs_the_absent_dataloader_module(tmp_path, kind, vocab):
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import UnsupportedInterpolationType

    path = tmp_path / "x.ckpt"
    R.write_reference_checkpoint(path, kind, vocab=vocab)
    assert "dataloader" not in sys.modules and not any("dataloader" in p for p in sys.path)
    _load_fails_without_dataloader(path)
    with R.stub_dataloader_module():
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    _load_fails_without_dataloader(path)  # the stub is gone again
    hp = ckpt["hyper_parameters"]
    assert type(hp["tokenizer"]).__module__ == "dataloader"
    assert type(hp["tokenizer"]).__name__ == (
        "VocabSizeTokenizerWrapper" if vocab == "tinygsm" else "GPT2TokenizerFast"
    )
    assert isinstance(hp["config"], DictConfig)
    plain = OmegaConf.to_container(hp["config"], resolve=False)
    assert "${eval:" in plain["loader"]["batch_size"]  # never resolved (custom resolvers)
    assert "${eval:" in plain["trainer"]["accumulate_grad_batches"]
    with pytest.raises(UnsupportedInterpolationType):  # needs the reference's resolvers
        OmegaConf.to_container(hp["config"], resolve=True)


@pytest.mark.parametrize("vocab", ["tinygsm", "owt"])
@pytest.mark.parametrize("kind", R.KINDS)
def test_layout_matches_the_reference_format(written, kind, vocab):
    info, ckpt = written[kind, vocab]
    assert set(ckpt) == TOP_LEVEL
    assert ckpt["hparams_name"] == "kwargs" and ckpt["global_step"] == info["global_step"]
    sd = ckpt["state_dict"]
    d, cond = 32, 16
    rows = ROWS[vocab].get(kind, 12)
    assert info["rows_in"] == rows
    if kind == "sfm_arch_adaptive":
        emb = "backbone.sphere_embed.weight"
        assert list(sd)[:2] == ["backbone.sz", emb]  # own parameter before submodules
        assert sd["backbone.lm_head.weight"].shape == (rows, d)
        assert sd["backbone.blocks.1.query.weight"].shape == (d, d)
        assert sd["backbone.blocks.0.alpha_modulation.weight"].shape == (2 * d, cond)
        assert "backbone.output_layer.linear.weight" not in sd
    else:
        emb = (
            "backbone.sphere_embed.weight"
            if "sfm_dit" in kind
            else "backbone.vocab_embed.embedding"
        )
        head = 13 if kind == "candi" else rows
        assert sd["backbone.output_layer.linear.weight"].shape == (head, d)
        assert sd["backbone.output_layer.linear.bias"].shape == (head,)
        assert sd["backbone.blocks.1.attn_qkv.weight"].shape == (3 * d, d)
        assert sd["backbone.blocks.1.mlp.0.weight"].shape == (4 * d, d)
        has_adaln = kind != "ar"
        assert ("backbone.sigma_map.mlp.0.weight" in sd) == has_adaln
        assert ("backbone.blocks.0.adaLN_modulation.weight" in sd) == has_adaln
        if has_adaln:
            assert sd["backbone.sigma_map.mlp.0.weight"].shape == (cond, 256)
            assert sd["backbone.blocks.0.adaLN_modulation.weight"].shape == (6 * d, cond)
            assert sd["backbone.output_layer.adaLN_modulation.bias"].shape == (2 * d,)
    assert sd[emb].shape == (rows, d)
    inv = sd["backbone.rotary_emb.inv_freq"]
    assert torch.equal(inv, 1.0 / 10000 ** (torch.arange(0, 16, 2).float() / 16))
    # EMA: parameters in state_dict order, buffers excluded, same shapes position by position
    params = [k for k in sd if k.startswith("backbone.") and not k.endswith("inv_freq")]
    shadow = ckpt["ema"]["shadow_params"]
    assert isinstance(shadow, list) and len(shadow) == len(params) == N_SHADOW.get(kind, 30)
    assert [tuple(s.shape) for s in shadow] == [tuple(sd[k].shape) for k in params]
    assert ckpt["ema"]["decay"] == 0.9999 and ckpt["ema"]["num_updates"] == info["global_step"]
    assert all(t.dtype == torch.float32 for t in shadow)
    # other prefixes
    others = {k.split(".")[0] for k in sd if not k.startswith("backbone.")}
    if kind == "candi":
        assert others == {"cont_noise_table", "disc_noise_table"}
        assert sd["cont_noise_table"].shape == (1000,) and sd["cont_noise_table"][0] == 0.2
    elif kind in ("sfm_dit_adaptive", "sfm_arch_adaptive"):
        assert others == {"noise"}
        _check_adaptive_buffers({k[6:]: v for k, v in sd.items() if k.startswith("noise.")})
    else:
        assert others == set()
    # hyper_parameters (s-flm trainer_base.py) and the config keys the importer reads
    hp = ckpt["hyper_parameters"]
    assert hp["vocab_size"] == (rows if kind in ("ar", "mdlm", "candi") else None)
    cfg = hp["config"]
    assert cfg.model.n_heads == 2 and cfg.model.hidden_size == d
    assert cfg.training.ema == 0.9999
    assert cfg.data.tokenizer_name_or_path == (
        "HuggingFaceTB/SmolLM-135M" if vocab == "tinygsm" else "gpt2"
    )
    if kind == "flm_owt":
        assert cfg.model.type == "ddit" and "softcap" not in cfg.model and "sampling" in cfg
    if kind == "flm_caps":
        assert cfg.model.softcap == 50.0 and cfg.algo.cap_value == 30.0
    if kind == "flm":
        assert cfg.model.softcap == 0.0 and cfg.algo.cap_value is None
    if kind == "sfm_dit_fixed":
        assert cfg.algo.invert_time_convention is True and cfg.noise.alpha_min == 0.869
        assert cfg.noise.alpha_max is None and cfg.noise.adaptive is False
    if kind in ("sfm_dit_adaptive", "sfm_arch_adaptive"):
        assert cfg.algo.invert_time_convention is False and cfg.noise.alpha_max == 0.121
        assert cfg.noise.adaptive is True and cfg.noise.adaptive_n_grid == 1000
    if kind == "sfm_arch_adaptive":
        assert cfg.model.use_time_alpha and cfg.model.mlp_type == "gelu"
        assert cfg.algo.renormalize_weights is True and not cfg.model.normalize_input_embed
    if kind == "mdlm":
        assert cfg.algo.time_conditioning is False and cfg.algo.post_process_mode == "log_probs"
    if kind == "candi":
        assert cfg.algo.mixed_coeff == 0.5 and cfg.model.use_original_rope is True


def _check_adaptive_buffers(nb):
    f64 = torch.float64
    assert [(k, v.dtype) for k, v in nb.items()] == [
        ("t_buf", f64),
        ("loss_buf", f64),
        ("buf_pos", torch.int64),
        ("alpha_vals", f64),
        ("has_schedule", torch.bool),
        ("ema_alpha_vals", f64),
        ("refit_count", torch.int64),
    ]
    assert nb["t_buf"].shape == nb["loss_buf"].shape == (R.DEFAULTS["buffer_size"],)
    assert nb["buf_pos"].shape == nb["has_schedule"].shape == nb["refit_count"].shape == ()
    assert bool(nb["has_schedule"]) and int(nb["refit_count"]) == R.DEFAULTS["refit_count"]
    for vals in (nb["alpha_vals"], nb["ema_alpha_vals"]):
        assert vals.shape == (1000,)
        assert (vals.diff() < 0).all()  # clean weight decreasing over linspace(0, 1, 1000)
        assert 1e-3 - 1e-12 <= float(vals.min()) and float(vals.max()) <= 0.121 + 1e-12
    assert not torch.equal(nb["alpha_vals"], nb["ema_alpha_vals"])


@pytest.mark.parametrize("kind", R.KINDS)
def test_ema_differs_from_raw_weights(written, kind):
    info, ckpt = written[kind, "tinygsm"]
    sd = ckpt["state_dict"]
    params = [k for k in sd if k.startswith("backbone.") and not k.endswith("inv_freq")]
    for k, s in zip(params, ckpt["ema"]["shadow_params"]):
        assert not torch.allclose(s, sd[k]), k
        assert torch.equal(s, info["ema_sd"][k])  # the info dict carries the EMA weights
        assert s.abs().max() > 0  # adaLN, head: nonzero
    raw = {k: v for k, v in sd.items() if k.startswith("backbone.")}
    inp = R.make_inputs(info)
    a = R.reference_logits(kind, info["ema_sd"], inp["inputs"], inp["time"], info)
    b = R.reference_logits(kind, raw, inp["inputs"], inp["time"], info)
    live = a > -1e5
    assert (a - b)[live].abs().max() > 0.1


@pytest.mark.parametrize("vocab", ["tinygsm", "owt"])
@pytest.mark.parametrize("kind", R.KINDS)
def test_reference_logits_runs_and_is_deterministic(written, tmp_path, kind, vocab):
    info, _ = written[kind, vocab]
    inp = R.make_inputs(info, batch=3, length=6, seed=1)
    out = R.reference_logits(kind, info["ema_sd"], inp["inputs"], inp["time"], info)
    assert out.shape == (3, 6, info["n_logits"]) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    # log-probabilities: each row normalised
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(3, 6), atol=1e-5, rtol=0)
    again = R.reference_logits(kind, info["ema_sd"], inp["inputs"], inp["time"], info)
    assert torch.equal(out, again)
    # same seed -> the same file contents; another seed -> other weights
    info2 = R.write_reference_checkpoint(tmp_path / "a.ckpt", kind, vocab=vocab)
    assert all(torch.equal(info2["ema_sd"][k], v) for k, v in info["ema_sd"].items())
    info3 = R.write_reference_checkpoint(tmp_path / "b.ckpt", kind, vocab=vocab, seed=1)
    assert any(not torch.equal(info3["ema_sd"][k], v) for k, v in info["ema_sd"].items())
    # the backbone output depends on the time input (not for ar / mdlm: no time conditioning)
    raw = R.reference_logits(
        kind, info["ema_sd"], inp["inputs"], inp["time"], info, post_process=False
    )
    if kind not in ("ar", "mdlm"):
        shifted = R.reference_logits(
            kind, info["ema_sd"], inp["inputs"], inp["time"] + 0.5, info, post_process=False
        )
        assert (raw - shifted).abs().max() > 1e-3


def test_post_processing_per_family(written):
    # AR: mask logit (last row) at -1e6 before the log-softmax
    info, _ = written["ar", "tinygsm"]
    inp = R.make_inputs(info)
    out = R.reference_logits("ar", info["ema_sd"], inp["inputs"], None, info)
    assert (out[..., info["mask_id"]] < -9e5).all() and info["mask_id"] == 12
    # AR is causal: a later token does not change earlier positions
    x2 = inp["inputs"].clone()
    x2[:, -1] = (x2[:, -1] + 1) % 12
    out2 = R.reference_logits("ar", info["ema_sd"], x2, None, info)
    torch.testing.assert_close(out[:, :-1], out2[:, :-1], rtol=0, atol=0)
    # MDLM: carry-over at unmasked positions, mask column ~ -1e6, time input ignored
    info, _ = written["mdlm", "owt"]
    inp = R.make_inputs(info)
    x = inp["inputs"]
    out = R.reference_logits("mdlm", info["ema_sd"], x, inp["time"], info)
    keep = x != info["mask_id"]
    assert keep.any() and (~keep).any()
    assert (out[keep].gather(-1, x[keep][:, None]) == 0).all()
    assert (out[keep].exp().sum(-1) == 1).all()
    assert (out[..., info["mask_id"]] < -9e5).all()
    other = R.reference_logits("mdlm", info["ema_sd"], x, inp["time"] + 3, info)
    assert torch.equal(out, other)
    # CANDI: revealed rows forced to their token; width = tokenizer length (mask column dropped)
    info, _ = written["candi", "tinygsm"]
    inp = R.make_inputs(info)
    out = R.reference_logits("candi", info["ema_sd"], inp["inputs"], inp["time"], info)
    rm = inp["inputs"]["reveal_mask"].bool()
    assert out.shape[-1] == 12 and rm.any() and (~rm).any()
    assert (out[rm].gather(-1, inp["tokens"][rm][:, None]) == 0).all()
    # temperature divides the raw output first
    info, _ = written["duo", "tinygsm"]
    inp = R.make_inputs(info)
    raw = R.reference_logits(
        "duo", info["ema_sd"], inp["inputs"], inp["time"], info, post_process=False
    )
    hot = R.reference_logits(
        "duo", info["ema_sd"], inp["inputs"], inp["time"], info, temperature=2.0
    )
    torch.testing.assert_close(hot, (raw / 2).log_softmax(-1), rtol=0, atol=1e-6)


def test_flm_caps_bite(written):
    info, _ = written["flm_caps", "tinygsm"]
    inp = R.make_inputs(info)
    args = ("flm_caps", info["ema_sd"], inp["inputs"], inp["time"], info)
    capped = R.reference_logits(*args)
    raw = R.reference_logits(*args, post_process=False)
    assert raw.abs().max() > 10  # the output cap 30 tanh(./30) is far from the identity there
    no_attn_cap = R.reference_logits(*args, attn_softcap=0.0)
    assert (capped - no_attn_cap).abs().max() > 0.1
    # temperature before the output cap: 30 tanh(l / T / 30), not 30 tanh(l / 30) / T
    t2 = R.reference_logits(*args, temperature=2.0)
    torch.testing.assert_close(
        t2, (30 * torch.tanh(raw / 2 / 30)).log_softmax(-1), rtol=0, atol=1e-5
    )
    assert (t2 - (30 * torch.tanh(raw / 30) / 2).log_softmax(-1)).abs().max() > 1e-3
    # flm_owt: attention softcap 50 by default (hard-coded in david3684/flm), no output cap
    info, _ = written["flm_owt", "owt"]
    inp = R.make_inputs(info)
    args = ("flm_owt", info["ema_sd"], inp["inputs"], inp["time"], info)
    raw = R.reference_logits(*args, post_process=False)
    torch.testing.assert_close(R.reference_logits(*args), raw.log_softmax(-1), rtol=0, atol=0)
    soft0 = R.reference_logits(*args, post_process=False, attn_softcap=0.0)
    assert (raw - soft0).abs().max() > 0.1


def test_sarch_ema_matrices_are_not_renormalised(written):
    info, ckpt = written["sfm_arch_adaptive", "tinygsm"]
    sd = ckpt["state_dict"]
    for name, axis in [("blocks.0.query.weight", 1), ("blocks.1.att_out.weight", 0),
                       ("lm_head.weight", 1), ("blocks.0.mlp_out.weight", 0)]:  # fmt: skip
        raw = sd["backbone." + name].norm(dim=axis)
        ema = info["ema_sd"]["backbone." + name].norm(dim=axis)
        torch.testing.assert_close(raw, torch.ones_like(raw))  # raw: unit after each step
        assert (ema - 1).abs().max() > 1e-3  # EMA: an average of unit matrices, not unit


def test_time_inputs_follow_the_conventions(written):
    fixed, _ = written["sfm_dit_fixed", "tinygsm"]
    adaptive, _ = written["sfm_dit_adaptive", "tinygsm"]
    c = torch.tensor([1.3e-6, 0.05, 0.131])
    s_fixed = R.reference_time_input("sfm_dit_fixed", fixed, clean_weight=c)
    torch.testing.assert_close(s_fixed, -torch.log(1 - c))
    assert 0 <= float(s_fixed.min()) and float(s_fixed.max()) < 0.141  # sigma in [0, 0.14]
    c = torch.tensor([1e-3, 0.121])
    s_ad = R.reference_time_input("sfm_dit_adaptive", adaptive, clean_weight=c)
    torch.testing.assert_close(s_ad, torch.tensor([6.9078, 2.1120]), atol=1e-4, rtol=0)
    mdlm, _ = written["mdlm", "tinygsm"]
    assert torch.equal(R.reference_time_input("mdlm", mdlm, t=torch.tensor([0.3])), torch.zeros(1))
    duo, _ = written["duo", "tinygsm"]
    t = torch.tensor([0.0, 1.0])
    torch.testing.assert_close(
        R.reference_time_input("duo", duo, t=t), torch.tensor([0.0, -torch.log(torch.tensor(1e-3))])
    )
    flm, _ = written["flm", "tinygsm"]
    assert torch.equal(R.reference_time_input("flm", flm, t=t), t)
    assert R.reference_time_input("ar", written["ar", "owt"][0], t=t) is None


def test_defensive_variants(tmp_path):
    info = R.write_reference_checkpoint(
        tmp_path / "c.ckpt", "duo", compiled_infix=True, teacher_keys=True, alpha_overshoot=0.0
    )
    with R.stub_dataloader_module():
        sd = torch.load(info["path"], weights_only=False)["state_dict"]
    assert (
        "backbone._orig_mod.blocks.0.attn_qkv.weight" in sd
        and "teacher.vocab_embed.embedding" in sd
    )
    assert not any(k.startswith("backbone.blocks") for k in sd)
    info = R.write_reference_checkpoint(
        tmp_path / "o.ckpt", "sfm_dit_adaptive", alpha_overshoot=1.2e-4
    )
    assert abs(float(info["noise"]["alpha_vals"][0]) - 0.12112) < 1e-9  # reference-written files
    with pytest.raises(TypeError):
        R.write_reference_checkpoint(tmp_path / "x.ckpt", "duo", hiden=4)
    with pytest.raises(ValueError):
        R.write_reference_checkpoint(tmp_path / "x.ckpt", "sedd")
