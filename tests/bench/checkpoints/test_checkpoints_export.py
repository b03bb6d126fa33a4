"""export -> convert gives back the same model: identical weights, method state and options."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import write_model_folder

from bench.checkpoints import convert, load
from bench.checkpoints.export import export
from bench.config import canonical

V, L = 13, 16

CASES = {
    "ar": ("ar", {}),
    "mdlm": ("mdlm", {}),
    "duo": ("duo", {}),
    "candi": ("candi", {}),
    "flm": ("flm", {"output_cap": 30.0, "attn_softcap": 50.0}),
    "sflm-dit": ("sflm", {"alpha_max": 0.3}),
    "sflm-sarch": ("sflm", {"backbone": "sarch", "alpha_max": 0.3}),
    "sflm-adaptive": ("sflm", {"alpha_max": 0.3, "adaptive": True, "adaptive_warmup": 0,
                               "adaptive_refit_every": 2, "adaptive_n_grid": 50}),
}  # fmt: skip


def _fit_adaptive(m, bb):
    """A fitted adaptive schedule travels too."""
    if getattr(m, "adaptive", None) is not None:
        t = torch.rand(64)
        for step in range(4):
            m.adaptive.record(t, (1 - t) * 3 + 0.1 * torch.rand(64), step)
        assert m.adaptive.fitted


def _model_folder(tmp_path, method, options, seed=0):
    """A model folder (weights.pt + model.json) holding a randomly initialised model."""
    return write_model_folder(
        tmp_path / "model",
        method,
        options,
        vocab=V,
        seq_len=L,
        steps=123,
        noise=0.05,
        seed=seed,
        edit=_fit_adaptive,
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_then_convert_gives_back_the_model(tmp_path, case):
    method, options = CASES[case]
    folder, m, bb = _model_folder(tmp_path, method, options)
    ckpt = export(folder, tmp_path / "ref.ckpt")
    raw = torch.load(ckpt, weights_only=False)
    assert all(k.startswith(("backbone.", "noise.", "cont_", "disc_")) for k in raw["state_dict"])
    assert len(raw["ema"]["shadow_params"]) == len(
        [k for k in raw["state_dict"] if k.startswith("backbone.") and "inv_freq" not in k]
    )
    meta = convert(str(ckpt), tmp_path / "back")
    assert meta["options"] == canonical(dataclasses.asdict(m.opts))
    assert meta["source"]["global_step"] == 123
    back = load(str(tmp_path / "back"))
    a, b = bb.state_dict(), back.backbone.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    if getattr(m, "adaptive", None) is not None:
        sa, sb = m.adaptive.get_extra_state(), back.method.adaptive.get_extra_state()
        assert torch.equal(sa["alpha_vals"], sb["alpha_vals"])
        assert sa["refit_count"] == sb["refit_count"] > 0


def test_export_of_a_folder_without_weights_is_one_line(tmp_path):
    from bench.checkpoints import CheckpointError

    with pytest.raises(CheckpointError, match="no weights.pt"):
        export(tmp_path, tmp_path / "x.ckpt")


#: our method case -> the fixture kind whose key order is the reference module's
_KIND = {"ar": "ar", "mdlm": "mdlm", "duo": "duo", "candi": "candi", "flm": "flm_caps",
         "sflm-dit": "sfm_dit_adaptive", "sflm-sarch": "sfm_arch_adaptive"}  # fmt: skip


@pytest.mark.parametrize("case", sorted(_KIND))
def test_export_follows_the_reference_parameter_order(tmp_path, case):
    """The reference copies the EMA list into its parameters by position, so the file must list
    them in the reference module's order (tests/checkpoints_ref.backbone_keys, checked against
    the reference classes), and carry the loop counters its on_load_checkpoint reads."""
    from tests.checkpoints_ref import backbone_keys

    method, options = CASES[case]
    folder, m, _ = _model_folder(tmp_path, method, options)
    ck = torch.load(export(folder, tmp_path / "ref.ckpt"), weights_only=False)
    ours = [k[len("backbone.") :] for k in ck["state_dict"] if k.startswith("backbone.")]
    rows = {"rows_in": 0, "rows_out": 0}
    want = [k for k, _, _ in backbone_keys(_KIND[case], 32, 2, 16, 2, rows)]
    assert ours == want
    loops = ck["loops"]["fit_loop"]
    assert loops["epoch_loop.batch_progress"]["current"]["completed"] == 123
    if case == "candi":  # the error-rate table r(sigma) of this vocabulary, increasing
        disc = ck["state_dict"]["disc_noise_table"]
        assert torch.all(disc[1:] >= disc[:-1]) and 0 < disc[0] < disc[-1] < (V - 1) / V


# --------------------------------------------------------------------------- the stored config


def _reference_backbone(cfg, vocab_size: int) -> list:
    """``(name, shape, is_buffer)`` of the backbone the reference builds from ``cfg`` alone, read
    by attribute as its constructors read it: ``TrainerBase`` picks the class by
    ``config.model.type``, then each class reads its keys (s-flm ``models/dit.py::DIT``,
    ``flm_dit.py::FLMDIT``, ``candi_dit.py::ContDIT``, ``sphere_dit.py::SphereDiT``,
    ``sphere_arch.py::SphereArch``). A missing key is an AttributeError, as there; the key
    table is tests/checkpoints_ref.backbone_keys (checked against the reference classes)."""
    from tests.checkpoints_ref import backbone_keys

    m, a = cfg.model, cfg.algo
    d, cond, H, n = m.hidden_size, m.cond_dim, m.n_heads, m.n_blocks
    assert isinstance(float(m.dropout), float) and int(m.length) > 0
    out_extra = 0
    if m.type == "dit":
        causal, adaln = a.causal_attention, a.adaLN
        assert isinstance(getattr(m, "softcap", 0.0), float)
        assert causal == (not adaln)  # the two DIT variants the reference trains (AR / the rest)
        kind = "ar" if causal else "mdlm"
    elif m.type == "flm-dit":
        assert isinstance(getattr(m, "softcap", 0.0), float)
        assert not getattr(a, "double_temb", False)  # else a second time embedding
        assert not getattr(a, "learnable_loss_weighting", False)  # else a weighting MLP
        kind = "flm"
    elif m.type == "candi-dit":
        assert isinstance(float(a.mixed_coeff), float)
        if not m.use_original_rope:
            assert isinstance(m.softcap, float)
        kind = "candi"
    elif m.type == "sphere-dit":
        assert a.adaLN and m.init in ("random", "ngpt", "unit_var", "pretrained")
        assert isinstance(float(m.eps), float) and m.pretrained_ckpt_path is None
        out_extra = 1 if m.learn_temperature_scaling else 0
        kind = "sfm_dit_adaptive"
    elif m.type == "sphere-arch":
        assert m.init in ("random", "ngpt", "pretrained") and isinstance(float(m.eps), float)
        assert m.use_time_alpha and not m.use_time_token and m.mlp_type == "gelu"
        assert m.normalize_input_embed in (True, False) and m.pretrained_ckpt_path is None
        kind = "sfm_arch_adaptive"
    else:
        raise AssertionError(f"model.type {m.type!r} is none of the reference's backbones")
    rows = {"rows_in": vocab_size, "rows_out": vocab_size + out_extra}
    return backbone_keys(kind, d, H, cond, n, rows)


class _Attr:
    """A plain dict read by attribute (a missing key is an AttributeError), recursively."""

    def __init__(self, d: dict):
        self._d = d

    def __getattr__(self, key):
        try:
            v = self._d[key]
        except KeyError:
            raise AttributeError(key) from None
        return _Attr(v) if isinstance(v, dict) else v


#: reference algorithms that add a mask class after the tokenizer's ids (s-flm algo.py: AR,
#: MDLM, CANDI: ``mask_index = vocab_size; vocab_size += 1``)
_MASK_ALGOS = ("ar", "mdlm", "candi")


@pytest.mark.parametrize("case", sorted(CASES))
def test_exported_config_builds_the_reference_backbone(tmp_path, case):
    """The stored config is an omegaconf DictConfig (the reference reads it by attribute, as it
    reads the released files') holding every key the reference's backbone constructor reads:
    the backbone it builds from the config alone (for a tokenizer of our |V| ids) has exactly
    the file's keys and shapes, so ``load_state_dict(strict=True)`` and the EMA copy by position
    fit; our safe reader reads the same config back as a plain dict."""
    from omegaconf import DictConfig, OmegaConf

    from bench.checkpoints.reference import read

    method, options = CASES[case]
    folder, _, _ = _model_folder(tmp_path, method, options)
    ck = torch.load(export(folder, tmp_path / "ref.ckpt"), weights_only=False)
    cfg = ck["hyper_parameters"]["config"]
    assert isinstance(cfg, DictConfig) and isinstance(cfg.model, DictConfig)
    rows = V + (1 if cfg.algo.name in _MASK_ALGOS else 0)
    assert ck["hyper_parameters"]["vocab_size"] == (rows if cfg.algo.name in _MASK_ALGOS else None)
    plain = read(tmp_path / "ref.ckpt").config  # unpickled without omegaconf (placeholders)
    assert plain == OmegaConf.to_container(cfg)
    params = [k for k in ck["state_dict"] if k.startswith("backbone.") and "inv_freq" not in k]
    for config in (cfg, _Attr(plain)):
        table = _reference_backbone(config, rows)
        assert [f"backbone.{k}" for k, _, _ in table] == [
            k for k in ck["state_dict"] if k.startswith("backbone.")
        ]
        for name, shape, _ in table:
            assert tuple(ck["state_dict"][f"backbone.{name}"].shape) == shape, name
        trainable = [shape for _, shape, buf in table if not buf]
        assert [tuple(t.shape) for t in ck["ema"]["shadow_params"]] == trainable
        assert len(params) == len(trainable)
    # what the reference's algorithm classes read besides (trainer_base.py / algo.py)
    for key in ("training.ema", "training.antithetic_sampling", "training.sampling_eps",
                "algo.parameterization", "algo.T", "algo.time_conditioning", "model.length",
                "sampler.predictor", "sampler.p_nucleus", "noise.type", "noise.eps",
                "prior.type", "optim.lr", "neg_infinity_mode"):  # fmt: skip
        assert OmegaConf.select(cfg, key, throw_on_missing=True) is not None, key


def test_export_needs_no_omegaconf_and_no_lightning(tmp_path):
    """The exporter writes the DictConfig without importing omegaconf (a runtime dependency it
    does not have) or the trainer."""
    import subprocess
    import sys
    from pathlib import Path

    folder, _, _ = _model_folder(tmp_path, "mdlm", {})
    root = Path(__file__).resolve().parents[3]
    code = (
        "import sys\n"
        "sys.modules['omegaconf'] = None  # importing it would fail\n"
        "from bench.checkpoints.export import export\n"
        f"export({str(folder)!r}, {str(tmp_path / 'x.ckpt')!r})\n"
        "bad = [m for m in sys.modules if m.startswith(('lightning', 'pytorch_lightning'))]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = convert(str(tmp_path / "x.ckpt"), tmp_path / "back")
    assert meta["method"] == "mdlm"
