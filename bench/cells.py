"""The work one job does for planned cells (:mod:`bench.plan`): train a model, sample and score.

Every executor (:mod:`bench.executors`) runs these functions, in-process or pickled into a
job. A cell already in the results store is skipped, so a job can be re-run (or requeued)
at any time: training resumes from its last checkpoint, sampling at batch granularity.
Each finished cell becomes one store file with one row per metric.

One owner per cell (:mod:`bench.locks`): training holds the train cell's lock (``owner.lock``
in its run folder; DDP rank 0 only), sampling holds one lock per sample cell, and a local job
(:func:`run_train_then_samples`) holds the train cell's lock for its whole life. A cell whose
lock another process holds is not computed here: training raises :class:`bench.locks.CellBusy`,
sampling skips the cell (the holder computes it).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import torch

from bench import locks, records, registry
from bench.atomic import atomic_torch_save, write_json_atomic
from bench.cell_model import _device, cell_task, keep_freed_heap, method_backbone
from bench.config import config_hash
from bench.plan import SampleCell, TrainCell
from bench.results import Store, rows
from bench.train import fit, heldout_for
from bench.weights import load_weights


def write_reference(task, c: SampleCell, store: Store) -> None:
    """A task with a held-out reference point (``task.data_reference(n)``) gets one store cell of
    it per (task config, subset, n) (:func:`bench.results.rows.reference_rows`), written once by
    the first job that samples that subset."""
    fn = task.data_reference  # an optional hook (bench/data/base.py): None when the task has none
    if fn is None:
        return
    rid = rows.reference_id(c)
    if store.has(rid):
        return
    t0 = time.perf_counter()
    metrics = fn(c.n_samples)
    store.write_cell(rid, rows.reference_rows(task, c, metrics, time.perf_counter() - t0))


# --------------------------------------------------------------------------- cell work


def owner_lock(tc: TrainCell):
    """The train cell's lock (:mod:`bench.locks`); a no-op on DDP ranks other than 0, which run
    the same job alongside rank 0 (SLURM_PROCID / RANK / LOCAL_RANK say which rank this is)."""
    rank = next(
        (int(os.environ[k]) for k in ("SLURM_PROCID", "RANK", "LOCAL_RANK") if os.environ.get(k)), 0
    )
    return locks.CellLock(locks.train_lock_path(tc.run_dir)) if rank == 0 else locks.NoLock()


def run_train(tc: TrainCell, threads: int = 0, progress: bool = True) -> str:
    """Train one cell unless its weights exist; record train rows. Returns the weights path.
    Holds the cell's lock meanwhile (raises :class:`bench.locks.CellBusy` if another process
    does)."""
    with owner_lock(tc):
        return _train(tc, threads, progress)


def _weights_readable(path) -> bool:
    """True if ``path`` loads as what :func:`bench.train.fit` writes (a truncated or damaged
    file is not)."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception:  # any unpickling / zip error means the file is damaged
        return False
    return isinstance(payload, dict) and {"backbone", "steps"} <= set(payload)


def _train(tc: TrainCell, threads: int, progress: bool) -> str:
    if threads:
        torch.set_num_threads(threads)
    store = Store(tc.results_dir)
    rebuild = False  # weights damaged after the cell was recorded: rebuild them, keep its rows
    if tc.weights.is_file() and store.has(tc.id):
        if _weights_readable(tc.weights):
            return str(tc.weights)
        moved = tc.weights.with_name(f"{tc.weights.name}.corrupt-{os.getpid()}-{int(time.time())}")
        os.replace(tc.weights, moved)
        print(
            f"warning: {tc.weights}: unreadable, moved to {moved.name}; rebuilding it from the "
            "run's checkpoints",
            file=sys.stderr,
        )
        rebuild = True
    tc.run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(dataclasses.asdict(tc), tc.run_dir / "cell.json")
    task = cell_task(tc)
    if getattr(tc, "source", None):
        return _import(tc, task, store, rebuild)
    torch.manual_seed(
        int(tc.train["seed"])
    )  # the initial weights are a function of the cell, not of the process
    method, backbone = method_backbone(tc, task)
    train_cfg = tc.train_config()
    if threads:
        train_cfg.threads = threads
    data = task.train_data(tc.groups)
    n_params = sum(p.numel() for p in backbone.parameters())
    res = fit(
        method,
        backbone,
        data,
        train_cfg,
        tc.run_dir,
        progress=progress,
        extra={"cell": tc.id},
        val_data=heldout_for(task, tc.groups, train_cfg),
    )
    if res.is_global_zero and not rebuild:  # DDP: every rank trains, rank 0 records
        store.write_cell(tc.id, rows.train_rows(tc, res, n_params, task=task))
    return str(res.weights)


