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


def test_unknown_method_and_option_are_named(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("methods: [{method: nope}]\n")
    with pytest.raises(ConfigError, match=r"methods\[0\]\.method: unknown method 'nope'"):
        load_sweep(p)
    p.write_text("methods: [{method: mdlm, options: {eps: 2.0}}]\n")
    with pytest.raises(ConfigError, match=r"methods\[0\]\.options\.eps: must be < 1"):
        load_sweep(p)


def test_hash_is_stable_and_content_addressed():
    a = build(TrainConfig, {"lr": 1e-3, "steps": 10})
    b = build(TrainConfig, {"steps": 10, "lr": 0.001})
    c = build(TrainConfig, {"steps": 11, "lr": 0.001})
    assert config_hash(a) == config_hash(b) != config_hash(c)
    # the same across processes (no reliance on Python's randomised hash())
    code = "from bench.config import *; print(config_hash(build(TrainConfig, {'lr': 1e-3, 'steps': 10})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == config_hash(a)
    assert config_hash({"x": 1, "y": [1, 2]}) == config_hash({"y": [1, 2], "x": 1})
