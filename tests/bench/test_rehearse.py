"""``python -m bench.sweep FILE --rehearse``: every distinct model built, trained one step,
sampled and scored at batch 1 and 2, peaks extrapolated to the sweep's batches; a failing phase
or a peak above ``--memory-gb`` stops with one line naming the cell and the phase; nothing is
written into the sweep's results folder."""

from __future__ import annotations

import json
import tempfile

import pytest
import torch
from helpers import owt_corpus, reference_checkpoint, require_offline

from bench import registry, rehearse, sweep
from bench.cell_model import cell_task, method_backbone
from bench.config import load_sweep
from bench.kinds.sample_rehearsal import setups
from bench.plan import plan

SWEEP = """
name: r
results_dir: {rd}
task: {{name: sudoku, grid: 4, difficulties: [easy, hard], train_mix: true, n_train: 64, \
n_valid: 8, data_dir: {dd}}}
backbone: {{size: cpu-mini}}
train: {{steps: 2, batch_size: 16, warmup_steps: 1, ema: 0.5}}
sample: {{nfe: [2, 4], temperature: [1.0, 0.5], n_samples: 8, batch_size: 8}}
seeds: [0, 1]
executor: {{kind: debug}}
methods:
  - {{method: mdlm}}
  - {{method: ar, decoding: [sample, greedy]}}
"""


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A two-method sweep of tiny models; temp folders go under ``tmp_path / "tmp"``."""
    rd = tmp_path / "results"
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.format(rd=rd, dd=tmp_path / "data"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("TMPDIR", str(scratch))  # else /dev/shm when it has room
    return path, rd, scratch


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def test_rehearsal_prints_every_model_and_writes_nothing(tiny, capsys):
    path, rd, scratch = tiny
    assert sweep.main([str(path), "--rehearse"]) == 0
    out, err = capsys.readouterr()
    progress = [ln for ln in _lines(err) if ln.startswith("rehearse [")]
    # two models (the seeds are one model each), one progress line each, in plan order
    assert len(progress) == 2
    assert progress[0].startswith("rehearse [1/2] mdlm/base [easy+hard] (+1 alike): build")
    assert progress[1].startswith("rehearse [2/2] ar/base [easy+hard] (+1 alike): build")
    rows = [ln for ln in _lines(out) if ln.startswith("| ")]
    phases = [r.split("|")[2].strip() for r in rows]
    for phase in ("build", "train", "sample ancestral", "sample sample", "sample greedy", "score"):
        assert phase in phases  # every decoding of each model
    train = next(r for r in rows if r.split("|")[2].strip() == "train")
    cells = [c.strip() for c in train.split("|")]
    assert cells[5] == "16"  # the sweep's train batch (one device)
    assert float(cells[6]) > 0 and cells[7] == "yes / yes / yes"
    sample = next(r for r in rows if r.split("|")[2].strip() == "sample ancestral")
    assert sample.split("|")[5].strip() == "8"  # sample.batch_size
    assert not rd.exists()  # nothing in the results folder
    assert not list(scratch.glob("sflm-rehearse-*"))  # the temp folder is gone


def _raises(self, backbone, prompt, *args, **kwargs):
    raise RuntimeError("boom")


def _short(self, backbone, prompt, *args, **kwargs):
    return prompt[:, :-1].clone()


@pytest.mark.parametrize(
    "broken,needle",
    [(_raises, "RuntimeError: boom"), (_short, "sampler returned shape (1, 39), expected (1, 40)")],
    ids=["raises", "wrong-shape"],
)
def test_a_failing_sampler_stops_with_one_line_naming_cell_and_phase(
    tiny, capsys, monkeypatch, broken, needle
):
    path, rd, scratch = tiny
    monkeypatch.setattr(registry.METHODS["mdlm"], "sample", broken)
    assert sweep.main([str(path), "--rehearse"]) == 1
    out, err = capsys.readouterr()
    assert out == ""  # no table
    last = _lines(err)[-1]
    assert last.startswith(f"rehearse: {path}: mdlm/base easy nfe=2 T=1 ancestral: ")
    assert ": sample ancestral (batch 1): " in last and needle in last
    assert not any("[2/2]" in ln for ln in _lines(err))  # it stopped there
    assert not rd.exists() and not list(scratch.glob("sflm-rehearse-*"))


def test_first_decoding_samples_one_setup_per_model_and_names_the_others(tiny, capsys):
    path, _, _ = tiny
    assert sweep.main([str(path), "--rehearse", "--first-decoding"]) == 0
    out = capsys.readouterr().out
    phases = [ln.split("|")[2].strip() for ln in _lines(out) if ln.startswith("| ")]
    assert "sample sample" in phases and "sample greedy" not in phases
    assert (
        "not rehearsed (--first-decoding" in out and "ar/base [easy+hard] (+1 alike): greedy" in out
    )


def test_a_non_finite_loss_stops_in_the_train_phase(tiny, capsys, monkeypatch):
    path, _, _ = tiny
    real = registry.METHODS["mdlm"].loss

    def nan_loss(self, backbone, batch, t):
        out = real(self, backbone, batch, t)
        out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(registry.METHODS["mdlm"], "loss", nan_loss)
    assert sweep.main([str(path), "--rehearse"]) == 1
    last = _lines(capsys.readouterr().err)[-1]
    assert last.startswith(f"rehearse: {path}: mdlm/base [easy+hard]: train (batch 1): ")
    assert "non-finite loss" in last


def test_a_too_small_memory_stops_with_the_memory_line(tiny, capsys):
    path, rd, _ = tiny
    assert sweep.main([str(path), "--rehearse", "--memory-gb", "0.01"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    last = _lines(err)[-1]
    assert last.startswith(f"rehearse: {path}: mdlm/base [easy+hard]: train: peak ")
    assert "extrapolated to batch 16" in last and "above --memory-gb 0.01" in last
    assert not rd.exists()


def test_memory_gb_needs_rehearse(tiny):
    path, _, _ = tiny
    with pytest.raises(SystemExit) as e:
        sweep.main([str(path), "--memory-gb", "40", "--dry-run"])
    assert e.value.code == 2


def test_extrapolation_is_linear_from_batch_1_and_2_with_a_floor():
    ph = rehearse.Phase("m", "sample", "c", peaks=[10, 13], batch=64)
    assert ph.extrapolated() == 10 + 63 * 3
    ph.floor = 1000  # the optimizer step's peak, which does not grow with the batch
    assert ph.extrapolated() == 1000
    flat = rehearse.Phase("m", "sample", "c", peaks=[10, 9], batch=64)
    assert flat.extrapolated() == 10  # a smaller peak at batch 2 is no negative slope
    assert rehearse.Phase("m", "build", "c", peaks=[5]).extrapolated() is None
    assert rehearse.fits(50e9, None) == "no / yes / yes"
    assert rehearse.fits(50e9, 60) == "yes"


def test_models_are_deduplicated_over_seeds_subsets_and_the_sampling_grid(tiny):
    path, _, _ = tiny
    p = plan(load_sweep(path, ["task.train_mix=false"]), str(path))
    models = rehearse.models_of(p)
    assert len(p.train_cells) == 8  # 2 methods x 2 seeds x 2 subsets
    assert [m.train.method for m in models] == ["mdlm", "ar"]
    assert [len(m.cells) for m in models] == [4, 4]
    # one setup per decoding, whatever the NFE and temperature grid
    assert [[s.decoding for s in setups(m.of_kind["sample"])] for m in models] == [
        ["ancestral"],
        ["sample", "greedy"],
    ]
    assert models[0].train_batch() == 16
    p8 = plan(load_sweep(path, ["train.devices=4"]), str(path))
    assert rehearse.models_of(p8)[0].train_batch() == 4  # the batch of one DDP rank


def test_import_cells_rehearse_export_import_and_load(tmp_path, capsys, monkeypatch):
    """An import cell's model is written as a random file of the checkpoint's format and goes
    through the import job and the sampling job's load; the data cache is left alone."""
    mdlm = reference_checkpoint(tmp_path, "mdlm", "mdlm", {})
    sfm = reference_checkpoint(tmp_path, "sfm", "sflm", {"alpha_max": 0.2, "adaptive": True})
    rd, cache = tmp_path / "results", tmp_path / "cache"
    path = tmp_path / "imp.yaml"
    path.write_text(
        f"name: imp\nresults_dir: {rd}\n"
        "task: {name: sort, n_train: 64, options: {n_digits: 4}}\n"
        "sample: {nfe: [2], temperature: [1.0], n_samples: 8, batch_size: 8}\n"
        "likelihood: {datasets: [heldout], batch_size: 4}\n"
        "executor: {kind: debug}\nmethods:\n"
        f"  - {{method: mdlm, checkpoint: {mdlm}}}\n"
        f"  - {{method: sflm, variant: trained, checkpoint: {sfm}, decoding: [exact], "
        "options: {adaptive: true}}\n"
    )
    monkeypatch.setenv("SFLM_BENCH_DATA", str(cache))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert sweep.main([str(path), "--rehearse"]) == 0
    out, _ = capsys.readouterr()
    rows = [[c.strip() for c in ln.split("|")] for ln in _lines(out) if ln.startswith("| ")]
    phases = [r[2] for r in rows]
    assert phases.count("export") == phases.count("import") == phases.count("load") == 2
    assert "train" not in phases  # nothing is trained
    assert phases.count("likelihood") == 1  # MDLM's bound; S-FLM has none
    assert "sample exact" in phases
    assert not rd.exists() and not list(scratch.glob("sflm-rehearse-*"))
    # the planner remembers the sweep's own files' sha256 in the data cache; the temp files'
    # sha256 went to the temp folder
    memo = json.loads((cache / "checkpoints" / "sha256.json").read_text())
    assert memo and not [k for k in memo if str(scratch) in k]


