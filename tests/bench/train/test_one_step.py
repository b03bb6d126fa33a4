"""One training step, three paths: the trainer (Lightning, :func:`bench.train.fit`),
``python -m bench.perf train`` (:func:`bench.perf.train.train_step`) and the rehearsal
(:func:`bench.rehearse.training.train_phase`) take the recipe's step (:mod:`bench.train.step`),
so from the same weights, batches and RNG state they reach bit-identical weights and EMA weights
after five steps. Clipping is always active here (grad_clip 0.05) and the EMA warms up (decay 0.9):
a path that skipped either would differ (the guard test). A checkpoint saved before the trainer
optimised manually resumes at its step, to the same weights."""

from __future__ import annotations

import copy
import dataclasses
import types

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from baselines.mdlm import MDLM
from bench import rehearse
from bench.config import BackboneConfig, TrainConfig, build, load_sweep
from bench.data.toy import sort_data
from bench.method import Batch, antithetic_times
from bench.perf import train as perf_train
from bench.plan import plan
from bench.rehearse import training as rehearse_training
from bench.train import fit
from bench.train.step import Recipe

STEPS = 5
RECIPE = {"steps": STEPS, "batch_size": 16, "lr": 0.001, "warmup_steps": 2, "ema": 0.9,
          "grad_clip": 0.05, "seed": 5, "threads": 1, "checkpoint_every": STEPS}  # fmt: skip
SWEEP = """
name: one
results_dir: {rd}
task: {{name: sort, n_train: 64, options: {{n_digits: 4}}}}
backbone: {{size: cpu-mini, dropout: 0.1}}
train: {{steps: {steps}, batch_size: 16, lr: 0.001, warmup_steps: 2, ema: 0.9, grad_clip: 0.05, \
seed: 5, threads: 1, checkpoint_every: {steps}}}
executor: {{kind: debug}}
methods:
  - {{method: mdlm}}
"""


def _model(init: dict | None = None):
    """MDLM on sort-8 (vocab 10, length 16) with a cpu-mini DiT, dropout 0.1 (its RNG draws
    must line up too); ``init``: the weights to start from."""
    method = MDLM(None, 10, 16)
    torch.manual_seed(123)
    backbone = method.build_backbone(BackboneConfig(size="cpu-mini", dropout=0.1))
    if init is not None:
        backbone.load_state_dict(init)
    return method, backbone.train()


class _Record(Callback):
    """Each step's batch and the torch RNG state it starts from; the trained and EMA weights."""

    def __init__(self):
        self.batches, self.rng, self.final = [], [], None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append(Batch(*(b.clone() for b in batch)))
        self.rng.append(torch.get_rng_state())

    def on_train_end(self, trainer, pl_module):
        self.final = _weights(pl_module.backbone, pl_module.ema)


def _weights(backbone, ema) -> dict:
    return {
        **{f"w.{k}": v.detach().clone() for k, v in backbone.state_dict().items()},
        **{f"ema.{k}": v.detach().clone() for k, v in ema.module.state_dict().items()},
    }


def _differing(a: dict, b: dict) -> list[str]:
    assert a.keys() == b.keys()
    return [k for k in a if not torch.equal(a[k], b[k])]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The trainer's five steps and what they saw."""
    tmp = tmp_path_factory.mktemp("one_step")
    cfg = build(TrainConfig, RECIPE)
    method, backbone = _model()
    init = copy.deepcopy(backbone.state_dict())
    rec = _Record()
    fit(method, backbone, sort_data(200, seed=1), cfg, tmp / "run", progress=False,
        callbacks=[rec])  # fmt: skip
    assert len(rec.batches) == STEPS and rec.final is not None
    return types.SimpleNamespace(cfg=cfg, init=init, rec=rec, tmp=tmp)


def _perf_path(trained, sabotage=None) -> dict:
    method, backbone = _model(trained.init)
    recipe = perf_train.optimizer(backbone, torch.device("cpu"), "32", trained.cfg)
    ema = recipe.ema
    if sabotage == "clip":
        recipe.clip = None
    elif sabotage == "ema":
        recipe.ema = None
    args = types.SimpleNamespace(batch=16, precision="32")
    for batch, rng in zip(trained.rec.batches, trained.rec.rng):
        torch.set_rng_state(rng)
        perf_train.train_step(method, backbone, recipe, batch, args, torch.device("cpu"))
    return _weights(backbone, ema)


