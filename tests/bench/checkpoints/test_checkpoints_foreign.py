"""Foreign and malformed reference-format files in every command that reads one
(``python -m bench.checkpoints inspect`` / ``convert``, ``python -m bench.eval``,
``python -m bench.generate``): one line on stderr naming the file (and the global or key at
fault), exit 2, nothing written; a pickled ``os.system`` call is never run (docs/checkpoints.md)."""

from __future__ import annotations

import os
import zipfile

import pytest
import torch
from helpers import reference_checkpoint

from bench.checkpoints.__main__ import main as checkpoints_main
from bench.commands import eval as bench_eval
from bench.commands import generate as bench_generate

SORT4 = ["--task", "sort", "--set", "task.options.n_digits=4"]


def _os_system(command):  # what os.system is while a file is written: pickled as `GLOBAL os system`
    raise AssertionError("never called while writing")


_os_system.__module__, _os_system.__name__, _os_system.__qualname__ = "os", "system", "system"


class _Command:
    """Pickles as a call of os.system (what a malicious checkpoint carries)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Unlisted:
    """A class outside the allow-list standing where a tensor should be."""

    def __init__(self):
        self.data = [1, 2, 3]


def _resave(good, dst, edit, monkeypatch):
    """``good`` with ``edit`` applied, written with ``os.system`` pickled as ``GLOBAL os system``
    (on Linux the real one is posix.system)."""
    ck = torch.load(good, weights_only=False)
    edit(ck)
    with monkeypatch.context() as m:
        m.setattr(os, "system", _os_system)
        torch.save(ck, dst)
    return dst


def _backbone_keys(ck):
    return [k for k in ck["state_dict"] if k.startswith("backbone.") and "inv_freq" not in k]


def _set(key, value):
    def edit(ck):
        ck["state_dict"][key] = value

    return edit


def _drop_output_layer(ck):  # consistently: raw weights and their EMA tensors
    keys = _backbone_keys(ck)
    for i in reversed([i for i, k in enumerate(keys) if "output_layer.linear" in k]):
        del ck["ema"]["shadow_params"][i]
        del ck["state_dict"][keys[i]]


def _wrong_qkv_shape(ck):  # raw and EMA agree, our backbone does not
    k = "backbone.blocks.0.attn_qkv.weight"
    ck["state_dict"][k] = torch.zeros(3, 3)
    ck["ema"]["shadow_params"][_backbone_keys(ck).index(k)] = torch.zeros(3, 3)


def _heads(n):
    def edit(ck):
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(ck["hyper_parameters"]["config"])
        cfg["model"]["n_heads"] = n
        ck["hyper_parameters"]["config"] = OmegaConf.create(cfg)

    return edit


def _truncated(good, dst):
    dst.write_bytes(good.read_bytes()[: good.stat().st_size // 2])


def _text(good, dst):
    dst.write_bytes(b"hello")


def _zip_not_torch(good, dst):
    with zipfile.ZipFile(dst, "w") as z:
        z.writestr("a.txt", "x")


def _garbage_pickle(good, dst):  # the torch zip layout, data.pkl not a pickle
    with zipfile.ZipFile(good) as zi, zipfile.ZipFile(dst, "w") as zo:
        for n in zi.namelist():
            zo.writestr(n, b"\x80\x02garbage" if n.endswith("data.pkl") else zi.read(n))


EMBED = "backbone.vocab_embed.embedding"
COMMAND = "a call of os.system, a global outside the allow-list (never run)"
#: name -> (edit of the checkpoint dict, or a writer of the whole file; what the line says)
CASES = {
    "os.system as a weight": (
        lambda marker: _set(EMBED, _Command(marker)),
        f"state_dict['{EMBED}'] is {COMMAND}, not a tensor",
    ),
    "os.system as an EMA tensor": (
        lambda marker: lambda ck: ck["ema"]["shadow_params"].__setitem__(0, _Command(marker)),
        f"ema['shadow_params'][0] is {COMMAND}, not a tensor",
    ),
    "os.system as the EMA list": (
        lambda marker: lambda ck: ck["ema"].__setitem__("shadow_params", _Command(marker)),
        f"ema['shadow_params'] is {COMMAND}, not a list of tensors",
    ),
    "os.system as the config": (
        lambda marker: lambda ck: ck["hyper_parameters"].__setitem__("config", _Command(marker)),
        f"hyper_parameters['config'] is {COMMAND}, not a config",
    ),
    "os.system as the step": (
        lambda marker: lambda ck: ck.__setitem__("global_step", _Command(marker)),
        f"global_step is {COMMAND}, not an integer",
    ),
    "a class not allowed as a weight": (
        lambda marker: _set(EMBED, Unlisted()),
        f"state_dict['{EMBED}'] is a {__name__}.Unlisted object, a class outside the allow-list",
    ),
    "no output layer": (
        lambda marker: _drop_output_layer,
        "no output layer (output_layer.linear.weight or lm_head.weight) in a mdlm backbone",
    ),
    "wrong shapes": (
        lambda marker: _wrong_qkv_shape,
        "blocks.0.qkv.weight: shape (3, 3) in the file, (96, 32) here",
    ),
    "heads that do not split the width": (
        lambda marker: _heads(5),
        "backbone: d_model=32 must split into 5 heads",
    ),
    "no state_dict": (
        lambda marker: lambda ck: ck.pop("state_dict"),
        "not a Lightning checkpoint (no 'state_dict' key)",
    ),
    "truncated": (_truncated, "not a checkpoint (not a zip-format torch.save file)"),
    "not a zip": (_text, "not a checkpoint (not a zip-format torch.save file)"),
    "a zip, not torch.save": (_zip_not_torch, "unreadable checkpoint"),
    "not a pickle inside": (_garbage_pickle, "unreadable checkpoint (UnpicklingError"),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return reference_checkpoint(tmp_path_factory.mktemp("good"), "good", "mdlm", {})


def test_the_payload_is_a_real_os_system_call(tmp_path, monkeypatch, good):
    """The files below really carry `GLOBAL os system` and a plain unpickle runs it (so the
    tests can fail)."""
    control = tmp_path / "control"
    path = _resave(good, tmp_path / "evil.ckpt", _set(EMBED, _Command(control)), monkeypatch)
    with zipfile.ZipFile(path) as z:
        [pkl] = [n for n in z.namelist() if n.endswith("data.pkl")]
        assert b"cos\nsystem\n" in z.read(pkl)  # protocol 2: GLOBAL 'os system'
    torch.load(path, weights_only=False)  # the unsafe way
    assert control.exists()


def _commands(path, out):
    return {
        "inspect": lambda: checkpoints_main(["inspect", str(path)]),
        "convert": lambda: checkpoints_main(["convert", str(path), "--out", str(out / "model")]),
        "bench.eval": lambda: bench_eval.main(
            [
                str(path),
                *SORT4,
                "--nfe",
                "2",
                "--limit",
                "2",
                "--no-progress",
                "--results-dir",
                str(out / "results"),
            ]
        ),  # fmt: skip
        "bench.generate": lambda: bench_generate.main(
            [str(path), *SORT4, "--prompt", "5 4 3 2", "--results-dir", str(out / "results")]
        ),
    }


@pytest.mark.parametrize("case", list(CASES))
def test_one_line_exit_2_nothing_written_nothing_run(tmp_path, capsys, monkeypatch, good, case):
    make, needle = CASES[case]
    marker = tmp_path / "pwned"
    path = tmp_path / "bad.ckpt"
    if make in (_truncated, _text, _zip_not_torch, _garbage_pickle):
        make(good, path)
    else:
        _resave(good, path, make(marker), monkeypatch)
    out = tmp_path / "out"
    before = sorted(tmp_path.rglob("*"))
    for name, command in _commands(path, out).items():
        rc = command()
        said = capsys.readouterr()
        lines = said.err.strip().splitlines()
        assert rc == 2 and said.out == "", (name, rc, said)
        assert len(lines) == 1, (name, said.err)
        assert lines[0].startswith("error: ") and str(path) in lines[0], (name, lines[0])
        assert needle in lines[0], (name, lines[0])
        assert sorted(tmp_path.rglob("*")) == before, name  # nothing written
        assert not marker.exists(), name  # os.system never ran