def test_owt_scorer_builds_an_unavailable_reference_lm_with_random_weights(
    tmp_path, capsys, monkeypatch
):
    require_offline("whisper")
    corpus = owt_corpus(tmp_path / "corpus.jsonl", n_docs=60)
    monkeypatch.setitem(
        rehearse.GPT2_CONFIGS, "tiny-ref", {"n_embd": 32, "n_layer": 1, "n_head": 2}
    )
    path = tmp_path / "owt.yaml"
    path.write_text(
        f"name: o\nresults_dir: {tmp_path / 'results'}\n"
        f"task: {{name: owt, data_dir: {tmp_path / 'data'}, options: {{corpus: {corpus}, "
        "valid_docs: 20, seq_len: 16, num_proc: 1, ref_model: tiny-ref}}\n"
        "backbone: {size: cpu-mini}\ntrain: {steps: 2, batch_size: 4}\n"
        "sample: {nfe: [2], temperature: [1.0], n_samples: 4, batch_size: 4}\n"
        "executor: {kind: debug}\nmethods:\n  - {method: mdlm}\n"
    )
    assert sweep.main([str(path), "--rehearse"]) == 0
    out, _ = capsys.readouterr()
    rows = [[c.strip() for c in ln.split("|")] for ln in _lines(out) if ln.startswith("| ")]
    lm = next(r for r in rows if r[2] == "reference LM")
    assert lm[8] == "tiny-ref (random weights)"
    assert any(r[2] == "score" for r in rows)
    assert "'tiny-ref' is not on this machine" in out


