"""What ``python -m bench.sweep`` prints about a planned sweep: the ``--status`` table (one line
per cell, with the log and last error line of a failure; once cells are done, the cost model's
prediction beside what they took: :mod:`bench.cost.check`) and the ``--dry-run`` plan (the jobs,
their resources, on SLURM an upper bound of the cost, and the cost model's prediction:
:mod:`bench.cost.model`).

The statuses themselves are the model of :mod:`bench.executors.cell_status` (store, locks, local
and SLURM jobs, failures), which the SLURM executor shares.
"""

from __future__ import annotations

from bench import registry
from bench.executors.cell_status import STATES, statuses
from bench.executors.slurm_cluster import (
    array_limit_min,
    chunk_cells,
    limit_min,
    memory_problem,
    plan_cost,
    settings,
    train_resources,
)
from bench.executors.state import state_dir
from bench.plan import Plan
from bench.results import Store

__all__ = ["dry_run", "model_cells", "predicted_cost", "status_table"]


def status_table(p: Plan) -> str:
    """What ``--status`` prints: one line per cell, log and last error line for failures."""
    rows = statuses(p)
    width = max([6, *(len(r.kind) for r in rows)])  # the kinds' names
    lines = [f"{'STATE':8s} {'KIND':{width}s} {'JOB':12s} CELL"]
    for r in rows:
        extra = f"  [{r.detail}]" if r.state != "done" and r.detail else ""
        lines.append(f"{r.state:8s} {r.kind:{width}s} {(r.job or '-'):12s} {r.label}{extra}")
        if r.state == "failed":
            lines.append(f"{'':{width + 22}s} log:   {r.log or '-'}")
            lines.append(f"{'':{width + 22}s} error: {r.error or '-'}")
    counts = {s: sum(r.state == s for r in rows) for s in STATES}
    if counts.get("done"):  # the cost model against what the done cells took
        from bench.cost.check import comparison

        try:
            lines.append(comparison(p, Store(p.cfg.results_dir)))
        except Exception as e:  # noqa: BLE001 - the comparison never stops a status table
            lines.append(f"predicted / measured: not available ({type(e).__name__}: {e})")
    lines.append(  # the summary line last
        ", ".join(f"{n} {s}" for s, n in counts.items()) + f" (of {len(rows)} cells); "
        f"state: {state_dir(p.cfg) / 'state.json'}"
    )
    return "\n".join(lines)


def _counts(cells, model: bool) -> list[str]:
    """``cells`` counted by kind, in the registry's order, as their kinds say it (the model kinds'
    with ``model``, the others' without)."""
    n: dict[str, int] = {}
    for c in cells:
        n[c.kind] = n.get(c.kind, 0) + 1
    kinds = [k for k in registry.KINDS if k in n] + [k for k in n if k not in registry.KINDS]
    return [registry.KINDS[k].describe(n[k]) for k in kinds if registry.KINDS[k].model == model]


def model_cells(p: Plan) -> str:
    """The plan's model cells by kind: "3 train cells", "7 import cells" (models converted from a
    checkpoint, not trained) or "2 train cells, 5 import cells"."""
    return ", ".join(_counts(p.train_cells, True)) or "no model"


def dry_run(p: Plan) -> str:
    """What ``--dry-run`` prints: the jobs for the cells not yet done, their resources and
    (SLURM) an upper bound of the cost, then the cost model's prediction."""
    cfg = p.cfg
    store = Store(cfg.results_dir)
    kind = cfg.executor.kind
    ex = settings(cfg.executor) if kind == "slurm" else cfg.executor
    cells = ", ".join([model_cells(p), *_counts(p.sample_cells, False)])
    lines = [f"sweep {cfg.name}: {cells}; executor {kind}"]
    opts = cfg.task.options if isinstance(cfg.task.options, dict) else vars(cfg.task.options)
    # the task's options say which data and grader the rows use (e.g. Sudoku generator: reference)
    lines.append(f"  task: {cfg.task.name}" + "".join(f"; {k}={v}" for k, v in opts.items()))
    if kind == "slurm":
        lines += _slurm_plan(p, ex, store)
    else:
        lines += _local_plan(p, store)
    lines += predicted_cost(p, ex, store)
    lines.append("nothing submitted (--dry-run)")
    return "\n".join(lines)


