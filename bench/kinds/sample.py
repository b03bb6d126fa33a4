"""The sample kind: a model's samples at one evaluation subset, NFE, temperature and decoding,
scored by the task (:class:`bench.plan.SampleCell`).

Planned per method entry and model (:func:`sample_cells_of`: subset x decoding x NFE x
temperature; its id :func:`_sample_id`), run in the model's job once the model is ready: one lock
per cell (another process's cell is skipped), batches saved as they are sampled (a re-run resumes
at batch granularity), the task's evaluation, the per-item records (:mod:`bench.records`) and
then the rows (:func:`bench.results.rows.sample_rows`); a task with a held-out reference point
gets its rows once (:func:`write_reference`).

Predicted from the shapes (:mod:`bench.kinds.sample_cost`): the backbone calls of each batch,
each the bare backbone's forward of the positions it computes times the model's
forward-equivalents per call, a variable-call decoding at its budget, then the scoring.
"""

from __future__ import annotations

import dataclasses
import sys
import time

from bench import locks, records
from bench.config import ConfigError, SampleConfig, config_hash
from bench.evaluate.draws import n_draws, score_samples
from bench.kind import CellKind
from bench.kinds import sample_cost
from bench.kinds.sampling import batch_seed, cell_sampler, sample_batch  # noqa: F401 (public)
from bench.plan import EntryModel, SampleCell, TrainCell

#: what a batch file records about its batch's cost, beside its ids and NFE (None in a file
#: written before they were recorded)
_BATCH_COST = (
    "sample_s", "network_s", "calls", "peak_mem_mb", "row_calls",
    "part_calls", "part_s", "full_call_s",
)  # fmt: skip

# --------------------------------------------------------------------------- planning


def _sample_id(tc: TrainCell, m: EntryModel, s: SampleConfig, subset, nfe, temp, dec) -> str:
    key = {
        "train": tc.id,
        "subset": subset,
        "nfe": nfe,
        "temperature": temp,
        "decoding": dec,
        "n": s.n_samples,
        "float64": s.float64,
        "seed": s.seed,
    }
    if m.sampling:  # absent at defaults: the ids sweeps always had
        key["sampling"] = m.sampling
    if s.n_per_item > 1:  # absent at one draw: the ids sweeps always had
        key["n_per_item"] = s.n_per_item
    if s.eos_stop:  # absent when off: the ids sweeps always had
        key["eos_stop"] = True
    if s.latency_items:
        key["latency_items"] = s.latency_items
    return config_hash(key)


def check_block_length(task, method, where: str) -> None:
    """A semi-autoregressive ``block_length`` must divide the task's generated length where every
    item generates as many positions (LLaDA generate.py asserts ``gen_length % block_length ==
    0``); a task whose items differ (:meth:`bench.data.base.Task.generated_length` None) is not
    checked: a row's last block is then shorter."""
    bl = getattr(method.opts, "block_length", 0)
    gen = task.generated_length()
    if bl and gen and gen % bl:
        raise ConfigError(
            f"{where}: options.block_length: {bl} does not divide the generated length {gen} of "
            f"task {task.name!r} (semi-autoregressive blocks cut it into equal blocks)"
        )


def sample_cells_of(tc: TrainCell, m: EntryModel, s: SampleConfig) -> list[SampleCell]:
    """The sample cells entry ``m`` plans on train cell ``tc`` (the entry's own, or one an
    earlier entry with the same model planned): each evaluation subset x decoding x NFE x
    temperature (NFE: the generated length, planned as 0, for a method whose NFE it is; one
    temperature, 1, for a temperature-free decoding)."""
    cells = []
    for subset in tc.groups:
        for dec in m.decodings:
            nfes = [0] if m.method.nfe_is_length else s.nfe
            temps = [1.0] if dec in m.method.temperature_free else s.temperature
            for nfe in nfes:
                for temp in temps:
                    cells.append(
                        SampleCell(
                            id=_sample_id(tc, m, s, subset, nfe, temp, dec),
                            train=tc,
                            subset=subset,
                            nfe=nfe,
                            temperature=temp,
                            decoding=dec,
                            n_samples=s.n_samples,
                            batch_size=s.batch_size,
                            float64=s.float64,
                            seed=s.seed,
                            variant=m.variant,
                            sampling=m.sampling,
                            n_per_item=s.n_per_item,
                            eos_stop=s.eos_stop,
                            latency_items=s.latency_items,
                        )
                    )
    return cells


