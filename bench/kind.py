"""Kinds of cells beside a model's sample cells: what a kind tells the planner and the jobs.

A model (a train cell) gets sample cells from the sweep's ``sample`` section; a *kind* adds other
cells of that model, run in the same job after its sample cells (the likelihood,
:mod:`bench.likelihood.kind`). A kind is one module: its cell type (a dataclass subclass of
:class:`bench.plan.SampleCell` naming its kind in ``kind``) and one :class:`CellKind` object,
registered by name in :data:`bench.registry.KINDS` (a plug-in package adds one through the
entry-point group ``sflm_bench.cell_kinds``, as methods and tasks). The planner and the jobs find
a kind through the registry, never by importing it (docs/layers.md), and test no cell class:
``registry.KINDS[cell.kind]``.
"""

from __future__ import annotations


class CellKind:
    """One kind of cell (module docstring). ``name`` is the registry's name and every cell's
    ``kind``. The planner calls :meth:`validate` once per sweep and :meth:`plan` once per model;
    a job calls :meth:`run` with the model's cells of this kind."""

    name: str = ""

    def validate(self, cfg, task, source: str) -> None:
        """Check the sweep ``cfg`` (a :class:`bench.config.SweepConfig`) for this kind at plan
        time, without loading data: raise :class:`bench.config.ConfigError` naming ``source``
        (the sweep file) and the key."""

    def plan(self, tc, variant: str, cfg) -> list:
        """The cells of this kind on model ``tc`` (a :class:`bench.plan.TrainCell`; ``variant``:
        the first method entry's that planned it), from sweep ``cfg``; none by default."""
        return []

    def predict(self, cell, forward_s):
        """What ``cell`` is predicted to cost, for ``--dry-run`` and SLURM sizing: ``(seconds,
        peak_bytes, note)``, or None (predicted as nothing, and the dry run says so).
        ``forward_s(batch, positions)`` is the predicted seconds of one forward pass of the
        cell's model at that batch and length on the sweep's device (the cost model's table,
        given as an argument: the prediction sits above the kinds)."""
        return None

    def run(self, cells: list, store, progress: bool = False) -> int:
        """Compute ``cells`` (this kind's, of one model) into ``store``, skipping those it has and
        those another process holds; the number computed or found done."""
        raise NotImplementedError(f"cell kind {self.name!r}: run")
