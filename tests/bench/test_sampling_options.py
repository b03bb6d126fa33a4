"""Sampling-only method options (``Method.sampling_options``): top-k and the
final decode are decodings of a trained model, not models. Entries differing only in them share
one train cell (trained once) and keep their own sample cells, variants and options; the ids of
sweeps without them are the ids the planner always gave."""

import dataclasses
from pathlib import Path

import pytest

from bench import registry, sweep
from bench.config import ConfigError, build, canonical, config_hash, load_sweep
from bench.evaluate.metrics import MetricValue
from bench.plan import _NON_SEMANTIC_TASK, _NON_SEMANTIC_TRAIN, _decodings, plan

ROOT = Path(__file__).resolve().parents[2]

SWEEP = """
name: t
results_dir: {rd}
task: {{name: sudoku, grid: 4, difficulties: [easy], n_train: 32, n_valid: 8, data_dir: {dd}}}
backbone: {{size: cpu-mini}}
train: {{steps: 2, batch_size: 8, warmup_steps: 1, checkpoint_every: 1, ema: 0.5}}
sample: {{nfe: [2], temperature: [1.0, 0.5], n_samples: 4, batch_size: 4}}
executor: {{kind: debug}}
methods:
{methods}
"""


def _plan(tmp_path, methods: str, name="s.yaml"):
    text = SWEEP.format(rd=tmp_path / "results", dd=tmp_path / "data", methods=methods)
    path = tmp_path / name
    path.write_text(text)
    return plan(load_sweep(path), str(path)), path


def test_sflm_declares_its_sampling_options():
    cls = registry.METHODS["sflm"]
    assert set(cls.sampling_options) == {"top_k", "final_decode"}
    fields = {f.name for f in dataclasses.fields(cls.Options)}
    for name, c in registry.METHODS.items():  # every declared name is an Options field
        assert set(c.sampling_options) <= {f.name for f in dataclasses.fields(c.Options)}, name
    assert set(cls.sampling_options) <= fields


def test_sampling_only_entries_share_one_train_cell(tmp_path):
    methods = (
        "  - {method: sflm, decoding: [topk, top1, top7]}\n"
        "  - {method: sflm, variant: k3, decoding: [topk, top1, top7], options: {top_k: 3}}\n"
        "  - {method: sflm, variant: fs, decoding: [topk, top1, top7], "
        "options: {final_decode: sample}}\n"
    )
    p, _ = _plan(tmp_path, methods)
    assert len(p.train_cells) == 1
    tc = p.train_cells[0]
    assert tc.variant == "base" and tc.options["top_k"] == 10
    assert tc.options["final_decode"] == "argmax"
    by_variant = {}
    for c in p.sample_cells:
        assert c.train is tc
        by_variant.setdefault(c.variant, []).append(c)
    assert set(by_variant) == {"base", "k3", "fs"}
    assert p.samples_of(tc) == p.sample_cells
    assert len({c.id for c in p.sample_cells}) == len(p.sample_cells)  # distinct cells
    # each cell samples with its own entry's options, overlaid on the model's
    assert {c.options["top_k"] for c in by_variant["k3"]} == {3}
    assert all(c.sampling == {"top_k": 3} for c in by_variant["k3"])
    assert all(c.sampling == {"final_decode": "sample"} for c in by_variant["fs"])
    assert all(c.sampling == {} and c.options == tc.options for c in by_variant["base"])
    # top1 is temperature-free unless the last step samples (the per-entry method decides)
    assert {c.temperature for c in by_variant["base"] if c.decoding == "top1"} == {1.0}
    assert {c.temperature for c in by_variant["fs"] if c.decoding == "top1"} == {1.0, 0.5}
    assert {c.decoding for c in by_variant["k3"]} == {"topk", "top1", "top7"}  # any top<k>
    assert "k3" in by_variant["k3"][0].label()

    # the rows of a sample cell carry its own variant (the model's rows: the first entry's)
    from bench.results.rows import sample_rows

    task = registry.make_task(tc.task_config())
    for c in p.sample_cells:
        method = registry.make_method("sflm", c.options, task)
        rows = sample_rows(
            c,
            [MetricValue("exact_match", 0.5, 4)],
            method=method,
            task=task,
            train_steps=2,
            nfe=2,
            wall_s=0.1,
        )
        assert rows[0]["variant"] == c.variant and rows[0]["train_cell"] == tc.id
        assert rows[0]["decoding"] == c.decoding
        if c.decoding == "top1":
            assert rows[0]["temperature_free"] is (c.variant != "fs")