def test_perf_train_steps_as_the_trainer(trained):
    assert _differing(trained.rec.final, _perf_path(trained)) == []


@pytest.mark.parametrize("skip", ["clip", "ema"])
def test_guard_a_path_without_clipping_or_ema_differs(trained, skip):
    """Guard for the comparisons: the same path without clipping, or without the EMA update,
    ends elsewhere (in the trained weights for clipping, in the EMA for both)."""
    bad = _differing(trained.rec.final, _perf_path(trained, sabotage=skip))
    assert any(k.startswith("ema.") for k in bad)
    assert skip == "ema" or any(k.startswith("w.") for k in bad)


def test_rehearsal_steps_as_the_trainer(trained, monkeypatch):
    """The rehearsal's train phase, once per step with the trainer's batch and RNG state at its
    batch 2 (the batch whose gradient it steps on) and the trainer's time draws, on one recipe
    state; the cell's recipe is the trainer's."""
    sweep = trained.tmp / "s.yaml"
    sweep.write_text(SWEEP.format(rd=trained.tmp / "results", steps=STEPS))
    p = plan(load_sweep(sweep), str(sweep))
    m = rehearse.models_of(p)[0]
    assert m.train.train_config() == trained.cfg
    k = {"step": 0}
    shared: list[Recipe] = []
    build = Recipe.build.__func__

    def build_once(cls, backbone, cfg, device, *, mixed=False):
        if not shared:
            shared.append(build(cls, backbone, cfg, device, mixed=mixed))
        return shared[0]

    def batch(inp, n, vocab, device):
        if n == 2:
            torch.set_rng_state(trained.rec.rng[k["step"]])
        return trained.rec.batches[k["step"]]

    monkeypatch.setattr(Recipe, "build", classmethod(build_once))
    monkeypatch.setattr(rehearse_training, "train_batch", batch)
    monkeypatch.setattr(rehearse_training, "stratum_midpoints", lambda n, dev: antithetic_times(16))
    method, backbone = _model(trained.init)
    for step in range(STEPS):
        k["step"] = step
        r = rehearse.Rehearsal(p, "s.yaml", memory_gb=None, tmp=trained.tmp,
                               device="cpu")  # fmt: skip
        r.task = types.SimpleNamespace(vocab_size=10, seq_len=16)
        rehearse_training.train_phase(r, m, method, backbone, None)
    assert shared[0].steps == STEPS
    assert _differing(trained.rec.final, _weights(backbone, shared[0].ema)) == []


def test_a_checkpoint_of_automatic_optimisation_resumes_at_its_step(trained):
    """Checkpoints written before the trainer took this step counted their steps in Lightning's
    automatic-optimisation loop: resumed now, such a run goes on from its step to the same
    weights as the uninterrupted run."""
    run = trained.tmp / "resumed"
    method, backbone = _model(trained.init)
    data = sort_data(200, seed=1)
    fit(method, backbone, data, dataclasses.replace(trained.cfg, steps=3), run, progress=False)
    last = run / "ckpt" / "last.ckpt"
    ck = torch.load(last, weights_only=False)
    loop = ck["loops"]["fit_loop"]
    manual = "epoch_loop.manual_optimization.optim_step_progress"
    auto = loop["epoch_loop.automatic_optimization.optim_progress"]["optimizer"]
    auto["step"], loop[manual] = loop[manual], copy.deepcopy(auto["step"])  # the old layout
    assert auto["step"]["total"]["completed"] == 3 and loop[manual]["total"]["completed"] == 0
    torch.save(ck, last)
    rec = _Record()
    method, backbone = _model(trained.init)
    res = fit(method, backbone, data, trained.cfg, run, progress=False, callbacks=[rec])
    assert res.steps == STEPS and len(rec.batches) == STEPS - 3
    assert _differing(trained.rec.final, rec.final) == []
