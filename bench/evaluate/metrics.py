"""What an evaluator returns: one :class:`MetricValue` per scored quantity.

Task evaluators (:meth:`bench.data.base.Task.evaluate`, :mod:`bench.data.sudoku.score`,
:mod:`bench.evaluate.gsm8k` through :class:`bench.data.program.task.ProgramTask`) return lists of
them; :mod:`bench.results.rows` turns each into a row of the results store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class MetricValue:
    """One scored quantity for the results store (a value in [0, 1] for accuracies).

    ``n`` is the number of examples it was computed on; ``ci_low`` / ``ci_high`` bound its 95 %
    confidence interval where the evaluator gives one, and ``ci_method`` names how it was
    computed. ``outcomes``: the per-item 0/1 outcomes whose mean the value is (items in the
    task's order), for paired comparisons between models (:mod:`bench.evaluate.paired`); None
    when the metric is not a mean of 0/1 outcomes.
    """

    metric: str
    value: float
    n: int
    ci_low: float | None = None
    ci_high: float | None = None
    ci_method: str | None = None
    outcomes: Any = None

    def columns(self) -> dict:
        """Its store-row columns (``metric``, ``value``, ``n``, ``ci_low``, ``ci_high``); the
        cell kinds (:mod:`bench.kinds`, :mod:`bench.likelihood.cells`) add theirs."""
        return {
            "metric": self.metric,
            "value": self.value,
            "n": self.n,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
        }
