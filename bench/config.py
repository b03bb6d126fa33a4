"""Typed configuration: dataclasses with defaults in code; YAML files only override them.

Every config error is a :class:`ConfigError` whose message names the file and the dotted
key (``sweeps/x.yaml: sample.nfe[1]: must be > 0, got 0``). CLIs turn it into one line on
stderr and exit status 2.

Range checks live in field metadata (``gt``, ``ge``, ``le``, ``choices``, ``nonempty``;
:func:`bench.options.option`) so the rule sits beside the default it constrains; a mapping
becomes a section by :func:`build` and :class:`ConfigError` is raised where it does not (both
:mod:`bench.options`', with :func:`is_set`, and importable from here). This module holds the
sections, the YAML file and its ``--set`` overrides, and the content hash.

This module knows no method and no task: the names and options of a sweep's ``methods`` and
``task.options`` are checked where they become objects, by the planner (:mod:`bench.plan`),
which also fills the ``sample`` / ``train`` / ``backbone`` fields a file leaves unset
(:func:`is_set`) with the task's defaults where it declares them.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# ConfigError, build and is_set are bench.options', and this module's public names too
from bench.options import ConfigError, build, is_set, option  # noqa: F401

# --------------------------------------------------------------------------- sections

#: ``train.logger`` values: Lightning loggers the trainer can write to (bench.train.make_loggers)
LOGGERS = ("csv", "tensorboard", "wandb", "none")
#: the package each optional logger needs (imported only when it is chosen)
_LOGGER_PACKAGES = {"tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",)}


def logger_missing_package(logger: str) -> str | None:
    """The package ``train.logger`` needs and this environment lacks (None: nothing missing)."""
    import importlib.util

    pkgs = _LOGGER_PACKAGES.get(logger, ())
    if pkgs and not any(importlib.util.find_spec(p) is not None for p in pkgs):
        return pkgs[0]
    return None


@dataclass
class TaskConfig:
    """Which data a sweep trains and evaluates on."""

    name: str = option("sudoku", help="task name in bench.registry.TASKS")
    grid: int = option(
        9, choices=(4, 6, 9), help="Sudoku side length: 9 (paper), 6 (2x3 boxes), 4 (2x2)"
    )
    difficulties: list[str] = option(
        factory=lambda: ["easy", "medium", "hard"],
        nonempty=True,
        help="evaluation subsets; Sudoku: difficulty levels easy/medium/hard (givens 40/35/30 "
        "of 81, scaled for smaller grids); tasks with fixed subsets ignore it",
    )
    train_mix: bool = option(
        False,
        help="False (paper): one model per difficulty. True: one model trained on the "
        "union of the difficulties, evaluated on each (CPU quickstart)",
    )
    n_train: int = option(48_000, gt=0, help="training puzzles per difficulty")
    n_valid: int = option(2_000, gt=0, help="validation puzzles per difficulty")
    seed: int = option(42, help="generation seed (train and validation derive from it)")
    data_dir: str = option("", help="cache directory; '' = $SFLM_BENCH_DATA or ~/.cache/sflm-bench")
    options: dict[str, Any] = option(
        factory=dict, help="the task's own options (its Options dataclass)"
    )


@dataclass
class BackboneConfig:
    """The shared network. ``size`` picks a named preset; explicit fields override it."""

    size: str = option("tiny", help="named size in bench.backbones.dit.SIZES")
    n_blocks: int | None = option(None, gt=0)
    d_model: int | None = option(None, gt=0)
    n_heads: int | None = option(None, gt=0)
    cond_dim: int | None = option(None, gt=0)
    dropout: float | None = option(None, ge=0.0, le=1.0)


@dataclass
class TrainConfig:
    """One trainer for every method (paper / reference-harness defaults)."""

    steps: int = option(20_000, gt=0, help="optimizer steps")
    batch_size: int = option(256, gt=0, help="global batch size")
    lr: float = option(3e-4, gt=0.0)
    betas: list[float] = option(factory=lambda: [0.9, 0.999])
    weight_decay: float = option(0.0, ge=0.0)
    warmup_steps: int = option(2500, ge=0, help="linear warm-up, then constant")
    grad_clip: float = option(1.0, gt=0.0)
    ema: float = option(0.9999, ge=0.0, lt=1.0, help="EMA decay (0 = no averaging)")
    precision: str = option(
        "auto", choices=("auto", "32", "bf16-mixed"), help="auto: bf16 on GPU, fp32 on CPU"
    )
    antithetic: bool = option(
        True, help="stratified time sampling over the batch (diffusion methods)"
    )
    checkpoint_every: int = option(1000, gt=0, help="steps between resumable checkpoints")
    seed: int = option(0)
    devices: int = option(1, gt=0, help="GPUs (or CPU processes) per node for DDP")
    num_nodes: int = option(1, gt=0)
    threads: int = option(0, ge=0, help="torch CPU threads (0 = leave torch's default)")
    # training curves (bench.train: <run>/logs/metrics.csv; the report's <task>_training_curves)
    logger: str = option(
        "csv",
        choices=LOGGERS,
        help="csv: <run>/logs/metrics.csv (what the report draws); tensorboard / wandb: that "
        "logger as well as the CSV (needs its package); none: no logs",
    )
    log_every: int | None = option(
        None,
        gt=0,
        help="steps between logged training losses (null = min(50, steps // 20), at least 1)",
    )
    val_every: int | None = option(
        None,
        ge=0,
        help="steps between validation losses on held-out examples (0 = off; null = steps // 20, "
        "at least 1)",
    )
    val_batches: int = option(2, gt=0, help="held-out batches (of batch_size) per validation")

    def validate(self) -> None:
        """The logger's package must be importable (checked when the sweep is planned)."""
        missing = logger_missing_package(self.logger)
        if missing:
            raise ConfigError(
                f"logger: {self.logger!r} needs the {missing} package (pip install {missing})"
            )


