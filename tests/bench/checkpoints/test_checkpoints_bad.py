"""Bad checkpoints: one line naming the file and the problem, exit 2, nothing written; a pickle
that would run a command never runs it."""

from __future__ import annotations

import os
import pickle
import zipfile

import pytest
import torch
from helpers import reference_checkpoint as reference_file

from bench.checkpoints import load
from bench.checkpoints.__main__ import main


@pytest.fixture
def good(tmp_path):
    return reference_file(tmp_path, "good", "mdlm", {})


def _cli(capsys, *args):
    rc = main(list(args))
    err = capsys.readouterr().err.strip()
    return rc, err


def _resave(src, dst, edit):
    ck = torch.load(src, weights_only=False)
    edit(ck)
    torch.save(ck, dst)
    return dst


def test_truncated_file(tmp_path, capsys, good):
    bad = tmp_path / "trunc.ckpt"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    rc, err = _cli(capsys, "convert", str(bad), "--out", str(tmp_path / "out"))
    assert rc == 2 and str(bad) in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_not_a_checkpoint(tmp_path, capsys):
    for name, data in [("text.ckpt", b"hello"), ("zip.ckpt", None)]:
        p = tmp_path / name
        if data is None:  # a zip that is not a torch.save file
            with zipfile.ZipFile(p, "w") as z:
                z.writestr("a.txt", "x")
        else:
            p.write_bytes(data)
        rc, err = _cli(capsys, "inspect", str(p))
        assert rc == 2 and str(p) in err and len(err.splitlines()) == 1, err


def test_a_dict_without_weights(tmp_path, capsys):
    p = tmp_path / "plain.ckpt"
    torch.save({"hello": 1}, p)
    rc, err = _cli(capsys, "inspect", str(p))
    assert rc == 2 and "not a Lightning checkpoint" in err


def test_forced_family_that_does_not_match(tmp_path, capsys, good):
    rc, err = _cli(capsys, "convert", str(good), "--family", "ar", "--out", str(tmp_path / "o"))
    assert rc == 2 and "not ar" in err and str(good) in err
    assert not (tmp_path / "o").exists()


def test_shape_mismatch_between_ema_and_weights(tmp_path, capsys, good):
    def edit(ck):
        ck["ema"]["shadow_params"][3] = torch.zeros(5, 5)

    bad = _resave(good, tmp_path / "shape.ckpt", edit)
    rc, err = _cli(capsys, "convert", str(bad), "--out", str(tmp_path / "o"))
    assert rc == 2 and "EMA tensor 3 has shape (5, 5)" in err
    assert not (tmp_path / "o").exists()


def test_ema_count_mismatch(tmp_path, capsys, good):
    bad = _resave(good, tmp_path / "count.ckpt", lambda ck: ck["ema"]["shadow_params"].pop())
    rc, err = _cli(capsys, "inspect", str(bad))
    assert rc == 2 and "EMA tensors for" in err


def test_missing_ema_loads_raw_weights_with_a_warning(tmp_path, capsys, good):
    raw = torch.load(good, weights_only=False)["state_dict"]
    bad = _resave(good, tmp_path / "noema.ckpt", lambda ck: ck.pop("ema"))
    loaded = load(str(bad))
    out = capsys.readouterr().out
    assert "no EMA weights" in out and str(bad) in out
    assert torch.equal(
        loaded.backbone.blocks[0].qkv.weight, raw["backbone.blocks.0.attn_qkv.weight"]
    )


def test_ema_is_used_not_the_raw_weights(tmp_path, good):
    def edit(ck):  # raw weights different from the EMA
        for k, v in ck["state_dict"].items():
            if k.startswith("backbone.") and v.is_floating_point():
                ck["state_dict"][k] = v + 1.0

    bad = _resave(good, tmp_path / "rawdiff.ckpt", edit)
    ck = torch.load(bad, weights_only=False)
    loaded = load(str(bad))
    w = loaded.backbone.blocks[0].qkv.weight
    keys = [k for k in ck["state_dict"] if k.startswith("backbone.") and "inv_freq" not in k]
    i = keys.index("backbone.blocks.0.attn_qkv.weight")
    assert torch.equal(w, ck["ema"]["shadow_params"][i])
    assert not torch.equal(w, ck["state_dict"]["backbone.blocks.0.attn_qkv.weight"])


class _Boom:
    """Pickles as a call to os.system (what a malicious checkpoint would carry)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("usable", [True, False])
def test_a_pickled_command_never_runs(tmp_path, capsys, good, usable):
    marker = tmp_path / "pwned"
    # the payload really runs under a plain unpickle (the test can fail)
    pickle.loads(pickle.dumps(_Boom(tmp_path / "control")))
    assert (tmp_path / "control").exists()

    def edit(ck):
        ck["hyper_parameters"]["tokenizer"] = _Boom(marker)
        if not usable:
            ck["state_dict"] = _Boom(marker)

    bad = _resave(good, tmp_path / "evil.ckpt", edit)
    rc, err = _cli(capsys, "inspect", str(bad))
    assert not marker.exists()
    assert rc == (0 if usable else 2), err
    if usable:
        loaded = load(str(bad))  # the weights are still usable
        assert loaded.family == "mdlm"
        assert not marker.exists()


def test_hub_source_offline_names_the_fetch_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    rc, err = _cli(capsys, "inspect", "hf://jdeschena/s-flm/tinygsm/ar.ckpt")
    assert rc == 2 and len(err.splitlines()) == 1
    assert "hf download jdeschena/s-flm tinygsm/ar.ckpt" in err


def test_unknown_family_name(tmp_path, capsys, good):
    rc, err = _cli(capsys, "inspect", str(good), "--family", "nope")
    assert rc == 2 and "unknown family 'nope'" in err


def test_hub_source_found_in_the_cache_offline(tmp_path, capsys, monkeypatch, good):
    """A hub file fetched earlier (or by hand with ``hf download``) is read from the Hugging Face
    cache with the hub off, and plans with its sha256."""
    import shutil

    from bench.checkpoints import plan_spec
    from bench.checkpoints.source import file_sha256

    cache = tmp_path / "hub"
    repo = cache / "models--jdeschena--s-flm"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / commit / "tinygsm"
    snap.mkdir(parents=True)
    shutil.copyfile(good, snap / "mdlm.ckpt")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    src = "hf://jdeschena/s-flm/tinygsm/mdlm.ckpt"
    rc, err = _cli(capsys, "inspect", src)
    assert rc == 0, err
    sp, source = plan_spec(src)
    assert sp.family == "mdlm" and source.sha256 == file_sha256(good)
    # a released file that is not cached plans from the catalogue, without a sha256
    sp2, source2 = plan_spec(
        "hf://jdeschena/s-flm/tinygsm/sfm/sphere_dit_truncated_fixed_no_renorm.ckpt"
    )
    assert source2.sha256 is None and sp2.options["time_convention"] == "inverted"