def test_train_counts_adam_moments_in_both_backward_peaks(tiny, monkeypatch):
    """The two backward peaks are measured before AdamW's first step makes its moments: both
    get their bytes, so the batch-1 / batch-2 slope is the activations' alone; the optimizer
    step's peak is the floor."""
    path, _, _ = tiny
    p = plan(load_sweep(path), str(path))
    m = rehearse.models_of(p)[0]
    scripted = iter([100, 130, 500])  # backward at 1, backward at 2, optimizer step

    def fake_measure(fn, device, module=None):
        peak = next(scripted)
        return fn(), 0.5, peak, ([peak - 10, peak] if module is not None else [])

    monkeypatch.setattr(rehearse.rehearsal, "measure", fake_measure)
    r = rehearse.Rehearsal(p, "s.yaml", memory_gb=None, tmp=path.parent, device="cpu")
    r.task = cell_task(m.train)
    method, backbone = method_backbone(m.train, r.task)
    inp = r.inputs_for("easy")
    ph = rehearse.training.train_phase(r, m, method, backbone, inp)
    moments = 2 * sum(x.numel() * x.element_size() for x in backbone.parameters())
    assert ph.peaks == [100 + moments, 130 + moments]
    assert ph.segments == [[90 + moments, 100 + moments], [120 + moments, 130 + moments]]
    assert ph.floor == 500 and ph.batch == 16
    assert ph.extrapolated() == max(100 + moments + 15 * 30, 500)


