"""Predicted cost of a plan: device seconds and peak memory per cell, per job and in total, from
the shapes alone and a throughput table (:mod:`bench.cost.table`).

What a cell costs follows from its shapes, each cell by its kind (:meth:`bench.kind.CellKind.
predict`, handed a :class:`Costs`: the model's net and this module's tables, as arguments, since
the prediction sits above the kinds; :mod:`bench.kinds` says how each built-in kind is predicted):

- the backbone (:class:`bench.cost.net.Net`: blocks, width, |V|; the S-arch of S-FLM has the
  DiT's matrices without adaLN) gives the parameter count and the FLOPs of one forward per token,
  ``2 (12 n_blocks d^2 + d |V|) + 4 n_blocks d * context`` (the matrices, then attention);
- a **sampling call** of B sequences of T new positions costs the bare backbone's forward,
  ``forward.overhead_s + B T flops / forward.flops_per_s``, times the model's forward-equivalents
  per call for its decoding and sampling dtype (:func:`sample_factor`); a training step the bare
  step (:func:`train_step_s`) times its training forward-equivalents (:func:`train_factor`);
- a **job** adds its process start (and a model load before its cells, what each kind loads:
  a tokenizer, a reference LM).

Entry points: :func:`predict_plan` (a whole plan, for ``--dry-run`` and SLURM sizing),
:func:`predict_job` (one model's job), :func:`local_wall` (jobs over the local executor's
parallel slots), :func:`device_kind` (which table a sweep's executor uses); the SLURM jobs'
predictions are :mod:`bench.cost.forecast`'s.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from bench.config import ExecutorConfig
from bench.cost.net import Net, net_of
from bench.cost.table import device_kind

# --------------------------------------------------------------------------- tables


def forward_s(entry: dict, net: Net, batch: int, positions: float, context: float) -> float:
    """Seconds of one bare forward of ``batch`` x ``positions`` new positions."""
    f = entry["forward"]
    return f["overhead_s"] + batch * positions * net.token_flops(context) / f["flops_per_s"]


def train_step_s(entry: dict, net: Net, batch: int, positions: float, context: float) -> float:
    """Seconds of one plain optimiser step of the bare backbone (forward, backward, AdamW)."""
    t = entry["train"]
    flops = 3.0 * batch * positions * net.token_flops(context)
    return t["overhead_s"] + flops / t["flops_per_s"] + net.params() * t["param_s"]


def _interp(pair, h: float, shares) -> float:
    """A factor measured at two head shares, at head share ``h`` (linear, clamped to the
    measured range below and to a head share of 1 above)."""
    if isinstance(pair, int | float):
        return float(pair)
    lo, hi = float(pair[0]), float(pair[1])
    h0, h1 = float(shares[0]), float(shares[1])
    if h1 <= h0:
        return lo
    w = min(max((h - h0) / (h1 - h0), 0.0), (1.0 - h0) / (h1 - h0))
    return max(lo + (hi - lo) * w, 0.0)


def model_label(method: str, options: dict) -> str:
    """The label of the benchmark model (:data:`bench.cost.catalogue.MODELS`) a cell's method and
    options are: the most specific one whose options the cell's include (``sflm/sarch`` for
    S-FLM on the S-arch, ``candi/pure-gaussian``), else the method's name."""
    from bench.cost.catalogue import FAST_PATHS, MODELS, VARIANTS

    best, n = method, -1
    for label, name, opts in MODELS + VARIANTS:
        if name != method or label in FAST_PATHS:
            continue
        if all(options.get(k) == v for k, v in opts.items()) and len(opts) > n:
            best, n = label, len(opts)
    return best


