"""A model's cell as objects and as the columns of its rows, shared by every kind of cell's work
(:mod:`bench.kinds`: training, sampling, the likelihood): its task, its method and
untrained backbone, the device (the columns every row of the model carries are
:func:`bench.results.rows.model_columns`). Imports neither the trainer nor any kind of cell's
work."""

from __future__ import annotations

import torch

from bench import heap, registry
from bench.plan import TrainCell


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def keep_freed_heap(device: torch.device) -> None:
    """Sampling (or a likelihood bound) on the CPU (on another ``device``: nothing): let glibc
    keep freed buffers of up to 32 MB in the heap for the next call instead of mapping, faulting
    in and unmapping them at every step (its threshold only rises as buffers are freed; a job
    that trains first has raised it, one that only samples has not): those page faults put much of
    a sampling process's CPU time in the system (docs/measurements/quickstart.md). Samples are
    bit-identical. Elsewhere than glibc: nothing."""
    if device.type == "cpu":
        heap.keep_freed()


def cell_task(tc: TrainCell):
    """The task of a train cell, built from its recorded config."""
    return registry.make_task(tc.task_config())


def method_backbone(tc: TrainCell, task):
    """The method and the (untrained) backbone of a train cell, for ``task``."""
    method = registry.make_method(tc.method, tc.options, task, getattr(tc, "vocab_size", None))
    backbone = method.build_backbone(tc.backbone_config())
    return method, backbone
