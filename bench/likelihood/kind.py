"""The likelihood kind of cell: a model's likelihood on one dataset of the sweep's ``likelihood``
section (docs/likelihood.md), planned beside its sample cells and run in the same job after them.

The worked example of docs/adding-a-cell-kind.md: the cell type (:class:`LikelihoodCell`), its
plan-time check (the datasets are ones the task can serve; nothing loaded), its cells (one per
dataset and model, its id the train cell's and the evaluation settings) and its work
(:func:`bench.likelihood.cells.run_likelihood_cell`), registered as ``likelihood`` in
:data:`bench.registry.KINDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bench.config import ConfigError, config_hash
from bench.kind import CellKind
from bench.plan import SampleCell


@dataclass
class LikelihoodCell(SampleCell):
    """A model's likelihood on one dataset (``subset`` = the dataset spec; ``n_samples`` = its
    sequences, 0 = all); the sample cell's ``nfe``, ``temperature`` and ``decoding`` are unused
    (0, 1.0 and "likelihood")."""

    kind: ClassVar[str] = "likelihood"

    block: int = 0
    wrap: bool = True
    draws: int = 1

    def label(self) -> str:
        seed = f" seed {self.train.train['seed']}" if self.train.train.get("seed") else ""
        model = f"{self.train.method}/{self.variant or self.train.variant}"
        return f"{model}{seed} likelihood {self.subset}"


class Likelihood(CellKind):
    name = "likelihood"

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
                    subset=spec,
                    nfe=0,
                    temperature=1.0,
                    decoding="likelihood",
                    n_samples=lk.n_sequences,
                    batch_size=lk.batch_size,
                    float64=True,
                    seed=lk.seed,
                    variant=variant,
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


KIND = Likelihood()