def _import(tc: TrainCell, task, store: Store, rebuild: bool) -> str:
    """An import cell's "training": convert its checkpoint into the run folder (``weights.pt`` +
    ``model.json``, as :func:`bench.checkpoints.convert` writes them) and record its train rows.
    The file must be the one planned (same sha256) and still give the planned options."""
    from bench.checkpoints import CheckpointError, open_source, resolve_options, write_model

    src = tc.source
    t0 = time.perf_counter()
    if Path(src["checkpoint"]).is_dir():  # a model folder written by bench.checkpoints convert
        return _import_folder(tc, task, store, rebuild, t0)
    op = open_source(src["checkpoint"], family=src.get("forced"))
    if src.get("sha256") and op.source.sha256 != src["sha256"]:
        raise CheckpointError(
            f"{src['checkpoint']}: sha256 {op.source.sha256[:12]} is not the planned "
            f"{src['sha256'][:12]} (the file changed since the sweep was planned; re-run it)"
        )
    if op.spec.method != tc.method:
        raise CheckpointError(
            f"{src['checkpoint']}: a {op.spec.method} checkpoint, not {tc.method}"
        )
    opts = resolve_options(op.spec, tc.options, where=f"{tc.label()} options")
    for w in op.ref.warnings:
        print(f"warning: {w}", file=sys.stderr, flush=True)
    meta = write_model(op, opts, tc.run_dir, seq_len=task.seq_len)
    if not rebuild:
        _import_rows(tc, task, store, meta, t0)
    return str(tc.weights)


def _import_rows(tc: TrainCell, task, store: Store, meta: dict, t0: float) -> None:
    store.write_cell(tc.id, rows.import_rows(tc, task, meta, time.perf_counter() - t0))


def _import_folder(tc: TrainCell, task, store: Store, rebuild: bool, t0: float) -> str:
    """Copy a converted model folder into the run folder (the weights must be the planned ones)."""
    import shutil

    from bench import atomic
    from bench.checkpoints import MODEL_JSON, CheckpointError, read_model_json
    from bench.checkpoints.source import file_sha256

    folder = Path(tc.source["checkpoint"])
    meta = read_model_json(folder)
    sha = file_sha256(folder / "weights.pt")
    if tc.source.get("sha256") and sha != tc.source["sha256"]:
        raise CheckpointError(f"{folder}: weights.pt changed since the sweep was planned")
    atomic.write_with(tc.weights, lambda tmp: shutil.copyfile(folder / "weights.pt", tmp))
    atomic.write_text(tc.run_dir / MODEL_JSON, (folder / MODEL_JSON).read_text())
    if not rebuild:
        _import_rows(tc, task, store, meta, t0)
    return str(tc.weights)


