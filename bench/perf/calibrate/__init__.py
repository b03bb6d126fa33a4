"""``calibrate``: measure the cost model's throughput table (:mod:`bench.cost.table`) here and store
it where the planner finds it (``--calib-dir``, default :func:`bench.cost.table.calibration_dir`:
``$SFLM_CALIBRATION_DIR`` or ``~/.cache/sflm-bench/calibration``), one entry per device kind
and CPU thread count (``--threads``: measure at the threads a job will use; the local executor
gives each of its ``max_parallel`` jobs ``cpu_count // max_parallel``).

Each timing is the median of ``--calib-reps`` runs (default 3; the bare backbone's fitted shapes
two more), and its spread, (max - min) / median of the runs, is kept; on one CPU thread it counts
the process's CPU seconds, not wall seconds, so that on a machine shared with other work the
table says what the work costs when the core is free (on several threads CPU seconds would count
the threads' spin-waits: calibrate those on an idle machine). What it measures:

- bare backbone forwards (no gradients) at six shapes and a one-position decoding step, fitted
  to ``overhead_s + FLOPs / flops_per_s`` (relative least squares);
- plain optimiser steps of the bare backbone at six shapes, fitted to ``overhead_s + 3 FLOPs /
  flops_per_s + parameters x param_s``;
- each model's sampling call (every decoding; float64, and float32 at the large vocabulary)
  and training step at a small vocabulary (two batch sizes: its own seconds per call apart) and
  a large one, as forward-equivalents of the bare forward / step timed right before it at the
  same shape (models: ``--models``, default all of :data:`bench.cost.catalogue.MODELS`);
- the trainer's own cost (``bench.train.fit`` for two step counts: per step and once), a job's
  process start (``import bench.cells`` in a fresh interpreter, its CPU seconds), the disk's
  write and read rates, the GSM8K sandbox's seconds per program over every core (when the
  sandbox runs here);
- opt-in: ``--calib-tokenizer`` (the GPT-2 tokenizer loaded as a text task's job loads it: where
  the hub is unreachable and ``HF_HUB_OFFLINE`` is unset, each load waits out its retries),
  ``--calib-genppl`` (the Gen. PPL reference LM: load and tokens/s).

``--calib-vocab V`` moves the large-vocabulary factor shape to |V| = V (its L and batch kept).
Its (B, L, |V|) buffers may then be above glibc's largest mmap threshold (32 MB: |V| 50,257 at
the CPU's L 32 and batch 8 in float64), which a job allocates in transparent huge pages
(``GLIBC_TUNABLES``, :func:`bench.heap.job_env`): a run without that setting says so in one
``warning:`` line, and the entry records it (``huge_pages``).

``--calib-quick`` (tests): tiny shapes, one run each, no trainer, job, disk or sandbox
measurement (those sections keep the shipped entry's values).

A busy or noisy machine writes a table that predicts the wrong times, so :func:`verdict` judges
the 1-min load average (``os.getloadavg``, before and after, against ``os.cpu_count``) and the
timings' spreads:

- **refused** (one ``error:`` line, exit 2, nothing written; checked once before measuring, so
  a busy machine is refused at once, and again after): the load besides this run leaves fewer
  free CPUs than the threads measured (:data:`BUSY_FREE`), or the median timing's spread is above
  :data:`SPREAD_REFUSE`;
- **warned** (one ``warning:`` line on stderr, the table written): the load besides this run is
  above :data:`LOAD_WARN` of the CPUs, the median spread above :data:`SPREAD_WARN` or one
  timing's above :data:`SPREAD_ONE`.

``--calib-force`` writes a refused table anyway (with the warning line). The entry records when
it was measured (``calibrated_at``), the load (``load``: 1-min averages before and after, CPUs,
the load besides this run), the repeats (``repeats``: runs per timing, median and largest spread,
the noisiest timing) and the verdict (``verdict``); ``--dry-run`` names the table it predicts
with (:func:`bench.cost.table.describe`).

The modules: :mod:`~bench.perf.calibrate.timing` (the clock and repeated runs),
:mod:`~bench.perf.calibrate.backbone` (the bare backbone's fits),
:mod:`~bench.perf.calibrate.methods` (each model's factors), :mod:`~bench.perf.calibrate.host`
(the trainer, a job, the sandbox, the scorers) and :mod:`~bench.perf.calibrate.verdict` (the
machine's load and the timings' spreads).
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from bench.config import ConfigError
from bench.perf import common
from bench.perf.calibrate.backbone import SHAPES, _forward_fit, _train_fit, fit
from bench.perf.calibrate.host import _genppl, _job, _memory, _sandbox, _tokenizer, _trainer
from bench.perf.calibrate.methods import _method_factors
from bench.perf.calibrate.timing import _SPREADS
from bench.perf.calibrate.verdict import (
    BUSY_FREE,
    LOAD_WARN,
    SPREAD_ONE,
    SPREAD_REFUSE,
    SPREAD_WARN,
    CalibrationRefused,
    _judge,
    _loadavg,
    others_load,
    verdict,
)

__all__ = [
    "BUSY_FREE",
    "HELP",
    "LOAD_WARN",
    "SHAPES",
    "SPREAD_ONE",
    "SPREAD_REFUSE",
    "SPREAD_WARN",
    "CalibrationRefused",
    "add_arguments",
    "fit",
    "others_load",
    "run",
    "verdict",
]


HELP = "measure the cost model's throughput table here and store it (bench.cost)"


def add_arguments(group) -> None:
    group.add_argument(
        "--calib-reps", type=int, default=3, help="calibrate: runs per timing (their median)"
    )
    group.add_argument(
        "--calib-dir", help="calibrate: where to store the table (default: the calibration dir)"
    )
    group.add_argument("--calib-kind", help="calibrate: the table kind (default: from the device)")
    group.add_argument(
        "--calib-quick", action="store_true", help="calibrate: tiny and fast (tests)"
    )
    group.add_argument(
        "--calib-tokenizer", action="store_true", help="calibrate: time a GPT-2 tokenizer load"
    )
    group.add_argument(
        "--calib-genppl", action="store_true", help="calibrate: time the Gen. PPL reference LM"
    )
    group.add_argument(
        "--calib-vocab",
        type=int,
        default=0,
        help="calibrate: the large-vocabulary factor shape's |V| (default: the device's, CPU "
        "8,192; e.g. 50257 to price the sampling calls at GPT-2's)",
    )
    group.add_argument(
        "--calib-force",
        action="store_true",
        help="calibrate: write the table even on a busy machine or with noisy timings",
    )


def run(model_list, args, device) -> list[dict]:
    from bench.cell_model import keep_freed_heap
    from bench.cost import table
    from bench.cost.defaults import DEFAULTS
    from bench.measure import device_name

    t_start = time.perf_counter()
    # the heap of a job (a sampling job sets it; training raises glibc's threshold to the same):
    # without it the large shapes' calls fault their buffers in anew and vary up to 2x by run
    keep_freed_heap(device)
    name = device_name(device)
    kind = args.calib_kind or table.kind_of(name)
    threads = torch.get_num_threads() if device.type == "cpu" else 0
    shapes = SHAPES["quick" if args.calib_quick else device.type]
    if getattr(args, "calib_vocab", 0):
        if args.calib_vocab < 2:
            raise ConfigError("--calib-vocab: must be >= 2")
        size, _, L, B = shapes["large"]
        shapes = {**shapes, "large": (size, args.calib_vocab, L, B)}
    if args.calib_reps < 1:
        raise ConfigError("--calib-reps: must be >= 1")
    huge = _huge_pages(shapes, device)
    if args.calib_quick:
        args.calib_reps = 1
    # a busy machine is refused before anything is measured (and judged again after)
    cpus, used = os.cpu_count() or 1, threads or 1
    load0 = _loadavg()
    _judge({}, others_load(load0, None, used), cpus, used, args.calib_force, "(before measuring)")
    _SPREADS.clear()
    base = DEFAULTS.get(kind) or DEFAULTS["cpu" if device.type == "cpu" else "h100"]
    rows: list[dict] = []
    entry = {"kind": kind, "threads": threads, "device_name": name}
    scorers = _measure(entry, base, model_list, shapes, args, device, rows)
    # scorer rates measured by an earlier calibration of this kind and thread count stay (the
    # tokenizer and the reference LM are opt-in measurements)
    d = Path(args.calib_dir) if args.calib_dir else None
    earlier = table.calibrated(kind, d).get(threads, {}).get("scorers", {})
    kept = {k: v for k, v in earlier.items() if k != "source" and k not in scorers}
    if scorers or kept:
        entry["scorers"] = {**base["scorers"], **kept, **scorers}
    entry["memory_bytes"] = _memory(device)
    if huge is not None:
        entry["huge_pages"] = huge
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    load = _loadavg()
    _record_quality(entry, load0, load, cpus, used, args)
    _stamp_sources(entry, base, scorers, kept, when, f"{name}, {threads or 'all'}", load, args)
    entry["calibrated_at"] = when
    # a self-contained entry: what was not measured here is the shipped entry's (its source says)
    entry = {**{k: v for k, v in base.items() if k in table.SECTIONS}, **entry}
    path = table.save(entry, d)
    took = time.perf_counter() - t_start
    common.progress(f"calibrate: {kind} table ({threads or 'all'} threads) -> {path} "
                    f"in {took:.0f} s")  # fmt: skip
    rows.append({"bench": "calibrate", "what": "table", "kind": kind, "threads": threads,
                 "path": str(path), "seconds": took})  # fmt: skip
    return rows


def _huge_pages(shapes: dict, device) -> bool | None:
    """On a CPU: whether this process allocates in transparent huge pages as a job does
    (``GLIBC_TUNABLES`` with :data:`bench.heap.HUGE_PAGES`), with a warning when it does not
    and the large shape's float64 (B, L, |V|) buffer is above glibc's largest mmap threshold
    (:data:`bench.heap.MMAP_THRESHOLD_MAX`); None elsewhere."""
    from bench import heap

    if device.type != "cpu":
        return None
    on = "glibc.malloc.hugetlb" in os.environ.get("GLIBC_TUNABLES", "")
    _, V, L, B = shapes["large"]
    if not on and B * L * V * 8 > heap.MMAP_THRESHOLD_MAX:
        common.progress(
            f"warning: calibrate: the |V| {V} shape's buffers are above the 32 MB mmap threshold "
            f"and GLIBC_TUNABLES lacks {heap.HUGE_PAGES} (a job's, bench.heap.job_env): they "
            "fault in 4 kB pages here, 2 MB in a job"
        )
    return on


def _measure(entry: dict, base: dict, model_list, shapes: dict, args, device, rows) -> dict:
    """Every measurement into ``entry`` (the bare backbone's fits, the models' factors; unless
    ``--calib-quick``, the trainer and a job); returns the scorer rates measured."""
    bare: dict = {}
    entry["forward"] = _forward_fit(shapes, args, device, rows, bare)
    entry["train"] = _train_fit(shapes, args, device, rows, bare)
    full = {**base, **entry}  # the fitted sections, the shipped ones for what is not measured
    entry["methods"] = _method_factors(model_list, shapes, full, args, device, rows)
    full["methods"] = entry["methods"]
    scorers = {}
    if not args.calib_quick:
        entry["trainer"] = _trainer(shapes["small"], full, args, device, rows)
        entry["job"] = {**base["job"], **_job(rows)}
        scorers.update(_sandbox(rows))
    if args.calib_tokenizer:
        scorers.update(_tokenizer(rows))
    if args.calib_genppl:
        scorers.update(_genppl(device, rows))
    return scorers


def _record_quality(entry: dict, load0, load, cpus: int, used: int, args) -> None:
    """The verdict on the measured timings and the load (:func:`_judge`; refused: raised), and
    what the entry records of them (``verdict``, ``load``, ``repeats``)."""
    others = others_load(load0, load, used)
    spreads = dict(_SPREADS)
    entry["verdict"] = _judge(spreads, others, cpus, used, args.calib_force, "(measured)")
    entry["load"] = {"start_1min": load0, "end_1min": load, "cpus": cpus,
                     "besides_this_run": others}  # fmt: skip
    worst = max(spreads, key=spreads.__getitem__) if spreads else ""
    entry["repeats"] = {
        "runs_per_timing": args.calib_reps,
        "timings": len(spreads),
        "median_spread": statistics.median(spreads.values()) if spreads else 0.0,
        "max_spread": spreads.get(worst, 0.0),
        "noisiest": worst,
    }
    common.progress(
        f"calibrate: {len(spreads)} timings, {args.calib_reps} runs each: median spread "
        f"{entry['repeats']['median_spread']:.1%}, largest {entry['repeats']['max_spread']:.1%}"
        + (f" ({worst})" if worst else "")
    )


def _stamp_sources(entry, base, scorers, kept, when: str, where: str, load, args) -> None:
    """Each measured section's ``source`` and the entry's (``where``: the device and threads)."""
    for sec in ("forward", "train", "trainer", "job", "methods"):
        if sec in entry:
            entry[sec]["source"] = f"python -m bench.perf calibrate, {when}"
    if "scorers" in entry:
        entry["scorers"]["source"] = (
            f"python -m bench.perf calibrate, {when} (measured: "
            f"{', '.join(sorted(scorers)) or 'none'}; earlier: {', '.join(sorted(kept)) or 'none'}"
            f"; the rest: {base['scorers']['source']})"
        )
    entry["source"] = (
        f"python -m bench.perf calibrate on {where} thread(s), {when}"
        + (f", 1-min load {load}" if load is not None else "")
        + (" (--calib-quick)" if args.calib_quick else "")
    )