def test_segments_keep_a_growing_peak_that_batch_1_hides():
    """At batch 1 the step's peak is a segment that does not grow (an embedding table's
    gradient); the activations' segment overtakes it from batch 2 on: the line through the two
    whole-step peaks would say 150 + 63 x 30 at batch 64, the segments say 100 + 63 x 80."""
    ph = rehearse.Phase("m", "train", "c", peaks=[150, 180], batch=64)
    ph.segments = [[100, 150], [180, 152]]
    assert ph.segmented() and ph.extrapolated() == 100 + 63 * 80
    ph.segments = [[100, 150], [180]]  # the batches ran different segments: the whole step's line
    assert not ph.segmented() and ph.extrapolated() == 150 + 63 * 30


def test_segments_mark_every_module_forward_and_backward():
    from bench.perf import common

    method, backbone = common.make_model("mdlm", {}, 8, 12, "cpu-mini", torch.device("cpu"))
    n_modules = len(list(backbone.modules()))
    counts = []
    for n in (1, 2):
        batch = common.sudoku_batch(n, 8, 12, torch.device("cpu"))
        seg = rehearse.Segments(torch.device("cpu"))
        seg.reset()
        with seg.hooked(backbone):
            method.loss(backbone, batch, rehearse.stratum_midpoints(n, "cpu")).loss.backward()
        seg.mark()
        counts.append(len(seg.peaks))
        assert all(p > 0 for p in seg.peaks)
    # a mark at each module's output, most of them again in the backward pass, and the rest
    assert counts[0] == counts[1] > n_modules + 1
    assert not any(h for m in backbone.modules() for h in m._forward_hooks.values())


TWINS = """
name: t
results_dir: {rd}
task: {{name: sudoku, grid: 4, difficulties: [easy], n_train: 64, n_valid: 8, data_dir: {dd}}}
backbone: {{size: cpu-mini}}
train: {{steps: 2, batch_size: 16, warmup_steps: 1, ema: 0.5}}
sample: {{nfe: [2], n_samples: 8, batch_size: 8}}
executor: {{kind: debug}}
methods:
  - {{method: sflm, variant: a, options: {{alpha_max: 0.2}}, decoding: [exact, top2, top3, top1]}}
  - {{method: sflm, variant: b, options: {{alpha_max: 0.3, adaptive: true}}, decoding: [exact]}}
  - {{method: sflm, variant: c, options: {{alpha_max: 0.2, backbone: sarch}}, decoding: [exact]}}
"""


def _row(out: str, model: str, phase: str) -> list[str]:
    rows = [[c.strip() for c in ln.split("|")] for ln in _lines(out) if ln.startswith("| ")]
    current = None
    for r in rows:
        current = r[1] or current
        if current.startswith(model) and r[2] == phase:
            return r
    raise AssertionError(f"no row {model} / {phase}")


