"""Timing one piece of calibration work: the clock (:func:`_clock`: CPU seconds on one CPU
thread, else wall seconds) and the median of repeated runs with its spread (:func:`_timed`,
:data:`_SPREADS`)."""

from __future__ import annotations

import statistics
import time

import torch

from bench.perf import common

#: spread of every timing of the calibration under way: what -> (max - min) / median
_SPREADS: dict[str, float] = {}


def _clock(device) -> float:
    """Seconds of this process's work: on one CPU thread its CPU seconds, which on a machine
    shared with other work stay what the work costs when the core is free (wall seconds there
    count the waits for a core); else wall seconds (CUDA: after a synchronisation; several CPU
    threads: their CPU seconds would count the threads' spin-waits, so calibrate those on an
    idle machine)."""
    if device.type == "cuda":
        common.sync(device)
    elif torch.get_num_threads() == 1:
        return time.process_time()
    return time.perf_counter()


def _timed(fn, reps: int, device, warmup: int = 1, what: str = "") -> float:
    """The median of ``reps`` timed calls of ``fn`` (:func:`_clock`), after ``warmup`` calls; their
    spread, (max - min) / median, goes to :data:`_SPREADS` under ``what``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, reps)):
        t0 = _clock(device)
        fn()
        times.append(_clock(device) - t0)
    med = statistics.median(times)
    if what:
        _SPREADS[what] = (max(times) - min(times)) / med if med > 0 else 0.0
    return med
