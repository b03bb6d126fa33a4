"""The speed protocol's plan (bench.config.SweepConfig.planned_methods): a sweep that asks for
batch-1 latency (``sample.latency_items``) gets an AR entry as its 1.0x reference when it has
none, and only then; the new sample options enter a cell's id only when set (older stores keep
their ids)."""

from __future__ import annotations

from bench.config import load_sweep
from bench.plan import plan

SWEEP = """
name: speed
results_dir: {rd}
task: {{name: sort, n_train: 16, options: {{n_digits: 4}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 1, batch_size: 4, warmup_steps: 0, checkpoint_every: 1, val_every: 0}}
sample: {{nfe: [2], n_samples: 4, batch_size: 4{extra}}}
executor: {{kind: debug}}
methods: [{methods}]
"""


def _plan(tmp_path, extra="", methods="{method: mdlm}"):
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.format(rd=tmp_path / "r", extra=extra, methods=methods))
    return plan(load_sweep(path), str(path))


def _methods(p):
    return sorted({c.train.method for c in p.sample_cells})


def test_latency_plans_an_ar_reference_only_when_none_exists(tmp_path):
    assert _methods(_plan(tmp_path)) == ["mdlm"]
    assert _methods(_plan(tmp_path, ", latency_items: 2")) == ["ar", "mdlm"]
    both = _plan(tmp_path, ", latency_items: 2", "{method: mdlm}, {method: ar, variant: mine}")
    assert [c.variant for c in both.sample_cells if c.train.method == "ar"] == ["mine"]


def test_speed_options_enter_the_cell_id_only_when_set(tmp_path):
    base = {c.label(): c.id for c in _plan(tmp_path).sample_cells}
    for extra in (", eos_stop: true", ", latency_items: 2"):
        other = {c.label(): c.id for c in _plan(tmp_path, extra).sample_cells if c.label() in base}
        assert other and all(other[k] != base[k] for k in other), extra
    same = {
        c.label(): c.id for c in _plan(tmp_path, ", eos_stop: false, latency_items: 0").sample_cells
    }
    assert same == base