def sample_factor(
    entry: dict, label: str, decoding: str, dtype: str, h: float
) -> tuple[float, float, str]:
    """(forward-equivalents per sampling call, the sampler's own seconds per call, the table key
    they came from) of model ``label`` with ``decoding`` in ``dtype`` at head share ``h``: the key
    ``<label>|<decoding>``, else ``<label>|top<k>`` as ``<label>|topk``, else the label's first
    decoding, else the method's (``sflm/sarch`` -> ``sflm``), else 1 and 0."""
    m = entry["methods"]
    table = m.get("sample", {})
    base = label.split("/")[0]
    topk = re.sub(r"^top([2-9]|\d\d+)$", "topk", decoding)
    keys = [f"{label}|{decoding}", f"{label}|{topk}"]
    keys += [k for k in table if k.startswith(f"{label}|")][:1]
    keys += [f"{base}|{decoding}"] + [k for k in table if k.startswith(f"{base}|")][:1]
    for k in keys:
        if k in table:
            v, call_s = table[k], 0.0
            if isinstance(v, dict):
                call_s = float(v.get("call_s", 0.0))
                v = v.get(dtype) or v.get("float32") or v.get("float64")
            return _interp(v, h, m.get("head_share", (0.0, 1.0))), call_s, k
    return 1.0, 0.0, "none"


def train_factor(entry: dict, label: str, h: float) -> tuple[float, float]:
    """(forward-equivalents of one training step of model ``label`` relative to the bare
    backbone's at head share ``h``, the loss's own seconds per step)."""
    m = entry["methods"]
    table = m.get("train", {})
    v = table.get(label, table.get(label.split("/")[0], 1.0))
    step_s = 0.0
    if isinstance(v, dict):
        v, step_s = v.get("factor", 1.0), float(v.get("step_s", 0.0))
    return _interp(v, h, m.get("head_share", (0.0, 1.0))), step_s


# --------------------------------------------------------------------------- predictions


@dataclass
class CellPrediction:
    """What one cell is predicted to cost on one device: ``seconds`` of the device (wall, in its
    job), ``peak_bytes`` of memory, and the parts ``seconds`` is the sum of."""

    cell_id: str
    kind: str  # train | import | sample | likelihood
    seconds: float
    peak_bytes: int
    parts: dict[str, float] = field(default_factory=dict)
    calls: int = 0  # backbone calls (sample / likelihood cells) or optimiser steps (train)
    flops: float = 0.0  # of the backbone calls / steps
    note: str = ""
    start_s: float = (
        0.0  # a model's: what its kind adds to the job's start (the trainer's tokenizer)
    )
    #: a sample cell's backbone calls per item (its budget: full and partial) and their
    #: forward-equivalents (partial calls at their share of a full one, times the call's factor),
    #: set beside the rows' calls_mean / fe_mean (bench.cost.check)
    item_calls: float = 0.0
    item_fe: float = 0.0
    #: why the cell may make fewer calls than ``item_calls`` ('' when it makes exactly those)
    variable_calls: str = ""
    #: what the prediction assumes that the cell may not do, in words shared by its cells (a
    #: call budget a decoding may not spend; block-only calls): --dry-run and bench.cost say them
    caveats: list[str] = field(default_factory=list)


@dataclass
class JobPrediction:
    """One model's work in a job: start (process, model load, tokenizer), its train or import cell
    (None when its weights exist) and its sample cells still to run."""

    label: str
    train_cell_id: str
    start_s: float
    load_s: float  # before sampling: the weights read back (and a tokenizer, where loaded)
    train: CellPrediction | None
    samples: list[CellPrediction]
    threads: int = 0
    prepare_s: float = 0.0  # the task's data caches, built by the sweep's first job
    process_s: float = 0.0  # of start_s, the process alone (what each SLURM array task pays)

    @property
    def train_s(self) -> float:
        return self.train.seconds if self.train else 0.0

    @property
    def sample_s(self) -> float:
        return sum(c.seconds for c in self.samples) + (self.load_s if self.samples else 0.0)

    @property
    def seconds(self) -> float:
        return self.prepare_s + self.start_s + self.train_s + self.sample_s

    @property
    def peak_bytes(self) -> int:
        cells = ([self.train] if self.train else []) + self.samples
        return max((c.peak_bytes for c in cells), default=0)

    def seconds_of(self, cell_ids) -> float:
        """Seconds of a job (one array task) that loads the model and samples only
        ``cell_ids`` of this model's cells (SLURM sizing: :func:`chunk_seconds`)."""
        ids = set(cell_ids)
        cells = [c for c in self.samples if c.cell_id in ids]
        start = self.process_s or self.start_s
        return start + (self.load_s if cells else 0.0) + sum(c.seconds for c in cells)


