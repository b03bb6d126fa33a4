"""``python -m bench.sweep SWEEP.yaml --rehearse [--set KEY=VALUE ...] [--memory-gb G]
[--first-decoding]``: every distinct model of a sweep at its real size, with random weights,
through each kind of work its jobs do, on this machine, before any GPU-hour is spent.
``python -m bench.rehearse SWEEP.yaml [SWEEP.yaml ...]`` does several sweeps in one process
(:func:`rehearse_all`, :class:`Shared`).

For every distinct model of the plan (method + options + backbone + vocabulary; models that
differ only by training seed, training subset or sampling grid, or import files with the same
facts, are one) it runs, at batch 1 and at batch 2 (a *twin*, a model that differs from an
earlier one only in options its method declares memory-neutral, ``Method.memory_neutral_options``
such as S-FLM's schedule constants, runs batch 1 only and takes the earlier model's growth from
batch 1 to 2, :func:`twin_key`; for sampling and likelihood also an imported model of the same
architecture, or of a vocabulary a few classes apart, the growth scaled up by the ratio when larger,
:func:`architecture`):

- **build**: the method and its backbone at the sweep's size, random weights, on the device. An
  import cell (``checkpoint:``) instead writes a random model of the file's facts in the
  reference format (:func:`bench.checkpoints.export.export`, without our own record, as the
  released files are) into a temp folder, runs the import job on it (:func:`bench.cells.run_train`
  on a copy of the cell whose results folder is the temp folder) and loads the imported weights
  as a sampling job does: the load path is rehearsed too;
- **train** (cells that train): the method's loss (at the middles of the trainer's time strata,
  :func:`stratum_midpoints`) and its backward at batch 1 and at batch 2 on the task's layout,
  then one optimizer step as the trainer takes it (:mod:`bench.train.step`: gradient clipping,
  AdamW, the method's post-step hook, the EMA, the LR schedule), without Lightning; bf16 autocast
  on CUDA as ``precision: auto``.
  The step's own peak does not grow with the batch: it is a floor under the extrapolation
  (:meth:`Rehearsal.train`);
- **sample**: one sampling call per sampling setup of the model (decoding and sampling-only
  options: their memory differs, e.g. the S-arch's stochastic decoding against its exact one;
  of decodings that share code with memory growing in a size,
  ``Method.decoding_family`` such as S-FLM's top-k, the largest; ``--first-decoding``: the first
  setup only), through
  :func:`bench.cells.sample_batch`, at ``nfe = 2``: a middle step and the last, whose memory
  can differ (a method whose NFE is the generated length gets a prompt of all but the last 2
  positions: a prefill of L - 2 positions, then one cached call, which bounds its real peak from
  above), in the cell's dtype (``sample.float64``); the output's shape, id range and NFE count
  are checked;
- **likelihood** (a sweep with a ``likelihood`` section, a method with a bound): one call of the
  method's bound on blocks of the evaluated length;

and once per sweep **score**: the task's ``evaluate`` on one item (the first model's sample),
with its reference LM where the task has one (OWT's Gen. PPL: the configured model when it is on
this machine, else its architecture with random weights from a known configuration, said in the
output).

Each phase reports seconds and peak memory (:class:`bench.measure.PeakMemory`: CUDA max
allocated, or the process's resident peak on the CPU) at both batches, and the peak extrapolated
linearly to the sweep's batch: ``sample.batch_size`` (sampling), ``likelihood.batch_size``, and
``train.batch_size / (devices x num_nodes)``, the batch of one device under DDP (training). The
table ends with the cards each model fits (40 / 80 / 141 GB, or ``--memory-gb``).

Inputs: the task's evaluation items (``eval_data``: prompts, masks, lengths) when this machine
has them; otherwise ids drawn at random in the task's shape (said in the output), so a missing
data set is not a failure here. Training batches are always the evaluation layout with random ids
in the generated positions: the training corpus is not read (its shape is the same, and reading it
at paper scale means tokenising it). With the hub unreachable, only local copies are tried
(``HF_HUB_OFFLINE=1`` for the run).

A shape, dtype or memory failure (an exception in a phase, an unexpected output, a peak
extrapolated above ``--memory-gb``) stops the rehearsal with one line naming the cell and the
phase, exit 1 (2 for a configuration error). Nothing is written into the sweep's results folder:
everything the import path writes goes to a temp folder, removed at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench import heap
from bench.cell_model import cell_task, method_backbone
from bench.config import ConfigError, canonical, config_hash
from bench.data.base import TaskData
from bench.likelihood.kind import LikelihoodCell
from bench.measure import PeakMemory, device_name
from bench.method import Batch
from bench.plan import Plan, SampleCell, TrainCell

#: the cards the table compares with when no ``--memory-gb`` is given (nominal GB = 1e9 bytes)
CARDS_GB = (40, 80, 141)
GB = 1e9
#: the NFE of a sampling call: the smallest that runs a middle step and the last one (FLM's
#: middle steps hold twice the memory of its last: nfe = 1 would halve its extrapolated peak)
REHEARSAL_NFE = 2
#: positions a method whose NFE is the generated length (AR) generates in the rehearsal: a
#: prefill, then one cached call
LENGTH_NFE_TAIL = 2
#: Gen. PPL reference LMs whose architecture is known here (transformers' GPT-2 configurations)
GPT2_CONFIGS = {
    "gpt2": {"n_embd": 768, "n_layer": 12, "n_head": 12},
    "gpt2-medium": {"n_embd": 1024, "n_layer": 24, "n_head": 16},
    "gpt2-large": {"n_embd": 1280, "n_layer": 36, "n_head": 20},
    "gpt2-xl": {"n_embd": 1600, "n_layer": 48, "n_head": 25},
}


class RehearsalFailure(Exception):
    """A phase failed: ``line`` names the sweep, the cell and the phase."""

    def __init__(self, line: str, code: int = 1):
        super().__init__(line)
        self.line, self.code = line, code


# --------------------------------------------------------------------------- the models


@dataclass
class Model:
    """One distinct model of a plan and the cells it stands for."""

    cells: list[TrainCell] = field(default_factory=list)
    #: one sample cell per distinct sampling setup (sampling options, decoding, dtype)
    samples: list[SampleCell] = field(default_factory=list)
    likelihood: LikelihoodCell | None = None

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
    the options the method declares memory-neutral (``Method.memory_neutral_options``: a
    schedule's constants). With ``architecture`` (:func:`architecture`, the built network's
    parameter names, shapes and dtypes) in place of the backbone config, the vocabulary and
    whether it was imported: a sampling call holds the same for a trained and an imported model
    of one architecture, however its config spells it. Twins measure their batch-2 point once
    (:meth:`Rehearsal.second`)."""
    from bench import registry

    neutral = set(getattr(registry.METHODS[tc.method], "memory_neutral_options", ()))
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
    """The plan's distinct models, in plan order, with their sampling setups."""
    by: dict[str, Model] = {}
    for tc in p.train_cells:
        by.setdefault(model_key(tc), Model()).cells.append(tc)
    seen: set = set()
    for sc in p.sample_cells:
        key = model_key(sc.train)
        m = by[key]
        if sc.kind == LikelihoodCell.kind:
            m.likelihood = m.likelihood or sc
            continue
        setup = (key, config_hash(sc.options), sc.decoding, bool(sc.float64))
        if setup not in seen:
            seen.add(setup)
            m.samples.append(sc)
    return list(by.values())


