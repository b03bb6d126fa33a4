"""Planning: a validated sweep file becomes content-addressed cells of every kind (pure: touches
no files; the kinds, :mod:`bench.kind`, plan their own cells through the registry).

- a **train cell** (:mod:`bench.kinds.train`; an **import cell**, :mod:`bench.kinds.imported`,
  when the entry names a ``checkpoint``) = task x backbone x train recipe x method (+ options) x
  training subsets; its run folder ``<results>/runs/<method>-<variant>-<hash>`` holds resumable
  checkpoints and the final EMA weights;
- a **sample cell** (:mod:`bench.kinds.sample`) = train cell x evaluation subset x nfe x
  temperature x decoding (+ sample size / seed, and the entry's sampling-only options when not
  their defaults); a **likelihood cell** (:mod:`bench.kinds.likelihood`) = train cell x dataset.

A method's sampling-only options (``Method.sampling_options``, e.g. S-FLM's ``top_k`` and
``final_decode``) are not part of a train cell's identity: method entries that differ only in
them share one train cell (trained once), and each keeps its own sample cells, variant name and
sampling options. A train cell's identity holds them at their defaults, which keeps the ids of
sweeps written before these options existed.

This is the one place where a sweep's method and task sections become objects: the task
(which parses and checks its own typed options; it loads no data and no tokenizer) and each
method's ``Options`` are built and validated here, and a method instance resolves its own
decoding names (S-FLM accepts any ``top<k>``). Errors are :class:`ConfigError` lines naming
the sweep file and key. A cell carries plain dicts (its hashed identity, JSON-able,
picklable); a job (:mod:`bench.cells`) turns them back into objects without validating again.

Every value a job checks is checked here first, so a bad one stops the sweep before a job is
started or submitted: the task's and each method's ``validate_plan`` hooks
(:meth:`bench.data.base.Task.validate_plan`, :meth:`bench.method.Method.validate_plan`) run the
rules of the code the jobs run (the backbone's size, the S-FLM schedule, the evaluation split's
size, a task's files and lengths) without building weights or loading data.

Task-sized defaults: the ``sample`` / ``train`` / ``backbone`` fields a sweep file leaves unset
(:func:`bench.config.is_set`) take the task's values where it declares them
(:meth:`bench.data.base.Task.sweep_defaults`: e.g. a sort task's NFE grid stops at its 8
generated tokens), else the dataclass defaults.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from bench import registry
from bench.config import (
    BackboneConfig,
    ConfigError,
    MethodEntry,
    SampleConfig,
    SweepConfig,
    TaskConfig,
    TrainConfig,
    build,
    canonical,
    is_set,
)
from bench.data.base import Task
from bench.method import Method

# fields that do not change what a cell computes (paths, threads, checkpoint cadence, logging
# and validation: bench.train runs validation under a forked RNG, the weights are unchanged)
_NON_SEMANTIC_TRAIN = (
    "threads",
    "checkpoint_every",
    "logger",
    "log_every",
    "val_every",
    "val_batches",
)
# task fields that are not part of a train cell's identity: where data is cached, and the
# subsets / mixing, which the cell's ``groups`` already say
_NON_SEMANTIC_TASK = ("data_dir", "difficulties", "train_mix")


@dataclass
class TrainCell:
    id: str
    sweep: str
    results_dir: str
    task: dict
    backbone: dict
    train: dict
    method: str
    variant: str
    options: dict
    groups: list[str]
    #: an import cell (``checkpoint:`` in the method entry): ``checkpoint`` (the source as
    #: written), ``sha256`` (None only when planned offline for a dry run), ``family``, ``forced``
    #: (the entry's ``family``); None for a cell that trains
    source: dict | None = None
    #: the model's classes when they exceed the task's vocabulary (imported [PAD] class)
    vocab_size: int | None = None

    @property
    def imported(self) -> bool:
        return getattr(self, "source", None) is not None

    @property
    def kind(self) -> str:
        """Its kind (:mod:`bench.kind`): ``import`` (a checkpoint converted) or ``train``."""
        return "import" if self.imported else "train"

    @property
    def run_dir(self) -> Path:
        return Path(self.results_dir) / "runs" / f"{self.method}-{self.variant}-{self.id}"

    @property
    def weights(self) -> Path:
        return self.run_dir / "weights.pt"

    def label(self) -> str:
        if self.imported:  # which file: three imports of one method are three models
            name = str(self.source.get("checkpoint") or "").rstrip("/").rsplit("/", 1)[-1]
            return f"{self.method}/{self.variant} [import{' ' + name if name else ''}]"
        seed = f" seed {self.train['seed']}" if self.train.get("seed") else ""
        return f"{self.method}/{self.variant} [{'+'.join(self.groups)}]{seed}"

    # the cell's sections as config objects (already validated when the cell was planned)
    def task_config(self) -> TaskConfig:
        return TaskConfig(**self.task)

    def backbone_config(self) -> BackboneConfig:
        return BackboneConfig(**self.backbone)

    def train_config(self) -> TrainConfig:
        return TrainConfig(**self.train)

    def absolute(self) -> TrainCell:
        """The same cell with an absolute ``results_dir`` (jobs may start in another directory)."""
        return dataclasses.replace(self, results_dir=str(Path(self.results_dir).absolute()))


@dataclass
class SampleCell:
    """A model's samples at one evaluation subset, NFE, temperature and decoding, scored
    (:mod:`bench.kinds.sample`)."""

    #: the kind of cell (:mod:`bench.kind`)
    kind: ClassVar[str] = "sample"

    id: str
    train: TrainCell
    subset: str
    nfe: int
    temperature: float
    decoding: str
    n_samples: int
    batch_size: int
    float64: bool
    seed: int
    #: the method entry's variant (entries differing only in sampling options share ``train``)
    variant: str = ""
    #: the entry's sampling-only options that differ from their defaults (part of ``id``)
    sampling: dict = field(default_factory=dict)
    #: K when only the first K items are scored (``bench.eval --limit K``; ``n_samples`` is K,
    #: so the id differs from a full run's); None: the sweep's ``n_samples``
    limit: int | None = None
    #: the ``bench.eval`` call that plans this cell of a sweep's model (not part of ``id``; its
    #: rows record it and the report keeps them apart); "" for a sweep's own cell
    evaluation: str = ""
    #: independent draws per item (``sample.n_per_item``; part of ``id`` above 1)
    n_per_item: int = 1
    #: stop a row at the task's EOS (``sample.eos_stop``; part of ``id`` when on)
    eos_stop: bool = False
    #: items timed again at batch 1 (``sample.latency_items``; part of ``id`` above 0)
    latency_items: int = 0

    @property
    def options(self) -> dict:
        """The method options this cell samples with: the model's, overlaid with ``sampling``."""
        # getattr: a cell pickled (a queued job) before this field existed samples the model
        return {**self.train.options, **getattr(self, "sampling", {})}

    def label(self) -> str:
        """``method/variant [seed k] subset nfe=N T=t decoding``; a method whose NFE is the
        generated length (AR: planned as nfe 0) shows ``nfe=length``, as the report's NFE is."""
        seed = f" seed {self.train.train['seed']}" if self.train.train.get("seed") else ""
        nfe = "length" if self.nfe == 0 else self.nfe
        return (
            f"{self.train.method}/{getattr(self, 'variant', '') or self.train.variant}{seed} "
            f"{self.subset} nfe={nfe} T={self.temperature:g} {self.decoding}"
        )

    def absolute(self) -> SampleCell:
        return dataclasses.replace(self, train=self.train.absolute())