# --------------------------------------------------------------------------- sampling


def run_cells(cells: list[SampleCell], store, progress: bool) -> int:
    """Sample + score ``cells`` (of one model), each under its own lock: those in the store and
    those another process holds are skipped. The number computed."""
    tc = cells[0].train
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
        return sample_model(tc, todo, store, progress) if todo else 0
    finally:
        for _, lock in held:
            lock.release()


def sample_model(tc: TrainCell, todo: list[SampleCell], store, progress: bool) -> int:
    """Sample and score ``todo`` (cells of train cell ``tc``), each into its store rows and
    records (:func:`_batches`, :func:`_score`), then the task's reference point."""
    from bench.cell_model import _device, cell_task, keep_freed_heap, method_backbone
    from bench.measure import environment
    from bench.weights import load_weights

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
        eos = task.eos_id() if c.eos_stop else None
        outs, nfe_used, costs = _batches(c, sampler, backbone, data, dev, progress, eos)
        lat = _latency(c, sampler, backbone, data, dev, eos)
        _score(c, task, sampler, data, (outs, nfe_used, costs, lat), env, meta["steps"], store, t0)
    write_reference(task, todo[0], store)
    return len(todo)


def _batches(c: SampleCell, sampler, backbone, data, dev, progress: bool, eos=None):
    """Cell ``c``'s batches: (the ids of each, the NFE used, what each cost). A batch is saved as
    it is sampled (``runs/<run>/samples/<cell>/batch_<k>.pt``: its ids, NFE, seconds, network
    seconds and calls, the peak memory so far) and read back on a re-run. ``sample_s`` is the
    seconds a batch took to sample (the prompts to the device, the sampler, the ids back to the
    CPU); ``peak_mem_mb`` the process's peak (:class:`~bench.measure.PeakMemory`, reset when it
    began sampling the cell)."""
    import torch
    from tqdm import tqdm

    from bench.atomic import atomic_torch_save
    from bench.measure import CallTimer, PeakMemory, time_full_call

    part_dir = c.train.run_dir / "samples" / c.id
    part_dir.mkdir(parents=True, exist_ok=True)
    outs, nfe_used, costs = [], None, []
    starts = list(range(0, len(data), c.batch_size))
    timer, peak = CallTimer(dev), PeakMemory(dev)
    sampler.call_timer = timer
    sampler.eos_id = eos  # the task's EOS under sample.eos_stop (a sampler that can stops there)
    try:
        peak.reset()
        todo = [(d, bi) for d in range(n_draws(c)) for bi in starts]  # draw-major
        for d, bi in tqdm(todo, desc=c.label(), disable=not progress, leave=False):
            draw = f"draw{d}_" if d else ""  # draw 0's files: the one-draw cell's names
            path = part_dir / f"{draw}batch_{bi // c.batch_size:05d}.pt"
            if path.is_file():  # resume at batch granularity
                saved = torch.load(path, weights_only=False)
                outs.append(saved["ids"])
                nfe_used = saved["nfe"]
                costs.append({k: saved.get(k) for k in _BATCH_COST})
                continue
            s0, n0, k0 = time.perf_counter(), timer.seconds(), timer.calls
            p0, ps0 = timer.part_calls, timer.part_seconds()
            sl = slice(bi, bi + c.batch_size)
            prompt, pmask = data.x[sl].to(dev), data.clean_mask[sl].to(dev)
            gen = torch.Generator(device=dev).manual_seed(batch_seed(c, bi, d))
            sampler.nfe_counter = 0
            sampler.row_calls = None  # a sampler that counts per row sets it (begin_rows)
            ids = sample_batch(sampler, backbone, c, prompt, pmask, gen, float64=c.float64)
            cost = {
                "sample_s": time.perf_counter() - s0,  # ids are on the CPU: the work is done
                "network_s": timer.seconds() - n0,
                "calls": timer.calls - k0,
                "peak_mem_mb": peak.peak_mb(),
                "part_calls": timer.part_calls - p0,
                "part_s": timer.part_seconds() - ps0,
            }
            if cost["part_calls"] == cost["calls"] and cost["calls"]:
                # every call partial (KV-cached AR): one uncounted full call is the unit
                cost["full_call_s"] = time_full_call(sampler, backbone, prompt, dev)
            nfe_used = budget(sampler, c, pmask, eos)
            cost["row_calls"] = item_calls(sampler, cost, len(ids))
            atomic_torch_save({"ids": ids, "nfe": nfe_used, **cost}, path)
            outs.append(ids)
            costs.append(cost)
    finally:
        del sampler.call_timer
        sampler.eos_id = None
    return outs, nfe_used, costs


