"""Throughput tables: the constants :mod:`bench.cost.model` predicts with, per device kind.

A table **entry** holds, for one device kind (``cpu``, ``a100``, ``h100``, ``h200``, or a kind
a calibration named) at one CPU thread count, every constant of the cost model, each section with
a one-line ``source``:

- ``forward``: a sampling forward of the bare backbone = ``overhead_s`` + FLOPs / ``flops_per_s``;
- ``train``: a plain optimiser step of the bare backbone (forward + backward + AdamW) =
  ``overhead_s`` + 3 x forward FLOPs / ``flops_per_s`` + parameters x ``param_s``;
- ``trainer``: what the Lightning trainer adds: ``step_s`` per step (hooks, EMA, clipping,
  logging), ``start_s`` once per run (set-up, first checkpoint, weights file);
- ``job``: ``start_s`` per job process (interpreter, imports, the task), ``load_bytes_per_s``
  (weights read back for sampling), ``write_bytes_per_s`` (checkpoints);
- ``methods``: each model's forward-equivalents per sampling call (``sample``, keyed
  ``<model>|<decoding>``, per sampling dtype) and per training step (``train``, keyed
  ``<model>``), each a pair measured at two shapes whose head shares (the output layer's part of
  a forward's FLOPs) are ``head_share``: a shape in between is interpolated by its head share (a
  sampler's extra work grows with |V|);
- ``scorers``: ``item_s`` and ``cell_s`` (any task's scoring and records per item and per cell),
  ``sandbox_cpu_s`` (CPU seconds per GSM8K program in the sandbox, spread over the job's cores),
  ``genppl_load_s`` / ``genppl_tokens_per_s`` (the Gen. PPL reference LM), ``tokenizer_load_s``
  (a hub tokenizer loaded by a job phase);
- ``memory_bytes``: the device's memory (CPU: the machine's).

The shipped entries (:mod:`bench.cost.defaults`) come from the paper's training-cost table and
the project's measurements; ``python -m bench.perf calibrate`` measures an entry on the machine
at hand and stores it in ``<calibration dir>/<kind>.json`` (:func:`calibration_dir`:
``$SFLM_CALIBRATION_DIR``, else ``<data cache>/calibration``, i.e.
``~/.cache/sflm-bench/calibration`` unless ``$SFLM_BENCH_DATA`` moves the data cache), one entry
per CPU thread count. A calibrated entry wins over the shipped one of its kind.

Every entry says when it was measured: a shipped one in ``measured``, a calibrated one in
``calibrated_at`` with the machine's ``load`` then (and calibrate's ``repeats`` and ``verdict``);
:func:`load` adds ``calibrated`` and, for a calibrated entry, ``table_path`` (the file), and
:func:`describe` says all that in one line (``--dry-run``'s predicted cost names its table so).
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

FORMAT = "sflm-bench-calibration"
VERSION = 1
ENV_DIR = "SFLM_CALIBRATION_DIR"
#: the sections every entry has (a calibrated file may leave some to the shipped entry)
SECTIONS = ("forward", "train", "trainer", "job", "methods", "scorers")


def calibration_dir() -> Path:
    """Where calibrated tables live: ``$SFLM_CALIBRATION_DIR``, else ``calibration/`` in the
    data cache (``$SFLM_BENCH_DATA`` or ``~/.cache/sflm-bench``)."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR]).expanduser()
    from bench.text.locate import data_cache_root

    return data_cache_root() / "calibration"


def kind_of(device_name: str) -> str:
    """The table kind of a device name: ``cpu`` for a CPU, ``h100`` / ``h200`` / ``a100`` / ...
    for an NVIDIA GPU whose name says it (``NVIDIA H100 80GB HBM3`` -> ``h100``), else the name
    lower-cased with non-alphanumerics as ``-``."""
    name = device_name.lower()
    if name.startswith("cpu") or not name:
        return "cpu"
    name = name.split(":", 1)[-1]
    m = re.search(r"\b([a-z]\d{2,3}[a-z]?)\b", name.replace("nvidia", " "))
    if m:
        return m.group(1)
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "gpu"


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    return data


def calibrated(kind: str, directory: Path | None = None) -> dict[int, dict]:
    """The calibrated entries of ``kind`` in ``directory`` (default :func:`calibration_dir`), by
    thread count ({} when none)."""
    data = _read((directory or calibration_dir()) / f"{kind}.json")
    if not data:
        return {}
    out = {}
    for k, e in (data.get("entries") or {}).items():
        try:
            out[int(k)] = e
        except ValueError:
            continue
    return out


def known_kinds(directory: Path | None = None) -> list[str]:
    """Every kind a table exists for: the shipped ones and the calibrated ones."""
    from bench.cost.defaults import DEFAULTS

    kinds = set(DEFAULTS)
    d = directory or calibration_dir()
    if d.is_dir():
        kinds |= {p.stem for p in d.glob("*.json") if _read(p)}
    return sorted(kinds)


