"""The shared trainer: exact resume, EMA with warm-up, what it writes."""

import torch
from helpers import sort_train_config, train_sort_mdlm

from baselines.mdlm import MDLM
from bench.config import BackboneConfig
from bench.data.toy import sort_data
from bench.train import StepBatches, TrainModule, ema_avg_fn
from bench.weights import load_weights

BB = BackboneConfig(
    size="cpu-mini", dropout=0.1
)  # as train_sort_mdlm's: dropout RNG must resume too


def _cfg(steps):
    return sort_train_config(steps)


def _run(run_dir, steps):
    """Train (or resume) in ``run_dir`` up to ``steps``; the weights file loaded into a fresh
    DiT."""
    res = train_sort_mdlm(run_dir, _cfg(steps), init_seed=123)
    fresh = MDLM(None, 10, 16).build_backbone(BB)
    load_weights(MDLM(None, 10, 16), fresh, res.weights)
    return res, fresh.state_dict()


def test_resume_is_exact(tmp_path):
    res_a, full = _run(tmp_path / "a", 6)
    _run(tmp_path / "b", 3)  # "preempted" after 3 steps (checkpoint at step 3)
    res_b, resumed = _run(tmp_path / "b", 6)  # same run dir: resumes from ckpt/last.ckpt
    assert res_a.steps == res_b.steps == 6
    for k in full:
        assert torch.equal(full[k], resumed[k]), f"{k} differs after resume"


def test_resume_differs_from_restart_with_other_seed(tmp_path):
    """Guard for the test above: a different seed gives different weights (the comparison is
    sensitive)."""
    _, a = _run(tmp_path / "a", 3)
    cfg = _cfg(3)
    cfg.seed = 6
    res = train_sort_mdlm(tmp_path / "c", cfg, init_seed=123)
    b = torch.load(res.weights, weights_only=False)["backbone"]
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_ema_warmup_decay():
    net = torch.nn.Linear(3, 1, bias=False)
    module = TrainModule(MDLM(None, 10, 16), net, _cfg(1))
    vals = []
    for step in range(3):
        with torch.no_grad():
            net.weight.fill_(float(step + 1))
        module.ema.update_parameters(net)
        vals.append(float(module.ema.module.weight[0, 0]))
    assert vals[0] == 1.0  # first update copies
    d1 = min(0.9, 2 / 11)  # (1 + n) / (10 + n) with n = 1 update so far
    assert abs(vals[1] - (d1 * 1 + (1 - d1) * 2)) < 1e-6
    d2 = min(0.9, 3 / 12)
    assert abs(vals[2] - (d2 * vals[1] + (1 - d2) * 3)) < 1e-6
    assert ema_avg_fn(0.5)(torch.tensor(0.0), torch.tensor(1.0), 1000) == 0.5  # capped at the decay


def test_batches_are_a_function_of_seed_and_step():
    data = sort_data(50, seed=0)
    a, b = StepBatches(data, 8, seed=1), StepBatches(data, 8, seed=1)
    b.start_step = 7
    it_a = iter(a)
    for _ in range(7):
        next(it_a)
    assert torch.equal(next(it_a)[0], next(iter(b))[0])
    # every example is seen once per epoch
    seen = torch.cat([torch.as_tensor(a.indices(s)) for s in range(6)])  # 48 of 50 examples
    assert len(set(seen.tolist())) == len(seen)


def test_antithetic_times_one_independent_draw_per_stratum():
    """Reference _sample_t: u_i = (U_i + i) / n, one draw in each stratum [i/n, (i+1)/n) with
    independent U_i (not one shared shift), mapped to [eps, 1]."""
    from bench.method import antithetic_times

    n, eps = 64, 1e-3
    t = antithetic_times(n, eps=eps, generator=torch.Generator().manual_seed(0))
    u = (t - eps) / (1 - eps)
    strata = torch.floor(u * n).long()
    assert torch.equal(strata, torch.arange(n))
    within = u * n - strata
    assert within.std() > 0.1  # a shared shift would make every within-stratum offset equal
    assert float(t.min()) >= eps and float(t.max()) <= 1.0


def test_no_fused_adamw_where_lightning_clips_under_mixed_precision():
    """bf16-mixed (the GPU default) with gradient clipping: Lightning refuses an optimizer that
    unscales inside its step (a fused AdamW) at the first step, so every GPU run failed; the
    trainer then builds the for-each AdamW, and keeps the fused one where nothing clips."""
    from types import SimpleNamespace

    from lightning.fabric.plugins.precision.amp import _optimizer_handles_unscaling

    from bench.train.loop import _clips_under_amp, make_adamw

    def module(clip, precision):
        return SimpleNamespace(
            _trainer=SimpleNamespace(precision=precision), cfg=SimpleNamespace(grad_clip=clip)
        )

    assert _clips_under_amp(module(1.0, "bf16-mixed"))
    assert _clips_under_amp(module(1.0, "16-mixed"))
    assert not _clips_under_amp(module(1.0, "32-true"))
    assert not _clips_under_amp(module(0.0, "bf16-mixed"))
    assert not _clips_under_amp(SimpleNamespace(_trainer=None))
    p = [torch.nn.Parameter(torch.zeros(4))]
    opt = make_adamw(p, device="cuda", clip_under_amp=True, lr=1e-3)
    assert not opt.defaults.get("fused") and not _optimizer_handles_unscaling(opt)
