"""Measuring a phase: seconds and peak memory (:func:`measure`), per segment of the network's run
(:class:`Segments`), and the peak extrapolated to the sweep's batch (:class:`Phase`)."""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass, field

import torch

from bench import heap
from bench.measure import PeakMemory

GB = 1e9


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


def trim() -> None:
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
    trim()
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


def fmt_gb(b) -> str:
    return "" if b is None else f"{b / GB:.2f}"
