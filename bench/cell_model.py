"""A model's cell as objects and as the columns of its rows, shared by every kind of cell's work
(:mod:`bench.cells`: training and sampling; :mod:`bench.likelihood.cells`): its task, its method and
untrained backbone, the device, and the columns every row of the model carries (``recipe``,
``checkpoint``). Imports neither the trainer nor any kind of cell's work."""

from __future__ import annotations

import json

import torch

from bench import heap, registry
from bench.plan import _NON_SEMANTIC_TASK, _NON_SEMANTIC_TRAIN, TrainCell


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


def _base_row(tc: TrainCell) -> dict:
    """The columns every row of a train cell's model carries."""
    return {
        "sweep": tc.sweep,
        "task": tc.task["name"],
        "method": tc.method,
        "variant": tc.variant,
        "backbone": tc.backbone["size"],
        "seed": tc.train["seed"],
        "train_seed": tc.train["seed"],
        "config_hash": tc.id,
        "train_cell": tc.id,
        "recipe": recipe(tc),
        **_checkpoint_column(tc),
    }


def recipe(tc: TrainCell) -> str:
    """The model's training recipe: its train cell's identity without the training seed, as
    canonical JSON (the report's model key: rows of two recipes of one method are two models,
    seeds pool only within one). Trained on several subsets at once or one model per subset is
    part of it; which subset is not (the report's subset columns say it)."""
    task = {k: v for k, v in tc.task.items() if k not in _NON_SEMANTIC_TASK}
    out = {
        "task": task,
        "joint_subsets": len(tc.groups) > 1,
        "backbone": tc.backbone,
        "method": tc.method,
        "options": tc.options,
    }
    src = getattr(tc, "source", None)
    if src:  # an imported file: its bytes and the options it is run with are the recipe
        out["import"] = src.get("sha256") or src.get("checkpoint")
        out["vocab_size"] = getattr(tc, "vocab_size", None)
    else:
        skip = {*_NON_SEMANTIC_TRAIN, "seed"}
        out["train"] = {k: v for k, v in tc.train.items() if k not in skip}
    return json.dumps(out, sort_keys=True, separators=(",", ":"), default=str)


def _checkpoint_column(tc: TrainCell) -> dict:
    """``checkpoint``: where an imported model came from (absent for a trained one, so stores
    without imports read as before)."""
    src = getattr(tc, "source", None)
    if not src:
        return {}
    sha = src.get("sha256") or "unknown"
    return {"checkpoint": f"{src['checkpoint']}@{sha[:12]}"}
