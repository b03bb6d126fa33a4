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
