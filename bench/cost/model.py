"""Predicted cost of a plan: device seconds and peak memory per cell, per job and in total, from
the shapes alone and a throughput table (:mod:`bench.cost.table`).

What a cell costs follows from its shapes:

- the backbone (:class:`Net`: blocks, width, |V|; the S-arch of S-FLM has the DiT's matrices
  without adaLN) gives the parameter count and the FLOPs of one forward per token,
  ``2 (12 n_blocks d^2 + d |V|) + 4 n_blocks d * context`` (the matrices, then attention);
- a **sampling call** of B sequences of T new positions costs the bare backbone's forward,
  ``forward.overhead_s + B T flops / forward.flops_per_s``, times the model's forward-equivalents
  per call for its decoding and sampling dtype (float64 unless the sweep says float32 or the
  method samples float32 at its |V|); a KV-cached AR call reads one position;
- a **sample cell** makes ``Method.nfe_for(nfe)`` calls per batch (AR: the generated length)
  over ceil(items / batch) batches, then scores the items (``scorers``: a light scorer per item,
  the GSM8K sandbox's CPU seconds per program over the job's cores, the reference LM's tokens);
- a **likelihood cell** runs ``draws`` forwards (AR: one) per batch of sequences, nothing for a
  method without a bound;
- a **train cell** takes ``steps`` optimiser steps of the per-device batch: the bare step
  (forward + backward ~ 3 forwards, AdamW over the parameters) times the model's training
  forward-equivalents, plus the trainer's per-step cost, validation passes and checkpoints; an
  **import cell** reads and converts the checkpoint;
- a **job** adds its process start (and a model load before sampling, a tokenizer per phase
  where the task loads one).

Peak memory: parameters (+ gradients, AdamW moments and the EMA copy when training) +
activations + the (B, L, |V|) buffers (logits, and the sampler's own in float64 or float32).

Entry points: :func:`predict_plan` (a whole plan, for ``--dry-run`` and SLURM sizing),
:func:`predict_train`, :func:`predict_sample` (one cell), :func:`local_wall` (jobs over the local
executor's parallel slots), :func:`device_kind` (which table a sweep's executor uses).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from bench.config import BackboneConfig, ExecutorConfig

#: (B, L, |V|) buffers a sampler holds at its peak beyond the float32 logits, in its sampling
#: dtype: S-FLM's exact velocity measured 4.16 (float64) and 2.78 (float32) buffers
#: (docs/measurements/gpu_h200_perf_velocity_b32*.json); the categorical samplers' Gumbel-max
#: (the logits cast, the uniforms, the noise) three
SAMPLER_BUFFERS = {"sflm": {"float64": 4.2, "float32": 2.8}, "*": {"float64": 3.0, "float32": 3.0}}
#: bytes of saved activations per token and block, in units of d_model x the activation width
#: (attention and MLP inputs, the 4d MLP hidden state, norms: ~34 d values per token and block,
#: Korthikanti et al. 2022)
ACT_PER_BLOCK = 34
#: sequences per likelihood dataset when the sweep says "all" (0): an assumption of the model
ALL_SEQUENCES = 1000


# --------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class Net:
    """A backbone's shape: the DiT (``arch="dit"``, causal for AR) or the S-arch."""

    n_blocks: int
    d_model: int
    n_heads: int
    cond_dim: int
    vocab_in: int
    vocab_out: int
    arch: str = "dit"
    causal: bool = False

    def params(self) -> int:
        """Parameters, counted as :mod:`bench.backbones.dit` / :mod:`sflm.sarch` build them."""
        d, c, n = self.d_model, self.cond_dim, self.n_blocks
        time = 0 if self.causal else 256 * c + c + c * c + c
        if self.arch == "sarch":
            # q, k, v, o; c_fc (+ bias); mlp_out (+ bias); s_fc; s_qk and the two gammas; delta
            block = 4 * d * d + (4 * d * d + 4 * d) + (4 * d * d + d) + 4 * d + 3 * d
            block += 2 * c * d + 2 * d
            return self.vocab_in * d + time + n * block + self.vocab_out * d + self.vocab_out
        block = 2 * d + 4 * d * d + (4 * d * d + 4 * d) + (4 * d * d + d)
        if not self.causal:
            block += 6 * c * d + 6 * d
        final = d + (0 if self.causal else 2 * c * d + 2 * d) + d * self.vocab_out + self.vocab_out
        return self.vocab_in * d + time + n * block + final

    def token_flops(self, context: float) -> float:
        """FLOPs of one position of a forward: the matrices (blocks and output layer), then
        attention over ``context`` keys."""
        d = self.d_model
        matrices = 12 * self.n_blocks * d * d + d * self.vocab_out
        return 2.0 * matrices + 4.0 * self.n_blocks * d * context

    def head_share(self, context: float) -> float:
        """The output layer's part of a forward's FLOPs (what a sampler's extra work over |V|
        is measured against)."""
        return 2.0 * self.d_model * self.vocab_out / self.token_flops(context)


