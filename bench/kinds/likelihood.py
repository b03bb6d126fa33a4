"""The likelihood kind: a model's likelihood on one dataset of the sweep's ``likelihood`` section
(docs/likelihood.md), planned beside its sample cells and run in the same job after them.

The worked example of docs/adding-a-cell-kind.md: the cell type (:class:`LikelihoodCell`), its
plan-time check (the datasets are ones the task can serve; nothing loaded), its cells (one per
dataset and model, its id the train cell's and the evaluation settings), its work
(:func:`bench.likelihood.cells.run_likelihood_cell`: its own lock, records and rows), its cost
prediction (``draws`` forwards, one for AR, per batch of sequences; nothing for a method without
a bound) and the tokenizer its job loads, registered as ``likelihood`` in
:data:`bench.registry.KINDS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.config import ConfigError, config_hash
from bench.kind import CellKind, ModelCell

#: sequences per likelihood dataset when the sweep says "all" (0): an assumption of the model
ALL_SEQUENCES = 1000


@dataclass(kw_only=True)
class LikelihoodCell(ModelCell):
    """A model's likelihood on one dataset: ``subset`` the dataset spec (its rows' ``subset``),
    ``n_samples`` its sequences (0 = all), ``block`` (0 = the task's length), ``wrap``, ``draws``
    of the bound per sequence, ``batch_size`` and ``seed`` of the draws; ``evaluation``: the
    ``bench.eval`` call that plans it ("" for a sweep's own cell)."""

    kind = "likelihood"

    subset: str
    n_samples: int = 0
    batch_size: int = 32
    seed: int = 0
    block: int = 0
    wrap: bool = True
    draws: int = 1
    evaluation: str = ""

    def label(self) -> str:
        seed = f" seed {self.train.train['seed']}" if self.train.train.get("seed") else ""
        model = f"{self.train.method}/{self.variant or self.train.variant}"
        return f"{model}{seed} likelihood {self.subset}"


class Likelihood(CellKind):
    name = "likelihood"
    batch_key = "likelihood.batch_size"
    work = ("bench.likelihood.cells", "bench.likelihood.evaluate", "bench.likelihood.datasets")

    def validate(self, cfg, task, source: str) -> None:
        """The section's datasets are ones this task can serve (nothing loaded)."""
        from bench.likelihood.datasets import check, parse

        for i, spec in enumerate(cfg.likelihood.datasets):
            try:
                check(parse(spec), task)
            except ValueError as e:  # ConfigError included
                raise ConfigError(f"{source}: likelihood.datasets[{i}]: {e}") from None

    def plan(self, tc, variant: str, cfg) -> list[LikelihoodCell]:
        """One cell per dataset of the section (none when it names none); its id: the train
        cell's and the evaluation settings (:func:`bench.likelihood.cells.cell_id`'s rule)."""
        lk = cfg.likelihood
        cells = []
        for spec in lk.datasets:
            ident = {"likelihood": tc.id, "dataset": spec, "n": lk.n_sequences, "block": lk.block,
                     "wrap": lk.wrap, "draws": lk.draws, "seed": lk.seed}  # fmt: skip
            cells.append(
                LikelihoodCell(
                    id=config_hash(ident),
                    train=tc,
                    variant=variant,
                    subset=spec,
                    n_samples=lk.n_sequences,
                    batch_size=lk.batch_size,
                    seed=lk.seed,
                    block=lk.block,
                    wrap=lk.wrap,
                    draws=lk.draws,
                )
            )
        return cells

    def run(self, cells: list, store, progress: bool = False) -> int:
        """Each cell takes its own lock and is skipped when the store has it."""
        from bench.likelihood.cells import run_likelihood_cell

        return sum(bool(run_likelihood_cell(c, store, progress)) for c in cells)

    def predict(self, c, cost):
        """``draws`` bounds (one for AR: exact) over ceil(sequences / batch) batches of ``block``
        positions, each a forward times the model's forward-equivalents; its peak: parameters
        and the (B, block, |V|) logits in float32 and float64. A method without a bound: the
        row written."""
        sc, net, method = cost.scorers, cost.net, type(cost.method)
        if not method.bound_kind:  # "no bound": a row without a value
            return cost.prediction(c.id, self.name, sc["cell_s"], 0, {"score": sc["cell_s"]})
        n = c.n_samples or ALL_SEQUENCES
        block, B = c.block or cost.L, c.batch_size
        batches = math.ceil(n / B)
        draws = 1 if method.nfe_is_length else c.draws
        fe, call_s, _ = cost.sample_factor("*", "float64", net.head_share(block))
        fwd = sum(cost.forward_s(min(B, n - i * B), block, block) for i in range(batches))
        net_s = draws * (fe * fwd + batches * call_s)
        peak = int(net.params() * 4 + B * block * net.vocab_out * (4 + 8))
        flops = draws * n * block * net.token_flops(block)
        parts = {"network": net_s, "score": sc["cell_s"]}
        return cost.prediction(c.id, self.name, sum(parts.values()), peak, parts,
                               calls=draws * batches, flops=flops)  # fmt: skip

    def load_s(self, cells: list, cost) -> float:
        """The task's tokenizer (where it loads one) for a method with a bound."""
        return cost.tokenizer_s if cells and type(cost.method).bound_kind else 0.0

    def rehearse(self, cells: list, ctx) -> list:
        """The bound of the model's first likelihood cell (:func:`rehearse_cell`), for a method
        with one."""
        if not cells or not getattr(ctx.method, "bound_kind", ""):
            return []
        return [rehearse_cell(cells[0], ctx)]


def rehearse_cell(lc: LikelihoodCell, ctx):
    """The rehearsal's likelihood phase of ``lc`` (``ctx``: :meth:`Likelihood.rehearse`'s): one
    call of the method's bound on blocks of the evaluated length at batch 1 and 2."""
    import torch

    from bench.method import Batch

    r, m, method, backbone = ctx.r, ctx.m, ctx.method, ctx.backbone
    dev = r.device
    L = lc.block or int(r.task.seq_len)
    ph = ctx.Phase(
        m.label(),
        "likelihood",
        lc.label(),
        batch=lc.batch_size,
        note=f"blocks of {L} random ids, {lc.draws} draw(s)",
    )
    vocab = int(r.task.vocab_size)

    def run(n: int):
        g = torch.Generator().manual_seed(n)
        x = torch.randint(0, vocab, (n, L), generator=g)
        clean = torch.zeros(n, L, dtype=torch.bool)
        batch = Batch(x, clean, ~clean).to(dev)

        def call(batch=batch, n=n):
            gen = torch.Generator(device=dev).manual_seed(0)
            with torch.no_grad():
                out = method.nll_bound(backbone, batch, n_draws=lc.draws, generator=gen)
            if out.ndim != 2 or out.shape[1] != n:
                raise ValueError(
                    f"nll_bound returned shape {tuple(out.shape)}, expected (draws, {n})"
                )
            if not bool(torch.isfinite(out).all()):
                raise FloatingPointError("non-finite bound")
            return out

        r.run_phase(ph, call, batch_note=f" (batch {n})", module=backbone)

    run(1)
    V = int(method.vocab_size)
    r.second(ph, ctx.twin("likelihood", V), lambda: run(2), vocab=V)
    r.check_memory(ph)
    return ph


KIND = Likelihood()