@dataclass
class PlanPrediction:
    """A plan's predicted cost on one device kind (the cells not yet in the store)."""

    kind: str
    entry: dict
    jobs: list[JobPrediction]
    gpus_per_job: int = 1
    #: once before the first job: the local executor's fork server importing what jobs need
    setup_s: float = 0.0

    @property
    def cells(self) -> dict[str, CellPrediction]:
        out = {}
        for j in self.jobs:
            for c in ([j.train] if j.train else []) + j.samples:
                out[c.cell_id] = c
        return out

    @property
    def device_seconds(self) -> float:
        return sum(j.seconds for j in self.jobs)

    @property
    def device_hours(self) -> float:
        return self.device_seconds / 3600.0

    @property
    def peak_bytes(self) -> int:
        return max((j.peak_bytes for j in self.jobs), default=0)

    def source(self) -> str:
        """Which table predicted (shipped or a calibrated file, its path) and when it was
        measured (:func:`bench.cost.table.describe`)."""
        from bench.cost.table import describe

        return describe({**self.entry, "kind": self.kind})


def _act_bytes(entry: dict) -> int:
    """Bytes per activation value: bf16 autocast on a GPU table, float32 on the CPU."""
    return 4 if entry.get("kind") == "cpu" else 2


class _Model:
    """A train cell's objects the predictions need: task, method, net, labels (built once)."""

    def __init__(self, tc):
        from bench import registry
        from bench.config import TaskConfig

        self.tc = tc
        self.task = registry.make_task(TaskConfig(**tc.task))
        self.method = registry.make_method(tc.method, tc.options, self.task,
                                           getattr(tc, "vocab_size", None))  # fmt: skip
        self.profile = dict(self.task.cost_profile() or {})
        arch = "sarch" if tc.options.get("backbone") == "sarch" else "dit"
        causal = not type(self.method).uses_time
        self.net = net_of(tc.backbone, self.method.vocab_size, arch=arch, causal=causal)
        self.label = model_label(tc.method, tc.options)
        self.L = int(self.task.seq_len)

    def dtype(self, float64: bool) -> str:
        by_size = getattr(self.method, "float32_by_size", None)
        if float64 and callable(by_size) and by_size():
            float64 = False
        return "float64" if float64 else "float32"

    def calls(self, nfe: int) -> tuple[int, bool, int]:
        """(backbone calls per batch, KV-cached (one position per call), positions given)."""
        import torch

        given = max(1, min(int(self.profile.get("prompt_tokens", 1)), self.L - 1))
        mask = torch.zeros(1, self.L, dtype=torch.bool)
        mask[:, :given] = True
        calls = int(self.method.nfe_for(nfe, mask))
        cached = bool(getattr(self.method, "kv_cache", None)) and type(self.method).nfe_is_length
        return calls, cached, given


