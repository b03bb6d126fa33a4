"""The train phase (:func:`train_phase`): the method's loss and backward at batch 1 and 2 on the
task's layout, then one optimizer step as the trainer takes it (:mod:`bench.train.step`)."""

from __future__ import annotations

import contextlib

import torch

from bench.method import Batch
from bench.rehearse.inputs import Inputs
from bench.rehearse.measuring import GB, Phase, fmt_gb
from bench.rehearse.models import Model, twin_key


def stratum_midpoints(n: int, device, eps: float = 1e-3) -> torch.Tensor:
    """(n,) times at the middles of the trainer's n strata (:func:`bench.method.antithetic_times`
    with every uniform draw at 1/2): each batch holds the expected mix of noise levels, so that a
    loss whose work depends on the time (CANDI's CPU path computes only the noised rows) grows
    linearly from batch 1 to 2 instead of with the luck of the draws."""
    u = (torch.arange(n, dtype=torch.float32, device=device) + 0.5) / n
    return (1 - eps) * u + eps


def train_batch(inp: Inputs, n: int, vocab: int, device) -> Batch:
    """``n`` rows of the evaluation layout, random ids where the model generates."""
    d = inp.data
    g = torch.Generator().manual_seed(n)
    noise = torch.randint(0, vocab, d.x[:n].shape, generator=g)
    x = torch.where(d.clean_mask[:n], d.x[:n], noise)
    return Batch(x, d.clean_mask[:n].clone(), d.loss_mask[:n].clone()).to(device)


def train_phase(r, m: Model, method, backbone, inp: Inputs) -> Phase:
    """Forward + backward at batch 1 and at batch 2, then one optimizer step (gradient
    clipping, AdamW, the method's post-step hook, the EMA, the LR schedule) after the batch-2
    backward: the two halves of the trainer's step (:mod:`bench.train.step`). The
    step's own peak does not grow with the batch: it is the phase's floor. Both backward peaks
    are measured before AdamW made its moments (its first step makes them) and are counted
    with their bytes: every later step's backward holds them (one optimizer step in all)."""
    from bench.train.loop import precision_for
    from bench.train.step import Recipe

    tc = m.train
    cfg = tc.train_config()
    ph = Phase(
        m.label(),
        "train",
        tc.label(),
        batch=m.train_batch(),
        per_device=cfg.devices * cfg.num_nodes > 1,
    )
    dev = r.device
    bf16 = dev.type == "cuda" and precision_for(cfg) == "bf16-mixed"
    backbone.train()
    recipe = Recipe.build(backbone, cfg, dev, mixed=bf16)
    opt = recipe.optimizer
    vocab = int(r.task.vocab_size)

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def forward_backward(n: int):
        batch = train_batch(inp, n, vocab, dev)
        t = stratum_midpoints(n, dev) if method.uses_time else None
        recipe.forward_backward(method, backbone, batch, t, autocast=autocast)
        bad = recipe.watch.first()
        if bad is not None:
            raise FloatingPointError(f"non-finite loss {bad[1]}")

    def step():
        recipe.update(method, backbone)
        opt.zero_grad(set_to_none=True)

    r.run_phase(ph, lambda: forward_backward(1), batch_note=" (batch 1)", module=backbone)

    def batch_2():
        opt.zero_grad(set_to_none=True)
        r.run_phase(ph, lambda: forward_backward(2), batch_note=" (batch 2)", module=backbone)

    r.second(ph, (twin_key(tc), "train"), batch_2)
    opt_ph = Phase(ph.model, "train", ph.cell)
    r.run_phase(opt_ph, step, batch_note=" (optimizer step)")
    moments = sum(
        t.numel() * t.element_size()
        for st in opt.state.values()
        for t in st.values()
        if isinstance(t, torch.Tensor) and t.numel() > 1
    )
    ph.peaks = [None if x is None else x + moments for x in ph.peaks]
    ph.segments = [[x + moments for x in segs] for segs in ph.segments]
    ph.seconds[-1] += opt_ph.seconds[0]
    ph.floor = opt_ph.peaks[0]
    ph.note = (
        f"optimizer step {fmt_gb(ph.floor)} GB; backward peaks + AdamW's moments "
        f"({moments / GB:.2f} GB)"
    )
    # the optimizer and the EMA copy go with this frame: a sampling job has neither
    backbone.eval()
    r.check_memory(ph)
    return ph
