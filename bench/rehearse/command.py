"""The entry points: :func:`rehearse` (``python -m bench.sweep FILE --rehearse``),
:func:`rehearse_all` and :func:`main` (``python -m bench.rehearse SWEEP [SWEEP ...]``); the
process's set-up around a run (threads, the hub, SIGTERM, the temp folder) and each sweep's
printed table and notes."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench import heap
from bench.measure import device_name
from bench.plan import Plan
from bench.rehearse.measuring import trim
from bench.rehearse.models import models_of
from bench.rehearse.output import model_summary, table
from bench.rehearse.rehearsal import Rehearsal, RehearsalFailure, Shared


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
            "sampling setups another of their family stands for (the method's decoding_family: the "
            "same code, memory growing with its size, the largest rehearsed): "
            + "; ".join(r.covered)
        )
    if any(ph.slope_of for ph in r.phases):
        notes.append(
            "(peak): batch 2 not run; the batch-1 peak plus the growth from batch 1 to 2 "
            "measured on a model that differs only in options its method declares memory-neutral "
            "(the method's memory_neutral_options: a schedule's constants), or, for a sampling or "
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
    trim()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.rehearse SWEEP [SWEEP ...] [--set KEY=VALUE] [--memory-gb GB]
    [--first-decoding]``: several sweeps rehearsed in one process (:func:`rehearse_all`)."""
    import argparse

    from bench.config import load_sweep
    from bench.plan import plan
    from bench.usage import UsageError, add_sets, usage_exit

    ap = argparse.ArgumentParser(
        prog="python -m bench.rehearse",
        description="rehearse several sweeps in one run (python -m bench.sweep FILE --rehearse: "
        "one); models an earlier sweep measured run batch 1 only",
    )
    ap.add_argument("sweeps", nargs="+", metavar="SWEEP", help="sweep YAML files")
    add_sets(ap, "override a value of every file, as if written in it (repeatable)")
    ap.add_argument("--memory-gb", type=float, metavar="GB", help="as bench.sweep --memory-gb")
    ap.add_argument("--first-decoding", action="store_true", help="as bench.sweep's")
    args = ap.parse_args(argv)
    plans = []
    for path in args.sweeps:
        try:
            plans.append((plan(load_sweep(path, args.sets), path, offline_ok=True), path))
        except UsageError as e:  # ConfigError included
            return usage_exit(e)
    return rehearse_all(plans, memory_gb=args.memory_gb, first_decoding=args.first_decoding)