def test_twins_reuse_the_growth_to_batch_2_and_top_k_runs_its_largest(
    tmp_path, capsys, monkeypatch
):
    """A model differing from an earlier one only in memory-neutral options (S-FLM's schedule
    constants) runs batch 1 only and adds the earlier model's growth from batch 1 to 2; another
    backbone is no twin; of S-FLM's top-k decodings on one path of its velocity the largest k
    runs, k = 1 (an argmax) apart."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    path = tmp_path / "t.yaml"
    path.write_text(TWINS.format(rd=tmp_path / "results", dd=tmp_path / "data"))
    grown = []
    real = rehearse.Rehearsal.second

    def spy(self, ph, key, run_batch_2, vocab=None):
        real(self, ph, key, run_batch_2, vocab)
        grown.append((ph.model.split(" ")[0], ph.name, list(ph.peaks), ph.slope_of, key))

    monkeypatch.setattr(rehearse.Rehearsal, "second", spy)
    assert sweep.main([str(path), "--rehearse"]) == 0
    out = capsys.readouterr().out
    phases = {(m, n) for m, n, *_ in grown}
    assert ("sflm/a", "sample top3") in phases and ("sflm/a", "sample top1") in phases
    assert ("sflm/a", "sample top2") not in phases  # covered by top3 (same path, smaller k)
    assert "sflm/a [easy]: top2 by top3" in out
    by = {(m, n): (peaks, of, key) for m, n, peaks, of, key in grown}
    for phase in ("train", "sample exact"):
        lead_peaks, lead_of, key = by[("sflm/a", phase)]
        twin_peaks, twin_of, twin_key = by[("sflm/b", phase)]
        assert lead_of == "" and twin_of.startswith("sflm/a") and twin_key == key
        assert twin_peaks[1] - twin_peaks[0] == lead_peaks[1] - lead_peaks[0]
        row = _row(out, "sflm/b", phase)
        assert "/" not in row[3]  # one time: batch 2 did not run
        assert row[4].endswith(")") and "batch 2 not run: sflm/a" in row[8]
        assert by[("sflm/c", phase)][1] == ""  # the S-arch is another model: batch 2 ran
    assert "memory-neutral" in out


def test_sflm_decoding_families_follow_the_top_k_velocity_paths():
    from sflm.sampler import topk_path

    m = registry.make_method("sflm", {}, type("T", (), {"vocab_size": 49153, "seq_len": 8})())
    m.dim = 768
    assert m.decoding_family("top1") == ("top1", 0)
    assert m.decoding_family("top2") == m.decoding_family("top100")[:1] + (2,)
    assert m.decoding_family("top100") == ("topk-gather", 100)
    assert m.decoding_family("top300") == ("topk-dense", 300)  # 300 x 768 > 4 V
    assert m.decoding_family("exact") == ("exact", 0)
    assert topk_path(256, 49153, 768) == "gather" and topk_path(257, 49153, 768) == "dense"
    assert topk_path(49153, 49153, 768) == "exact"


def test_rehearsal_capabilities_are_the_tools_not_the_method_cores():
    """memory_neutral_options, decoding_family and min_nfe are the rehearsal's capabilities
    (Rehearsable), not members of bench.method.Method: a method without them gets the defaults
    (none, its own family, 1), one that declares them its own values."""
    from bench.method import Method

    for name in ("memory_neutral_options", "decoding_family", "min_nfe"):
        assert not hasattr(Method, name), name
    task = type("T", (), {"vocab_size": 11, "seq_len": 8})()
    ar = registry.make_method("ar", {}, task)
    mask = torch.zeros(1, 8, dtype=torch.bool)
    assert rehearse.memory_neutral_options(type(ar)) == ()
    assert rehearse.decoding_family(ar, "greedy") == ("greedy", 0)
    assert rehearse.min_nfe(ar, mask) == 1
    assert "alpha_max" in rehearse.memory_neutral_options(registry.METHODS["sflm"])
    mdlm = registry.make_method("mdlm", {"block_length": 2}, task)
    assert rehearse.min_nfe(mdlm, mask) == 4  # 8 generated positions, one call per block of 2
    sflm = registry.make_method("sflm", {}, type("T", (), {"vocab_size": 49153, "seq_len": 8})())
    sflm.dim = 768
    assert rehearse.decoding_family(sflm, "top100") == ("topk-gather", 100)


def test_several_sweeps_in_one_run_share_what_an_earlier_one_measured(
    tmp_path, capsys, monkeypatch
):
    """``python -m bench.rehearse A B``: one table per sweep and the total; a model of B that A
    measured at batch 2 (the same architecture and task shape) runs batch 1 only there."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(SWEEP.format(rd=tmp_path / "ra", dd=tmp_path / "data"))
    # B: MDLM again (other seeds, NFE grid and results folder: the same model) and Duo
    b.write_text(
        SWEEP.format(rd=tmp_path / "rb", dd=tmp_path / "data")
        .replace("seeds: [0, 1]", "seeds: [5]")
        .replace("{method: ar, decoding: [sample, greedy]}", "{method: duo}")
        .replace("nfe: [2, 4]", "nfe: [8]")
    )
    assert rehearse.main([str(a), str(b)]) == 0
    out, err = capsys.readouterr()
    assert out.count("## Rehearsal of") == 2 and "## 2 sweeps rehearsed in" in out
    second = out.split(f"## Rehearsal of {b}", 1)[1]
    mdlm_train = _row(second, "mdlm/base", "train")
    assert "/" not in mdlm_train[3] and "batch 2 not run: mdlm/base" in mdlm_train[8]
    assert f"({a})" in mdlm_train[8]  # measured in the earlier sweep, named
    assert "/" in _row(second, "duo/base", "train")[3]  # Duo is new: both batches ran
    # the same task settings: the scorer measured for A stands for B's
    assert f"as measured for {a} (the same task settings)" in _row(second, "", "score")[8]
    assert not (tmp_path / "ra").exists() and not (tmp_path / "rb").exists()
    assert rehearse.main([str(a), str(tmp_path / "missing.yaml")]) == 2