def net_of(backbone: dict | BackboneConfig, vocab: int, *, arch: str = "dit",
           causal: bool = False) -> Net:  # fmt: skip
    """The :class:`Net` of a backbone section (a preset name and its overrides) at ``vocab``."""
    from bench.backbones.dit import resolve_size

    cfg = backbone if isinstance(backbone, BackboneConfig) else BackboneConfig(**backbone)
    s = resolve_size(cfg)
    return Net(s.n_blocks, s.d_model, s.n_heads, s.cond_dim, vocab, vocab, arch, causal)


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


def _bytes(dtype: str) -> int:
    return 8 if dtype == "float64" else 4


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


def _sampler_peak(entry, m: _Model, batch: int, dtype: str, cached: bool) -> int:
    net, L = m.net, m.L
    positions = 1 if cached else L
    act = batch * positions * net.d_model * 16 * 4
    blv = batch * positions * net.vocab_out
    bufs = SAMPLER_BUFFERS.get(m.tc.method, SAMPLER_BUFFERS["*"])[dtype]
    cache = batch * L * net.d_model * 2 * net.n_blocks * 4 if cached else 0
    return int(net.params() * 4 + act + blv * (4 + bufs * _bytes(dtype)) + cache)


def predict_sample(entry: dict, m: _Model, c, *, cores: int = 1) -> CellPrediction:
    """One sample or likelihood cell of model ``m`` (``cores``: the CPU cores the GSM8K sandbox
    spreads its programs over: the machine's for a local job, ``cpus_per_task`` on SLURM)."""

    sc = entry["scorers"]
    net, L = m.net, m.L
    if c.kind not in ("sample", "likelihood"):  # a plug-in kind predicts its own (bench.kind)
        from bench import registry

        said = registry.KINDS[c.kind].predict(c, lambda b, n: forward_s(entry, net, b, n, n))
        if said is None:
            return CellPrediction(c.id, c.kind, 0.0, 0, note=f"kind {c.kind}: not predicted")
        seconds, peak, note = said
        return CellPrediction(c.id, c.kind, seconds, int(peak), {c.kind: seconds}, note=note)
    if c.kind == "likelihood":
        if not type(m.method).bound_kind:  # "no bound": a row without a value
            return CellPrediction(c.id, "likelihood", sc["cell_s"], 0, {"score": sc["cell_s"]})
        n = c.n_samples or ALL_SEQUENCES
        block = c.block or L
        batches = math.ceil(n / c.batch_size)
        draws = 1 if type(m.method).nfe_is_length else c.draws
        fe, call_s, _ = sample_factor(entry, m.label, "*", "float64", net.head_share(block))
        fwd = sum(
            forward_s(entry, net, min(c.batch_size, n - i * c.batch_size), block, block)
            for i in range(batches)
        )
        net_s = draws * (fe * fwd + batches * call_s)
        peak = int(net.params() * 4 + c.batch_size * block * net.vocab_out * (4 + 8))
        flops = draws * n * block * net.token_flops(block)
        parts = {"network": net_s, "score": sc["cell_s"]}
        return CellPrediction(c.id, "likelihood", sum(parts.values()), peak, parts,
                              calls=draws * batches, flops=flops)  # fmt: skip
    n, B = c.n_samples, c.batch_size
    calls, cached, given = m.calls(c.nfe)
    dtype = m.dtype(c.float64)
    batches = math.ceil(n / B)
    sizes = [min(B, n - i * B) for i in range(batches)]
    if cached:  # the prefill reads the given positions, each later call one position
        ctx = (given + L) / 2
        fe, call_s, key = sample_factor(entry, m.label, c.decoding, dtype, net.head_share(ctx))
        per = [
            forward_s(entry, net, b, given, given) + (calls - 1) * forward_s(entry, net, b, 1, ctx)
            for b in sizes
        ]
        flops = n * (given * net.token_flops(given) + (calls - 1) * net.token_flops(ctx))
    else:
        fe, call_s, key = sample_factor(entry, m.label, c.decoding, dtype, net.head_share(L))
        per = [calls * forward_s(entry, net, b, L, L) for b in sizes]
        flops = n * calls * L * net.token_flops(L)
    network = fe * sum(per) + calls * batches * call_s
    scorer = m.profile.get("scorer", "light")
    score = sc["cell_s"] + n * sc["item_s"]
    if scorer == "sandbox":
        score += n * sc["sandbox_cpu_s"] / max(1, cores)
    elif scorer == "genppl":
        score += n * L / sc["genppl_tokens_per_s"]
    parts = {"network": network, "score": score}
    peak = _sampler_peak(entry, m, B, dtype, cached)
    return CellPrediction(c.id, "sample", network + score, peak, parts, calls=calls * batches,
                          flops=flops, note=f"{dtype}; factor {fe:.2f} ({key})")  # fmt: skip


