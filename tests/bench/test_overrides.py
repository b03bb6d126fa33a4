"""``python -m bench.sweep FILE --set KEY=VALUE``: overrides applied as if written in the file."""

from pathlib import Path

import pytest
import yaml

from bench import sweep
from bench.config import ConfigError, apply_overrides, load_sweep, load_yaml
from bench.plan import plan

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"

RAW = {
    "name": "t",
    "sample": {"nfe": [4, 16]},
    "methods": [{"method": "ar"}, {"method": "sflm", "options": {"top_k": 0}}],
}


def test_values_are_yaml_and_paths_are_dotted_with_indices():
    out = apply_overrides(
        RAW,
        [
            "sample.nfe=[8,16]",
            "methods[1].options.top_k=1",
            "methods[0].decoding=[greedy]",
            "train.lr=1.0e-3",
            "sample.float64=false",
            "task.options={a: 1}",
            "task.options.b=x=y",  # only the first '=' splits
            'name="a\\nb"',
            "seeds=[0, 1]",
        ],
    )
    assert out["sample"]["nfe"] == [8, 16]
    assert out["methods"][1]["options"] == {"top_k": 1}
    assert out["methods"][0] == {"method": "ar", "decoding": ["greedy"]}
    assert out["train"] == {"lr": 1e-3}  # created: the mapping had no train section
    assert out["sample"]["float64"] is False
    assert out["task"] == {"options": {"a": 1, "b": "x=y"}}
    assert out["name"] == "a\nb" and out["seeds"] == [0, 1]
    # a deep copy: the caller's mapping is untouched
    assert RAW["sample"]["nfe"] == [4, 16] and RAW["methods"][1]["options"] == {"top_k": 0}


def test_later_items_win_and_an_empty_section_is_filled():
    out = apply_overrides({"task": None}, ["sample.nfe=[1]", "sample.nfe=2", "task.grid=4"])
    assert out == {"sample": {"nfe": 2}, "task": {"grid": 4}}


def test_index_replaces_a_list_element():
    out = apply_overrides(RAW, ["sample.nfe[1]=32", "methods[0]={method: mdlm}"])
    assert out["sample"]["nfe"] == [4, 32] and out["methods"][0] == {"method": "mdlm"}


@pytest.mark.parametrize(
    "item,message",
    [
        (
            "methods[9].options.top_k=1",
            "--set methods[9].options.top_k: the file has 2 methods (indices 0..1)",
        ),
        ("sample.nfe[2]=1", "--set sample.nfe[2]: the file has 2 sample.nfe (indices 0..1)"),
        ("seeds[0]=1", "--set seeds[0]: seeds is missing, not a list"),
        ("name[0]=1", "--set name[0]: name is a str, not a list"),
        ("sample.nfe.x=1", "--set sample.nfe.x: sample.nfe is a list, not a mapping"),
        ("name.x=1", "--set name.x: name is a str, not a mapping"),
        ("sample.nfe", "--set 'sample.nfe': expected KEY=VALUE"),
        ("=1", "--set '=1': expected KEY=VALUE"),
        ("sample.nfe=", "--set sample.nfe: empty value"),
        ("sample.nfe=[8,", "--set sample.nfe: malformed YAML value '[8,'"),
        ("sample.nfe[x]=1", "--set 'sample.nfe[x]=1': malformed key 'sample.nfe[x]'"),
        ("methods[1.top_k=1", "--set 'methods[1.top_k=1': malformed key"),
        ("sample..nfe=1", "--set 'sample..nfe=1': malformed key"),
        ("methods[-1].variant=x", "--set 'methods[-1].variant=x': malformed key"),
    ],
)
def test_bad_items_name_the_key(item, message):
    with pytest.raises(ConfigError) as e:
        apply_overrides(RAW, [item])
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def _ids(p):
    return [c.id for c in p.train_cells], [c.id for c in p.sample_cells]


def test_an_override_plans_the_cells_of_the_edited_file(tmp_path):
    """--set sample.nfe=[8] plans exactly the cells of quickstart.yaml with nfe: [8] written in
    it (same ids, same order), not the unedited file's."""
    sets = ["sample.nfe=[8]", "methods[6].options.top_k=1"]
    over = plan(load_sweep(QUICKSTART, sets), str(QUICKSTART), offline_ok=True)
    data = load_yaml(QUICKSTART)
    data["sample"]["nfe"] = [8]
    data["methods"][6]["options"]["top_k"] = 1
    edited = tmp_path / "quickstart.yaml"
    edited.write_text(yaml.safe_dump(data))
    written = plan(load_sweep(edited), str(edited), offline_ok=True)
    assert _ids(over) == _ids(written)
    nfes = {c.nfe for c in over.cells["sample"]}  # a likelihood cell has no NFE
    assert 8 in nfes and not nfes & {4, 16}  # AR's cells have no NFE grid
    plain = plan(load_sweep(QUICKSTART), str(QUICKSTART), offline_ok=True)
    assert set(_ids(over)[1]) - set(_ids(plain)[1])  # new sample cells (AR's are shared)
    assert load_sweep(QUICKSTART, []) == load_sweep(QUICKSTART)  # no items: the file as it is