@dataclass
class Plan:
    """A planned sweep: its cells by kind (:mod:`bench.kind`), each kind's in plan order."""

    cfg: SweepConfig
    #: kind name -> its cells (``train`` and ``import``: the models; the others: their cells)
    cells: dict[str, list] = field(default_factory=dict)
    #: the models (train and import cells) in plan order: one job each
    models: list[TrainCell] = field(default_factory=list)
    #: the kinds whose cells are models
    model_kinds: set[str] = field(default_factory=set)

    def add(self, cell, model: bool = False) -> None:
        """Add ``cell`` under its kind (``model``: it is a model, a job of its own)."""
        self.cells.setdefault(cell.kind, []).append(cell)
        if model:
            self.models.append(cell)
            self.model_kinds.add(cell.kind)

    @property
    def train_cells(self) -> list[TrainCell]:
        """The models (train and import cells), in plan order."""
        return self.models

    @property
    def sample_cells(self) -> list:
        """Every cell of a model, whatever its kind (sample, likelihood, a plug-in's): the cells
        the models' jobs run once the model is ready, model by model in plan order."""
        by: dict[str, list] = {}
        for c in self._of_models():
            by.setdefault(c.train.id, []).append(c)
        return [c for tc in self.models for c in by.get(tc.id, [])]

    def samples_of(self, tc: TrainCell) -> list:
        """The cells of model ``tc`` of every kind but the models', kind by kind."""
        return [c for c in self._of_models() if c.train.id == tc.id]

    def _of_models(self):
        return (c for k, cells in self.cells.items() if k not in self.model_kinds for c in cells)