# --------------------------------------------------------------------------- measuring


@dataclass
class Phase:
    """One phase of one model: seconds and peak bytes at batch 1 and 2 (or once)."""

    model: str
    name: str
    cell: str  # the cell it stands for, in a failure line
    seconds: list[float] = field(default_factory=list)
    peaks: list[int | None] = field(default_factory=list)
    batch: int | None = None  # the sweep's batch the peak is extrapolated to
    per_device: bool = False
    #: a peak that does not grow with the batch (training: the optimizer step's)
    floor: int | None = None
    #: per batch, the peak of each segment of the network's run (:class:`Segments`)
    segments: list[list[int]] = field(default_factory=list)
    note: str = ""
    #: the model whose batch-1 -> 2 growth gave this phase's batch-2 point (a twin's phase,
    #: :meth:`Rehearsal.second`), or "" when batch 2 ran
    slope_of: str = ""
    #: the ratio that growth was scaled by ("50258/50257 classes"), or "" when taken as it is
    slope_ratio: str = ""

    def extrapolated(self) -> float | None:
        """Bytes at :attr:`batch`: each segment's peak extended linearly from batch 1 and 2, the
        largest of them (a segment whose peak does not grow, e.g. the gradient of an embedding
        table, cannot hide one that does), never below the whole phase's line through its two
        peaks nor below :attr:`floor`."""
        if self.batch is None or len(self.peaks) < 2 or None in self.peaks[:2]:
            return None
        p1, p2 = self.peaks[0], self.peaks[1]
        out = max(p1 + (self.batch - 1) * max(p2 - p1, 0), self.floor or 0)
        if len(self.segments) >= 2 and len(self.segments[0]) == len(self.segments[1]):
            for a, b in zip(self.segments[0], self.segments[1]):
                out = max(out, a + (self.batch - 1) * max(b - a, 0))
        return out

    def segmented(self) -> bool:
        """True when both batches ran the same segments (the extrapolation used them)."""
        return len(self.segments) >= 2 and len(self.segments[0]) == len(self.segments[1]) > 1


def _trim() -> None:
    """Give freed memory back (so the next peak starts from what is live)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    heap.trim()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Segments:
    """Peaks between marks: the run of a network cut at every module's output in the forward
    pass and, with gradients, at the gradient of every module's output in the backward pass.
    Both batches of a phase run the same modules in the same order, so segment k of batch 1 and
    segment k of batch 2 are the same stretch of work; a peak extrapolated per segment stays
    right when the place of the step's peak moves with the batch (at batch 1 the gradient of an
    embedding table at the end of the backward, at batch 64 the activations at its start)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pm = PeakMemory(device)
        self.peaks: list[int] = []

    def reset(self) -> None:
        if self.device.type == "cuda":  # the allocator's host-side counters: no synchronisation
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.pm.reset()

    def mark(self) -> None:
        if self.device.type == "cuda":
            self.peaks.append(int(torch.cuda.max_memory_allocated(self.device)))
        else:
            self.peaks.append(int(self.pm.peak_bytes() or 0))
        self.reset()

    @contextlib.contextmanager
    def hooked(self, module: torch.nn.Module):
        """Mark at each module's output (and at its gradient, when one flows back)."""

        def on_grad(grad):
            self.mark()

        def on_output(mod, inputs, out):
            self.mark()
            first = out[0] if isinstance(out, tuple | list) and out else out
            if isinstance(first, torch.Tensor) and first.requires_grad:
                first.register_hook(on_grad)

        handles = [m.register_forward_hook(on_output) for m in module.modules()]
        try:
            yield self
        finally:
            for h in handles:
                h.remove()


def measure(fn, device: torch.device, module: torch.nn.Module | None = None):
    """(fn(), seconds, peak bytes, segment peaks) with the peak counter reset first; the segments
    (:class:`Segments`) of ``module``'s runs inside ``fn`` when given, else []."""
    _trim()
    pm = PeakMemory(device).reset()
    seg = Segments(device)
    t0 = time.perf_counter()
    if module is None:
        out = fn()
    else:
        seg.reset()
        with seg.hooked(module):
            out = fn()
        seg.mark()  # the rest, after the last module
    _sync(device)
    seconds = time.perf_counter() - t0
    peak = pm.peak_bytes() if module is None else max(seg.peaks)
    return out, seconds, peak, seg.peaks


# --------------------------------------------------------------------------- inputs


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