def _todo(p: Plan, store):
    """(model, its cells not in the store, trained) for every model with work left."""
    for tc in p.train_cells:
        todo = [s for s in p.samples_of(tc) if not store.has(s.id)]
        trained = store.has(tc.id) and tc.weights.is_file()
        if not (trained and not todo):
            yield tc, todo, trained


def _local_plan(p: Plan, store) -> list[str]:
    """The local executor's jobs: one per model with work left."""
    lines, n_train, n_cells = [], 0, 0
    for tc, todo, trained in _todo(p, store):
        n_train += 1
        verb = "import" if getattr(tc, "imported", False) else "train"
        lines.append(
            f"  job   {tc.label():40s} "
            f"{verb + ' + ' if not trained else ''}{len(todo)} sample cells"
        )
        n_cells += len(todo)
    return lines + [f"jobs: {n_train} local job(s) for {n_cells} sample cell(s)"]


def _slurm_plan(p: Plan, ex, store) -> list[str]:
    """The SLURM executor's jobs: the cluster, the time limits, per model its train (or import)
    job and sampling array, and the bound of the cost (:func:`plan_cost`)."""
    from bench.cost.forecast import slurm_sizing

    facts = ", ".join(
        f"{k}={getattr(ex, k)}" for k in ("partition", "account", "qos") if getattr(ex, k)
    )
    lines = [
        f"  cluster: {facts or 'default partition/account'}; time limit {ex.time_min} min; "
        f"gpus/node {ex.gpus_per_node}; cpus/task {ex.cpus_per_task}; mem {ex.mem_gb} GB/task; "
        f"array parallelism {ex.array_parallelism}"
    ]
    sizes = slurm_sizing(p, ex, store)  # time limits, task packing
    lines.append(
        f"  time limits: predicted x {ex.time_safety:g}, at least {ex.time_floor_min} min, at "
        f"most time_min={ex.time_min} min; sample cells packed into tasks of about "
        f"{ex.task_target_min:g} predicted min"
        if sizes
        else f"  time limits: time_min={ex.time_min} min for every job (no prediction)"
    )
    for tc, todo, trained in _todo(p, store):
        r = train_resources(ex, tc)
        chunks = chunk_cells(todo, ex, sizes)
        res = (
            f"nodes={r['nodes']} tasks/node={r['tasks_per_node']} "
            f"gpus/node={r['gpus_per_node']} limit "
            f"{limit_min(sizes.train_s(tc) if sizes else None, ex)} min"
            if not trained
            else "trained"
        )
        verb = ("import" if getattr(tc, "imported", False) else "train") if not trained else "done"
        lines.append(
            f"  {verb:6s} {tc.label():40s} {res}; "
            f"{len(todo)} sample cells in {len(chunks)} array task(s)"
            + (f", limit {array_limit_min(tc, chunks, ex, sizes)} min" if chunks else "")
        )
    return lines + _slurm_bound(p, ex, store, sizes)


def _slurm_bound(p: Plan, ex, store, sizes) -> list[str]:
    c = plan_cost(p, ex, store, sizes)  # what the SLURM executor's preflight also says
    lines = [
        "jobs: "
        + (f"{c.train} train job(s), " if c.train or not c.imports else "")
        + (f"{c.imports} import job(s), " if c.imports else "")
        + f"{c.arrays} sampling array(s) with {c.tasks} task(s) "
        f"for {c.cells} sample cell(s)"
    ]
    flat = plan_cost(p, ex, store) if sizes else c
    lines.append(
        f"cost upper bound ({'sized ' if sizes else ''}time limits x resources): "
        f"{c.gpu_h:.1f} GPU-hours, {c.cpu_h:.1f} CPU-hours"
        + (
            f" (every job at time_min={ex.time_min} min: {flat.gpu_h:.1f} GPU-hours, "
            f"{flat.cpu_h:.1f} CPU-hours)"
            if sizes
            else ""
        )
    )
    problem = memory_problem(p, sizes)
    if problem:
        lines.append(f"error: {problem} (a run stops here)")
    return lines