def test_a_model_option_still_gives_two_train_cells(tmp_path):
    methods = (
        "  - {method: sflm, options: {alpha_max: 0.2}}\n"
        "  - {method: sflm, variant: b, options: {alpha_max: 0.3, top_k: 3}}\n"
    )
    p, _ = _plan(tmp_path, methods)
    assert len(p.train_cells) == 2
    assert [tc.variant for tc in p.train_cells] == ["base", "b"]
    assert p.train_cells[1].options["top_k"] == 10  # the model holds sampling options at default


def test_sampling_options_at_their_defaults_change_no_id(tmp_path):
    a, _ = _plan(tmp_path, "  - {method: sflm}\n", "a.yaml")
    b, _ = _plan(tmp_path, "  - {method: sflm, options: {top_k: 10, final_decode: argmax}}\n")
    assert [c.id for c in a.train_cells] == [c.id for c in b.train_cells]
    assert [c.id for c in a.sample_cells] == [c.id for c in b.sample_cells]
    c, _ = _plan(tmp_path, "  - {method: sflm, options: {top_k: 4}}\n", "c.yaml")
    assert [x.id for x in c.train_cells] == [x.id for x in a.train_cells]
    assert not {x.id for x in c.sample_cells} & {x.id for x in a.sample_cells}


def test_entries_differing_only_in_variant_name_are_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"methods\[1\].*methods\[0\]"):
        _plan(tmp_path, "  - {method: sflm}\n  - {method: sflm, variant: again}\n")
    # different decodings of one model under two names are fine
    p, _ = _plan(
        tmp_path,
        "  - {method: sflm, decoding: [exact]}\n  - {method: sflm, variant: t, decoding: [top1]}\n",
    )
    assert len(p.train_cells) == 1 and {c.variant for c in p.sample_cells} == {"base", "t"}


#: options added after the quickstart's ids were pinned (declared omit_default; none of the
#: quickstart's entries sets them)
_LATER_OPTIONS = {
    "sflm": ("time_convention", "velocity_dtype"),
    "flm": ("cap_order",),
    "duo": (
        "nelbo",
        "top_p",
        "top_k",
        "psi_time_profile",
        "psi_high_mode",
        "psi_middle_mode",
        "psi_low_mode",
        "psi_high_frac",
        "psi_middle_frac",
    ),
    "ar": ("top_p", "top_k"),
    "mdlm": (
        "top_p",
        "top_k",
        "block_length",
        "block_cache",
        "cache_refresh",
        "tau",
        "factor",
        "remdm_eta",
        "remdm_t_on",
        "remdm_t_off",
        "remdm_alpha_on",
    ),
    "candi": ("top_p", "top_k"),
}