def budget(sampler, c: SampleCell, pmask, eos) -> int:
    """The NFE a batch's rows record: the calls it made, or, for a decoding that may make
    fewer (a cache, a threshold, an EOS stop: ``Method.call_skipping``, ``eos_stopping``), the
    planned budget, ``Method.nfe_for`` (AR's: the generated length); the calls it made are the
    cost columns' ``network_calls``, each item's its records' ``calls``."""
    dec = sampler.resolve_decoding(c.decoding)
    stops = eos is not None and sampler.eos_stopping(dec)
    if dec in sampler.call_skipping or stops:
        return sampler.nfe_for(c.nfe, pmask)
    return sampler.nfe_counter


def _latency(c: SampleCell, sampler, backbone, data, dev, eos) -> list[float]:
    """``sample.latency_items`` K > 0: the first K items sampled again one at a time (batch 1;
    the seeds of a batch of one at that item, draw 0; not scored), each one's seconds. Saved
    (``samples/<cell>/latency.pt``) so that a resumed cell does not time them twice; [] at 0."""
    import torch

    from bench.atomic import atomic_torch_save

    k = min(c.latency_items, len(data))
    if not k:
        return []
    path = c.train.run_dir / "samples" / c.id / "latency.pt"
    if path.is_file():
        return list(torch.load(path, weights_only=False)["seconds"])
    out = []
    sampler.eos_id = eos
    try:
        for i in range(k):
            prompt, pmask = data.x[i : i + 1].to(dev), data.clean_mask[i : i + 1].to(dev)
            gen = torch.Generator(device=dev).manual_seed(batch_seed(c, i))
            s0 = time.perf_counter()
            sample_batch(sampler, backbone, c, prompt, pmask, gen, float64=c.float64)
            out.append(time.perf_counter() - s0)  # the ids are on the CPU: the work is done
    finally:
        sampler.eos_id = None
    atomic_torch_save({"seconds": out}, path)
    return out