def _variant(entry: MethodEntry) -> str:
    return entry.variant or "base"


def _task(cfg: SweepConfig, source: str):
    if cfg.task.name not in registry.TASKS:
        known = ", ".join(sorted(registry.TASKS))
        raise ConfigError(f"{source}: task.name: unknown task {cfg.task.name!r} (known: {known})")
    try:
        return registry.make_task(cfg.task)  # parses the task's options; loads no data
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


#: the sections a task may give defaults for (Task.sweep_defaults)
_DEFAULTED = {"sample": SampleConfig, "train": TrainConfig, "backbone": BackboneConfig}


def _task_defaults(task, source: str) -> dict[str, dict]:
    """The task's :meth:`~bench.data.base.Task.sweep_defaults`, checked by the sections' rules."""
    defaults = task.sweep_defaults() or {}
    where = f"{source}: task.name: {task.name}'s sweep_defaults"
    for section, values in defaults.items():
        if section not in _DEFAULTED:
            known = ", ".join(_DEFAULTED)
            raise ConfigError(f"{where}: unknown section {section!r} (known: {known})")
        build(_DEFAULTED[section], values, where=f"{where}: {section}")
    return defaults


def _with_defaults(obj, defaults: dict | None):
    """``obj`` with ``defaults`` in the fields the sweep file left unset (``obj`` itself when
    there are none: a sweep that sets every field plans exactly as before)."""
    unset = {k: v for k, v in (defaults or {}).items() if not is_set(obj, k)}
    return dataclasses.replace(obj, **unset) if unset else obj


def _method(entry: MethodEntry, task, where: str, options: dict | None = None, vocab=None):
    """(the method instance, its canonical options) for one ``methods[i]`` entry
    (``options``: instead of the entry's, e.g. those of an imported checkpoint)."""
    if entry.method not in registry.METHODS:
        known = ", ".join(sorted(registry.METHODS))
        raise ConfigError(f"{where}.method: unknown method {entry.method!r} (known: {known})")
    cls = registry.METHODS[entry.method]
    opts = build(cls.Options, entry.options if options is None else options,
                 where=f"{where}.options")  # fmt: skip
    try:
        # an instance knows its variant's decodings and NFE rules (e.g. CANDI pure Gaussian)
        method = registry.make_method(entry.method, opts, task, vocab)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return method, canonical(opts)


def _split_sampling(method, opts: dict) -> tuple[dict, dict]:
    """(the options with every sampling-only option at its default: the model's identity,
    the sampling-only options that differ from their defaults)."""
    fields = {f.name: f for f in dataclasses.fields(type(method).Options)}
    model, sampling = dict(opts), {}
    for name in type(method).sampling_options:
        f = fields.get(name)
        if f is None or (
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ):
            raise TypeError(
                f"{type(method).__name__}.sampling_options: {name!r} is not an Options field "
                "with a default"
            )
        default = canonical(
            f.default if f.default is not dataclasses.MISSING else f.default_factory()
        )
        if f.metadata.get("omit_default"):  # left out of the ids at its default (_identity)
            model.pop(name, None)
        else:
            model[name] = default
        if name in opts and opts[name] != default:
            sampling[name] = opts[name]
    return model, sampling


