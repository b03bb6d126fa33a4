"""Training that diverges stops cleanly: one line naming the run and step,
the last good checkpoint kept (never overwritten by a non-finite state), ``failed.json`` written."""

import json
import math
from datetime import datetime

import pytest
import torch
from helpers import sort_train_config
from lightning.pytorch.callbacks import Callback

from baselines.mdlm import MDLM
from bench.config import BackboneConfig
from bench.data.toy import sort_data


class PoisonedMDLM(MDLM):
    """MDLM whose loss becomes ``bad`` (nan / inf, still differentiable) from its k-th call on."""

    def __init__(self, k: int, bad: float):
        super().__init__(None, 10, 16)
        self.k, self.bad, self.calls = k, bad, 0

    def loss(self, backbone, batch, t):
        out = super().loss(backbone, batch, t)
        if self.calls >= self.k:
            out.loss = out.loss * self.bad
        self.calls += 1
        return out


def _fit(run_dir, method, steps, checkpoint_every, callbacks=()):
    from bench.train import fit

    cfg = sort_train_config(steps, checkpoint_every=checkpoint_every)
    torch.manual_seed(0)
    backbone = method.build_backbone(BackboneConfig(size="cpu-mini"))
    return fit(
        method,
        backbone,
        sort_data(200, seed=1),
        cfg,
        run_dir,
        progress=False,
        callbacks=list(callbacks),
    )


def _all_finite(obj) -> bool:
    if isinstance(obj, torch.Tensor):
        return not obj.is_floating_point() or bool(torch.isfinite(obj).all())
    if isinstance(obj, dict):
        return all(_all_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_all_finite(v) for v in obj)
    return True


def _failed(run_dir) -> dict:
    info = json.loads((run_dir / "failed.json").read_text())
    datetime.fromisoformat(info["time"])
    return info


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    from bench.train import TrainingDiverged

    run = tmp_path / "mdlm-base-abc123"
    with pytest.raises(TrainingDiverged) as info:
        _fit(run, PoisonedMDLM(k=7, bad=math.nan), steps=30, checkpoint_every=3)
    msg = str(info.value)
    assert (
        "\n" not in msg and "mdlm-base-abc123" in msg and "non-finite loss (nan) at step 7" in msg
    ), msg
    assert info.value.step == 7 and info.value.at_step == 9  # the save at step 9 refused the state
    ckpt = torch.load(run / "ckpt" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == 6, "last.ckpt must be the last checkpoint before the bad step"
    assert _all_finite(ckpt["state_dict"]) and _all_finite(ckpt["optimizer_states"])
    assert sorted(p.name for p in (run / "ckpt").iterdir()) == ["last.ckpt", "step6.ckpt"]
    assert not (run / "weights.pt").exists()
    failed = _failed(run)
    assert failed["reason"] == "non-finite loss (nan) at step 7" and failed["step"] == 7
    assert (
        failed["kind"] == "diverged"
        and failed["checkpoint_step"] == 6
        and failed["stopped_at"] == 9
    )
    # the kept checkpoint resumes: a healthy method trains on from step 6 and clears failed.json
    res = _fit(run, MDLM(None, 10, 16), steps=8, checkpoint_every=3)
    assert res.steps == 8 and math.isfinite(res.final_loss) and not (run / "failed.json").exists()


def test_inf_loss_between_checkpoints_is_caught_by_the_periodic_check(tmp_path):
    from bench.train import NONFINITE_CHECK_EVERY, TrainingDiverged

    run = tmp_path / "r"
    with pytest.raises(TrainingDiverged) as info:
        _fit(run, PoisonedMDLM(k=2, bad=math.inf), steps=50, checkpoint_every=100)
    assert info.value.step == 2 and info.value.at_step == NONFINITE_CHECK_EVERY < 50
    assert "non-finite loss (inf) at step 2" in str(
        info.value
    ) and "no checkpoint was written" in str(info.value)
    assert not (run / "ckpt" / "last.ckpt").exists()
    assert _failed(run)["checkpoint"] is None


class PoisonEMA(Callback):
    """Make the EMA weights non-finite after step ``k`` (the training loss stays finite)."""

    def __init__(self, k):
        self.k = k

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.k:
            with torch.no_grad():
                next(pl_module.ema.parameters()).fill_(math.nan)


def test_non_finite_weights_are_never_saved(tmp_path):
    from bench.train import TrainingDiverged

    run = tmp_path / "r"
    with pytest.raises(TrainingDiverged, match="non-finite weights at step 4"):
        _fit(run, MDLM(None, 10, 16), steps=10, checkpoint_every=2, callbacks=[PoisonEMA(3)])
    ckpt = torch.load(run / "ckpt" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == 2 and _all_finite(ckpt["state_dict"])
    assert _failed(run)["step"] == 4


def test_a_healthy_run_leaves_no_failure_record(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "failed.json").write_text('{"reason": "stale"}')
    res = _fit(run, MDLM(None, 10, 16), steps=3, checkpoint_every=2)
    assert res.steps == 3 and isinstance(res.final_loss, float) and math.isfinite(res.final_loss)
    assert not (run / "failed.json").exists()
