"""Tiny deterministic tasks for learnability checks (CPU, seconds).

``sort``: 8 random digits followed by the same digits sorted (16 tokens, vocabulary 10);
the first 8 positions are the prompt (``task.options.n_digits`` changes the 8). A method that
cannot reach >= 90 % exact match on this with a small CPU budget is broken
(tests/bench/test_conformance.py::test_learns_sort8 holds every registered method to it: at
most 3000 steps of a cpu-mini DiT).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.data.base import Task, TaskData, nfe_grid
from bench.evaluate.metrics import MetricValue
from bench.options import Options, option


def sort_data(n: int, n_digits: int = 8, seed: int = 0) -> TaskData:
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 10, (n, n_digits), generator=g)
    x = torch.cat([a, a.sort(-1).values], dim=1)
    clean = torch.zeros_like(x, dtype=torch.bool)
    clean[:, :n_digits] = True
    return TaskData(x, clean, ~clean)


@dataclass
class SortOptions(Options):
    """``task.options`` of the ``sort`` task."""

    n_digits: int = option(8, gt=0, help="digits to sort; sequences are twice as long")


class SortTask(Task):
    name = "sort"
    vocab_size = 10
    headline_metric = "exact_match"
    Options = SortOptions

    def __init__(self, cfg):
        super().__init__(cfg)
        self.seq_len = 2 * self.opts.n_digits

    def groups(self):
        return [f"sort{self.opts.n_digits}"]

    def generated_length(self) -> int:
        """The n_digits sorted digits after the prompt."""
        return self.opts.n_digits

    def sweep_defaults(self):
        """NFE 2, 4, ... up to the generated length (the n_digits sorted digits: 8 -> [2, 4, 8])."""
        return {"sample": {"nfe": nfe_grid(2, self.opts.n_digits)}}

    def train_data(self, groups):
        return sort_data(self.cfg.n_train, self.opts.n_digits, seed=self.cfg.seed)

    def eval_data(self, group, n):
        return sort_data(n, self.opts.n_digits, seed=self.cfg.seed + 1_000_003)

    def heldout_data(self, groups, n):
        return self.eval_data(groups[0], n)

    def evaluate(self, samples, data, group):
        ok = (samples == data.x).all(-1).float()
        return [MetricValue("exact_match", float(ok.mean()), len(ok), outcomes=ok.numpy())]