def _identity(method, opts: dict) -> dict:
    """``opts`` without the options declared ``omit_default`` that sit at their default: options
    added after cells were recorded leave those cells' ids unchanged."""
    out = dict(opts)
    for f in dataclasses.fields(type(method).Options):
        if f.metadata.get("omit_default") and f.name in out:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            if out[f.name] == canonical(default):
                del out[f.name]
    return out


def _decodings(method, entry: MethodEntry, sweep_decodings: list[str], where: str) -> list[str]:
    """The method's decodings for this entry, resolved by the method itself ('default' -> its
    default; S-FLM: any ``top<k>``). A name in the entry's own ``decoding`` list that the method
    does not know is an error; one in the sweep-wide ``sample.decoding`` is skipped for it."""
    names = entry.decoding if entry.decoding is not None else sweep_decodings
    resolved = []
    for d in names:
        try:
            resolved.append(method.resolve_decoding(d))
        except ValueError as e:
            if entry.decoding is not None:
                raise ConfigError(f"{where}.decoding: {e}") from None
    return list(dict.fromkeys(resolved)) or [method.resolve_decoding("default")]


@dataclass(frozen=True)
class Sweep:
    """What every method entry of one sweep is planned against: the task, its subsets and the
    ``sample`` / ``train`` / ``backbone`` sections with the task's defaults filled in."""

    cfg: SweepConfig
    source: str  # the sweep file, in errors
    offline_ok: bool
    task: Task
    subsets: list[str]  # Sudoku: the difficulties; GSM8K: the test split
    sample: SampleConfig
    train: TrainConfig
    backbone: BackboneConfig


@dataclass(frozen=True)
class EntryModel:
    """One ``methods[i]`` entry, validated: the model it trains (or imports) and how it samples."""

    index: int  # i of methods[i]
    entry: MethodEntry
    where: str  # ``<sweep>: methods[i]``, in errors
    method: Method
    options: dict  # the model's identity: sampling-only options at their defaults
    sampling: dict  # the sampling-only options that differ from their defaults
    train: TrainConfig  # the sweep's recipe with the entry's overrides
    backbone: dict
    source: dict | None  # an import cell's source (``checkpoint:``), else None
    vocab_size: int | None
    decodings: list[str]
    seeds: list[int]
    groups: list[list[str]]  # the training subsets of each train cell

    @property
    def variant(self) -> str:
        return _variant(self.entry)


def _sweep(cfg: SweepConfig, source: str, offline_ok: bool) -> Sweep:
    """The task and the sweep's sections, with the task's defaults in the fields the file leaves
    unset (a sort task's NFE grid stops at its generated length, not at 9x9 Sudoku's 180), checked
    by the task's own rules (split sizes, files, lengths) before any job."""
    task = _task(cfg, source)
    subsets = list(task.groups())
    defaults = _task_defaults(task, source)
    sample = _with_defaults(cfg.sample, defaults.get("sample"))
    train = _with_defaults(cfg.train, defaults.get("train"))
    backbone = _with_defaults(cfg.backbone, defaults.get("backbone"))
    try:
        task.validate_plan(backbone=backbone, train=train, sample=sample)
    except ValueError as e:  # ConfigError included
        raise ConfigError(f"{source}: {e}") from None
    return Sweep(
        cfg=cfg,
        source=source,
        offline_ok=offline_ok,
        task=task,
        subsets=subsets,
        sample=sample,
        train=train,
        backbone=backbone,
    )