def stratum_midpoints(n: int, device, eps: float = 1e-3) -> torch.Tensor:
    """(n,) times at the middles of the trainer's n strata (:func:`bench.method.antithetic_times`
    with every uniform draw at 1/2): each batch holds the expected mix of noise levels, so that a
    loss whose work depends on the time (CANDI's CPU path computes only the noised rows) grows
    linearly from batch 1 to 2 instead of with the luck of the draws."""
    u = (torch.arange(n, dtype=torch.float32, device=device) + 0.5) / n
    return (1 - eps) * u + eps


def train_batch(inp: Inputs, n: int, vocab: int, device) -> Batch:
    """``n`` rows of the evaluation layout, random ids where the model generates."""
    d = inp.data
    g = torch.Generator().manual_seed(n)
    noise = torch.randint(0, vocab, d.x[:n].shape, generator=g)
    x = torch.where(d.clean_mask[:n], d.x[:n], noise)
    return Batch(x, d.clean_mask[:n].clone(), d.loss_mask[:n].clone()).to(device)


# --------------------------------------------------------------------------- the phases


@contextlib.contextmanager
def _sha_memo(folder: Path):
    """The checkpoint importer remembers each file's sha256 in the data cache; the temp files'
    go to ``folder`` instead."""
    from bench.checkpoints import source

    before = source._sha_cache
    source._sha_cache = lambda: folder / "sha256.json"
    try:
        yield
    finally:
        source._sha_cache = before


def _export_random(tc: TrainCell, task, out: Path) -> None:
    """A random model with ``tc``'s facts, written to ``out`` in the reference format without our
    own record (:func:`bench.checkpoints.export.export_model`), as the released files are."""
    from bench.checkpoints.export import export_model

    torch.manual_seed(0)
    method, backbone = method_backbone(tc, task)
    facts = {
        "method": tc.method,
        "options": canonical(dataclasses.asdict(method.opts)),
        "backbone": tc.backbone,
        "vocab_size": getattr(tc, "vocab_size", None) or task.vocab_size,
        "seq_len": task.seq_len,
    }
    export_model(method, backbone, facts, out, ours=False)


def setup_name(sc: SampleCell) -> str:
    """A sampling setup: the decoding, and the sampling-only options that are not defaults."""
    extra = getattr(sc, "sampling", None)
    return sc.decoding + (f" {json.dumps(extra, sort_keys=True)}" if extra else "")


@dataclass
class Shared:
    """What the rehearsals of several sweeps in one run share (:func:`rehearse_all`): the growth
    from batch 1 to 2 per (:func:`twin_key`, phase, task shape), so a model of a later sweep that
    an earlier sweep measured runs batch 1 only, and the task settings whose scorer was measured.
    Nothing of a sweep's models, data or reference LM outlives it (kept, they raised the next
    sweep's resident peaks)."""

    #: (twin key, phase name, task shape) -> (model, growth of the peak and of each segment
    #: from batch 1 to 2, its classes when the key holds them as "V"): what a twin's phase
    #: reuses instead of running batch 2
    growth: dict[tuple, tuple[str, int, list[int], int | None]] = field(default_factory=dict)
    #: the task settings (their hash) whose scorer an earlier sweep of the run measured -> it
    scored: dict[str, str] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def where(self, r: Rehearsal) -> str:
        """`` (sweeps/x.yaml)`` when several sweeps are rehearsed, else ""."""
        return f" ({r.source})" if len(self.sources) > 1 else ""