@dataclass
class SampleConfig:
    """The sampling grid every trained model is evaluated on."""

    nfe: list[int] = option(
        factory=lambda: [180],
        nonempty=True,
        each_gt=0,
        help="backbone calls; unset: the task's grid where it declares one (Task.sweep_defaults: "
        "sort 2, 4, ... n_digits; Sudoku the sequence length, 180 for 9x9)",
    )
    temperature: list[float] = option(factory=lambda: [1.0], nonempty=True, each_gt=0.0)
    decoding: list[str] = option(
        factory=lambda: ["default"],
        nonempty=True,
        help="decoding variants; 'default' = the method's own default; names a method does "
        "not support are skipped for it",
    )
    n_samples: int = option(
        2_000,
        gt=0,
        help="validation problems per cell; unset: the task's (Sudoku task.n_valid, GSM8K 1,319)",
    )
    batch_size: int = option(256, gt=0)
    float64: bool = option(True, help="categorical sampling / geometry in float64")
    seed: int = option(0)
    n_per_item: int = option(
        1,
        gt=0,
        help="independent draws per item (pass@1 as their mean, pass@j for j <= k, maj@k; "
        "bench/evaluate/passk.py); 1: one draw, as always",
    )
    eos_stop: bool = option(
        False,
        help="stop a row at the task's EOS where the method's decoding can (AR at the EOS, "
        "MDLM's blocked decodings with block_length > 0 after the block that holds it; --list "
        "says which): rows record the budget as nfe, each item's calls and tokens up to its "
        "EOS; where it cannot (another decoding, a task without EOS) not an error, the cell "
        "fills the canvas; false: fill the canvas, as the paper's samplers",
    )
    latency_items: int = option(
        0,
        ge=0,
        help="time the first K items again one at a time (batch 1, not scored): the rows' "
        "latency_s; 0: none",
    )


@dataclass
class LikelihoodConfig:
    """Held-out likelihood of every trained model (docs/likelihood.md): one likelihood cell per
    model and dataset, run in the job that samples the model. Methods without a bound
    (``Method.bound_kind`` empty) get a "no bound" row instead."""

    datasets: list[str] = option(
        factory=list,
        help="dataset specs: heldout (the task's own), owt-valid, text:PATH, or a zero-shot "
        "corpus (ptb, wikitext2, wikitext103, lm1b, lambada, ag_news, pubmed, arxiv); [] = none",
    )
    n_sequences: int = option(0, ge=0, help="sequences per dataset (0 = every one)")
    block: int = option(0, ge=0, help="tokens per sequence (0 = the task's sequence length)")
    wrap: bool = option(
        True, help="concatenate documents and cut blocks (MDLM / Duo); false: one padded per block"
    )
    draws: int = option(1, gt=0, help="Monte-Carlo draws of the bound per sequence (exact: 1)")
    batch_size: int = option(32, gt=0)
    seed: int = option(0, help="seed of the bound's time draws")


