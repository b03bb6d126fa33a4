"""What a plan's prediction assumes that its cells may not do, said beside it by ``python -m
bench.sweep --dry-run`` and ``python -m bench.cost``: the ``caveats`` of its cells' predictions
(:attr:`bench.cost.model.CellPrediction.caveats`: a call budget a variable-call decoding may not
spend, block-only calls under a block cache), one line per model and caveat with the number of
cells it applies to."""

from __future__ import annotations

from bench.cost.model import PlanPrediction


def caveat_lines(pred: PlanPrediction, indent: str = "  ") -> list[str]:
    """The caveats of ``pred``'s cells, per model (the job's label) in plan order: ``[]`` when
    none has any."""
    lines = []
    for j in pred.jobs:
        counts: dict[str, int] = {}
        for c in j.samples:
            for what in c.caveats:
                counts[what] = counts.get(what, 0) + 1
        lines += [f"{indent}  {j.label}: {k} cell(s) {what}" for what, k in counts.items()]
    if not lines:
        return []
    return [f"{indent}the prediction assumes (per model; each cell's note says more):", *lines]