class Rehearsal:
    """Runs the phases of every model of a plan (see the module docstring)."""

    def __init__(
        self,
        p: Plan,
        source: str,
        *,
        memory_gb: float | None,
        tmp: Path,
        device,
        first_decoding: bool = False,
        err=sys.stderr,
        shared: Shared | None = None,
    ):
        self.p, self.source, self.memory_gb, self.tmp = p, source, memory_gb, tmp
        self.shared = shared or Shared()
        self.first_decoding = first_decoding
        self.skipped: list[str] = []  # sampling setups not rehearsed, per model
        self.covered: list[str] = []  # sampling setups another of their family stands for
        self.device = torch.device(device)
        self.err = err
        self.phases: list[Phase] = []
        self.notes: list[str] = []
        self.task = None
        self.inputs: dict[str, Inputs] = {}
        self.scored: tuple[SampleCell, torch.Tensor, Inputs] | None = None

    # -- helpers ----------------------------------------------------------------------
    def fail(self, cell: str, phase: str, what: str, code: int = 1) -> RehearsalFailure:
        return RehearsalFailure(f"rehearse: {self.source}: {cell}: {phase}: {what}", code)

    def run_phase(self, ph: Phase, fn, *, device=None, batch_note: str = "", module=None):
        """Measure ``fn`` into ``ph`` (one more batch; ``module``: the network whose segments
        are measured, :class:`Segments`); an exception is a failure of the phase."""
        try:
            out, s, peak, segs = measure(fn, torch.device(device or self.device), module)
        except RehearsalFailure:
            raise
        except Exception as e:  # noqa: BLE001 - any error of the phase stops the rehearsal
            msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            where = f"{ph.name}{batch_note}"
            raise self.fail(
                ph.cell, where, f"{type(e).__name__}: {msg}", 2 if isinstance(e, ConfigError) else 1
            ) from e
        ph.seconds.append(s)
        ph.peaks.append(peak)
        if module is not None:
            ph.segments.append(segs)
        return out

    def check_memory(self, ph: Phase) -> None:
        x = ph.extrapolated()
        if self.memory_gb is None or x is None or x <= self.memory_gb * GB:
            return
        per = " per device" if ph.per_device else ""
        raise self.fail(
            ph.cell,
            ph.name,
            f"peak {x / GB:.1f} GB extrapolated to batch {ph.batch}{per} (from "
            f"{ph.peaks[0] / GB:.2f} GB at 1, {ph.peaks[1] / GB:.2f} GB at 2) is above "
            f"--memory-gb {self.memory_gb:g}",
        )

    def second(self, ph: Phase, key: tuple[str, str], run_batch_2, vocab: int | None = None):
        """Batch 2 of a phase: run it (``run_batch_2()``) and remember its growth over batch 1
        for twins of the model (:func:`twin_key`), or, for a twin whose phase ran before, add
        that growth to this model's own batch-1 peak and segments instead of running it.

        ``vocab``: the model's classes, when the key was made with them written ``"V"``
        (:func:`architecture`). A twin with more classes than the model measured takes that
        growth times the ratio: an upper bound of a growth ``a + b V`` with ``a, b >= 0`` (the
        (B, L, V) buffers and the rest); one with fewer takes it as it is. Vocabularies further
        apart than :data:`VOCAB_TWIN_SLACK` are not twins: batch 2 runs."""
        key = (*key, self.task_shape())
        ref = self.shared.growth.get(key)
        if ref is not None and vocab is not None and ref[3] is not None:
            if abs(vocab - ref[3]) > VOCAB_TWIN_SLACK * ref[3]:
                ref = None
        if ref is None:
            run_batch_2()
            p1, p2 = ph.peaks[0], ph.peaks[1]
            if p1 is not None and p2 is not None and key not in self.shared.growth:
                segs = (
                    [b - a for a, b in zip(ph.segments[0], ph.segments[1])]
                    if len(ph.segments) >= 2 and len(ph.segments[0]) == len(ph.segments[1])
                    else []
                )
                where = f"{ph.model}{self.shared.where(self)}"
                self.shared.growth[key] = (where, p2 - p1, segs, vocab)
            return
        model, grow, segs, ref_vocab = ref
        if ph.peaks[0] is None:
            run_batch_2()
            return
        scale = 1.0
        if vocab is not None and ref_vocab is not None and vocab != ref_vocab:
            scale = max(vocab / ref_vocab, 1.0)
            if scale > 1:
                ph.slope_ratio = f"{vocab}/{ref_vocab} classes"
        ph.peaks.append(ph.peaks[0] + round(grow * scale))
        if ph.segments and len(segs) == len(ph.segments[0]):
            ph.segments.append([a + round(d * scale) for a, d in zip(ph.segments[0], segs)])
        ph.slope_of = model

    def task_shape(self) -> tuple:
        """What of the task the memory of a phase depends on besides the model: its length and
        classes (a twin of another sweep must share them)."""
        return (int(self.task.seq_len), int(self.task.vocab_size))

    def setups(self, m: Model, method) -> list[SampleCell]:
        """The sampling setups rehearsed: of each family of decodings (``Method.decoding_family``:
        the same code, memory growing with a size such as top-k's k) under the same options and
        dtype, the largest; then only the first with ``--first-decoding``."""
        best: dict[tuple, tuple[SampleCell, int]] = {}
        for sc in m.samples:
            try:
                fam, size = method.decoding_family(sc.decoding)
            except Exception:  # noqa: BLE001 - an unknown decoding fails in its sample phase
                fam, size = sc.decoding, 0
            key = (config_hash(sc.options), bool(sc.float64), fam)
            if key not in best or size > best[key][1]:
                best[key] = (sc, size)
        keep = {id(sc) for sc, _ in best.values()}
        chosen = [sc for sc in m.samples if id(sc) in keep]
        by: dict[str, list[str]] = {}
        for sc in m.samples:
            if id(sc) in keep:
                continue
            fam, _ = method.decoding_family(sc.decoding)
            lead = best[(config_hash(sc.options), bool(sc.float64), fam)][0]
            by.setdefault(setup_name(lead), []).append(setup_name(sc))
        for lead, others in by.items():
            self.covered.append(f"{m.label()}: {', '.join(others)} by {lead}")
        if self.first_decoding and len(chosen) > 1:
            self.skipped.append(f"{m.label()}: " + ", ".join(setup_name(sc) for sc in chosen[1:]))
            chosen = chosen[:1]
        return chosen

    def inputs_for(self, subset: str) -> Inputs:
        if subset not in self.inputs:
            inp = task_inputs(self.task, subset)
            self.inputs[subset] = inp
            if not inp.real:
                self.notes.append(inp.note)
        return self.inputs[subset]

    # -- a model ----------------------------------------------------------------------
    def model(self, m: Model) -> list[Phase]:
        # everything alive now (imports, the task, its data) is frozen for the model's phases:
        # their collections (:func:`_trim`, 0.2 s each over a full heap) then scan only the
        # model's own objects; unfrozen when it is done
        gc.collect()
        gc.freeze()
        try:
            return self._model(m)
        finally:
            gc.unfreeze()

    def _model(self, m: Model) -> list[Phase]:
        tc = m.train
        label = m.label()
        task = self.task
        out: list[Phase] = []
        if tc.imported:
            method, backbone = self.imported(m, out)
        else:
            ph = Phase(label, "build", tc.label())
            out.append(ph)

            def build():
                torch.manual_seed(int(tc.train["seed"]))
                method, backbone = method_backbone(tc, task)
                return method.to(self.device), backbone.to(self.device)

            method, backbone = self.run_phase(ph, build)
        n_params = sum(p.numel() for p in backbone.parameters())
        inp = self.inputs_for(m.samples[0].subset if m.samples else tc.groups[0])
        if not tc.imported:
            out.append(self.train(m, method, backbone, inp))
        backbone.eval()
        cache: dict = {}
        for sc in self.setups(m, method):
            out.append(self.sample(m, sc, method, backbone, inp, cache))
        cache.clear()
        if m.likelihood is not None and getattr(method, "bound_kind", ""):
            out.append(self.likelihood(m, method, backbone))
        count = f"{n_params / 1e6:.1f} M" if n_params >= 100_000 else f"{n_params:,}"
        out[0].note = f"{count} parameters" + (f"; {out[0].note}" if out[0].note else "")
        del method, backbone
        _trim()
        return out

    def imported(self, m: Model, out: list[Phase]):
        """Export a random model of the file's facts, import it as the sweep's import job does,
        load it as a sampling job does."""
        from bench.cells import run_train
        from bench.weights import load_weights

        tc, label, task = m.train, m.label(), self.task
        ckpt = self.tmp / f"{tc.method}-{tc.variant}.ckpt"
        ph = Phase(label, "export", tc.label(), note="a random file of the checkpoint's format")
        out.append(ph)
        self.run_phase(ph, lambda: _export_random(tc, task, ckpt), device="cpu")
        cell = dataclasses.replace(
            tc,
            results_dir=str(self.tmp / "results"),
            source={**tc.source, "checkpoint": str(ckpt), "sha256": None},
        )
        ph = Phase(label, "import", tc.label(), note="the import job (host memory)")
        out.append(ph)
        with _sha_memo(self.tmp):
            self.run_phase(ph, lambda: run_train(cell, progress=False), device="cpu")
        ckpt.unlink(missing_ok=True)
        ph = Phase(label, "load", tc.label(), note="weights.pt as a sampling job loads it")
        out.append(ph)

        def load():
            method, backbone = method_backbone(cell, task)
            load_weights(method, backbone, cell.weights)
            return method.to(self.device), backbone.to(self.device)

        method, backbone = self.run_phase(ph, load)
        shutil.rmtree(cell.run_dir, ignore_errors=True)
        return method, backbone

    def train(self, m: Model, method, backbone, inp: Inputs) -> Phase:
        """Forward + backward at batch 1 and at batch 2, then one optimizer step (gradient
        clipping, AdamW, the method's post-step hook, the EMA, the LR schedule) after the batch-2
        backward: the two halves of the trainer's step (:mod:`bench.train.step`). The
        step's own peak does not grow with the batch: it is the phase's floor. Both backward peaks
        are measured before AdamW made its moments (its first step makes them) and are counted
        with their bytes: every later step's backward holds them (one optimizer step in all)."""
        from bench.train.loop import precision_for
        from bench.train.step import Recipe

        tc = m.train
        cfg = tc.train_config()
        ph = Phase(
            m.label(),
            "train",
            tc.label(),
            batch=m.train_batch(),
            per_device=cfg.devices * cfg.num_nodes > 1,
        )
        dev = self.device
        bf16 = dev.type == "cuda" and precision_for(cfg) == "bf16-mixed"
        backbone.train()
        recipe = Recipe.build(backbone, cfg, dev, mixed=bf16)
        opt = recipe.optimizer
        vocab = int(self.task.vocab_size)

        def autocast():
            return (
                torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
            )

        def forward_backward(n: int):
            batch = train_batch(inp, n, vocab, dev)
            t = stratum_midpoints(n, dev) if method.uses_time else None
            recipe.forward_backward(method, backbone, batch, t, autocast=autocast)
            bad = recipe.watch.first()
            if bad is not None:
                raise FloatingPointError(f"non-finite loss {bad[1]}")

        def step():
            recipe.update(method, backbone)
            opt.zero_grad(set_to_none=True)

        self.run_phase(ph, lambda: forward_backward(1), batch_note=" (batch 1)", module=backbone)

        def batch_2():
            opt.zero_grad(set_to_none=True)
            self.run_phase(
                ph, lambda: forward_backward(2), batch_note=" (batch 2)", module=backbone
            )

        self.second(ph, (twin_key(tc), "train"), batch_2)
        opt_ph = Phase(ph.model, "train", ph.cell)
        self.run_phase(opt_ph, step, batch_note=" (optimizer step)")
        moments = sum(
            t.numel() * t.element_size()
            for st in opt.state.values()
            for t in st.values()
            if isinstance(t, torch.Tensor) and t.numel() > 1
        )
        ph.peaks = [None if x is None else x + moments for x in ph.peaks]
        ph.segments = [[x + moments for x in segs] for segs in ph.segments]
        ph.seconds[-1] += opt_ph.seconds[0]
        ph.floor = opt_ph.peaks[0]
        ph.note = (
            f"optimizer step {_gb(ph.floor)} GB; backward peaks + AdamW's moments "
            f"({moments / GB:.2f} GB)"
        )
        # the optimizer and the EMA copy go with this frame: a sampling job has neither
        backbone.eval()
        self.check_memory(ph)
        return ph

    def sample(self, m: Model, sc: SampleCell, method, backbone, inp: Inputs, cache) -> Phase:
        from bench.cells import batch_seed, cell_sampler, sample_batch

        dev = self.device
        name = f"sample {setup_name(sc)}"
        ph = Phase(m.label(), name, sc.label(), batch=sc.batch_size)
        try:
            sampler = cell_sampler(method, sc, self.task, dev, cache)
        except Exception as e:  # noqa: BLE001
            raise self.fail(sc.label(), name, f"{type(e).__name__}: {e}") from e
        length_nfe = bool(sampler.nfe_is_length)
        # at least the calls the decoding needs (Method.min_nfe: MDLM's blocks take one each)
        least = int(sampler.min_nfe(inp.data.clean_mask[:1]))
        cell = dataclasses.replace(sc, nfe=sc.nfe if length_nfe else max(REHEARSAL_NFE, least))
        if length_nfe:
            ph.note = (
                f"NFE = length: prefill of L - {LENGTH_NFE_TAIL} positions + "
                f"{LENGTH_NFE_TAIL - 1} cached call (an upper bound)"
            )
        V = int(sampler.vocab_size)

        def run(n: int):
            prompt = inp.data.x[:n].to(dev)
            pmask = inp.data.clean_mask[:n].clone()
            if length_nfe:
                pmask[:, : pmask.shape[1] - LENGTH_NFE_TAIL] = True
            pmask = pmask.to(dev)

            def call(prompt=prompt, pmask=pmask):
                gen = torch.Generator(device=dev).manual_seed(batch_seed(sc, 0))
                sampler.nfe_counter = 0
                ids = sample_batch(sampler, backbone, cell, prompt, pmask, gen, float64=sc.float64)
                want = sampler.nfe_for(cell.nfe, pmask)
                if tuple(ids.shape) != tuple(prompt.shape):
                    raise ValueError(
                        f"sampler returned shape {tuple(ids.shape)}, expected {tuple(prompt.shape)}"
                    )
                if ids.dtype.is_floating_point or ids.dtype == torch.bool:
                    raise TypeError(f"sampler returned {ids.dtype} ids")
                if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):
                    raise ValueError(
                        f"sampled id outside [0, {V}): {int(ids.min())}..{int(ids.max())}"
                    )
                # a call-skipping decoding (a cache) makes at most nfe_for calls
                skips = sampler.resolve_decoding(cell.decoding) in sampler.call_skipping
                if sampler.nfe_counter > want or (sampler.nfe_counter != want and not skips):
                    raise ValueError(f"{sampler.nfe_counter} backbone calls, nfe_for says {want}")
                return ids

            return self.run_phase(ph, call, batch_note=f" (batch {n})", module=backbone)

        ids = run(1)
        if self.scored is None:
            self.scored = (sc, ids, inp)
        key = (twin_key(m.train, architecture(backbone, V)), f"{name} {bool(sc.float64)}")
        self.second(ph, key, lambda: run(2), vocab=V)
        self.check_memory(ph)
        return ph

    def likelihood(self, m: Model, method, backbone) -> Phase:
        lc = m.likelihood
        dev = self.device
        L = lc.block or int(self.task.seq_len)
        ph = Phase(
            m.label(),
            "likelihood",
            lc.label(),
            batch=lc.batch_size,
            note=f"blocks of {L} random ids, {lc.draws} draw(s)",
        )
        vocab = int(self.task.vocab_size)

        def run(n: int):
            g = torch.Generator().manual_seed(n)
            x = torch.randint(0, vocab, (n, L), generator=g)
            clean = torch.zeros(n, L, dtype=torch.bool)
            batch = Batch(x, clean, ~clean).to(dev)

            def call(batch=batch, n=n):
                gen = torch.Generator(device=dev).manual_seed(0)
                with torch.no_grad():
                    out = method.nll_bound(backbone, batch, n_draws=lc.draws, generator=gen)
                if out.ndim != 2 or out.shape[1] != n:
                    raise ValueError(
                        f"nll_bound returned shape {tuple(out.shape)}, expected (draws, {n})"
                    )
                if not bool(torch.isfinite(out).all()):
                    raise FloatingPointError("non-finite bound")
                return out

            self.run_phase(ph, call, batch_note=f" (batch {n})", module=backbone)

        run(1)
        V = int(method.vocab_size)
        key = (twin_key(m.train, architecture(backbone, V)), "likelihood")
        self.second(ph, key, lambda: run(2), vocab=V)
        self.check_memory(ph)
        return ph

    # -- the scorer -------------------------------------------------------------------
    def reference_lm(self) -> None:
        """Give the task's Gen. PPL evaluator its reference LM: the configured one when this
        machine has it, else its architecture with random weights (a known configuration)."""
        ev = self.task.genppl()
        if ev.ref is not None:
            return
        from bench.evaluate.genppl.evaluator import ReferenceModelError, load_reference

        name = ev.ref_model
        try:
            ev.ref = load_reference(
                name, device=self.device, data_dir=ev.data_dir, max_context=ev.max_context
            )
            return
        except ReferenceModelError as e:
            why = str(e)
        if name not in GPT2_CONFIGS:
            raise RuntimeError(f"{why}; no known configuration of {name!r} to build it from")
        from transformers import GPT2Config, GPT2LMHeadModel

        from bench.evaluate.genppl.evaluator import wrap_model
        from bench.text.gpt2 import load_gpt2_tokenizer

        tok = load_gpt2_tokenizer(self.task.opts.tokenizer_source, self.task.cfg.data_dir)
        cfg = GPT2Config(vocab_size=len(tok), n_positions=1024, **GPT2_CONFIGS[name])
        model = _random_gpt2(GPT2LMHeadModel, cfg)
        if self.device.type == "cuda":
            model = model.to(torch.bfloat16)
        ev.ref = wrap_model(
            model, tok, f"{name} (random weights)", device=self.device, max_context=ev.max_context
        )
        self.notes.append(
            f"Gen. PPL reference LM {name!r} is not on this machine: its architecture "
            f"(transformers GPT2Config {GPT2_CONFIGS[name]}) with random weights scored the item"
        )

    def score(self) -> Phase | None:
        if self.scored is None:
            return None
        sc, ids, inp = self.scored
        ph = Phase("(the task's scorer)", "score", sc.label(), note="one item")
        if not inp.real:
            ph.note = "skipped: the task's evaluation items are unavailable here"
            return ph
        settings = config_hash(canonical(self.p.cfg.task))
        if settings in self.shared.scored:  # the same scorer on the same kind of item
            ph.note = f"as measured for {self.shared.scored[settings]} (the same task settings)"
            return ph
        self.shared.scored[settings] = self.source
        data = TaskData(
            inp.data.x[:1],
            inp.data.clean_mask[:1],
            inp.data.loss_mask[:1],
            {k: list(v)[:1] for k, v in inp.data.meta.items()},
        )
        if hasattr(self.task, "genppl"):  # a reference LM (OWT): built before it is measured
            lm = Phase("(the task's scorer)", "reference LM", sc.label())
            self.run_phase(lm, self.reference_lm)
            lm.note = self.task.genppl().ref.name
            self.phases.append(lm)
        self.run_phase(ph, lambda: self.task.evaluate(ids[:1], data, inp.subset))
        if hasattr(self.task, "genppl"):  # nothing of this sweep outlives it (Shared)
            self.task.genppl().ref = None
        return ph

    # -- everything -------------------------------------------------------------------
    def run(self, models: list[Model]) -> None:
        self.task = cell_task(self.p.train_cells[0])
        for i, m in enumerate(models, 1):
            t0 = time.perf_counter()
            phases = self.model(m)
            self.phases += phases
            print(
                f"rehearse [{i}/{len(models)}] {m.label()}: {progress_line(phases)} "
                f"({time.perf_counter() - t0:.0f} s)",
                file=self.err,
                flush=True,
            )
        ph = self.score()
        if ph is not None:
            self.phases.append(ph)
            print(f"rehearse: score {ph.cell}: {progress_line([ph])}", file=self.err, flush=True)