@dataclass
class ExecutorConfig:
    """Where jobs run. Cluster facts come from here or the environment, never from code."""

    kind: str = option("local", choices=("local", "slurm", "debug"))
    partition: str = option("")
    account: str = option("")
    qos: str = option("")
    time_min: int = option(
        60,
        gt=0,
        help="job time limit (minutes); on SLURM the cap of the limits sized from the cost model "
        "(time_safety), or every job's limit when time_safety is 0",
    )
    time_safety: float = option(
        3.0,
        ge=0,
        help="SLURM: a job's time limit is its predicted time (bench.cost) x this, at least "
        "time_floor_min, at most time_min; 0 = every job asks time_min",
    )
    time_floor_min: int = option(10, gt=0, help="SLURM: the shortest sized time limit (minutes)")
    task_target_min: float = option(
        30.0,
        ge=0,
        help="SLURM: pack a model's sample cells into array tasks of about this many predicted "
        "minutes each (0, or cells_per_task set, or no prediction: the split by array_parallelism)",
    )
    gpus_per_node: int = option(0, ge=0)
    cpus_per_task: int = option(2, gt=0)
    mem_gb: int = option(8, gt=0)
    array_parallelism: int = option(16, gt=0, help="max concurrently running array tasks")
    cells_per_task: int = option(
        0,
        ge=0,
        help="sample cells per array task (0 = spread a model's cells "
        "over at most array_parallelism tasks)",
    )
    max_parallel: int = option(2, gt=0, help="local executor: jobs running at once")
    log_dir: str = option("", help="'' = <results>/logs")
    device: str = option(
        "",
        help="the device kind the jobs run on, for --dry-run's predicted cost (bench.cost: cpu, "
        "a100, h100, h200 or a calibrated kind); '' = this machine's (local), h100 (SLURM with "
        "GPUs), cpu (SLURM without)",
    )
    # ``device`` names a kind the cost model has a table for: checked by the commands that read
    # a sweep (bench.cost.table.check_device), as the tables live above the configuration


@dataclass
class MethodEntry:
    """One method (x variant) in a sweep."""

    method: str = option(help="method name in bench.registry.METHODS")
    variant: str = option("", help="label for this option set ('' = 'base')")
    options: dict[str, Any] = option(
        factory=dict, help="method options (the method's Options dataclass)"
    )
    decoding: list[str] | None = option(None, help="overrides sample.decoding for this method")
    train: dict[str, Any] = option(factory=dict, help="per-method train overrides (e.g. lr)")
    checkpoint: str = option(
        "",
        help="import this checkpoint instead of training (a reference-format file, "
        "hf://jdeschena/s-flm/<path>, or an authors' Hugging Face repository hf://<owner>/<repo>; "
        "bench.checkpoints): options and backbone come from the file",
    )
    family: str = option(
        "",
        help="with checkpoint: the reference family when the file's config cannot tell MDLM, Duo "
        "and FLM apart ('' = from the file)",
    )


@dataclass
class SweepConfig:
    """A whole sweep file."""

    name: str = option("sweep", help="sweep name (a results column)")
    results_dir: str = option("results", help="store and run folders")
    task: TaskConfig = option(factory=TaskConfig)
    backbone: BackboneConfig = option(factory=BackboneConfig)
    train: TrainConfig = option(factory=TrainConfig)
    sample: SampleConfig = option(factory=SampleConfig)
    likelihood: LikelihoodConfig = option(factory=LikelihoodConfig)
    executor: ExecutorConfig = option(factory=ExecutorConfig)
    methods: list[MethodEntry] = option(factory=list, nonempty=True)
    kinds: dict[str, dict[str, Any]] = option(
        factory=dict,
        help="settings of cell kinds from plug-in packages, by kind name (bench.kind; each kind "
        "checks its own)",
    )
    seeds: list[int] = option(
        factory=list,
        each_ge=0,
        help="training seeds: every model is trained (and sampled) once per "
        "seed, overriding train.seed; the report gives mean +- sd over seeds. [] = train.seed only",
    )

    def planned_methods(self) -> list[MethodEntry]:
        """The method entries the planner plans (:func:`bench.plan.plan`): the file's, and when
        it asks for the speed protocol (``sample.latency_items`` > 0) but has no AR entry, one
        more: AR at its defaults (its KV cache on), the 1.0x reference of the report's speed
        section (a trained AR of the same recipe in the store is reused, as any model)."""
        entries = list(self.methods)
        if self.sample.latency_items and not any(e.method == "ar" for e in entries):
            entries.append(MethodEntry(method="ar"))
        return entries


