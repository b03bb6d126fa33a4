"""What every benchmark shares: models and batches at a given shape, timing with the device
synchronised, and peak memory (CUDA allocator; CPU resident set through ``/proc``)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from pathlib import Path

import torch

from bench import registry
from bench.config import BackboneConfig, build
from bench.method import Batch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device, precision: str):
    """bf16 autocast on CUDA when ``precision`` is ``bf16-mixed``; else nothing."""
    if device.type == "cuda" and precision == "bf16-mixed":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def make_model(
    method: str, options: dict, vocab: int, seq_len: int, size: str, device: torch.device
):
    """A registered method with ``options`` and its freshly initialised backbone (seed 0)."""
    cls = registry.METHODS[method]
    m = cls(build(cls.Options, options, where=f"{method}.options"), vocab, seq_len)
    torch.manual_seed(0)
    backbone = m.build_backbone(BackboneConfig(size=size)).to(device)
    return m.to(device), backbone


def as_asked(method) -> None:
    """Make ``method`` sample in the dtype its ``float64`` argument asks for at every |V|: a
    method whose options pick float32 by vocabulary size (``velocity_dtype: auto``) is set to
    follow the argument (``sample``), so that a benchmark comparing or timing the two dtypes
    gets both."""
    if getattr(method.opts, "velocity_dtype", None) == "auto":
        method.opts = dataclasses.replace(method.opts, velocity_dtype="sample")


def sudoku_batch(
    n: int, vocab: int, seq_len: int, device: torch.device, seed: int = 0, prompt_frac: float = 0.5
) -> Batch:
    """Random ids; the first ``prompt_frac`` of each row given (clean), the rest scored."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (n, seq_len), generator=g)
    clean = torch.zeros(n, seq_len, dtype=torch.bool)
    clean[:, : int(seq_len * prompt_frac)] = True
    return Batch(x.to(device), clean.to(device), (~clean).to(device))


def seconds_per_call(fn, warmup: int, reps: int, device: torch.device) -> float:
    """Wall seconds per call of ``fn`` over ``reps`` timed calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / reps


def reset_peak(device: torch.device, trim: bool = True) -> int | None:
    """Reset the peak-memory counter; return the memory in use now (None: cannot reset).
    ``trim=False`` leaves malloc's settings alone (the train bench: a fixed mmap threshold would
    slow every later step; glibc serves the large (B, L, V) buffers by mmap anyway)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    if trim:
        _trim_heap()
    try:  # writing 5 resets the process's peak resident set size (VmHWM), Linux >= 4.0
        Path("/proc/self/clear_refs").write_text("5")
        return _proc_status("VmRSS")
    except OSError:
        return None


def _trim_heap() -> None:
    """CPU: make freed large buffers leave the resident set (fixed mmap threshold + malloc_trim),
    so that a peak measured after a warm-up counts them again."""
    from bench import heap

    heap.give_back_freed()
    heap.trim()


def peak(device: torch.device) -> int:
    """The peak memory since :func:`reset_peak` (bytes)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return _proc_status("VmHWM")


def _proc_status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {key}")


def progress(msg: str) -> None:
    """One progress line on stderr (stdout carries the tables)."""
    print(msg, file=sys.stderr, flush=True)