class Costs:
    """The cost model's view of one model's cells on one device, handed to a kind's
    :meth:`~bench.kind.CellKind.predict` (the prediction sits above the kinds: they take it as an
    argument). ``cost(batch, positions)``: seconds of one bare forward of ``batch`` x
    ``positions`` (attention over as many keys); the model's ``net``, ``method`` (an instance),
    ``tc``, ``L`` (the task's length), ``label`` (its benchmark model), ``profile`` (the task's
    cost profile); the table's ``entry`` and ``scorers``; ``cores`` the GSM8K sandbox spreads
    over (the machine's for a local job, ``cpus_per_task`` on SLURM)."""

    def __init__(self, entry: dict, m: _Model, cores: int = 1):
        self.entry, self.m, self.cores = entry, m, cores
        self.net, self.method, self.tc, self.L = m.net, m.method, m.tc, m.L
        self.label, self.profile = m.label, m.profile
        self.scorers = entry["scorers"]
        self.act_bytes = _act_bytes(entry)
        #: seconds to load the task's tokenizer, where it loads one
        self.tokenizer_s = self.scorers["tokenizer_load_s"] if m.profile.get("tokenizer") else 0.0

    def __call__(self, batch: int, positions: float) -> float:
        return self.forward_s(batch, positions, positions)

    def forward_s(self, batch: int, positions: float, context: float) -> float:
        """:func:`forward_s` of the model's net."""
        return forward_s(self.entry, self.net, batch, positions, context)

    def train_step_s(self, batch: int, positions: float, context: float) -> float:
        """:func:`train_step_s` of the model's net."""
        return train_step_s(self.entry, self.net, batch, positions, context)

    def sample_factor(self, decoding: str, dtype: str, h: float) -> tuple[float, float, str]:
        """:func:`sample_factor` of the model's label."""
        return sample_factor(self.entry, self.label, decoding, dtype, h)

    def train_factor(self, h: float) -> tuple[float, float]:
        """:func:`train_factor` of the model's label."""
        return train_factor(self.entry, self.label, h)

    def dtype(self, float64: bool) -> str:
        return self.m.dtype(float64)

    def calls(self, nfe: int) -> tuple[int, bool, int]:
        return self.m.calls(nfe)

    def prediction(self, cell_id: str, kind: str, seconds: float, peak_bytes: int,
                   parts: dict | None = None, **kw) -> CellPrediction:  # fmt: skip
        """A :class:`CellPrediction` (``kw``: ``calls``, ``flops``, ``note``, ``start_s``,
        ``item_calls``, ``item_fe``, ``variable_calls``, ``caveats``)."""
        return CellPrediction(cell_id, kind, seconds, int(peak_bytes), dict(parts or {}), **kw)


def predict_cell(kind, cell, cost: Costs) -> CellPrediction:
    """Cell ``cell`` predicted by its ``kind`` (:meth:`bench.kind.CellKind.predict`): its
    :class:`CellPrediction`, a ``(seconds, peak_bytes, note)`` it answered, or nothing."""
    said = kind.predict(cell, cost)
    if isinstance(said, CellPrediction):
        return said
    if said is None:
        return CellPrediction(cell.id, cell.kind, 0.0, 0, note=f"kind {cell.kind}: not predicted")
    seconds, peak, note = said
    return CellPrediction(cell.id, cell.kind, seconds, int(peak), {cell.kind: seconds}, note=note)


def predict_job(entry: dict, tc, cells: list, *, trained: bool, cores: int = 1,
                models: dict | None = None) -> JobPrediction:  # fmt: skip
    """One model's job: make the model (unless ``trained``) and run its ``cells`` (not yet in
    the store), each predicted by its kind; before the cells, the weights read back and what each
    kind loads (:meth:`bench.kind.CellKind.load_s`)."""
    from bench import registry

    cost = Costs(entry, _model(tc, models), cores)
    job = entry["job"]
    train = None if trained else predict_cell(registry.KINDS[tc.kind], tc, cost)
    start = job["start_s"] + (train.start_s if train is not None else 0.0)
    samples = [predict_cell(registry.KINDS[c.kind], c, cost) for c in cells]
    load = 0.0
    if cells:
        load = 4.0 * cost.net.params() / job["load_bytes_per_s"]
        by_kind: dict[str, list] = {}
        for c in cells:
            by_kind.setdefault(c.kind, []).append(c)
        for kind, mine in by_kind.items():
            load += registry.KINDS[kind].load_s(mine, cost)
    return JobPrediction(tc.label(), tc.id, start, load, train, samples,
                         process_s=job["start_s"])  # fmt: skip


def _model(tc, models: dict | None) -> _Model:
    if models is None:
        return _Model(tc)
    if tc.id not in models:
        models[tc.id] = _Model(tc)
    return models[tc.id]


# --------------------------------------------------------------------------- plans