def run_samples(cells: list[SampleCell], threads: int = 0, progress: bool = True) -> int:
    """Sample + evaluate cells of ONE train cell (skipping those in the store and those whose
    lock another process holds), then its cells of other kinds (:mod:`bench.kind`: its
    likelihood), each by its kind. Returns #done."""
    if not cells:
        return 0
    if threads:
        torch.set_num_threads(threads)
    tc = cells[0].train
    store = Store(tc.results_dir)
    others: dict[str, list] = {}  # kind -> its cells, in the plan's order
    for c in cells:
        if c.kind != SampleCell.kind:
            others.setdefault(c.kind, []).append(c)
    cells = [c for c in cells if c.kind == SampleCell.kind]
    held = []
    try:
        for c in cells:
            if store.has(c.id):
                continue
            lock = locks.CellLock(locks.sample_lock_path(tc.run_dir, c.id))
            try:
                held.append((c, lock.acquire()))
            except locks.CellBusy as e:
                print(f"sflm: skipping sample cell {c.label()}: {e}", file=sys.stderr, flush=True)
        todo = [c for c, _ in held if not store.has(c.id)]  # finished by its last holder meanwhile?
        done = _sample(tc, todo, store, progress) if todo else 0
    finally:
        for _, lock in held:
            lock.release()
    for kind, mine in others.items():  # each takes its cells' locks, skips those in the store
        done += registry.KINDS[kind].run(mine, store, progress)
    return done


def cell_sampler(method, c: SampleCell, task, device, cache: dict):
    """The method instance that samples cell ``c``: ``method`` (the trained model) itself, or,
    when the cell's entry sets sampling-only options (:mod:`bench.plan`), an instance with those
    options and the trained model's state, built once per option set in ``cache``."""
    key = config_hash(c.options)
    if key == config_hash(c.train.options):
        return method
    if key not in cache:
        cache[key] = registry.make_method(
            c.train.method, c.options, task, getattr(c.train, "vocab_size", None)
        )
        cache[key].load_state_dict(method.state_dict())  # the trained model's state
        cache[key].to(device)
    return cache[key]


def batch_seed(c: SampleCell, start: int) -> int:
    """The seed of the batch of cell ``c`` that starts at example ``start``."""
    return c.seed * 1_000_003 + start


def sample_batch(sampler, backbone, c: SampleCell, prompt, pmask, generator, *, float64: bool):
    """One batch of cell ``c``'s samples (ids on the CPU)."""
    return sampler.sample(
        backbone,
        prompt,
        pmask,
        nfe=c.nfe,
        temperature=c.temperature,
        decoding=c.decoding,
        float64=float64,
        generator=generator,
    ).cpu()