def _old_rule_ids(cfg, source):
    """The train / sample ids as the planner computed them before sampling options existed:
    the hash of the FULL canonical options (a reimplementation, to pin backwards compatibility)."""
    task = registry.make_task(cfg.task)
    task_sem = {k: v for k, v in canonical(cfg.task).items() if k not in _NON_SEMANTIC_TASK}
    subsets = list(task.groups())
    groups_list = [subsets] if cfg.task.train_mix else [[g] for g in subsets]
    s = cfg.sample
    train_ids, sample_ids = [], []
    for entry in cfg.methods:
        cls = registry.METHODS[entry.method]
        opts = build(cls.Options, entry.options, where="x")
        method = registry.make_method(entry.method, opts, task)
        train0 = build(type(cfg.train), {**dataclasses.asdict(cfg.train), **entry.train}, where="x")
        decs = _decodings(method, entry, s.decoding, source)
        for seed in list(dict.fromkeys(cfg.seeds)) or [train0.seed]:
            for groups in groups_list:
                train = dataclasses.replace(train0, seed=seed)
                ident = {
                    "task": task_sem,
                    "groups": groups,
                    "backbone": canonical(cfg.backbone),
                    "train": {
                        k: v for k, v in canonical(train).items() if k not in _NON_SEMANTIC_TRAIN
                    },
                    "method": entry.method,
                    # the options that existed then: those added later with omit_default are
                    # left out at their default (bench.plan._identity)
                    "options": {
                        k: v
                        for k, v in canonical(opts).items()
                        if k not in _LATER_OPTIONS.get(entry.method, ())
                    },
                }
                tid = config_hash(ident)
                train_ids.append(tid)
                for subset in groups:
                    for dec in decs:
                        for nfe in [0] if method.nfe_is_length else s.nfe:
                            temps = [1.0] if dec in method.temperature_free else s.temperature
                            for temp in temps:
                                key = {
                                    "train": tid,
                                    "subset": subset,
                                    "nfe": nfe,
                                    "temperature": temp,
                                    "decoding": dec,
                                    "n": s.n_samples,
                                    "float64": s.float64,
                                    "seed": s.seed,
                                }
                                sample_ids.append(config_hash(key))
    return train_ids, sample_ids


def test_quickstart_ids_are_the_old_ids():
    path = ROOT / "sweeps" / "quickstart.yaml"
    cfg = load_sweep(path)
    p = plan(cfg, str(path))
    train_ids, sample_ids = _old_rule_ids(cfg, str(path))
    assert [c.id for c in p.train_cells] == train_ids
    # the sampling cells (the quickstart's likelihood cells came later: tests/bench/likelihood)
    from bench.kinds.likelihood import LikelihoodCell

    assert [c.id for c in p.sample_cells if not isinstance(c, LikelihoodCell)] == sample_ids
    assert len(p.train_cells) == 16 and any(c.method == "sflm" for c in p.train_cells)


def test_sweep_trains_once_and_samples_both_variants(tmp_path):
    """End to end (debug executor): two S-FLM entries differing only in final_decode make one
    run folder, trained once, and sample rows for both variants, each sampled with its own
    final decode (top1 at T = 0.5 only exists for the sampled final decode)."""
    from bench import report

    methods = (
        "  - {method: sflm, decoding: [top1]}\n"
        "  - {method: sflm, variant: fs, decoding: [top1], options: {final_decode: sample}}\n"
    )
    p, path = _plan(tmp_path, methods)
    assert sweep.main([str(path), "--no-progress"]) == 0
    rd = tmp_path / "results"
    runs = sorted((rd / "runs").iterdir())
    assert [r.name for r in runs] == [f"sflm-base-{p.train_cells[0].id}"]
    assert len(list((rd / "store").glob("*.json"))) == 1 + 3  # 1 model, 1 + 2 sample cells
    res = report.read(rd)
    train = res[res.kind == "train"]
    assert set(train.variant) == {"base"} and train.config_hash.nunique() == 1
    em = res[(res.kind == "sample") & (res.metric == "exact_match")]
    assert sorted(zip(em.variant, em.temperature)) == [("base", 1.0), ("fs", 0.5), ("fs", 1.0)]
    assert set(em.train_cell) == {p.train_cells[0].id}
    fs = em[em.variant == "fs"]
    assert not fs.temperature_free.any() and em[em.variant == "base"].temperature_free.all()


def test_an_option_added_later_enters_the_id_only_off_its_default(tmp_path):
    """omit_default options (bench.plan._identity): at the default the id is the old one, at any
    other value the model is another cell."""
    base, _ = _plan(tmp_path, "  - {method: sflm}\n", "a.yaml")
    same, _ = _plan(tmp_path, "  - {method: sflm, options: {time_convention: clean}}\n", "b.yaml")
    other, _ = _plan(
        tmp_path, "  - {method: sflm, options: {time_convention: inverted}}\n", "c.yaml"
    )
    assert base.train_cells[0].id == same.train_cells[0].id
    assert "time_convention" not in base.train_cells[0].options
    assert other.train_cells[0].id != base.train_cells[0].id
    assert other.train_cells[0].options["time_convention"] == "inverted"
