"""The train kind: a model trained here (:class:`bench.plan.TrainCell` without a ``source``).

Planned once per training seed x training subsets of a method entry without ``checkpoint:``
(:func:`train_cells_of`; its id :func:`_train_id`, shared with the import kind), run by
:func:`bench.train.fit` in its run folder (resumable; rows: :func:`bench.results.rows.train_rows`),
predicted from the shapes: ``steps`` optimiser steps of the per-device batch (the bare step,
forward + backward ~ 3 forwards and AdamW, times the model's training forward-equivalents, plus
the trainer's per-step cost), validation passes and checkpoints.
"""

from __future__ import annotations

import dataclasses
import math

from bench.config import TrainConfig, canonical, config_hash
from bench.kind import CellKind
from bench.plan import _NON_SEMANTIC_TASK, _NON_SEMANTIC_TRAIN, EntryModel, Sweep, TrainCell

#: bytes of saved activations per token and block, in units of d_model x the activation width
#: (attention and MLP inputs, the 4d MLP hidden state, norms: ~34 d values per token and block,
#: Korthikanti et al. 2022)
ACT_PER_BLOCK = 34


def _train_id(sw: Sweep, m: EntryModel, train: TrainConfig, groups: list[str]) -> str:
    """A train cell's content hash: task (its semantic fields), training subsets, backbone,
    method and model options, and the recipe (its semantic fields) or, for an import, the file
    (its sha256) and the model's vocabulary."""
    ident = {
        "task": {k: v for k, v in canonical(sw.cfg.task).items() if k not in _NON_SEMANTIC_TASK},
        "groups": groups,
        "backbone": m.backbone,
        "method": m.entry.method,
        "options": m.options,
    }
    if m.source:  # the file (by its sha256) and the options it is run with
        ident["import"] = m.source["sha256"] or m.source["checkpoint"]
        ident["vocab_size"] = m.vocab_size
    else:
        ident["train"] = {k: v for k, v in canonical(train).items() if k not in _NON_SEMANTIC_TRAIN}
    return config_hash(ident)


def train_cells_of(sw: Sweep, m: EntryModel) -> list[TrainCell]:
    """The entry's train cells: one per training seed x training subsets (one for an import)."""
    cells = []
    for seed in m.seeds:
        train = dataclasses.replace(m.train, seed=seed)  # train.seed 0 and seeds [0]: one cell
        for groups in m.groups:
            cells.append(
                TrainCell(
                    id=_train_id(sw, m, train, groups),
                    sweep=sw.cfg.name,
                    results_dir=sw.cfg.results_dir,
                    task=canonical(sw.cfg.task),
                    backbone=m.backbone,
                    train=canonical(train),
                    method=m.entry.method,
                    variant=m.variant,
                    options=m.options,
                    groups=groups,
                    source=m.source,
                    vocab_size=m.vocab_size,
                )
            )
    return cells


def train(tc: TrainCell, store, progress: bool, threads: int, rebuild: bool) -> None:
    """Train ``tc`` into its run folder (resuming from its last checkpoint) and record its rows
    unless ``rebuild`` (its weights were damaged after they were recorded: the rows stay)."""
    import torch

    from bench.cell_model import cell_task, method_backbone
    from bench.results.rows import train_rows
    from bench.train import fit, heldout_for

    task = cell_task(tc)
    # the initial weights are a function of the cell, not of the process
    torch.manual_seed(int(tc.train["seed"]))
    method, backbone = method_backbone(tc, task)
    train_cfg = tc.train_config()
    if threads:
        train_cfg.threads = threads
    data = task.train_data(tc.groups)
    n_params = sum(p.numel() for p in backbone.parameters())
    res = fit(
        method,
        backbone,
        data,
        train_cfg,
        tc.run_dir,
        progress=progress,
        extra={"cell": tc.id},
        val_data=heldout_for(task, tc.groups, train_cfg),
    )
    if res.is_global_zero and not rebuild:  # DDP: every rank trains, rank 0 records
        store.write_cell(tc.id, train_rows(tc, res, n_params, task=task))


class Train(CellKind):
    name = "train"
    model = True
    batch_key = "train.batch_size"
    work = ("bench.train", "bench.cell_model")

    def plan_entry(self, tc, entry, sweep, first: bool) -> list[TrainCell]:
        """The entry's models when it trains them (no ``checkpoint:``)."""
        return [] if entry.source else train_cells_of(sweep, entry)

    def run(self, cells: list, store, progress: bool = False, threads: int = 0) -> int:
        from bench.cells import prepare_model

        for tc in cells:
            rebuild = prepare_model(tc, store)
            if rebuild is not None:
                train(tc, store, progress, threads, rebuild)
        return len(cells)

    def predict(self, tc, cost):
        """``steps`` optimiser steps (module docstring), its peak: parameters, gradients, AdamW
        moments and the EMA copy (20 bytes a parameter) + activations + the logits."""
        net, tr = cost.net, tc.train
        P = net.params()
        devices = int(tr.get("devices", 1)) * int(tr.get("num_nodes", 1))
        B = max(1, int(tr["batch_size"]) // devices)
        steps = int(tr["steps"])
        T = cost.L - 1 if net.causal else cost.L
        ctx = T / 2 if net.causal else T
        ft, loss_s = cost.train_factor(net.head_share(ctx))
        trainer = cost.entry["trainer"]
        step = ft * cost.train_step_s(B, T, ctx) + loss_s + trainer["step_s"]
        val_every = tr.get("val_every")
        val_every = max(1, steps // 20) if val_every is None else int(val_every)
        n_val = (steps // val_every) * int(tr.get("val_batches", 2)) if val_every else 0
        if tr.get("logger") == "none":
            n_val = 0
        val = n_val * ft * cost.forward_s(B, T, ctx)
        # each periodic checkpoint writes its file and last.ckpt (weights, AdamW moments, EMA: 16
        # bytes a parameter), the end one more last.ckpt and weights.pt
        ckpts = math.ceil(steps / int(tr.get("checkpoint_every", 1000) or steps))
        ckpt = ((2 * ckpts + 1) * 16.0 + 4.0) * P / cost.entry["job"]["write_bytes_per_s"]
        parts = {"steps": steps * step, "validation": val, "checkpoints": ckpt,
                 "trainer": trainer["start_s"]}  # fmt: skip
        act = B * T * (net.n_blocks * ACT_PER_BLOCK * net.d_model * cost.act_bytes
                       + net.vocab_out * 4 * 3)  # fmt: skip
        return cost.prediction(tc.id, self.name, sum(parts.values()), int(20 * P + act), parts,
                               calls=steps, start_s=cost.tokenizer_s,
                               flops=steps * 3.0 * B * T * net.token_flops(ctx) * devices,
                               note=f"{steps} steps x {step:.3g} s (factor {ft:.2f})")  # fmt: skip


KIND = Train()