def predict_train(entry: dict, m: _Model) -> CellPrediction:
    """One train cell (or import cell) of model ``m``."""
    tc, net = m.tc, m.net
    job = entry["job"]
    P = net.params()
    if getattr(tc, "imported", False):
        read = 12.0 * P / job["load_bytes_per_s"]  # the file (weights + EMA), the model written
        fetch = 0.0 if (tc.source or {}).get("sha256") else 8.0 * P / job["download_bytes_per_s"]
        parts = {"read": read, "fetch": fetch}
        return CellPrediction(tc.id, "import", read + fetch, int(12 * P), parts)
    tr = tc.train
    devices = int(tr.get("devices", 1)) * int(tr.get("num_nodes", 1))
    B = max(1, int(tr["batch_size"]) // devices)
    steps = int(tr["steps"])
    T = m.L - 1 if net.causal else m.L
    ctx = T / 2 if net.causal else T
    h = net.head_share(ctx)
    ft, loss_s = train_factor(entry, m.label, h)
    step = ft * train_step_s(entry, net, B, T, ctx) + loss_s + entry["trainer"]["step_s"]
    val_every = tr.get("val_every")
    val_every = max(1, steps // 20) if val_every is None else int(val_every)
    n_val = (steps // val_every) * int(tr.get("val_batches", 2)) if val_every else 0
    if tr.get("logger") == "none":
        n_val = 0
    val = n_val * ft * forward_s(entry, net, B, T, ctx)
    # each periodic checkpoint writes its file and last.ckpt (weights, AdamW moments, EMA: 16
    # bytes a parameter), the end one more last.ckpt and weights.pt
    ckpts = math.ceil(steps / int(tr.get("checkpoint_every", 1000) or steps))
    ckpt = ((2 * ckpts + 1) * 16.0 + 4.0) * P / job["write_bytes_per_s"]
    parts = {"steps": steps * step, "validation": val, "checkpoints": ckpt,
             "trainer": entry["trainer"]["start_s"]}  # fmt: skip
    act = B * T * (net.n_blocks * ACT_PER_BLOCK * net.d_model * _act_bytes(entry)
                   + net.vocab_out * 4 * 3)  # fmt: skip
    peak = int(20 * P + act)
    return CellPrediction(tc.id, "train", sum(parts.values()), peak, parts, calls=steps,
                          flops=steps * 3.0 * B * T * net.token_flops(ctx) * devices,
                          note=f"{steps} steps x {step:.3g} s (factor {ft:.2f})")  # fmt: skip


def predict_job(entry: dict, tc, cells: list, *, trained: bool, cores: int = 1,
                models: dict | None = None) -> JobPrediction:  # fmt: skip
    """One model's job: train (unless ``trained``) and its ``cells`` (not yet in the store)."""

    m = _model(tc, models)
    job, sc = entry["job"], entry["scorers"]
    tok = sc["tokenizer_load_s"] if m.profile.get("tokenizer") else 0.0
    train = None if trained else predict_train(entry, m)
    start = job["start_s"] + (tok if train is not None and train.kind == "train" else 0.0)
    samples = [predict_sample(entry, m, c, cores=cores) for c in cells]
    sampled = [c for c in cells if c.kind == "sample"]
    bound = [c for c in cells if c.kind == "likelihood" and type(m.method).bound_kind]
    load = 0.0
    if cells:
        load = 4.0 * m.net.params() / job["load_bytes_per_s"]
        load += tok if sampled else 0.0
        load += tok if bound else 0.0
        if sampled and m.profile.get("scorer") == "genppl":
            load += sc["genppl_load_s"]
    return JobPrediction(tc.label(), tc.id, start, load, train, samples,
                         process_s=job["start_s"])  # fmt: skip


def _model(tc, models: dict | None) -> _Model:
    if models is None:
        return _Model(tc)
    if tc.id not in models:
        models[tc.id] = _Model(tc)
    return models[tc.id]


# --------------------------------------------------------------------------- plans


def local_device_kind() -> str:
    """This machine's kind: its first CUDA GPU's (as the local executor's jobs use it) or
    ``cpu``."""
    import torch

    if torch.cuda.is_available():
        from bench.cost.table import kind_of

        return kind_of(torch.cuda.get_device_name(0))
    return "cpu"


#: the kind a SLURM sweep with GPUs is predicted on when ``executor.device`` does not say
SLURM_GPU_DEFAULT = "h100"


def device_kind(ex: ExecutorConfig) -> tuple[str, str]:
    """(the table kind the sweep's jobs run on, how it was chosen): ``executor.device`` (or
    ``SFLM_SLURM_DEVICE`` on SLURM) when set; else, on SLURM, ``h100`` with GPUs and ``cpu``
    without; else this machine's."""
    if getattr(ex, "device", ""):
        return ex.device, "executor.device"
    if ex.kind == "slurm":
        if ex.gpus_per_node:
            return SLURM_GPU_DEFAULT, "assumed: set executor.device"
        return "cpu", "no GPUs per node"
    return local_device_kind(), "this machine"


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


@dataclass
class SlurmPrediction:
    """A plan's predicted SLURM jobs: seconds of each train / import job and of each sampling
    array task (each task starts a process and loads its model), and the device-hours they use
    (GPU-hours: a train job's GPUs, one per array task on a cluster with GPUs)."""

    train_s: dict[str, float] = field(default_factory=dict)  # train cell id -> seconds
    import_s: dict[str, float] = field(default_factory=dict)  # import cell id -> seconds
    task_s: dict[str, list[float]] = field(default_factory=dict)  # train cell id -> per task
    gpu_h: float = 0.0
    cpu_h: float = 0.0  # import jobs and, without GPUs, every job (x cpus_per_task)

    @property
    def longest_s(self) -> float:
        """The longest job or array task (what a time limit must cover)."""
        every = [*self.train_s.values(), *self.import_s.values()]
        every += [t for ts in self.task_s.values() for t in ts]
        return max(every, default=0.0)


def slurm_sizing(p, ex: ExecutorConfig, store):
    """The prediction SLURM jobs are sized from (:class:`bench.executors.slurm_cluster.Sizing`),
    or None when ``time_safety`` is 0 or there is no table for the executor's device kind (every
    job then asks ``time_min``)."""
    from bench.executors.slurm_cluster import sizing_of

    if ex.time_safety <= 0:
        return None
    kind = device_kind(ex)[0]
    try:
        pred = predict_plan(p, kind, store, ex=ex)
    except KeyError:  # no table for this kind (bench.cost.table)
        return None
    return sizing_of(pred)


def slurm_cost(pred: PlanPrediction, p, ex: ExecutorConfig, store=None) -> SlurmPrediction:
    """What the SLURM executor would submit for ``p`` (as
    :func:`bench.executors.slurm_cluster.plan_cost` counts it), predicted: each train job, each
    import job (CPU) and each sampling array task (:func:`chunk_seconds`)."""
    from bench.executors.slurm_cluster import chunk_cells, sizing_of, train_resources

    out = SlurmPrediction()
    jobs = {j.train_cell_id: j for j in pred.jobs}
    cpus = max(1, int(ex.cpus_per_task))
    sizes = sizing_of(pred) if ex.time_safety > 0 else None  # tasks packed as the executor does
    for tc in p.train_cells:
        j = jobs.get(tc.id)
        if j is None:
            continue
        if j.train is not None:
            secs = j.prepare_s + j.start_s + j.train_s
            r = train_resources(ex, tc)
            if j.train.kind == "import":
                out.import_s[tc.id] = secs
                out.cpu_h += secs * r["cpus_per_task"] / 3600
            else:
                out.train_s[tc.id] = secs
                gpus = r["gpus_per_node"] * r["nodes"]
                if gpus:
                    out.gpu_h += secs * gpus / 3600
                else:
                    out.cpu_h += secs * cpus * r["tasks_per_node"] * r["nodes"] / 3600
        todo = [s for s in p.samples_of(tc) if store is None or not store.has(s.id)]
        ts = chunk_seconds(j, chunk_cells(todo, ex, sizes))
        out.task_s[tc.id] = ts
        if ex.gpus_per_node:
            out.gpu_h += sum(ts) / 3600
        else:
            out.cpu_h += sum(ts) * cpus / 3600
    return out
