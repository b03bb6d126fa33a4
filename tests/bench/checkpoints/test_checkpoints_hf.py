"""The methods' own authors' Hugging Face-format checkpoints (kuleshov-group/mdlm-owt,
s-sahoo/duo, s-sahoo/duo-distilled; bench/checkpoints/hf.py), on small folders written here in
the published format: inspect / convert / load / generate read them, the converted network gives
the outputs of an independent transcription of the authors' forward, and bad input is one line,
exit 2, nothing written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bench import generate as gen
from bench import registry, sweep
from bench.checkpoints import hf, load
from bench.checkpoints.__main__ import main
from bench.config import BackboneConfig

SORT4 = ["--task", "sort", "--set", "task.options.n_digits=4"]


def _random_folder(out: Path, model_type: str, vocab: int, *, seed=0, length=64, **cfg) -> Path:
    """A folder in the published format with random weights (every tensor non-zero, so adaLN,
    the gates and the head all act)."""
    method = hf.formats()[model_type][0]
    cls = registry.METHODS[method]
    torch.manual_seed(seed)
    m = cls(cls.Options(), vocab, length)
    bb = m.build_backbone(BackboneConfig(size="cpu-mini"))
    with torch.no_grad():
        for p in bb.parameters():
            p.normal_(0.0, 0.2)
    return hf.write_folder(bb, model_type, out, model_length=length, **cfg)


@pytest.fixture
def mdlm_dir(tmp_path):
    return _random_folder(tmp_path / "mdlm-owt", "mdlm", 10, time_conditioning=False)


@pytest.fixture
def duo_dir(tmp_path):
    return _random_folder(tmp_path / "duo", "duo", 11, var_min=True)


# --------------------------------------------------------------------------- the authors' forward
# Our own transcription of the forward the authors' Hugging Face code runs (the DIT of
# kuleshov-group/mdlm / s-sahoo/duo models/dit.py, which their hub modelling files carry), written
# from the published code as read, on the file's own tensors and names, in float64.


def _ln(x, w):  # LayerNorm without bias, then the weight
    return F.layer_norm(x, (x.shape[-1],)) * w


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def authors_forward(folder: Path, ids: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    from safetensors.torch import load_file

    cfg = json.loads((folder / "config.json").read_text())
    w = {
        k[len("backbone.") :]: v.double()
        for k, v in load_file(folder / "model.safetensors").items()
    }
    H, B, L = cfg["n_heads"], ids.shape[0], ids.shape[1]
    lin = lambda x, n: F.linear(x, w[f"{n}.weight"], w.get(f"{n}.bias"))  # noqa: E731
    x = w["vocab_embed.embedding"][ids]
    half = 128  # TimestepEmbedder: 256 frequencies, max period 10,000
    freqs = torch.exp(-math.log(10_000) * torch.arange(half, dtype=torch.float64) / half)
    args = sigma.double()[:, None] * freqs[None]
    t = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    c = F.silu(lin(F.silu(lin(t, "sigma_map.mlp.0")), "sigma_map.mlp.2"))
    ang = torch.outer(torch.arange(L, dtype=torch.float64), w["rotary_emb.inv_freq"])
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    for i in range(cfg["n_blocks"]):
        p = f"blocks.{i}"
        sh1, sc1, g1, sh2, sc2, g2 = lin(c, f"{p}.adaLN_modulation")[:, None].chunk(6, dim=2)
        h = _ln(x, w[f"{p}.norm1.weight"]) * (1 + sc1) + sh1
        qkv = lin(h, f"{p}.attn_qkv").view(B, L, 3, H, -1)
        q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))  # (B, H, L, D)
        q, k = (z * cos + _rotate_half(z) * sin for z in (q, k))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v
        x = x + g1 * lin(att.transpose(1, 2).reshape(B, L, -1), f"{p}.attn_out")
        h = _ln(x, w[f"{p}.norm2.weight"]) * (1 + sc2) + sh2
        x = x + g2 * lin(F.gelu(lin(h, f"{p}.mlp.0"), approximate="tanh"), f"{p}.mlp.2")
    shift, scale = lin(c, "output_layer.adaLN_modulation")[:, None].chunk(2, dim=2)
    x = _ln(x, w["output_layer.norm_final.weight"]) * (1 + scale) + shift
    return lin(x, "output_layer.linear")


#: tolerance of ours (float32, LayerNorm and rotary in float32) against the float64 transcription
ATOL = 1e-4


def _inputs(vocab_rows: int, mask: int | None = None):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, vocab_rows, (3, 24), generator=g)
    if mask is not None:
        ids[:, ::3] = mask
    return ids


def test_mdlm_converted_network_gives_the_authors_outputs(mdlm_dir, tmp_path):
    m = load(str(mdlm_dir))
    assert m.family == "mdlm" and m.method.vocab_size == 10 and m.method.mask_id == 10
    assert m.method.opts.time_conditioning is False and m.method.opts.eps == 1e-3
    ids = _inputs(11, mask=10)
    # mdlm diffusion.py _process_sigma: time_conditioning false feeds sigma = 0
    theirs = authors_forward(mdlm_dir, ids, torch.zeros(3))
    alpha = torch.tensor([0.3, 0.6, 0.9])
    with torch.no_grad():
        ours = m.backbone(ids, m.method.sigma(alpha)).double()
        logp = m.method.log_probs(m.backbone, ids, alpha).double()
    scale = max(1.0, theirs.abs().max().item())
    assert theirs.abs().max() > 1.0  # the random weights make real logits, not zeros
    assert (ours - theirs).abs().max().item() <= ATOL * scale
    # SUBS (mdlm diffusion.py _subs_parameterization): mask logit -inf, normalise; unmasked
    # positions carry their token over
    sub = theirs.clone()
    sub[..., 10] = -1e6
    sub = sub.log_softmax(-1)
    masked = ids == 10
    assert (logp[masked][:, :10] - sub[masked][:, :10]).abs().max().item() <= ATOL * scale
    assert (logp[masked][:, 10] < -1e5).all()  # the mask class is never predicted
    assert (logp[~masked].argmax(-1) == ids[~masked]).all()
    assert torch.allclose(
        logp[~masked].exp().sum(-1), torch.ones(int((~masked).sum()), dtype=torch.float64)
    )


def test_duo_converted_network_gives_the_authors_outputs(duo_dir):
    m = load(str(duo_dir))
    assert m.family == "duo" and m.method.vocab_size == 11  # [PAD] is a class (no mask row)
    assert m.method.opts.time_conditioning is True
    ids = _inputs(11)
    alpha = torch.tensor([0.2, 0.5, 0.95])
    # duo trainer_base.py _sigma_from_alphat: sigma = -log alpha_t, time-conditioned (duo_base)
    theirs = authors_forward(duo_dir, ids, -torch.log(alpha))
    with torch.no_grad():
        ours = m.backbone(ids, m.method.sigma(alpha)).double()
    scale = max(1.0, theirs.abs().max().item())
    assert (ours - theirs).abs().max().item() <= ATOL * scale
    # the time input matters: another alpha gives other logits (so the check above saw it)
    other = authors_forward(duo_dir, ids, -torch.log(alpha.flip(0)))
    assert (other - theirs).abs().max().item() > 100 * ATOL * scale
    # DUO_BASE._process_model_output: log_softmax over the V classes
    with torch.no_grad():
        ours_lp = F.log_softmax(m.backbone(ids, m.method.sigma(alpha)).double(), -1)
    assert (ours_lp - theirs.log_softmax(-1)).abs().max().item() <= 2 * ATOL * scale


# --------------------------------------------------------------------------- the commands


def _cli(capsys, *args):
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err.strip()


def test_inspect_and_convert_each_published_format(mdlm_dir, duo_dir, tmp_path, capsys):
    for folder, family, vocab, tc in ((mdlm_dir, "mdlm", 10, False), (duo_dir, "duo", 11, True)):
        rc, out, err = _cli(capsys, "inspect", folder, "--json")
        assert rc == 0, err
        info = json.loads(out)
        assert info["family"] == family and info["method"] == family
        assert info["vocab_rows"]["our_vocab"] == vocab
        assert info["options"]["time_conditioning"] is tc
        assert info["seq_len"] == 64 and info["backbone"]["n_heads"] == 4
        assert info["sha256"] == hf.file_sha256(folder / "model.safetensors")
        assert any(".py files were never fetched or run" in n for n in info["notes"])
        out_dir = tmp_path / f"conv-{family}"
        rc, out, err = _cli(capsys, "convert", folder, "--out", out_dir)
        assert rc == 0, err
        meta = json.loads((out_dir / "model.json").read_text())
        assert meta["method"] == family and meta["vocab_size"] == vocab
        assert meta["source"]["sha256"] == info["sha256"]
        # the converted folder loads to the same network as the published one
        a, b = load(str(folder)), load(str(out_dir))
        ids = _inputs(vocab)
        with torch.no_grad():
            assert torch.equal(a.backbone(ids, torch.ones(3)), b.backbone(ids, torch.ones(3)))


def test_generate_accepts_a_published_folder(mdlm_dir, tmp_path, capsys):
    rd = tmp_path / "results"
    rc = gen.main([str(mdlm_dir), *SORT4, "--prompt", "1 2", "--results-dir", str(rd)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert out.out.splitlines()[-1].startswith("nfe: ")


def test_eval_scores_a_published_folder(mdlm_dir, tmp_path, capsys):
    from bench import eval as ev

    rd = tmp_path / "results"
    argv = [str(mdlm_dir), *SORT4, "--likelihood", "heldout", "--limit", "4", "--results-dir"]
    rc = ev.main([*argv, str(rd)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "heldout" in out.out and "<=" in out.out  # MDLM: an upper bound


def test_a_sweep_checkpoint_entry_plans_a_published_folder(mdlm_dir, tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(
        f"name: s\nresults_dir: {tmp_path / 'results'}\ntask: {{name: sort, options: "
        f"{{n_digits: 4}}}}\nsample: {{nfe: [4], n_samples: 2}}\n"
        f"methods:\n  - method: mdlm\n    checkpoint: {mdlm_dir}\n"
    )
    assert sweep.main([str(f), "--dry-run"]) == 0, capsys.readouterr().err
    # the wrong method for the file is one line
    f.write_text(f.read_text().replace("method: mdlm", "method: duo"))
    assert sweep.main([str(f), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "mdlm checkpoint" in err, err


# --------------------------------------------------------------------------- bad input


def _edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (folder / "config.json").write_text(json.dumps(cfg))


def _one_line_nothing_written(capsys, folder, tmp_path, *needles):
    out_dir = tmp_path / "never"
    for args in (("inspect", folder), ("convert", folder, "--out", out_dir)):
        rc, out, err = _cli(capsys, *args)
        assert rc == 2 and len(err.splitlines()) == 1, err
        assert "Traceback" not in err and all(n in err for n in needles), err
    assert not out_dir.exists()


def test_truncated_or_foreign_weights_file(mdlm_dir, tmp_path, capsys):
    w = mdlm_dir / "model.safetensors"
    good = w.read_bytes()
    w.write_bytes(good[: len(good) // 2])
    _one_line_nothing_written(capsys, mdlm_dir, tmp_path, str(w), "not a readable safetensors")
    w.write_bytes(b"PK\x03\x04 this is a zip, not safetensors" * 10)
    _one_line_nothing_written(capsys, mdlm_dir, tmp_path, str(w), "not a readable safetensors")
    w.unlink()
    _one_line_nothing_written(capsys, mdlm_dir, tmp_path, "model.safetensors")


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"model_type": "llada"}, "model_type 'llada' is not a format"),
        ({"model_type": None}, "model_type None is not a format"),
        ({"auto_map": {"AutoConfig": "configuration_mdlm.MDLMConfig",
                       "AutoModelForMaskedLM": "modeling_evil.Other"}},
         "auto_map.AutoModelForMaskedLM"),
        ({"auto_map": {"AutoModelForCausalLM": "modeling_mdlm.MDLM"}},
         "auto_map.AutoModelForCausalLM"),
        ({"auto_map": ["modeling_mdlm.MDLM"]}, "auto_map is list"),
        ({"rope_theta": 500000}, "config key 'rope_theta'"),
        ({"hidden_dim": 128}, "hidden_dim = 128, the tensors say 64"),
        ({"vocab_size": 12}, "vocab_size = 12, the tensors say 11"),
        ({"n_heads": "twelve"}, "n_heads is 'twelve'"),
        ({"torch_dtype": "int8"}, "torch_dtype 'int8'"),
    ],
)  # fmt: skip
def test_config_the_mapping_does_not_know(mdlm_dir, tmp_path, capsys, changes, needle):
    _edit_config(mdlm_dir, **changes)
    _one_line_nothing_written(capsys, mdlm_dir, tmp_path, needle)


def test_duo_values_the_mapping_does_not_know(duo_dir, tmp_path, capsys):
    _edit_config(duo_dir, causal=True)  # a causal DUO is an AR model, not this mapping's
    _one_line_nothing_written(capsys, duo_dir, tmp_path, "causal = True")
    _edit_config(duo_dir, causal=False, time_conditioning=False)  # not a DUOConfig field
    _one_line_nothing_written(capsys, duo_dir, tmp_path, "config key 'time_conditioning'")


def test_unknown_or_wrong_tensors(mdlm_dir, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    w = mdlm_dir / "model.safetensors"
    sd = load_file(w)
    save_file({**sd, "backbone.blocks.0.lora_A.weight": torch.zeros(2, 2)}, w)
    _one_line_nothing_written(capsys, mdlm_dir, tmp_path, "lora_A")
    save_file({**sd, "teacher.head": torch.zeros(2)}, w)
    _one_line_nothing_written(capsys, mdlm_dir, tmp_path, "'teacher.head' is not a backbone")
    bad = dict(sd)
    bad["backbone.rotary_emb.inv_freq"] = sd["backbone.rotary_emb.inv_freq"] * 2
    save_file(bad, w)
    _one_line_nothing_written(capsys, mdlm_dir, tmp_path, "base-10,000 rotary")
    bad = dict(sd)
    bad["backbone.blocks.1.mlp.0.weight"] = torch.zeros(128, 64)  # MLP ratio 2
    save_file(bad, w)
    _one_line_nothing_written(capsys, mdlm_dir, tmp_path, "blocks.1.mlp.0.weight")


def test_forced_family_that_contradicts_the_format(mdlm_dir, tmp_path, capsys):
    rc, _, err = _cli(capsys, "inspect", mdlm_dir, "--family", "duo")
    assert rc == 2 and "is a mdlm checkpoint, not duo" in err and len(err.splitlines()) == 1


def test_a_vocabulary_the_task_cannot_serve(tmp_path, capsys):
    folder = _random_folder(tmp_path / "big", "mdlm", 30)  # 30 classes: no task has them
    rc = gen.main([str(folder), *SORT4, "--prompt", "1 2", "--results-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "has |V| = 30, task sort has 10" in err, err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*.parquet"))


def test_hub_repo_offline_names_the_fetch_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    rc, _, err = _cli(capsys, "inspect", "hf://someone/mdlm-copy")
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "hf download someone/mdlm-copy config.json model.safetensors" in err, err


def test_hub_repo_in_the_cache_is_read_offline_and_no_code_is_fetched(
    mdlm_dir, tmp_path, capsys, monkeypatch
):
    """A repository in the Hugging Face cache layout (as snapshot_download leaves it) is found
    offline; a .py file beside the data files is never imported."""
    import shutil

    cache = tmp_path / "cache"
    snap = cache / "models--kuleshov-group--mdlm-owt" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(mdlm_dir / f, snap / f)
    (snap / "modeling_mdlm.py").write_text("raise SystemExit('the authors code ran')\n")
    refs = cache / "models--kuleshov-group--mdlm-owt" / "refs"
    refs.mkdir()
    (refs / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    import huggingface_hub.constants as C

    monkeypatch.setattr(C, "HF_HUB_CACHE", str(cache))
    rc, out, err = _cli(capsys, "inspect", "hf://kuleshov-group/mdlm-owt", "--json")
    assert rc == 0, err
    info = json.loads(out)
    assert info["source"] == "hf://kuleshov-group/mdlm-owt" and info["family"] == "mdlm"
    assert info["sha256"] == hf.file_sha256(mdlm_dir / "model.safetensors")


def test_rehearsal_writes_random_weights_in_the_published_format(
    mdlm_dir, duo_dir, tmp_path, capsys, monkeypatch
):
    """An import cell of a Hugging Face-format source is rehearsed with a random folder of the
    same format (config.json + model.safetensors), imported and loaded as the jobs do."""
    import tempfile

    rd = tmp_path / "results"
    path = tmp_path / "r.yaml"
    path.write_text(
        f"name: r\nresults_dir: {rd}\n"
        "task: {name: sort, n_train: 64, options: {n_digits: 4}}\n"
        "sample: {nfe: [2], temperature: [1.0], n_samples: 8, batch_size: 8}\n"
        "likelihood: {datasets: [heldout], batch_size: 4}\n"
        "executor: {kind: debug}\nmethods:\n"
        f"  - {{method: mdlm, checkpoint: {mdlm_dir}}}\n"
        f"  - {{method: duo, checkpoint: {duo_dir}}}\n"
    )
    monkeypatch.setenv("SFLM_BENCH_DATA", str(tmp_path / "cache"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    written = []
    real = hf.write_folder
    monkeypatch.setattr(hf, "write_folder", lambda *a, **k: written.append(a[1]) or real(*a, **k))
    assert sweep.main([str(path), "--rehearse"]) == 0, capsys.readouterr().err
    out, _ = capsys.readouterr()
    phases = [ln.split("|")[2].strip() for ln in out.splitlines() if ln.startswith("| ")]
    assert phases.count("export") == phases.count("import") == phases.count("load") == 2
    assert phases.count("likelihood") == 2  # both have a bound
    assert written == ["mdlm", "duo"]  # the published format, not the reference .ckpt
    assert not rd.exists() and not list(scratch.glob("sflm-rehearse-*"))


def test_the_field_weights_sweep_plans_and_prices_offline(tmp_path, capsys, monkeypatch):
    """sweeps/field_weights.yaml: the three hub repositories planned from the catalogue (not
    fetched, hub offline), every corpus in both layouts, the predicted GPU-hours printed."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    path = Path(__file__).resolve().parents[3] / "sweeps" / "field_weights.yaml"
    assert sweep.main([str(path), "--dry-run", "--results-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert ": 3 import cells, 28 sample cells, 51 likelihood cells" in out, out
    assert "predicted cost:" in out and "GPU-hours" in out
    from bench.config import load_sweep

    ds = load_sweep(path).likelihood.datasets
    corpora = {d.partition("@")[0] for d in ds if "@" in d}
    assert len(corpora) == 8 and all({f"{c}@wrapped", f"{c}@padded"} <= set(ds) for c in corpora)
