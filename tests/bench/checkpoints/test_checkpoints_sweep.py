"""Sweeps that import checkpoints instead of training: an import cell per file (its id holds the
file's sha256), options from the file, sample cells / store / report unchanged, a re-run does
nothing, and a sweep option that contradicts the file is one line naming both values."""

from __future__ import annotations

import pytest
from helpers import reference_checkpoint

from bench import sweep
from bench.checkpoints import MODEL_JSON
from bench.config import load_sweep
from bench.plan import plan
from bench.results import Store

SWEEP = """
name: imp
results_dir: {rd}
task: {{name: sort, n_train: 64, options: {{n_digits: 4}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 2, batch_size: 8}}
sample: {{nfe: [2, 4], temperature: [1.0], n_samples: 8, batch_size: 8}}
seeds: [0, 1]
executor: {{kind: debug}}
methods:
{methods}
"""


reference_file = reference_checkpoint


def _write(tmp_path, methods, name="s.yaml"):
    path = tmp_path / name
    path.write_text(SWEEP.format(rd=tmp_path / "results", methods=methods))
    return path


def test_import_sweep_samples_without_training_and_reruns_nothing(tmp_path, capsys):
    mdlm = reference_file(tmp_path, "mdlm", "mdlm", {})
    sfm = reference_file(tmp_path, "sfm", "sflm", {"alpha_max": 0.2, "adaptive": True})
    duo = reference_file(tmp_path, "duo", "duo", {}, vocab=11)  # a [PAD] class beyond the task's
    methods = (
        f"  - {{method: mdlm, checkpoint: {mdlm}}}\n"
        f"  - {{method: sflm, variant: evaluated, checkpoint: {sfm}, decoding: [exact]}}\n"
        f"  - {{method: sflm, variant: trained, checkpoint: {sfm}, decoding: [exact], "
        "options: {adaptive: true}}\n"
        f"  - {{method: duo, checkpoint: {duo}}}\n"
    )
    path = _write(tmp_path, methods)
    p = plan(load_sweep(path), str(path))
    assert len(p.train_cells) == 4  # one per file and option set, not per seed
    assert all(tc.imported for tc in p.train_cells)
    sfm_cells = [tc for tc in p.train_cells if tc.method == "sflm"]
    assert {tc.options.get("adaptive") for tc in sfm_cells} == {False, True}
    assert sfm_cells[0].options["alpha_max"] == pytest.approx(0.2)
    assert next(tc for tc in p.train_cells if tc.method == "duo").vocab_size == 11
    assert sweep.main([str(path), "--no-progress"]) == 0
    store = Store(tmp_path / "results")
    df = store.read()
    train = df[df.kind == "train"]
    assert len(train) == 4 and set(train.metric) == {"n_params"}
    assert (train.train_steps == 77).all()
    assert df.checkpoint.str.contains("@").all()  # every row names its file and sha256
    samples = df[df.kind == "sample"]
    assert set(samples.method) == {"mdlm", "sflm", "duo"}
    for tc in p.train_cells:  # nothing trained: no Lightning checkpoints, no logs
        assert tc.weights.is_file() and (tc.run_dir / MODEL_JSON).is_file()
        assert not (tc.run_dir / "ckpt").exists()
    mtimes = {tc.id: tc.weights.stat().st_mtime_ns for tc in p.train_cells}
    n_files = len(list((tmp_path / "results" / "store").glob("*.json")))
    capsys.readouterr()
    assert sweep.main([str(path), "--no-progress"]) == 0  # a re-run does nothing
    assert {tc.id: tc.weights.stat().st_mtime_ns for tc in p.train_cells} == mtimes
    assert len(list((tmp_path / "results" / "store").glob("*.json"))) == n_files


def test_import_cell_id_follows_the_file_content(tmp_path):
    a = reference_file(tmp_path, "a", "mdlm", {}, seed=0)
    path = _write(tmp_path, f"  - {{method: mdlm, checkpoint: {a}}}\n")
    id0 = plan(load_sweep(path), str(path)).train_cells[0].id
    (tmp_path / "x").mkdir()
    b = reference_file(tmp_path / "x", "b", "mdlm", {}, seed=1)
    b.replace(a)  # same path, other weights
    assert plan(load_sweep(path), str(path)).train_cells[0].id != id0


@pytest.mark.parametrize(
    "entry, message",
    [
        ("{method: mdlm, checkpoint: CK, options: {time_conditioning: true}}",
         "time_conditioning: the sweep says True, the checkpoint says False"),
        ("{method: duo, checkpoint: CK}", "the sweep says 'duo'"),
        ("{method: sflm, checkpoint: CK, options: {adaptive: true}}", "the sweep says 'sflm'"),
        ("{method: mdlm, checkpoint: MISSING}", "no such file"),
        ("{method: mdlm, checkpoint: CK, family: duo}", "not duo"),
    ],
)  # fmt: skip
def test_contradicting_entries_are_one_line_exit_2(tmp_path, capsys, entry, message):
    ck = reference_file(tmp_path, "m", "mdlm", {})
    entry = entry.replace("CK", str(ck)).replace("MISSING", str(tmp_path / "nope.ckpt"))
    path = _write(tmp_path, f"  - {entry}\n")
    assert sweep.main([str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "results").exists()  # nothing written


def test_a_converted_model_folder_is_a_checkpoint_too(tmp_path):
    from bench.checkpoints import convert

    ck = reference_file(tmp_path, "m", "mdlm", {})
    convert(str(ck), tmp_path / "folder")
    path = _write(tmp_path, f"  - {{method: mdlm, checkpoint: {tmp_path / 'folder'}}}\n")
    p = plan(load_sweep(path), str(path))
    direct = _write(tmp_path, f"  - {{method: mdlm, checkpoint: {ck}}}\n", "direct.yaml")
    assert p.train_cells[0].options == plan(load_sweep(direct), str(direct)).train_cells[0].options
    assert sweep.main([str(path), "--no-progress"]) == 0
    df = Store(tmp_path / "results").read()
    assert len(df[df.kind == "sample"]) > 0 and (df[df.kind == "train"].train_steps == 77).all()
    tc = p.train_cells[0]
    assert tc.weights.read_bytes() == (tmp_path / "folder" / "weights.pt").read_bytes()