# --------------------------------------------------------------------------- files and --set


def load_yaml(path: str | Path) -> dict:
    """Read a YAML mapping; missing file / bad YAML / non-mapping -> ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: malformed YAML{at}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


_STEP = re.compile(r"([^.\[\]=\s]+)((?:\[\d+\])*)")


def _parse_key(key: str, item: str, where: str) -> list[str | int]:
    """``methods[2].options.top_k`` -> ``["methods", 2, "options", "top_k"]``."""
    steps: list[str | int] = []
    for part in key.split("."):
        m = _STEP.fullmatch(part)
        if not m:
            raise ConfigError(
                f"{where} {item!r}: malformed key {key!r} (expected e.g. sample.nfe or "
                "methods[2].options.top_k)"
            )
        steps.append(m[1])
        steps += [int(i) for i in re.findall(r"\d+", m[2])]
    return steps


def _path_name(steps: list[str | int]) -> str:
    return "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps).lstrip(".")


def apply_overrides(data: dict, sets: list[str], *, where: str = "--set") -> dict:
    """A deep copy of the raw sweep mapping ``data`` with each ``KEY=VALUE`` of ``sets`` applied
    in order, as if written in the file. KEY is a dotted path with list indices
    (``methods[2].options.top_k``); VALUE is YAML (``[8,16]``, ``1``, ``true``, ``{a: 1}``).
    Missing mappings on the path are created; a bad item, an index out of range, or a step into
    a value of the wrong kind is a :class:`ConfigError` naming the key. The values themselves
    are checked later, by :func:`build` and the planner, as the file's are."""
    data = copy.deepcopy(data)
    for item in sets:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(f"{where} {item!r}: expected KEY=VALUE, e.g. sample.nfe=[8,16]")
        steps = _parse_key(key, item, where)
        if not text.strip():
            raise ConfigError(f"{where} {key}: empty value (an empty string is written '')")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"{where} {key}: malformed YAML value {text!r}: {problem}") from None
        node: Any = data
        for i, step in enumerate(steps):
            here = _path_name(steps[:i]) or "the top level"
            if isinstance(step, int):
                if not isinstance(node, list):
                    got = "missing" if node is None else f"a {type(node).__name__}"
                    raise ConfigError(f"{where} {key}: {here} is {got}, not a list")
                if step >= len(node):
                    span = f"indices 0..{len(node) - 1}" if node else "no index"
                    raise ConfigError(f"{where} {key}: the file has {len(node)} {here} ({span})")
            elif not isinstance(node, dict):
                raise ConfigError(
                    f"{where} {key}: {here} is a {type(node).__name__}, not a mapping"
                )
            if i == len(steps) - 1:
                node[step] = value
            else:
                if (
                    isinstance(step, str)
                    and node.get(step) is None
                    and isinstance(steps[i + 1], str)
                ):
                    node[step] = {}  # a missing (or empty) section: create it
                node = node[step] if isinstance(step, int) else node.get(step)
    return data


def load_sweep(path: str | Path, overrides: list[str] | None = None) -> SweepConfig:
    """Load a sweep file, apply ``overrides`` (``KEY=VALUE`` items: :func:`apply_overrides`)
    and validate its sections. The task's name and ``options`` and each method entry's name,
    ``options``, ``train`` overrides and ``decoding`` names are checked by
    :func:`bench.plan.plan`, which turns them into objects."""
    data = load_yaml(path)
    if overrides:
        data = apply_overrides(data, overrides)
    return build(SweepConfig, data, where=f"{path}: ")


# --------------------------------------------------------------------------- hashing


def canonical(obj: Any) -> Any:
    """A JSON-able canonical form: dataclasses -> dicts, tuples -> lists, floats normalised."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: canonical(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [canonical(v) for v in obj]
    if isinstance(obj, float):
        return float(repr(obj)) if obj == obj else "nan"
    return obj


def config_hash(obj: Any, length: int = 12) -> str:
    """Stable content hash: sha256 of the canonical, key-sorted JSON (same config -> same hash
    across processes, Python versions and key order)."""
    blob = json.dumps(canonical(obj), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:length]
