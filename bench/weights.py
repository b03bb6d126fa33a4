"""``weights.pt``: the final weights of a model, what sampling loads.

The trainer writes it when training ends (:mod:`bench.train`), the importer when it converts a
reference checkpoint (:mod:`bench.checkpoints`); sampling (:mod:`bench.kinds.sample`), the
exporter and ``python -m bench.perf`` read it. It holds the backbone's EMA weights (the module
sampling uses), the method's state (e.g. S-FLM's adaptive schedule), the step count and the
writer's metadata.

Reading or writing it imports neither Lightning nor the trainer (tests/bench/test_imports.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # pragma: no cover
    from bench.method import Method

#: the file's name in a run folder or a model folder
WEIGHTS_FILE = "weights.pt"


def weights_payload(
    backbone: torch.nn.Module, method: Method, steps: int, extra: dict | None = None
) -> dict:
    """What ``weights.pt`` holds: ``backbone``'s weights (the EMA ones: the module sampling
    uses), the method's state, the step count and ``extra`` metadata."""
    return {
        "backbone": backbone.state_dict(),
        "method_state": method.state_dict(),
        "steps": steps,
        "extra": extra or {},
    }


def save_weights(
    path: str | Path,
    backbone: torch.nn.Module,
    method: Method,
    steps: int,
    extra: dict | None = None,
) -> Path:
    """Write :func:`weights_payload` to ``path`` atomically (a reader never sees a torn file).
    Returns ``path``."""
    from bench.atomic import atomic_torch_save

    path = Path(path)
    atomic_torch_save(weights_payload(backbone, method, steps, extra), path)
    return path


def load_weights(method: Method, backbone: torch.nn.Module, path: str | Path) -> dict:
    """Load what :func:`save_weights` (or the trainer) wrote into ``backbone`` (EMA weights) and
    ``method``; returns the metadata: ``steps`` and the writer's ``extra`` entries."""
    payload = torch.load(path, map_location="cpu", weights_only=False)
    backbone.load_state_dict(payload["backbone"])
    method.load_state_dict(payload["method_state"])
    return {"steps": payload["steps"], **payload.get("extra", {})}
