import subprocess
import sys

import pytest

from bench.config import (
    ConfigError,
    SampleConfig,
    SweepConfig,
    TrainConfig,
    build,
    config_hash,
    load_sweep,
)


def test_defaults_come_from_code():
    cfg = build(SweepConfig, {"methods": [{"method": "mdlm"}]})
    assert cfg.train.lr == 3e-4 and cfg.train.ema == 0.9999 and cfg.sample.nfe == [180]
    assert cfg.train.betas == [0.9, 0.999] and cfg.train.weight_decay == 0.0


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"nfee": [1]}, "sample.nfee: unknown key"),
        ({"nfe": [8, 0]}, "sample.nfe[1]: must be > 0"),
        ({"nfe": []}, "sample.nfe: must not be empty"),
        ({"temperature": [0.0]}, "sample.temperature[0]: must be > 0"),
        ({"temperature": ["hot"]}, "sample.temperature[0]: expected a number"),
        ({"n_samples": 1.5}, "sample.n_samples: expected an integer"),
        ({"float64": "yes"}, "sample.float64: expected true/false"),
    ],
)
def test_errors_name_the_key(data, needle):
    with pytest.raises(ConfigError) as e:
        build(SampleConfig, data, where="f.yaml: sample")
    assert needle in str(e.value) and str(e.value).startswith("f.yaml")


def test_yaml_scientific_notation_and_scalar_grid(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("train: {lr: 3e-4}\nsample: {nfe: 16}\nmethods: [{method: mdlm}]\n")
    cfg = load_sweep(p)
    assert cfg.train.lr == pytest.approx(3e-4) and cfg.sample.nfe == [16]


def _plan(p):
    from bench.plan import plan

    return plan(load_sweep(p), str(p))


SMALL_TASK = "task: {name: sort, n_train: 8}\nsample: {nfe: [4]}\n"


@pytest.mark.parametrize(
    "methods,needle",
    [
        ("[{method: nope}]", r"methods\[0\]\.method: unknown method 'nope'"),
        ("[{method: mdlm, options: {eps: 2.0}}]", r"methods\[0\]\.options\.eps: must be < 1"),
        (
            "[{method: mdlm}, {method: sflm, options: {alpha_max: 2.0}}]",
            r"methods\[1\]\.options\.alpha_max",
        ),
        ("[{method: mdlm, train: {lr: -1}}]", r"methods\[0\]\.train\.lr: must be > 0"),
        (
            "[{method: mdlm, decoding: [bogus]}]",
            r"methods\[0\]\.decoding: mdlm: unknown decoding 'bogus'",
        ),
        (
            "[{method: sflm, decoding: [top0]}]",
            r"methods\[0\]\.decoding: sflm: unknown decoding 'top0'",
        ),
    ],
)
def test_the_planner_names_bad_methods_options_and_decodings(tmp_path, methods, needle):
    """Method entries are checked once, where the planner builds them (bench.config knows no
    method): the error names the file and the key."""
    p = tmp_path / "s.yaml"
    p.write_text(SMALL_TASK + f"methods: {methods}\n")
    load_sweep(p)  # the sections themselves are fine
    with pytest.raises(ConfigError, match=needle) as e:
        _plan(p)
    assert str(e.value).startswith(str(p))


def test_the_planner_takes_the_methods_own_decoding_names(tmp_path):
    """S-FLM samples with any top<k>: the planner accepts what the sampler accepts, both in a
    method's own list and in the sweep-wide one (where names a method lacks are skipped)."""
    p = tmp_path / "s.yaml"
    p.write_text(SMALL_TASK + "methods: [{method: sflm, decoding: [top5, default, exact]}]\n")
    assert [c.decoding for c in _plan(p).sample_cells] == ["top5", "exact"]
    p.write_text(
        "task: {name: sort, n_train: 8}\nsample: {nfe: [4], decoding: [top3, greedy]}\n"
        "methods: [{method: sflm}, {method: mdlm}, {method: flm}]\n"
    )
    got = {(c.train.method, c.decoding) for c in _plan(p).sample_cells}
    assert got == {("sflm", "top3"), ("mdlm", "greedy"), ("flm", "euler")}


def test_unknown_task_is_named(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("task: {name: chess}\nmethods: [{method: mdlm}]\n")
    with pytest.raises(ConfigError, match=r"task\.name: unknown task 'chess'"):
        _plan(p)


def test_hash_is_stable_and_content_addressed():
    a = build(TrainConfig, {"lr": 1e-3, "steps": 10})
    b = build(TrainConfig, {"steps": 10, "lr": 0.001})
    c = build(TrainConfig, {"steps": 11, "lr": 0.001})
    assert config_hash(a) == config_hash(b) != config_hash(c)
    # the same across processes (no reliance on Python's randomised hash())
    code = (
        "from bench.config import *; "
        "print(config_hash(build(TrainConfig, {'lr': 1e-3, 'steps': 10})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == config_hash(a)
    assert config_hash({"x": 1, "y": [1, 2]}) == config_hash({"y": [1, 2], "x": 1})