def test_a_blocked_decoding_is_rehearsed_with_a_call_per_block(tiny, capsys):
    """MDLM with block_length 4 on 4x4 Sudoku (16 generated positions: 4 blocks, one call each
    at least): the sampling call takes min_nfe calls (Rehearsable), not the usual 2, and passes."""
    path, _, _ = tiny
    args = [
        str(path),
        "--rehearse",
        "--set",
        "methods=[{method: mdlm, options: {block_length: 4}}]",
    ]
    assert sweep.main(args) == 0
    out = capsys.readouterr().out
    assert "sample ancestral" in out


def test_sampling_twins_key_on_the_built_architecture():
    """Sampling and likelihood twins are keyed on the network's parameter shapes, however the
    config spells it (an imported file's facts, a size name): the same shapes, the same key; one
    more class, another."""
    from bench.config import BackboneConfig

    task = type("T", (), {"vocab_size": 11, "seq_len": 8})()
    m = registry.make_method("mdlm", {}, task)
    a = m.build_backbone(BackboneConfig(size="cpu-mini"))
    b = m.build_backbone(BackboneConfig(size="cpu-mini"))
    wider = registry.make_method("mdlm", {}, type("T", (), {"vocab_size": 12, "seq_len": 8})())
    c = wider.build_backbone(BackboneConfig(size="cpu-mini"))
    assert rehearse.architecture(a) == rehearse.architecture(b) != rehearse.architecture(c)


def test_sampling_twins_across_a_few_more_classes_scale_the_growth():
    """Networks that differ only in their vocabulary share the sampling key when it is made with
    their classes (GPT-2's 50,257 against a reference file's 50,258); a twin with more classes
    adds the measured growth times the ratio, one with fewer adds it as it is, and vocabularies
    more than 1 % apart are no twins (batch 2 runs)."""
    from bench.config import BackboneConfig

    def net(v):
        m = registry.make_method("duo", {}, type("T", (), {"vocab_size": v, "seq_len": 8})())
        return m.build_backbone(BackboneConfig(size="cpu-mini"))

    a, b, far = net(1000), net(1001), net(1100)
    assert rehearse.architecture(a, 1000) == rehearse.architecture(b, 1001)
    assert rehearse.architecture(b, 1001) == rehearse.architecture(far, 1100)
    assert rehearse.architecture(a) != rehearse.architecture(b)  # without: the shapes differ

    r = rehearse.Rehearsal.__new__(rehearse.Rehearsal)
    r.shared, r.source = rehearse.Shared(), "s.yaml"
    r.task = type("T", (), {"seq_len": 8, "vocab_size": 1000})()
    runs = []

    def second(peak1, vocab, peak2):
        ph = rehearse.Phase(f"m{vocab}", "sample x", "c", batch=64, peaks=[peak1])

        def run_batch_2():
            runs.append(vocab)
            ph.peaks.append(peak2)

        r.second(ph, ("k", "sample x"), run_batch_2, vocab=vocab)
        return ph

    lead = second(100, 1000, 1100)  # growth 1000, measured
    more = second(200, 1010, None)
    fewer = second(300, 990, None)
    apart = second(400, 1011, 1900)
    assert runs == [1000, 1011]
    assert more.peaks == [200, 200 + 1010] and more.slope_of == "m1000"
    assert more.slope_ratio == "1010/1000 classes"
    assert fewer.peaks == [300, 300 + 1000] and fewer.slope_of == "m1000" and not fewer.slope_ratio
    assert "growth from 1 to 2 x 1010/1000 classes" in rehearse.table([more], None)
    assert apart.peaks == [400, 1900] and apart.slope_of == ""
    assert lead.extrapolated() == 100 + 63 * 1000 < more.extrapolated()