def _entry_model(sw: Sweep, i: int, entry: MethodEntry) -> EntryModel:
    """Entry ``methods[i]`` as a validated model: its method and options (an imported
    checkpoint's from the file), its train recipe, what its jobs would reject (backbone size,
    schedule: the method's ``validate_plan``), its decodings, seeds and training subsets."""
    where = f"{sw.source}: methods[{i}]"
    imported = vocab = None
    backbone = canonical(sw.backbone)
    if entry.checkpoint:  # options, sizes and vocabulary from the file
        from bench.checkpoints.entry import import_facts

        sp, file_opts, imported, vocab = import_facts(entry, sw.task, where, sw.offline_ok)
        method, opts = _method(entry, sw.task, where, file_opts, vocab)
        backbone = dict(sp.backbone)
    else:
        if entry.family:
            raise ConfigError(f"{where}.family: only with checkpoint")
        method, opts = _method(entry, sw.task, where)
    model_opts, sampling = _split_sampling(method, _identity(method, opts))
    # per-method train overrides use TrainConfig's own fields and rules
    train = build(
        TrainConfig, {**dataclasses.asdict(sw.train), **entry.train}, where=f"{where}.train"
    )
    decodings = _decodings(method, entry, sw.sample.decoding, where)
    sample = dataclasses.replace(sw.sample, decoding=decodings)  # this entry's, resolved
    try:
        method.validate_plan(backbone=BackboneConfig(**backbone), train=train, sample=sample)
    except ValueError as e:  # ConfigError included
        msg = str(e)
        if not imported and msg.startswith(("backbone", "sample")):  # a section at the root
            raise ConfigError(f"{sw.source}: {msg} (methods[{i}]: {entry.method})") from None
        raise ConfigError(f"{where}: {msg}") from None
    if imported:  # one model, whatever the training seeds and subsets: it is not trained
        seeds, groups = [train.seed], [sw.subsets]
    else:
        seeds = list(dict.fromkeys(sw.cfg.seeds)) or [train.seed]
        groups = [sw.subsets] if sw.cfg.task.train_mix else [[g] for g in sw.subsets]
    return EntryModel(
        index=i,
        entry=entry,
        where=where,
        method=method,
        options=model_opts,
        sampling=sampling,
        train=train,
        backbone=backbone,
        source=imported,
        vocab_size=vocab,
        decodings=decodings,
        seeds=seeds,
        groups=groups,
    )


def plan(cfg: SweepConfig, source: str = "sweep", *, offline_ok: bool = False) -> Plan:
    """Expand a sweep (``bench.config.load_sweep``) into cells; ``source`` names the file in
    errors. Loads no data and writes nothing; an entry with ``checkpoint:`` reads that file's
    header (memory-mapped) or, for a released file not fetched yet, the catalogue and the hub's
    metadata. ``offline_ok``: such a file may stay unidentified (no sha256: a dry run offline).

    The steps: the task and the sections (:func:`_sweep`), every kind's plan-time check
    (:meth:`bench.kind.CellKind.validate`), then per method entry its model
    (:func:`_entry_model`), the models the model kinds plan of it (train or import cells:
    :func:`bench.kinds.train.train_cells_of`; entries with the same model share the first one's)
    and each other kind's cells of that model (:meth:`bench.kind.CellKind.plan_entry`)."""
    out = Plan(cfg)
    sw = _sweep(cfg, source, offline_ok)
    for name in cfg.kinds:
        if name not in registry.KINDS:
            known = ", ".join(sorted(registry.KINDS))
            raise ConfigError(
                f"{sw.source}: kinds.{name}: no cell kind of that name (known: {known})"
            )
    kinds = [registry.KINDS[k] for k in registry.KINDS]
    for kind in kinds:
        kind.validate(cfg, sw.task, sw.source)
    models: dict[str, TrainCell] = {}  # train cell id -> the cell (entries may share one)
    owner: dict[str, int] = {}  # cell id -> the methods[] index that planned it
    for i, entry in enumerate(cfg.planned_methods()):
        m = _entry_model(sw, i, entry)
        for new in [c for k in kinds if k.model for c in k.plan_entry(None, m, sw, True)]:
            tc = models.setdefault(new.id, new)
            if tc is new:  # the first entry with this model names its run folder
                out.add(tc, model=True)
            for kind in kinds:
                if kind.model:
                    continue
                for c in kind.plan_entry(tc, m, sw, tc is new):
                    if owner.setdefault(c.id, m.index) != m.index:
                        raise ConfigError(
                            f"{m.where}: same model, options and sampling as "
                            f"methods[{owner[c.id]}] (only the variant name differs); remove one "
                            "of them"
                        )
                    out.add(c)
    return out