def _random_gpt2(cls, cfg):
    """A GPT-2 of ``cfg`` with random weights, built without transformers' initialisation (its
    module-by-module init is slow at gpt2-large's size): structure on the meta device,
    then every matrix drawn N(0, 0.02) (GPT-2's initializer_range), biases 0, norm scales 1, the
    head tied to the embedding. The model has no buffers to fill."""
    with torch.device("meta"):
        model = cls(cfg)
    model = model.to_empty(device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim > 1:
                p.normal_(0.0, cfg.initializer_range, generator=g)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.fill_(1.0)
    model.tie_weights()
    return model.eval()


# --------------------------------------------------------------------------- output


def _gb(b) -> str:
    return "" if b is None else f"{b / GB:.2f}"


def progress_line(phases: list[Phase]) -> str:
    parts = []
    for ph in phases:
        if not ph.seconds:  # not run (its note says why)
            parts.append(f"{ph.name}: {ph.note}")
            continue
        s = "/".join(f"{x:.1f}" for x in ph.seconds)
        x = ph.extrapolated()
        at = f" -> {x / GB:.1f} GB @{ph.batch}" if x is not None else ""
        parts.append(f"{ph.name} {s} s {_gb(max((p or 0) for p in ph.peaks or [0]))} GB{at}")
    return "; ".join(parts)


def fits(x: float | None, memory_gb: float | None) -> str:
    if x is None:
        return ""
    cards = (memory_gb,) if memory_gb is not None else CARDS_GB
    return " / ".join("yes" if x <= c * GB else "no" for c in cards)


def table(phases: list[Phase], memory_gb: float | None) -> str:
    cards = f"{memory_gb:g} GB" if memory_gb is not None else " / ".join(f"{c}" for c in CARDS_GB)
    head = (
        "| model | phase | s (batch 1 / 2) | peak GB (batch 1 / 2) | sweep batch | "
        f"peak GB at that batch | fits {cards}{'' if memory_gb else ' GB'} | note |"
    )
    lines = [head, "|" + "---|" * 8]
    last = None
    for ph in phases:
        x = ph.extrapolated()
        batch = "" if ph.batch is None else f"{ph.batch}{' per device' if ph.per_device else ''}"
        model = ph.model if ph.model != last else ""
        last = ph.model
        peaks = " / ".join(_gb(p) for p in ph.peaks)
        note = ph.note
        if ph.slope_of and len(ph.peaks) == 2:
            peaks = f"{_gb(ph.peaks[0])} / ({_gb(ph.peaks[1])})"
            note = "; ".join(
                x
                for x in (
                    note,
                    f"batch 2 not run: {ph.slope_of}'s growth from 1 to 2"
                    + (f" x {ph.slope_ratio}" if ph.slope_ratio else ""),
                )
                if x
            )
        lines.append(
            f"| {model} | {ph.name} | {' / '.join(f'{s:.1f}' for s in ph.seconds)} | "
            f"{peaks} | {batch} | "
            f"{'' if x is None else f'{x / GB:.1f}'} | {fits(x, memory_gb)} | {note} |"
        )
    return "\n".join(lines)


def model_summary(phases: list[Phase], memory_gb: float | None) -> str:
    """Per model: the largest extrapolated device peak and the cards it fits."""
    worst: dict[str, tuple[float, str]] = {}
    for ph in phases:
        x = ph.extrapolated()
        if x is not None and (ph.model not in worst or x > worst[ph.model][0]):
            worst[ph.model] = (x, ph.name)
    if not worst:
        return ""
    cards = f"{memory_gb:g} GB" if memory_gb is not None else " / ".join(map(str, CARDS_GB))
    lines = [
        f"| model | largest peak GB (phase) | fits {cards}{'' if memory_gb else ' GB'} |",
        "|---|---|---|",
    ]
    for model, (x, name) in worst.items():
        lines.append(f"| {model} | {x / GB:.1f} ({name}) | {fits(x, memory_gb)} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- entry point


@contextlib.contextmanager
def _hub_offline_if_unreachable(notes: list[str]):
    """Without a reachable hub, only local copies are tried (no retries, no downloads)."""
    from bench.checkpoints.source import _hub_reachable
    from bench.text.locate import hub_offline

    if hub_offline() or _hub_reachable(timeout=3.0):
        yield
        return
    os.environ["HF_HUB_OFFLINE"] = "1"
    notes.append("the Hugging Face hub is unreachable: local copies only (HF_HUB_OFFLINE=1)")
    try:
        yield
    finally:
        os.environ.pop("HF_HUB_OFFLINE", None)


@contextlib.contextmanager
def _exit_on_sigterm():
    """SIGTERM exits through ``finally`` blocks (exit status 143), as Ctrl-C does."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


#: free bytes a memory-backed /dev/shm needs before the rehearsal's files go there (an exported
#: and an imported paper-size model: about 2 GB at a time)
SHM_FREE_BYTES = 8 * 2**30


def _scratch_dir() -> str | None:
    """Where the import path's files go: ``$TMPDIR`` when set; else ``/dev/shm`` (memory-backed:
    the GB-sized checkpoints written and read back skip the disk) when it has
    :data:`SHM_FREE_BYTES` free; else the system's temp folder."""
    if os.environ.get("TMPDIR"):
        return None
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if st.f_bavail * st.f_frsize >= SHM_FREE_BYTES else None


def rehearse(
    p: Plan,
    source: str,
    *,
    memory_gb: float | None = None,
    first_decoding: bool = False,
    out=None,
    err=None,
) -> int:
    """Rehearse plan ``p`` (module docstring); returns the exit status. ``first_decoding``: only
    the first sampling setup of each model (default: every one)."""
    return rehearse_all(
        [(p, source)], memory_gb=memory_gb, first_decoding=first_decoding, out=out, err=err
    )


def rehearse_all(
    plans: list[tuple[Plan, str]],
    *,
    memory_gb: float | None = None,
    first_decoding: bool = False,
    out=None,
    err=None,
) -> int:
    """Rehearse every (plan, source) in turn in one process, sharing what :class:`Shared` holds
    (a model an earlier sweep measured at batch 2 runs batch 1 only); one table per sweep, then
    the total; the first failure stops it (its exit status)."""
    out = out or sys.stdout
    err = err or sys.stderr
    if memory_gb is not None and not memory_gb > 0:
        print(f"error: --memory-gb: must be > 0, got {memory_gb:g}", file=err)
        return 2
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        # every allocation of 128 kB or more by its own mapping, returned when freed, so that the
        # resident peak follows what is live (glibc otherwise raises the threshold as buffers are
        # freed and keeps them: the batch-1 / batch-2 difference, and its extrapolation, varied by
        # tens of GB between runs)
        heap.give_back_freed()
    threads_before = torch.get_num_threads()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = max(1, cpus or 1)
    torch.set_num_threads(threads)
    where = f"{device_name(device)}, {threads} threads"
    shared = Shared(sources=[src for _, src in plans])
    tmp = Path(tempfile.mkdtemp(prefix="sflm-rehearse-", dir=_scratch_dir()))
    start = time.perf_counter()
    try:
        for p, source in plans:
            code = _rehearse_one(
                p, source, shared, tmp, device, where, memory_gb, first_decoding, out, err
            )
            if code:
                return code
    finally:  # also on Ctrl-C and SIGTERM: the temp folder goes
        shutil.rmtree(tmp, ignore_errors=True)
        torch.set_num_threads(threads_before)
    if len(plans) > 1:
        print(
            f"## {len(plans)} sweeps rehearsed in {time.perf_counter() - start:.0f} s in all "
            f"({where})",
            file=out,
        )
    return 0


def _rehearse_one(p, source, shared, tmp, device, where, memory_gb, first_decoding, out, err):
    models = models_of(p)
    n_cells = len(p.train_cells) + len(p.sample_cells)
    print(
        f"rehearse: {source}: {len(models)} distinct model(s) for {n_cells} cells, on {where}",
        file=err,
        flush=True,
    )
    r = Rehearsal(
        p,
        source,
        memory_gb=memory_gb,
        tmp=tmp,
        device=device,
        first_decoding=first_decoding,
        err=err,
        shared=shared,
    )
    t0 = time.perf_counter()
    try:
        with _hub_offline_if_unreachable(r.notes), _exit_on_sigterm():
            r.run(models)
    except RehearsalFailure as f:
        print(f.line, file=err, flush=True)
        return f.code
    total = time.perf_counter() - t0
    cards = f"--memory-gb {memory_gb:g}" if memory_gb is not None else "40 / 80 / 141 GB cards"
    print(f"## Rehearsal of {source} ({p.cfg.name})\n", file=out)
    print(
        f"{len(models)} distinct model(s) standing for {len(p.train_cells)} train or import and "
        f"{len(p.sample_cells)} sample cells; {where}; {total:.0f} s in all. Peaks "
        f"extrapolated linearly from batch 1 and 2 to the sweep's batch and compared with "
        f"{cards}.\n",
        file=out,
    )
    print(table(r.phases, memory_gb), file=out)
    summary = model_summary(r.phases, memory_gb)
    if summary:
        print("\n" + summary, file=out)
    notes = list(dict.fromkeys(r.notes))
    for inp in r.inputs.values():
        if inp.real:
            notes.append(inp.note)
    if any(ph.name == "train" for ph in r.phases):
        notes.append(
            "training batches: the evaluation layout with random ids where the model generates "
            "(the training corpus is not read)"
        )
    if r.covered:
        notes.append(
            "sampling setups another of their family stands for (Method.decoding_family: the "
            "same code, memory growing with its size, the largest rehearsed): "
            + "; ".join(r.covered)
        )
    if any(ph.slope_of for ph in r.phases):
        notes.append(
            "(peak): batch 2 not run; the batch-1 peak plus the growth from batch 1 to 2 "
            "measured on a model that differs only in options its method declares memory-neutral "
            "(Method.memory_neutral_options: a schedule's constants), or, for a sampling or "
            "likelihood phase, on the same architecture trained instead of imported, or with a "
            "vocabulary within 1 % (the growth times the ratio of the classes when this one has "
            "more) (or in an earlier sweep of this run, named in brackets)"
        )
    if r.skipped:
        notes.append(
            "sampling setups not rehearsed (--first-decoding; their memory can differ): "
            + "; ".join(r.skipped)
        )
    if device.type == "cpu":
        notes.append(
            "CPU: peaks are the process's resident set (Python, torch and the model included), "
            "float32 throughout (a GPU trains in bf16 autocast): a guide to a card's memory, "
            "not its measurement"
        )
    print("\nNotes:\n" + "\n".join(f"- {n}" for n in notes), file=out)
    r.task, r.inputs, r.scored = None, {}, None  # the next sweep's peaks start without them
    _trim()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.rehearse SWEEP [SWEEP ...] [--set KEY=VALUE] [--memory-gb GB]
    [--first-decoding]``: several sweeps rehearsed in one process (:func:`rehearse_all`)."""
    import argparse

    from bench.config import load_sweep
    from bench.plan import plan

    ap = argparse.ArgumentParser(
        prog="python -m bench.rehearse",
        description="rehearse several sweeps in one run (python -m bench.sweep FILE --rehearse: "
        "one); models an earlier sweep measured run batch 1 only",
    )
    ap.add_argument("sweeps", nargs="+", metavar="SWEEP", help="sweep YAML files")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a value of every file, as if written in it (repeatable)",
    )
    ap.add_argument("--memory-gb", type=float, metavar="GB", help="as bench.sweep --memory-gb")
    ap.add_argument("--first-decoding", action="store_true", help="as bench.sweep's")
    args = ap.parse_args(argv)
    plans = []
    for path in args.sweeps:
        try:
            plans.append((plan(load_sweep(path, args.overrides), path, offline_ok=True), path))
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return rehearse_all(plans, memory_gb=args.memory_gb, first_decoding=args.first_decoding)


if __name__ == "__main__":
    sys.exit(main())