def _snapshot(rd: Path):
    return {p: p.stat().st_mtime_ns for p in rd.rglob("*") if p.is_file()}


def _quickstart(tmp_path) -> Path:
    """quickstart.yaml with its own results_dir under tmp_path (file_results): the CLI tests
    override it with --set, and were --set ignored, nothing would reach the repository's."""
    path = tmp_path / "quickstart.yaml"
    data = load_yaml(QUICKSTART)
    data["results_dir"] = str(tmp_path / "file_results")
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    "item,needle",
    [
        ("methods[9].options.top_k=1", "--set methods[9].options.top_k: the file has 8 methods"),
        ("sample.nfe.x=1", "--set sample.nfe.x: sample.nfe is a list, not a mapping"),
        ("sample.nfe=", "--set sample.nfe: empty value"),
        ("sample.nfe", "--set 'sample.nfe': expected KEY=VALUE"),
        # the values are checked by the file's rules, naming the key
        ("sample.nfee=[1]", "quickstart.yaml: sample.nfee: unknown key"),
        ("sample.nfe=[0]", "quickstart.yaml: sample.nfe[0]: must be > 0"),
        ("train.steps=many", "quickstart.yaml: train.steps: expected an integer"),
        ("methods[6].options.topk=1", "methods[6].options.topk: unknown key"),
        ("task.options.bogus=1", "task.options.bogus: unknown key"),
    ],
)
@pytest.mark.parametrize("mode", ["--dry-run", "--status"])
def test_cli_errors_exit_2_with_one_line_and_write_nothing(tmp_path, capsys, item, needle, mode):
    rd = tmp_path / "results"
    rd.mkdir()
    (rd / "keep.txt").write_text("x")
    before = _snapshot(rd)
    path = _quickstart(tmp_path)
    assert sweep.main([str(path), "--set", f"results_dir={rd}", "--set", item, mode]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert _snapshot(rd) == before and not (tmp_path / "file_results").exists()


# a tiny sweep whose own results_dir is a tmp folder: were --set ignored, running it would train
# two 1-step models there, never the quickstart sweep into the repository's results
TINY = """
results_dir: {rd}
task: {{name: sudoku, grid: 4, difficulties: [easy], n_train: 16, n_valid: 4, data_dir: {dd}}}
backbone: {{size: cpu-mini}}
train: {{steps: 1, batch_size: 4, warmup_steps: 0, checkpoint_every: 1}}
sample: {{nfe: [2], temperature: [1.0], n_samples: 4, batch_size: 4}}
executor: {{kind: debug}}
methods: [{{method: mdlm}}, {{method: ar, decoding: [greedy]}}]
"""


@pytest.mark.parametrize(
    "item,needle",
    [
        ("methods[2].variant=x", "--set methods[2].variant: the file has 2 methods (indices 0..1)"),
        ("sample.nfee=[1]", "s.yaml: sample.nfee: unknown key"),
        ("methods[0].options.bogus=1", "methods[0].options.bogus: unknown key"),
    ],
)
def test_a_run_with_a_bad_override_exits_2_and_writes_nothing(tmp_path, capsys, item, needle):
    rd, dd = tmp_path / "results", tmp_path / "data"
    path = tmp_path / "s.yaml"
    path.write_text(TINY.format(rd=rd, dd=dd))
    assert sweep.main([str(path), "--no-progress", "--set", item]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not rd.exists() and not dd.exists()


def test_cli_dry_run_uses_the_overrides(tmp_path, capsys):
    rd = tmp_path / "results"
    argv = [str(_quickstart(tmp_path)), "--dry-run", "--set", f"results_dir={rd}"]
    assert sweep.main(argv + ["--set", "seeds=[0]", "--set", "sample.nfe=[8]"]) == 0
    out = capsys.readouterr().out
    assert sweep.main(argv) == 0
    plain = capsys.readouterr().out
    # one seed instead of two: half the train cells; one nfe instead of two: fewer sample cells
    assert "sweep quickstart: 8 train cells" in out and "16 train cells" in plain
    # a dry run writes nothing, under the overridden results_dir or the file's
    assert not rd.exists() and not (tmp_path / "file_results").exists()