def predicted_cost(p: Plan, ex, store) -> list[str]:
    """The cost model's prediction (:mod:`bench.cost.model`) of the jobs ``--dry-run`` lists: per
    model its training, its sampling and its peak memory, what it assumes of the cells
    (:func:`bench.cost.notes.caveat_lines`); in total the device-hours on the
    executor's device kind (SLURM: beside the bound) or the local executor's wall time."""
    from bench.cost.forecast import slurm_cost
    from bench.cost.model import device_kind, fmt_bytes, fmt_s, local_wall, predict_plan
    from bench.cost.notes import caveat_lines

    kind, why = device_kind(ex)
    try:
        pred = predict_plan(p, kind, store, ex=ex)
    except KeyError:
        return [f"predicted cost: no table for device kind {kind!r} ({why}; `python -m bench.perf "
                "calibrate` there makes one, executor.device picks another)"]  # fmt: skip
    except Exception as e:  # noqa: BLE001 - the prediction never stops a dry run
        return [f"predicted cost: not available ({type(e).__name__}: {e})"]
    if not pred.jobs:
        return []
    lines = [
        f"predicted cost ({pred.source()}, kind {kind}: {why}; python -m bench.perf calibrate "
        "measures this machine's):",
        f"  {'model':42s} {'start+train':>11s} {'sampling':>9s} {'peak tensors':>12s}",
    ]
    for j in pred.jobs:
        train = fmt_s(j.prepare_s + j.start_s + j.train_s) if j.train else "-"
        lines.append(
            f"  {j.label[:42]:42s} {train:>11s} {fmt_s(j.sample_s):>9s} "
            f"{fmt_bytes(j.peak_bytes):>12s}"
        )
    lines += caveat_lines(pred)
    mem = pred.entry.get("memory_bytes") or 0
    if mem and pred.peak_bytes > mem:
        lines.append(
            f"  warning: a job's predicted peak ({fmt_bytes(pred.peak_bytes)}) is above the "
            f"{kind}'s memory ({fmt_bytes(mem)}): lower sample.batch_size / train.batch_size"
        )
    if ex.kind == "slurm":
        from bench.executors.slurm_cluster import sizing_of

        sc = slurm_cost(pred, p, ex, store)
        sized = ex.time_safety > 0
        bound = plan_cost(p, ex, store, sizing_of(pred) if sized else None)
        lines.append(
            f"predicted cost: {sc.gpu_h:.1f} GPU-hours on {kind}, {sc.cpu_h:.1f} CPU-hours "
            + (
                f"(the bound: {bound.gpu_h:.1f} GPU-hours); "
                if ex.gpus_per_node
                else f"(the bound: {bound.cpu_h:.1f} CPU-hours); "
            )
            + "longest job or array task "
            f"{fmt_s(sc.longest_s)} ("
            + (
                f"limits sized to x{ex.time_safety:g}, at most {ex.time_min} min"
                if sized
                else f"time limit {ex.time_min} min"
            )
            + ")"
        )
    else:
        parallel = max(1, min(ex.max_parallel, len(pred.jobs))) if ex.kind == "local" else 1
        wall = local_wall(pred.jobs, parallel, pred.setup_s)
        threads = pred.jobs[0].threads
        lines.append(
            f"predicted time: {fmt_s(wall)} wall, {parallel} job(s) at once with {threads} "
            f"thread(s) each ({pred.device_hours:.2f} {kind} device-hours of jobs)"
        )
    return lines
