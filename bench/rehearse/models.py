"""The distinct models of a plan (:func:`models_of`) and what makes two alike: one model
(:func:`model_key`), or twins that hold the same memory per batch element (:func:`twin_key`,
:func:`architecture`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bench.config import config_hash
from bench.plan import Plan, TrainCell
from bench.rehearse.capabilities import memory_neutral_options


@dataclass
class Model:
    """One distinct model of a plan and the cells it stands for."""

    cells: list[TrainCell] = field(default_factory=list)
    #: kind name -> the cells of that kind of every train cell it stands for, in plan order (each
    #: kind picks what the rehearsal tries of them: :meth:`bench.kind.CellKind.rehearse`)
    of_kind: dict[str, list] = field(default_factory=dict)

    @property
    def train(self) -> TrainCell:
        return self.cells[0]

    def label(self) -> str:
        more = len(self.cells) - 1
        return self.train.label() + (f" (+{more} alike)" if more else "")

    def train_batch(self) -> int | None:
        """The batch one device trains on: the global batch over devices x nodes (DDP ranks take
        every world-th example of it; :class:`bench.train.loop.StepBatches`)."""
        if self.train.imported:
            return None
        return max(
            -(
                -int(tc.train["batch_size"])
                // (int(tc.train["devices"]) * int(tc.train["num_nodes"]))
            )
            for tc in self.cells
        )


def model_key(tc: TrainCell) -> str:
    """What makes two train cells the same model here: method, options, backbone, classes, and
    whether it is imported (not its seed, training subsets or file)."""
    return config_hash(
        {
            "method": tc.method,
            "options": tc.options,
            "backbone": tc.backbone,
            "vocab": getattr(tc, "vocab_size", None),
            "import": tc.imported,
        }
    )


def twin_key(tc: TrainCell, architecture: str | None = None) -> str:
    """What makes two models hold the same memory per batch element: :func:`model_key` without
    the options the method declares memory-neutral (``Rehearsable.memory_neutral_options``: a
    schedule's constants). With ``architecture`` (:func:`architecture`, the built network's
    parameter names, shapes and dtypes) in place of the backbone config, the vocabulary and
    whether it was imported: a sampling call holds the same for a trained and an imported model
    of one architecture, however its config spells it. Twins measure their batch-2 point once
    (:meth:`Rehearsal.second`)."""
    from bench import registry

    neutral = set(memory_neutral_options(registry.METHODS[tc.method]))
    ident = {
        "method": tc.method,
        "options": {k: v for k, v in tc.options.items() if k not in neutral},
    }
    if architecture is not None:
        ident["architecture"] = architecture
    else:
        ident |= {
            "backbone": tc.backbone,
            "vocab": getattr(tc, "vocab_size", None),
            "import": tc.imported,
        }
    return config_hash(ident)


#: how far apart two vocabularies may be for sampling twins (:func:`architecture` with ``vocab``):
#: a few special tokens, e.g. GPT-2's 50,257 classes and the reference OWT files' 50,258
VOCAB_TWIN_SLACK = 0.01


def architecture(net: torch.nn.Module, vocab: int | None = None) -> str:
    """The network's parameters' names, shapes and dtypes, hashed. With ``vocab`` (the model's
    number of classes) every dimension equal to it is written ``"V"``: networks that differ
    only in their vocabulary share the key, and :meth:`Rehearsal.second` scales the growth it
    reuses by the ratio of the two vocabularies (within :data:`VOCAB_TWIN_SLACK`)."""

    def dim(d: int):
        return "V" if vocab is not None and d == vocab else d

    return config_hash(
        [[n, [dim(d) for d in p.shape], str(p.dtype)] for n, p in net.named_parameters()]
    )


def models_of(p: Plan) -> list[Model]:
    """The plan's distinct models, in plan order, with their cells by kind."""
    by: dict[str, Model] = {}
    for tc in p.train_cells:
        by.setdefault(model_key(tc), Model()).cells.append(tc)
    for c in p.sample_cells:
        by[model_key(c.train)].of_kind.setdefault(c.kind, []).append(c)
    return list(by.values())