def _score(c: SampleCell, task, sampler, data, sampled, env, steps, store, t0: float) -> None:
    """Score cell ``c``'s samples (``sampled``: :func:`_batches`' answer) and write its records,
    then its rows. What it cost (:data:`bench.measure.SAMPLE_COST_COLUMNS`): ``sample_s``, the
    batches' seconds summed (resumed ones' as their files record them; loading the items,
    building the sampler, saving and scoring are not in it), ``score_s`` the task's evaluation
    and the records, ``wall_s`` all of this process's work on the cell, ``peak_mem_mb`` the most
    any batch's process measured. A batch file written before these were recorded makes the
    columns it would have fed None."""
    import torch

    from bench.atomic import atomic_torch_save
    from bench.measure import sample_cost
    from bench.results import rows

    outs, nfe_used, costs, latency = sampled
    samples = torch.cat(outs)
    atomic_torch_save(
        {"ids": samples, "cell": dataclasses.asdict(c)}, c.train.run_dir / "samples" / f"{c.id}.pt"
    )
    t1 = time.perf_counter()
    per_item = [
        None if b["sample_s"] is None else b["sample_s"] / len(ids)
        for b, ids in zip(costs, outs)
        for _ in range(len(ids))
    ]
    speed = item_speed(task, samples, data, outs, costs)
    metrics, recs = score_samples(
        task, c, samples, data, nfe=nfe_used,
        cost={"sample_s": per_item, "device_name": env["device_name"], **speed},
    )  # fmt: skip
    peaks = [b["peak_mem_mb"] for b in costs if b["peak_mem_mb"] is not None]
    cost_cols = {
        **sample_cost(
            *(_total(costs, k) for k in ("sample_s", "network_s", "calls")),
            items=n_draws(c) * len(data),  # every draw of every item sampled
            generated=sum(speed["tokens"]),
        ),
        "peak_mem_mb": max(peaks) if peaks else None,
        **calls_columns(speed["calls"]),
        **speed_columns(speed),
        "latency_s": sum(latency) / len(latency) if latency else None,
        "latency_items": len(latency) if latency else None,
        **env,
    }
    times = {"score_s": time.perf_counter() - t1, **cost_cols}
    out = rows.sample_rows(
        c,
        metrics,
        method=sampler,
        task=task,
        train_steps=steps,
        nfe=nfe_used,
        wall_s=time.perf_counter() - t0,
        items=rows.items_key(data),
    )
    # the records first: a cell whose rows exist always has them (bench.records)
    files = records.write(c.train.results_dir, c.id, recs)
    store.write_cell(c.id, [{**r, **files, **times, **rows.limit_column(c)} for r in out])


def item_calls(sampler, cost: dict, n: int) -> list[list[int]]:
    """Each item's [full, partial] backbone calls in the batch just sampled (``cost``: its
    ``calls`` and ``part_calls``): those its row needed where the sampler counts per row
    (:attr:`bench.method.Method.row_calls`: MDLM's threshold decodings stop a row's block when
    it has no mask left, an EOS stop a row at its EOS, while the batch calls on for the others),
    else every call the batch made."""
    rows = getattr(sampler, "row_calls", None)
    if rows is not None and len(rows) == n:
        return [[int(f), int(p)] for f, p in rows.tolist()]
    full = cost["calls"] - cost["part_calls"]
    return [[full, cost["part_calls"]]] * n


def item_speed(task, samples, data, outs, costs) -> dict:
    """Per item, over every draw (draw-major, as ``samples``): ``calls`` (None where a batch
    file does not know them), ``partial_calls``, ``fe`` (forward-equivalents:
    :func:`bench.measure.item_forward_equivalents`; None where unknown) and ``tokens`` (the
    task's :meth:`~bench.data.base.Task.generated_tokens`)."""
    from bench.measure import item_forward_equivalents

    n = len(data)
    tokens = [k for d in range(0, samples.shape[0], n)
              for k in task.generated_tokens(samples[d : d + n], data)]  # fmt: skip
    calls, part, fe = [], [], []
    for b, ids in zip(costs, outs):
        rc = b.get("row_calls")
        if rc is not None and rc and not isinstance(rc[0], list):  # a file before [full, part]
            rc = [[k, 0] for k in rc]
        calls += [None] * len(ids) if rc is None else [f + p for f, p in rc]
        part += [None] * len(ids) if rc is None else [p for _, p in rc]
        fe += item_forward_equivalents(b, rc) or [None] * len(ids)
    known = lambda v: None if any(k is None for k in v) else v  # noqa: E731
    return {"calls": known(calls), "partial_calls": known(part), "fe": known(fe), "tokens": tokens}