def _sample(tc: TrainCell, todo: list[SampleCell], store: Store, progress: bool) -> int:
    """Sample and score ``todo`` (cells of train cell ``tc``), each into its store rows and
    records. What a cell cost (:data:`bench.measure.SAMPLE_COST_COLUMNS`): ``sample_s`` is
    the seconds its batches took to sample (moving the prompts to the device, the sampler, the
    ids back to the CPU), summed over every batch, also those resumed from the batch files of an
    earlier run (each file records its batch's seconds, network seconds and calls); loading the
    items, building the sampler, saving and scoring are not in it. ``score_s`` is the task's
    evaluation and the records; ``wall_s`` all of this process's work on the cell. A batch file
    written before these were recorded makes the columns it would have fed None.
    ``peak_mem_mb``: the most any batch's process measured (:class:`~bench.measure.
    PeakMemory`, reset when that process began sampling the cell; each batch file records the
    peak so far), so across a resume it is the peak of the processes that sampled; None when no
    batch file records one."""
    from tqdm import tqdm

    from bench.measure import CallTimer, PeakMemory, environment, sample_cost

    if not tc.weights.is_file():
        raise FileNotFoundError(
            f"{tc.weights}: train cell {tc.label()} has no weights (did training fail?)"
        )
    dev = _device()
    keep_freed_heap(dev)
    env = environment(dev)
    task = cell_task(tc)
    method, backbone = method_backbone(tc, task)
    meta = load_weights(method, backbone, tc.weights)
    backbone.to(dev).eval()
    method.to(dev)
    samplers: dict = {}
    for c in todo:
        t0 = time.perf_counter()
        sampler = cell_sampler(method, c, task, dev, samplers)
        data = task.eval_data(c.subset, c.n_samples)
        part_dir = tc.run_dir / "samples" / c.id
        part_dir.mkdir(parents=True, exist_ok=True)
        outs, nfe_used, costs = [], None, []
        starts = list(range(0, len(data), c.batch_size))
        timer, peak = CallTimer(dev), PeakMemory(dev)
        sampler.call_timer = timer
        try:
            peak.reset()
            for bi in tqdm(starts, desc=c.label(), disable=not progress, leave=False):
                path = part_dir / f"batch_{bi // c.batch_size:05d}.pt"
                if path.is_file():  # resume at batch granularity
                    saved = torch.load(path, weights_only=False)
                    outs.append(saved["ids"])
                    nfe_used = saved["nfe"]
                    costs.append({k: saved.get(k) for k in _BATCH_COST})
                    continue
                s0, n0, k0 = time.perf_counter(), timer.seconds(), timer.calls
                sl = slice(bi, bi + c.batch_size)
                prompt, pmask = data.x[sl].to(dev), data.clean_mask[sl].to(dev)
                gen = torch.Generator(device=dev).manual_seed(batch_seed(c, bi))
                sampler.nfe_counter = 0
                ids = sample_batch(sampler, backbone, c, prompt, pmask, gen, float64=c.float64)
                cost = {
                    "sample_s": time.perf_counter() - s0,  # ids are on the CPU: the work is done
                    "network_s": timer.seconds() - n0,
                    "calls": timer.calls - k0,
                    "peak_mem_mb": peak.peak_mb(),
                }
                # a call-skipping decoding (a cache) keeps the planned budget as its NFE; the calls
                # it made are the cost columns' network_calls
                skips = sampler.resolve_decoding(c.decoding) in sampler.call_skipping
                nfe_used = c.nfe if skips else sampler.nfe_counter
                atomic_torch_save({"ids": ids, "nfe": nfe_used, **cost}, path)
                outs.append(ids)
                costs.append(cost)
        finally:
            del sampler.call_timer
        samples = torch.cat(outs)
        atomic_torch_save(
            {"ids": samples, "cell": dataclasses.asdict(c)}, tc.run_dir / "samples" / f"{c.id}.pt"
        )
        t1 = time.perf_counter()
        metrics = task.evaluate(samples, data, c.subset)
        per_item = [
            None if b["sample_s"] is None else b["sample_s"] / len(ids)
            for b, ids in zip(costs, outs)
            for _ in range(len(ids))
        ]
        recs = records.item_records(
            task, c, samples, data, metrics, nfe=nfe_used,
            cost={"sample_s": per_item, "device_name": env["device_name"]},
        )  # fmt: skip
        peaks = [b["peak_mem_mb"] for b in costs if b["peak_mem_mb"] is not None]
        cost_cols = {
            **sample_cost(
                *(_total(costs, k) for k in ("sample_s", "network_s", "calls")),
                items=len(data),
                generated=int((~data.clean_mask.bool()).sum()),
            ),
            "peak_mem_mb": max(peaks) if peaks else None,
            **env,
        }
        times = {"score_s": time.perf_counter() - t1, **cost_cols}
        out = rows.sample_rows(
            c,
            metrics,
            method=sampler,
            task=task,
            train_steps=meta["steps"],
            nfe=nfe_used,
            wall_s=time.perf_counter() - t0,
            items=rows.items_key(data),
        )
        # the records first: a cell whose rows exist always has them (bench.records)
        files = records.write(tc.results_dir, c.id, recs)
        store.write_cell(c.id, [{**r, **files, **times, **rows.limit_column(c)} for r in out])
    write_reference(task, todo[0], store)
    return len(todo)


#: what a batch file records about its batch's cost, beside its ids and NFE (None in a file
#: written before they were recorded)
_BATCH_COST = ("sample_s", "network_s", "calls", "peak_mem_mb")


def _total(costs: list[dict], key: str):
    """The sum of ``key`` over a cell's batches; None when a batch does not record it."""
    vals = [b.get(key) for b in costs]
    return None if any(v is None for v in vals) else sum(vals)


def run_train_then_samples(
    tc: TrainCell, cells: list[SampleCell], threads: int = 0, progress: bool = True
) -> int:
    """One local job: train (if needed), then sample every cell of this model, holding the
    train cell's lock throughout (raises :class:`bench.locks.CellBusy` if another process holds
    it)."""
    with owner_lock(tc):
        run_train(tc, threads, progress)
        return run_samples(cells, threads, progress)
