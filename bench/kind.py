"""Kinds of cells: what a kind tells the planner, the jobs, the cost model, ``--status`` /
``--dry-run`` and the rehearsal (docs/adding-a-cell-kind.md).

Every cell of a plan has a kind, named by its ``kind`` (a class attribute of its type). Two kinds
are *models*: a train cell trains one, an import cell converts a checkpoint into one
(:class:`bench.plan.TrainCell`; :mod:`bench.kinds.train`, :mod:`bench.kinds.imported`). Every
other kind's cells are cells *of* a model (their ``train`` is its cell), run in the model's job
once it is ready: the sample cells (:mod:`bench.kinds.sample`), the likelihood
(:mod:`bench.kinds.likelihood`), a plug-in's. A kind is one module: its cell type and one
:class:`CellKind` object, registered by name in :data:`bench.registry.KINDS` (a plug-in package
adds one through the entry-point group ``sflm_bench.cell_kinds``, as methods and tasks). The
planner, the jobs, the executors, the cost model and the views find a kind through the registry,
``registry.KINDS[cell.kind]``, never by importing it (docs/layers.md), and test no cell class.

A cell of a model is a dataclass with ``id`` (a content hash: the same id on the next run means
the cell is done), ``train`` (the model's :class:`bench.plan.TrainCell`), ``variant`` (the method
entry's), a ``label()`` and an ``absolute()`` (the same cell with absolute paths, for a job that
starts elsewhere); :class:`ModelCell` is a base with the last three.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar


@dataclass
class ModelCell:
    """A base for a cell of a model (module docstring): ``id``, the model's train cell ``train``
    and the method entry's ``variant`` (entries differing only in sampling options share one
    model). A subclass names its kind in the class attribute ``kind`` and adds its settings."""

    kind: ClassVar[str] = ""

    id: str
    train: object  # bench.plan.TrainCell
    variant: str = ""

    def label(self) -> str:
        """``method/variant [seed k] <kind>``; a kind says more in its own."""
        seed = f" seed {self.train.train['seed']}" if self.train.train.get("seed") else ""
        return f"{self.train.method}/{self.variant or self.train.variant}{seed} {self.kind}"

    def absolute(self):
        return dataclasses.replace(self, train=self.train.absolute())


class CellKind:
    """One kind of cell (module docstring). ``name`` is the registry's name and every cell's
    ``kind``; ``model``: its cells are models (train, import). The planner calls :meth:`validate`
    once per sweep and :meth:`plan_entry` once per method entry and model; a job calls
    :meth:`run` with the model's cells of this kind; the cost model :meth:`predict` and
    :meth:`load_s`; ``--status`` / ``--dry-run`` :meth:`describe`; the rehearsal
    :meth:`rehearse`."""

    name: str = ""
    #: the cells are models: a job trains (or imports) one, then runs its cells of the other kinds
    model: bool = False
    #: the sweep key whose value sizes a cell's batches (named when its peak memory is too high)
    batch_key: str = ""
    #: the modules a job imports to run cells of this kind (its work imports them lazily); the
    #: local executor's fork server imports them once, before it forks the jobs
    work: tuple[str, ...] = ()

    def validate(self, cfg, task, source: str) -> None:
        """Check the sweep ``cfg`` (a :class:`bench.config.SweepConfig`) for this kind at plan
        time, without loading data: raise :class:`bench.config.ConfigError` naming ``source``
        (the sweep file) and the key."""

    def plan(self, tc, variant: str, cfg) -> list:
        """The cells of this kind on model ``tc`` (a :class:`bench.plan.TrainCell`; ``variant``:
        the first method entry's that planned it), from sweep ``cfg``; none by default."""
        return []

    def plan_entry(self, tc, entry, sweep, first: bool) -> list:
        """The cells of this kind that method entry ``entry`` plans on model ``tc``, in a sweep
        planned as ``sweep`` (:class:`bench.plan.Sweep`: ``cfg``, ``task``, the sections with
        the task's defaults); ``first``: no earlier entry has this model. A model kind gets
        ``tc`` None and returns the entry's models. The default: :meth:`plan` once per model."""
        return self.plan(tc, entry.variant, sweep.cfg) if first and tc is not None else []

    def predict(self, cell, cost):
        """What ``cell`` is predicted to cost, for ``--dry-run`` and SLURM sizing: ``(seconds,
        peak_bytes, note)``, a prediction made with ``cost.prediction(...)``, or None (predicted
        as nothing, and the dry run says so). ``cost`` is the cost model's view of the cell's
        model on the sweep's device (:class:`bench.cost.model.Costs`; given as an argument: the
        prediction sits above the kinds): ``cost(batch, positions)`` is the predicted seconds of
        one forward pass at that batch and length."""
        return None

    def load_s(self, cells: list, cost) -> float:
        """Seconds a job spends before running ``cells`` (this kind's, of one model) beyond
        loading the model's weights: e.g. a tokenizer; none by default."""
        return 0.0

    def describe(self, n: int) -> str:
        """``n`` cells of this kind in words, as ``--dry-run`` counts them: ``3 likelihood
        cells``."""
        return f"{n} {self.name} cells"

    def run(self, cells: list, store, progress: bool = False) -> int:
        """Compute ``cells`` (this kind's, of one model; a model kind: the model itself) into
        ``store``, skipping those it has and those another process holds; the number computed
        or found done."""
        raise NotImplementedError(f"cell kind {self.name!r}: run")

    def rehearse(self, cells: list, ctx) -> list:
        """The rehearsal's tries of this kind's ``cells`` of one model at full size, as phases
        (:mod:`bench.rehearse`; ``ctx``: a :class:`bench.rehearse.rehearsal.Tryout`, given: the
        rehearsal, the model, its built networks and items, the phase type); none by default."""
        return []