def check_device(cfg, source: str) -> None:
    """A sweep's ``executor.device`` (on SLURM: ``SFLM_SLURM_DEVICE`` when set) names a kind a
    table exists for (shipped or calibrated): :class:`~bench.config.ConfigError` naming the file
    and key, or the variable, otherwise."""
    from bench.config import ConfigError

    kind, where = cfg.executor.device, f"{source}: executor.device"
    env = os.environ.get("SFLM_SLURM_DEVICE", "").strip()
    if cfg.executor.kind == "slurm" and env:
        kind, where = env, "environment SFLM_SLURM_DEVICE"
    if kind and kind not in (kinds := known_kinds()):
        raise ConfigError(
            f"{where}: unknown device kind {kind!r} (known: "
            f"{', '.join(kinds)}; python -m bench.perf calibrate adds this machine's)"
        )


def _merge(base: dict, over: dict) -> dict:
    """``over``'s sections over ``base``'s (a calibrated entry may leave sections out; method
    factors merge by key, so a calibration that measured some models keeps the others')."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _scaled(entry: dict, threads: int) -> dict:
    """A CPU entry measured at ``entry['threads']`` threads, its rates scaled to ``threads``
    (parallel efficiency 0.8 per doubling, rates only; overheads are per call, not per core)."""
    have = int(entry.get("threads") or 0)
    if not have or threads == have:
        return entry
    f = (threads / have) ** 0.8
    out = copy.deepcopy(entry)
    for sec in ("forward", "train"):
        out[sec]["flops_per_s"] *= f
    out["train"]["param_s"] /= f
    for key in ("genppl_tokens_per_s",):
        if key in out["scorers"]:
            out["scorers"][key] *= f
    out["threads"] = threads
    out["scaled_from_threads"] = have
    out["source"] = f"{entry.get('source', '')} (scaled from {have} to {threads} threads)"
    return out


def load(kind: str, threads: int = 0, directory: Path | None = None) -> dict:
    """The entry the planner predicts with for ``kind`` (at ``threads`` CPU threads, 0 = any):
    the calibrated entry of that thread count, else the nearest calibrated one scaled, else the
    shipped one (scaled), each over the shipped entry's sections. Raises KeyError for a kind with
    neither."""
    from bench.cost.defaults import DEFAULTS

    cal = calibrated(kind, directory)
    base = DEFAULTS.get(kind)
    if not cal and base is None:
        raise KeyError(kind)
    if cal:
        t = threads or min(cal)
        near = min(cal, key=lambda k: (abs(k - t), k))
        if base is None:  # a kind only calibrated: any section it lacks, from the CPU / H100 one
            cpu = str(cal[near].get("device_name", "cpu")).startswith("cpu")
            base = DEFAULTS["cpu" if cpu else "h100"]
        entry = _merge(base, cal[near])
        entry["calibrated"] = True
        entry["table_path"] = str((directory or calibration_dir()) / f"{kind}.json")
    else:
        entry = copy.deepcopy(base)
        entry["calibrated"] = False
    if threads and entry.get("threads"):
        entry = _scaled(entry, threads)
    return entry


def describe(entry: dict) -> str:
    """Which table ``entry`` (from :func:`load`) is and when it was measured, in one line:
    ``calibrated cpu table, 1 thread(s): <file>, measured <UTC time> at 1-min load 0.3 on 2 CPUs``
    or ``shipped h100 table (built-in default, bench/cost/defaults.py), measured: <when>``."""
    kind = entry.get("kind", "?")
    threads = f", {entry['threads']} thread(s)" if entry.get("threads") else ""
    if entry.get("scaled_from_threads"):
        threads += f" (scaled from {entry['scaled_from_threads']})"
    if not entry.get("calibrated"):
        when = entry.get("measured") or "(not recorded)"
        where = "built-in default, bench/cost/defaults.py"
        return f"shipped {kind} table{threads} ({where}), measured: {when}"
    # an entry calibrated before ``calibrated_at`` was kept: the date its source gives
    dated = re.search(r"\d{4}-\d{2}-\d{2}(T[\d:]+Z)?", str(entry.get("source") or ""))
    when = entry.get("calibrated_at") or (dated.group(0) if dated else "(not recorded)")
    out = f"calibrated {kind} table{threads}: {entry.get('table_path', '?')}, measured {when}"
    load = entry.get("load") or {}
    if load.get("end_1min") is not None:
        out += f" at 1-min load {load['end_1min']:.1f} on {load.get('cpus', '?')} CPUs"
    verdict = str(entry.get("verdict") or "")
    if verdict.startswith(("forced", "warn")):
        out += f" ({verdict})"
    return out


def save(entry: dict, directory: Path | None = None) -> Path:
    """Store ``entry`` (its ``kind`` and ``threads`` say where) in the kind's file, beside the
    entries of other thread counts, atomically."""
    from bench import atomic

    d = directory or calibration_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{entry['kind']}.json"
    data = _read(path) or {"format": FORMAT, "version": VERSION, "kind": entry["kind"]}
    data.setdefault("entries", {})[str(int(entry.get("threads") or 0))] = entry
    atomic.write_json_atomic(data, path)
    return path


# --------------------------------------------------------------------------- which table


def local_device_kind() -> str:
    """This machine's kind: its first CUDA GPU's (as the local executor's jobs use it) or
    ``cpu``."""
    import torch

    if torch.cuda.is_available():
        return kind_of(torch.cuda.get_device_name(0))
    return "cpu"


#: the kind a SLURM sweep with GPUs is predicted on when ``executor.device`` does not say
SLURM_GPU_DEFAULT = "h100"


def device_kind(ex) -> tuple[str, str]:
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
