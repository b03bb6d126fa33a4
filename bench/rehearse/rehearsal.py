"""The rehearsal of one plan (:class:`Rehearsal`): each model built, then its phases (train, or
the import path for an import cell; then what each kind of its cells tries,
:meth:`bench.kind.CellKind.rehearse`: the sample kind's setups, the likelihood's bound), then the
task's scorer once; what the rehearsals of several sweeps share (:class:`Shared`), what a kind's
tries are given (:class:`Tryout`) and a failure's one line (:class:`RehearsalFailure`)."""

from __future__ import annotations

import gc
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench import registry
from bench.cell_model import cell_task, method_backbone
from bench.config import ConfigError, config_hash
from bench.kinds.sample_rehearsal import setup_name
from bench.plan import Plan, SampleCell
from bench.rehearse.capabilities import decoding_family, min_nfe
from bench.rehearse.imported import export_import_load
from bench.rehearse.inputs import Inputs, task_inputs
from bench.rehearse.measuring import GB, Phase, measure, trim
from bench.rehearse.models import VOCAB_TWIN_SLACK, Model, architecture, twin_key
from bench.rehearse.output import progress_line
from bench.rehearse.scoring import score_phase
from bench.rehearse.training import train_phase


class RehearsalFailure(Exception):
    """A phase failed: ``line`` names the sweep, the cell and the phase."""

    def __init__(self, line: str, code: int = 1):
        super().__init__(line)
        self.line, self.code = line, code


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


@dataclass
class Tryout:
    """What a kind's :meth:`~bench.kind.CellKind.rehearse` is given for the cells of one model:
    the rehearsal ``r`` (:meth:`Rehearsal.run_phase`, :meth:`~Rehearsal.second`,
    :meth:`~Rehearsal.check_memory`, :meth:`~Rehearsal.fail`, ``device``, ``task``), the model
    ``m``, its built ``method`` and ``backbone`` (in eval mode), the items ``inp``, the samplers'
    shared ``cache``; the phase type ``Phase`` and the rehearsal's capability probes."""

    r: Rehearsal
    m: Model
    method: object
    backbone: torch.nn.Module
    inp: Inputs
    cache: dict = field(default_factory=dict)
    Phase = Phase
    min_nfe = staticmethod(min_nfe)

    def twin(self, phase: str, vocab: int) -> tuple[str, str]:
        """The key a twin of this model reuses the growth of ``phase`` under
        (:meth:`Rehearsal.second`; ``vocab``: its classes)."""
        return (twin_key(self.m.train, architecture(self.backbone, vocab)), phase)

    def setups(self, samples: list) -> list:
        """:meth:`Rehearsal.setups` of this model."""
        return self.r.setups(self.m, self.method, samples)


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

    def setups(self, m: Model, method, samples: list[SampleCell]) -> list[SampleCell]:
        """The sampling setups rehearsed of ``samples`` (model ``m``'s, one per setup): of each
        family of decodings (``Rehearsable.decoding_family``: the same code, memory growing with
        a size such as top-k's k) under the same options and dtype, the largest; then only the
        first with ``--first-decoding``."""
        best: dict[tuple, tuple[SampleCell, int]] = {}
        for sc in samples:
            try:
                fam, size = decoding_family(method, sc.decoding)
            except Exception:  # noqa: BLE001 - an unknown decoding fails in its sample phase
                fam, size = sc.decoding, 0
            key = (config_hash(sc.options), bool(sc.float64), fam)
            if key not in best or size > best[key][1]:
                best[key] = (sc, size)
        keep = {id(sc) for sc, _ in best.values()}
        chosen = [sc for sc in samples if id(sc) in keep]
        by: dict[str, list[str]] = {}
        for sc in samples:
            if id(sc) in keep:
                continue
            fam, _ = decoding_family(method, sc.decoding)
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
        # their collections (:func:`trim`) then scan only the
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
            method, backbone = export_import_load(self, m, out)
        else:
            ph = Phase(label, "build", tc.label())
            out.append(ph)

            def build():
                torch.manual_seed(int(tc.train["seed"]))
                method, backbone = method_backbone(tc, task)
                return method.to(self.device), backbone.to(self.device)

            method, backbone = self.run_phase(ph, build)
        n_params = sum(p.numel() for p in backbone.parameters())
        # the items of the first cell that reads an evaluation subset, else the first training one
        cells = [c for k in registry.KINDS for c in m.of_kind.get(k, [])]
        subsets = [c.subset for c in cells if getattr(c, "subset", None) in c.train.groups]
        inp = self.inputs_for(subsets[0] if subsets else tc.groups[0])
        if not tc.imported:
            out.append(train_phase(self, m, method, backbone, inp))
        backbone.eval()
        ctx = Tryout(self, m, method, backbone, inp)
        for kind in registry.KINDS:  # each kind tries the model's cells of its own
            if m.of_kind.get(kind):
                out += registry.KINDS[kind].rehearse(m.of_kind[kind], ctx)
        count = f"{n_params / 1e6:.1f} M" if n_params >= 100_000 else f"{n_params:,}"
        out[0].note = f"{count} parameters" + (f"; {out[0].note}" if out[0].note else "")
        del method, backbone
        trim()
        return out

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
        ph = score_phase(self)
        if ph is not None:
            self.phases.append(ph)
            print(f"rehearse: score {ph.cell}: {progress_line([ph])}", file=self.err, flush=True)
