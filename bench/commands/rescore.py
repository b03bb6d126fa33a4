"""Score saved samples again, without sampling: another grader, another Gen. PPL reference model.

    python -m bench.rescore [--results-dir R] [--task T] [--model M] [--nfe N]
                            [--set task.options.KEY=VALUE ...]

Every selected sample cell's saved token ids (``runs/<run>/samples/<cell>.pt``) go through its
task's scorer built with the cell's task settings overlaid with the ``--set`` ones (only
``task.options.*`` keys: what decides how an item is scored). The result is a new cell: its id is
the sampled cell's and the settings that differ, its rows carry ``scorer`` (those settings, as
canonical JSON) and ``rescored_from`` (the sampled cell), with their own per-item records; the
sampled cell's rows stay, and the report shows the re-scored rows as another evaluation of the
model (``mdlm (ancestral) [scored grader=reference]``). A re-scored cell already in the store is
skipped, so running it twice does nothing.

Without ``--set`` (or with settings equal to the cell's) nothing is written: every stored value
(value, CI, n, per-item outcomes) is computed again and compared exactly; exit 1 on any
difference. A setting that changes which items a cell has (e.g. the prompt separator) is refused:
its saved samples answer other prompts, so it needs sampling again.

A selected cell whose per-item records file was changed, cut or deleted after it was written
(:func:`bench.records.damaged_files`, the check ``python -m bench.results verify`` makes) is
skipped with one line on stderr naming the file and the cell; the others are scored, and the exit
status is 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.usage import UsageError, add_filters, add_results_dir, add_sets, usage_exit

#: the stored columns a re-score must reproduce exactly
COMPARED = ("value", "n", "ci_low", "ci_high", "item_outcomes", "draw_outcomes", "items_key")


@dataclass(frozen=True)
class _SampledWith:
    """What :func:`bench.results.sample_columns` reads of the method that sampled a cell, as its
    rows recorded it (re-scoring builds no model)."""

    nfe_is_length: bool
    temperature_free: tuple
    decodings: tuple


def scorer_overrides(sets: list[str], task_cfg: dict) -> dict:
    """``{key: value}`` of the ``task.options.*`` settings in ``sets`` that differ from
    ``task_cfg["options"]``. A ``--set`` outside ``task.options`` is a UsageError (and so is a
    bad one: :class:`bench.config.ConfigError`)."""
    from bench.config import apply_overrides

    for item in sets:
        if not item.partition("=")[0].strip().startswith("task.options."):
            raise UsageError(
                f"--set {item!r}: only task.options.KEY=VALUE changes how saved samples are scored"
            )
    new = apply_overrides({"task": {"options": dict(task_cfg.get("options") or {})}}, sets)
    old = task_cfg.get("options") or {}
    return {k: v for k, v in new["task"]["options"].items() if old.get(k, _MISSING) != v}


_MISSING = object()
_TASKS: dict = {}  # task config hash -> task (bench.rescore scores many cells of one task)


def _saved(results_dir: Path, row) -> tuple[Path, dict]:
    """The saved ids of a sample cell and the cell it came from (its planned SampleCell)."""
    import torch

    hits = sorted(results_dir.glob(f"runs/*-{row['train_cell']}/samples/{row['cell_id']}.pt"))
    if not hits:
        raise FileNotFoundError(f"cell {row['cell_id']}: no saved samples under {results_dir}/runs")
    return hits[0], torch.load(hits[0], weights_only=False)


def _cell(d: dict):
    """A SampleCell from its saved ``dataclasses.asdict`` form."""
    from bench.plan import SampleCell, TrainCell

    return SampleCell(**{**d, "train": TrainCell(**d["train"])})


def rescore_cell(saved: dict, row, overrides: dict, rows_of_cell: list[dict]):
    """Score one cell's saved samples (``saved``: its samples file, :func:`_saved`) under its
    task settings plus ``overrides``: (the new cell's id, its store rows, records, seconds).
    ``row``: the cell's row from :func:`bench.commands.samples.select_cells`; ``rows_of_cell``: its
    stored rows."""
    import dataclasses

    from bench import registry
    from bench.config import TaskConfig, canonical, config_hash
    from bench.evaluate.draws import score_samples
    from bench.results.rows import items_key, sample_rows

    c = _cell(saved["cell"])
    task_cfg = {**c.train.task, "options": {**(c.train.task.get("options") or {}), **overrides}}
    t0 = time.perf_counter()
    tkey = config_hash(task_cfg)
    if tkey not in _TASKS:  # one task per setting: its sandbox / reference LM starts once
        _TASKS[tkey] = registry.make_task(TaskConfig(**task_cfg))
    task = _TASKS[tkey]
    data = task.eval_data(c.subset, c.n_samples)
    key = items_key(data)
    if key != row.get("items_key") and row.get("items_key"):
        raise UsageError(
            f"--set {', '.join(f'task.options.{k}' for k in overrides)}: changes the items of cell "
            f"{c.id} (its saved samples answer other prompts); sample again instead"
        )
    nfe = row.get("nfe")
    new_id = config_hash({"rescore": c.id, "scorer": canonical(overrides)}) if overrides else c.id
    new_c = dataclasses.replace(c, id=new_id)
    # every draw of a k-draw cell (sample.n_per_item), as when it was sampled
    metrics, recs = score_samples(task, new_c, saved["ids"], data, nfe=nfe)
    first = rows_of_cell[0]
    sampled = _SampledWith(
        nfe_is_length=bool(first.get("nfe_is_length")),
        temperature_free=(c.decoding,) if first.get("temperature_free") else (),
        decodings=(c.decoding,) if first.get("default_decoding") else ("",),
    )
    rows = sample_rows(
        new_c,
        metrics,
        method=sampled,
        task=task,
        train_steps=first.get("train_steps"),
        nfe=nfe,
        wall_s=time.perf_counter() - t0,
        items=key,
    )
    keep = {
        k: first.get(k) for k in ("sweep", "recipe", "checkpoint", "item_limit") if first.get(k)
    }
    if overrides:
        keep |= {
            "scorer": json.dumps(canonical(overrides), sort_keys=True, separators=(",", ":")),
            "rescored_from": c.id,
        }
    secs = time.perf_counter() - t0
    return new_id, [{**r, **keep, "score_s": secs} for r in rows], recs, secs


def differences(stored: list[dict], fresh: list[dict]) -> list[str]:
    """What differs between a cell's stored rows and the same scorer's fresh ones."""
    by = {r["metric"]: r for r in stored}
    out = []
    for r in fresh:
        s = by.get(r["metric"])
        if s is None:
            out.append(f"{r['metric']}: not stored")
            continue
        for k in COMPARED:
            a, b = s.get(k), r.get(k)
            if a != b and not (a is None and b is None):
                out.append(f"{r['metric']}.{k}: stored {a!r}, now {b!r}")
    missing = sorted(set(by) - {r["metric"] for r in fresh})
    out += [f"{m}: stored, not produced now" for m in missing]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.rescore",
        description="Score saved samples again under other scorer settings (new rows; the old "
        "ones stay), or check that the stored values reproduce (no --set).",
    )
    add_results_dir(ap, "results folder (default: results)", default="results")
    add_filters(
        ap,
        task="only this task's cells",
        model="only this model (label, method or method/variant)",
        nfe="only cells at this NFE",
    )
    add_sets(
        ap,
        "a scorer setting (repeatable), e.g. task.options.grader=reference",
        metavar="task.options.KEY=VALUE",
    )
    args = ap.parse_args(argv)

    from bench.commands.samples import select_cells
    from bench.records import RecordsError
    from bench.results import Store

    results_dir = Path(args.results_dir)
    store = Store(results_dir)
    try:
        if not store.dir.is_dir():
            raise UsageError(f"{store.dir}: no results store")
        df = store.read()
        cells = select_cells(df, task=args.task, model=args.model, nfe=args.nfe)
        if len(cells) and "scorer" in cells:  # score what was sampled, not a re-score
            cells = cells[cells["rescored_from"].isna() | (cells["rescored_from"] == "")]
        if not len(cells):
            raise UsageError(f"{results_dir}: no sampled cell with records matches the selection")
        _check_settings(results_dir, cells, args.sets)
        cells, damaged = _skip_damaged(results_dir, cells)
        rc = _run(results_dir, store, cells, args.sets) if len(cells) else 1
        return 1 if damaged else rc
    except (UsageError, RecordsError, FileNotFoundError) as e:  # ConfigError: a UsageError
        return usage_exit(e)


def _skip_damaged(results_dir: Path, cells):
    """(the selected cells whose records file is intact, how many files are not): one
    ``skipped:`` line on stderr per damaged records file, naming it and its cell."""
    from bench import records

    bad = records.damaged_files(results_dir, cells)
    for _, ids, why in bad:
        print(f"skipped: cell {', '.join(ids)}: {why}", file=sys.stderr)
    gone = {c for _, ids, _ in bad for c in ids}
    return cells[~cells["cell_id"].isin(gone)], len(bad)


def _check_settings(results_dir: Path, cells, sets: list[str]) -> None:
    """The ``--set`` items build each selected model's task (its run folder's ``cell.json``; the
    options' rules: ConfigError naming the key), before any work. Building a task is cheap: no
    data, no sandbox."""
    from bench import registry
    from bench.config import TaskConfig

    seen = set()
    for tc_id in dict.fromkeys(cells["train_cell"]):
        found = sorted(results_dir.glob(f"runs/*-{tc_id}/cell.json"))
        if not found:
            raise FileNotFoundError(f"train cell {tc_id}: no run folder under {results_dir}/runs")
        task = json.loads(found[0].read_text())["task"]
        overrides = scorer_overrides(sets, task)
        key = json.dumps([task, overrides], sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            opts = {**(task.get("options") or {}), **overrides}
            registry.make_task(TaskConfig(**{**task, "options": opts}))


def _run(results_dir: Path, store, cells, sets: list[str]) -> int:
    from tqdm import tqdm

    from bench import records

    written = skipped = reproduced = 0
    bad: list[str] = []
    spent = sampled_s = scored_s = 0.0
    for _, row in tqdm(list(cells.iterrows()), desc="rescore", file=sys.stderr, leave=False):
        _, saved = _saved(results_dir, row)
        overrides = scorer_overrides(sets, saved["cell"]["train"]["task"])
        stored = store.rows(row["cell_id"])
        if overrides:
            from bench.config import canonical, config_hash

            if store.has(config_hash({"rescore": row["cell_id"], "scorer": canonical(overrides)})):
                skipped += 1
                continue
        new_id, rows, recs, secs = rescore_cell(saved, row, overrides, stored)
        spent += secs
        sampled_s += float(stored[0].get("sample_s") or stored[0].get("wall_s") or 0.0)
        scored_s += float(stored[0].get("score_s") or 0.0)
        if not overrides:
            diff = differences(stored, rows)
            reproduced += not diff
            bad += [f"cell {row['cell_id']} ({row['model']}): {d}" for d in diff]
            continue
        files = records.write(results_dir, new_id, recs)
        store.write_cell(new_id, [{**r, **files} for r in rows])
        written += 1
    for line in bad:
        print(f"differs: {line}")
    what = (
        f"{written} re-scored cells written, {skipped} already in the store"
        if sets
        else f"{reproduced} of {len(cells)} cells reproduce every stored value"
    )
    then = (
        f"sampling took {sampled_s:.1f} s, scoring {scored_s:.1f} s"
        if scored_s
        else (
            f"sampling and scoring took {sampled_s:.1f} s"  # rows written before sample_s / score_s
        )
    )
    if written or reproduced or bad:
        what += f"; scoring took {spent:.1f} s (when sampled, the same cells' {then})"
    print(what)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