def job_threads(p, ex: ExecutorConfig, n_jobs: int) -> int:
    """CPU threads each job runs with: the local executor splits the cores between the jobs
    it runs at once (:mod:`bench.executors.local`); a SLURM task has ``cpus_per_task``."""
    if ex.kind == "slurm":
        return max(1, int(ex.cpus_per_task))
    if ex.kind == "debug":
        return max(1, os.cpu_count() or 1)
    parallel = max(1, min(int(ex.max_parallel), max(1, n_jobs)))
    return max(1, (os.cpu_count() or 1) // parallel)


def predict_plan(p, kind: str | None = None, store=None, *, ex: ExecutorConfig | None = None,
                 entry: dict | None = None) -> PlanPrediction:  # fmt: skip
    """Every job plan ``p`` still needs (cells in ``store`` skipped; ``store`` None: every cell),
    predicted on device ``kind`` (None: :func:`device_kind` of the executor section ``ex``, default
    the plan's) with ``entry`` (default: :func:`bench.cost.table.load` for the kind and the threads
    each job gets: a CPU kind's jobs use the threads the executor gives them)."""
    from bench.cost import table

    ex = ex or p.cfg.executor
    kind = kind or device_kind(ex)[0]
    todo = []
    for tc in p.train_cells:
        cells = [s for s in p.samples_of(tc) if store is None or not store.has(s.id)]
        trained = store is not None and store.has(tc.id) and tc.weights.is_file()
        if trained and not cells:
            continue
        todo.append((tc, cells, trained))
    threads = job_threads(p, ex, len(todo))
    if entry is None:
        entry = table.load(kind, threads if kind == "cpu" else 0)
    # the sandbox runs programs on every core it sees (bench.evaluate.sandbox: 4 workers a core)
    cores = max(1, int(ex.cpus_per_task)) if ex.kind == "slurm" else (os.cpu_count() or 1)
    models: dict = {}
    jobs = []
    forked = ex.kind == "local" and fork_server()
    for tc, cells, trained in todo:
        j = predict_job(entry, tc, cells, trained=trained, cores=cores, models=models)
        j.threads = threads
        if forked:  # forked with the imports done (bench.executors.forkserver)
            j.start_s += FORK_S - j.process_s
            j.process_s = FORK_S
        jobs.append(j)
    if jobs:  # a cold data cache: the first job builds it (the others wait for it or reuse it)
        prof = models[jobs[0].train_cell_id].profile
        loads = prof.get("prepare_tokenizer_loads", 0) * entry["scorers"]["tokenizer_load_s"]
        jobs[0].prepare_s = float(prof.get("prepare_s", 0.0)) + loads
    return PlanPrediction(kind, entry, jobs, setup_s=entry["job"]["start_s"] if forked else 0.0)


#: seconds a local job forked by the fork server takes to start (the imports are done): an estimate
FORK_S = 0.5


def fork_server() -> bool:
    """Whether the local executor forks its jobs from a fork server (Linux, unless
    ``SFLM_LOCAL_FORK=0``): a job then starts without importing torch and the trainer again."""
    try:
        from bench.executors.forkserver import enabled
    except ImportError:
        return False
    return enabled()


def local_wall(jobs: list[JobPrediction], parallel: int, setup_s: float = 0.0) -> float:
    """Wall seconds of ``jobs`` on ``parallel`` slots, started in plan order, each on the first
    slot to free up (as :func:`bench.executors.local.execute` does), after ``setup_s``."""
    slots = [setup_s] * max(1, parallel)
    for j in jobs:
        i = min(range(len(slots)), key=slots.__getitem__)
        slots[i] += j.seconds
    return max(slots) if jobs else 0.0


def chunk_seconds(job: JobPrediction, chunks: list[list]) -> list[float]:
    """Predicted seconds of each SLURM array task of a model (``chunks``: its sample cells split
    as :func:`bench.executors.slurm_cluster.chunk_cells` splits them), each loading the model."""
    return [job.seconds_of(c.id for c in chunk) for chunk in chunks]


def fmt_s(s: float) -> str:
    """``42 s``, ``3.5 min``, ``2.1 h``."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def fmt_bytes(b: float) -> str:
    for unit, k in (("GiB", 2**30), ("MiB", 2**20)):
        if b >= k:
            return f"{b / k:.1f} {unit}"
    return f"{b / 1024:.0f} KiB"