def speed_columns(speed: dict) -> dict:
    """The cell's speed columns from :func:`item_speed`: ``fe_mean`` (forward-equivalents per
    sample), ``tokens_mean``, ``tokens_per_call`` (tokens over calls, summed over the items:
    d3LLM's tokens per forward) and ``tokens_per_fe`` (tokens over forward-equivalents); None
    where the calls or forward-equivalents are not known."""
    tok, calls, fe = speed["tokens"], speed["calls"], speed["fe"]
    total = sum(tok)
    return {
        "fe_mean": sum(fe) / len(fe) if fe else None,
        "tokens_mean": total / len(tok) if tok else None,
        "tokens_per_call": total / sum(calls) if calls and sum(calls) else None,
        "tokens_per_fe": total / sum(fe) if fe and sum(fe) else None,
    }


def calls_columns(calls: list | None) -> dict:
    """``calls_mean`` / ``calls_max``: the backbone calls per item over the cell (None when an
    item's are not known)."""
    if not calls or any(k is None for k in calls):
        return {"calls_mean": None, "calls_max": None}
    return {"calls_mean": sum(calls) / len(calls), "calls_max": max(calls)}


def _total(costs: list[dict], key: str):
    """The sum of ``key`` over a cell's batches; None when a batch does not record it."""
    vals = [b.get(key) for b in costs]
    return None if any(v is None for v in vals) else sum(vals)


def write_reference(task, c: SampleCell, store) -> None:
    """A task with a held-out reference point (``task.data_reference(n)``) gets one store cell of
    it per (task config, subset, n) (:func:`bench.results.rows.reference_rows`), written once by
    the first job that samples that subset."""
    from bench.results import rows

    fn = task.data_reference  # an optional hook (bench/data/base.py): None when the task has none
    if fn is None:
        return
    rid = rows.reference_id(c)
    if store.has(rid):
        return
    t0 = time.perf_counter()
    metrics = fn(c.n_samples)
    store.write_cell(rid, rows.reference_rows(task, c, metrics, time.perf_counter() - t0))


# --------------------------------------------------------------------------- the kind


class Sample(CellKind):
    name = "sample"
    batch_key = "sample.batch_size"
    work = ("bench.cell_model", "bench.measure", "bench.weights", "bench.results.rows")

    def plan_entry(self, tc, entry, sweep, first: bool) -> list[SampleCell]:
        """Every entry plans its own sample cells on its model (entries may share one), its
        ``block_length`` checked against the task (:func:`check_block_length`)."""
        check_block_length(sweep.task, entry.method, entry.where)
        return sample_cells_of(tc, entry, sweep.sample)

    def run(self, cells: list, store, progress: bool = False) -> int:
        return run_cells(cells, store, progress) if cells else 0

    def predict(self, c, cost):
        """:func:`bench.kinds.sample_cost.predict`."""
        return sample_cost.predict(self.name, c, cost)

    def load_s(self, cells: list, cost) -> float:
        """The task's tokenizer (where it loads one) and the Gen. PPL reference LM (where it
        scores with it)."""
        load = cost.tokenizer_s
        if cost.profile.get("scorer") == "genppl":
            load += cost.scorers["genppl_load_s"]
        return load

    def rehearse(self, cells: list, ctx) -> list:
        """A sampling call of each setup the rehearsal picks (:func:`~bench.kinds.
        sample_rehearsal.setups`, then its decoding families: ``ctx.setups``) at batch 1 and 2
        (:func:`~bench.kinds.sample_rehearsal.rehearse_setup`)."""
        from bench.kinds.sample_rehearsal import rehearse_setup, setups

        out = [rehearse_setup(sc, ctx) for sc in ctx.setups(setups(cells))]
        ctx.cache.clear()
        return out


KIND = Sample()
