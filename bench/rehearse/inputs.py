"""The items a rehearsal feeds its models: the task's evaluation items, or random ids in their
shape when this machine cannot load them (:func:`task_inputs`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.data.base import TaskData


@dataclass
class Inputs:
    """Two items in the task's evaluation layout (``real``: the task's own items)."""

    data: TaskData
    subset: str
    real: bool
    note: str


def task_inputs(task, subset: str) -> Inputs:
    """The task's first two evaluation items of ``subset``, or random ids in its shape (a prompt
    of L / 8 positions) when this machine cannot load them."""
    try:
        d = task.eval_data(subset, 2)
    except Exception as e:  # noqa: BLE001 - a data set, package or tokenizer missing here
        try:
            d = task.eval_data(subset, 1)
        except Exception:  # noqa: BLE001
            L, V = int(task.seq_len), int(task.vocab_size)
            g = torch.Generator().manual_seed(0)
            x = torch.randint(0, V, (2, L), generator=g)
            clean = torch.zeros(2, L, dtype=torch.bool)
            clean[:, : L // 8] = True
            why = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
            note = (
                f"{task.name} {subset}: evaluation items unavailable here ({why}); random ids "
                f"in its shape (L = {L}, |V| = {V}, a prompt of L / 8 positions)"
            )
            return Inputs(TaskData(x, clean, ~clean, {}), subset, False, note)
    if len(d) < 2:  # one item: use it twice
        d = TaskData(
            d.x.repeat(2, 1),
            d.clean_mask.repeat(2, 1),
            d.loss_mask.repeat(2, 1),
            {k: list(v) * 2 for k, v in d.meta.items()},
        )
    d = TaskData(
        d.x[:2].clone(),
        torch.as_tensor(d.clean_mask[:2]).clone(),
        torch.as_tensor(d.loss_mask[:2]).clone(),
        {k: list(v)[:2] for k, v in d.meta.items()},
    )
    return Inputs(d, subset, True, f"{task.name} {subset}: the task's evaluation items")
