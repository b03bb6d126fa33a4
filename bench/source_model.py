"""One model named on the command line (``SRC``), shared by ``python -m bench.eval`` and
``python -m bench.generate``.

``SRC`` is one of:

- a **run folder** of a sweep, ``<results>/runs/<method>-<variant>-<id>/`` (its ``cell.json``
  is the train cell; ``weights.pt`` the trained model). Its task, backbone, recipe, method,
  variant and options come from ``cell.json``; its rows go to the results folder holding
  ``runs/``, beside the sweep's. Naming its ``weights.pt`` or ``cell.json`` names the folder;
- a **model folder** written by ``python -m bench.checkpoints convert`` (``model.json`` +
  ``weights.pt``);
- a **reference-format file** (the S-FLM paper's harness: ``*.ckpt``) or ``hf://<repo>/<path>``
  (:mod:`bench.checkpoints.source`);
- a method's authors' **Hugging Face-format** repository, ``hf://<owner>/<repo>``, or a local
  folder of its ``config.json`` + ``model.safetensors`` (:mod:`bench.checkpoints.hf`).

The last two are imported as a sweep imports ``checkpoint:`` entries (:mod:`bench.plan`: method,
options, backbone and vocabulary from the file; the task from ``--task`` and ``--set task...``).

:func:`sweep_data` writes the sweep a user would have written for SRC (a plain mapping, then
``--set`` items through :func:`bench.config.apply_overrides`), :func:`plan_source` plans it with
:func:`bench.plan.plan` and keeps SRC's own train cells, so the cells and their ids are the ones
a sweep plans: for a run folder the planned train cell's id must equal the folder's (checked).
Everything here raises :class:`bench.config.ConfigError` (one line) on bad input and writes
nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from bench.config import ConfigError

#: the sweep name of the rows of an imported file evaluated by ``bench.eval`` (a run folder's
#: rows keep the name of the sweep that trained it; the name is never part of a cell's id)
EVAL_SWEEP = "eval"


@dataclass
class Source:
    """SRC, resolved. ``kind``: ``"run"`` (a run folder; ``run_dir`` and ``cell`` set) or
    ``"checkpoint"`` (a model folder, a reference-format file or ``hf://...``)."""

    text: str
    kind: str
    run_dir: Path | None = None
    cell: dict | None = None

    @property
    def imported_run(self) -> bool:
        """A run folder of an import cell (its model came from a checkpoint)."""
        return bool(self.cell and self.cell.get("source"))

    @property
    def results_dir(self) -> Path | None:
        """A run folder's results folder (the one holding ``runs/``)."""
        return self.run_dir.parent.parent if self.run_dir is not None else None


def resolve_source(src: str) -> Source:
    """What ``src`` names (module docstring); :class:`ConfigError` when it is none of them."""
    if src.startswith("hf://"):
        return Source(src, "checkpoint")
    p = Path(src).expanduser()
    if p.is_file() and p.name in ("weights.pt", "cell.json") and (p.parent / "cell.json").is_file():
        p = p.parent  # the run folder's weights or cell file: the run folder
    if p.is_dir():
        if (p / "cell.json").is_file():
            run_dir = Path(os.path.normpath(p.absolute()))
            try:
                cell = json.loads((run_dir / "cell.json").read_text())
            except (OSError, ValueError) as e:
                raise ConfigError(f"{src}: unreadable cell.json ({e})") from None
            if not isinstance(cell, dict):
                raise ConfigError(f"{src}: cell.json is not a train cell (not a mapping)")
            missing = [k for k in ("id", "task", "method", "train", "groups") if k not in cell]
            if missing:
                raise ConfigError(f"{src}: cell.json is not a train cell (no {missing[0]!r})")
            return Source(src, "run", run_dir, cell)
        if (p / "model.json").is_file() or (p / "config.json").is_file():  # converted; HF format
            return Source(src, "checkpoint")
        raise ConfigError(
            f"{src}: neither a run folder (no cell.json) nor a model folder from "
            "bench.checkpoints convert (no model.json) nor a Hugging Face-format one "
            "(no config.json)"
        )
    if p.is_file():
        return Source(src, "checkpoint")
    raise ConfigError(
        f"{src}: no such file or folder (SRC: a run folder, a model folder, a reference-format "
        "file or hf://...)"
    )


def evaluation_name(
    *,
    nfe=None,
    temperature=None,
    decoding=None,
    limit=None,
    sets=(),
    likelihood=None,
    draws=None,
) -> str:
    """The name the rows of a run folder's ``bench.eval`` record (``evaluation``): the flags that
    set its protocol (items, grid, draws), as typed, e.g. ``bench.eval --nfe 40 --limit 32``.
    Training seeds only choose which of the model's trained seeds pool, so they are not in it."""
    parts = ["bench.eval"]
    if likelihood:
        parts += ["--likelihood", ",".join(likelihood)]
    for flag, vals in (("--nfe", nfe), ("--temperature", temperature), ("--decoding", decoding)):
        if vals:
            parts += [flag, *(f"{v:g}" if isinstance(v, float) else str(v) for v in vals)]
    if limit:
        parts += ["--limit", str(limit)]
    if draws:
        parts += ["--draws", str(draws)]
    for item in sets:
        parts += ["--set", str(item)]
    return " ".join(parts)


def sweep_data(
    source: Source,
    *,
    task: str | None,
    sets: list[str] = (),
    results_dir: str | None = None,
    seeds: list[int] | None = None,
    sample: dict | None = None,
    decoding: list[str] | None = None,
) -> dict:
    """The sweep mapping for ``source`` (module docstring): ``sample`` the ``sample`` section's
    values given on the command line, ``decoding`` the method entry's decodings (None: the
    method's default), then the ``--set`` items (``sets``) as if written in the file."""
    from bench.config import apply_overrides

    entry: dict = {}
    if source.kind == "run":
        cell = source.cell
        if task is not None and task != cell["task"].get("name"):
            raise ConfigError(
                f"--task: {source.text} is a model of task {cell['task'].get('name')!r}, "
                f"not {task!r}"
            )
        own = source.results_dir
        if results_dir is not None and Path(os.path.normpath(Path(results_dir).absolute())) != own:
            raise ConfigError(
                f"--results-dir: a run folder's rows go to its own results folder ({own}), "
                f"not {results_dir}"
            )
        entry = {"method": cell["method"], "variant": cell.get("variant") or "base",
                 "options": dict(cell.get("options") or {})}  # fmt: skip
        src = cell.get("source")
        if src:  # an import cell's run folder: the same file (its sha256 is the id)
            entry["checkpoint"] = src["checkpoint"]
            if src.get("forced"):
                entry["family"] = src["forced"]
        train = dict(cell["train"])
        data = {
            "name": cell.get("sweep") or EVAL_SWEEP,
            "results_dir": str(own),
            "task": dict(cell["task"]),
            "backbone": dict(cell.get("backbone") or {}),
            "train": train,
            "seeds": list(seeds) if seeds else [int(train.get("seed", 0))],
        }
    else:
        if not task:
            raise ConfigError(f"--task: required for {source.text} (a checkpoint names no task)")
        if seeds:
            raise ConfigError(
                "--seeds: an imported checkpoint is one model; training seeds apply to run folders"
            )
        from bench.checkpoints import plan_spec

        sp, _ = plan_spec(source.text)  # the method the file holds (its header; CheckpointError)
        entry = {"method": sp.method, "checkpoint": source.text}
        data = {
            "name": EVAL_SWEEP,
            "results_dir": results_dir or "results",
            "task": {"name": task},
        }
    if decoding:
        entry["decoding"] = list(decoding)
    data["sample"] = dict(sample or {})
    data["executor"] = {"kind": "debug"}
    data["methods"] = [entry]
    return apply_overrides(data, list(sets)) if sets else data


def friendly(msg: str, label: str) -> str:
    """A planner message about the one method entry, in the command's words."""
    msg = msg.replace(f"{label}: methods[0].decoding", f"{label}: --decoding")
    for key in ("checkpoint: ", ""):
        msg = msg.replace(f"{label}: methods[0].{key}", f"{label}: ")
    return msg.replace(f"{label}: methods[0]: ", f"{label}: ")


def build_plan(data: dict, label: str):
    """``data`` built as a :class:`bench.config.SweepConfig` and planned (errors: one line)."""
    from bench.config import SweepConfig, build
    from bench.plan import plan

    cfg = build(SweepConfig, data, where=f"{label}: ")
    try:
        return plan(cfg, label)
    except ConfigError as e:
        raise ConfigError(friendly(str(e), label)) from None


def own_train_cells(source: Source, p) -> list:
    """The planned train cells that are SRC's model (one per training seed for a run folder).
    For a run folder, the cell of its own seed must be the folder itself (same id)."""
    if source.kind != "run":
        return list(p.train_cells)
    cell = source.cell
    groups = list(cell["groups"])
    mine = [tc for tc in p.train_cells if list(tc.groups) == groups]
    seed = int(cell["train"].get("seed", 0))
    own = next((tc for tc in mine if int(tc.train.get("seed", 0)) == seed), None)
    if own is None or own.id != cell["id"]:
        got = own.id if own is not None else "none"
        raise ConfigError(
            f"{source.text}: planned from its cell.json the model's id is {got}, the folder's is "
            f"{cell['id']} (cell.json from another version of the harness, or --set changed the "
            "model)"
        )
    return mine


def trained_cell(source: Source):
    """A run folder's train cell as recorded (:class:`bench.plan.TrainCell`), its results folder
    where the folder is now."""
    from bench.plan import TrainCell

    names = {f.name for f in dataclasses.fields(TrainCell)}
    cell = {k: v for k, v in source.cell.items() if k in names}
    cell["results_dir"] = str(source.results_dir)
    return TrainCell(**cell)
