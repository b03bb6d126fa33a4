"""Measuring what a cell costs: wall seconds by phase, the seconds spent inside the network, peak
memory, and the machine it ran on (the columns every sample and train row carries).

- :func:`environment`: device name, torch / CUDA versions, CPU threads;
- :class:`PeakMemory`: the peak since a reset (CUDA: the allocator's max allocated; CPU: the
  process's resident-set high-water mark, ``VmHWM``, reset through ``/proc/self/clear_refs``);
- :class:`CallTimer`: seconds inside the backbone calls a sampler makes through
  :meth:`bench.method.Method.call` (CUDA: events, read once at the end, so timing adds no
  synchronisation; CPU: ``perf_counter``). ``forward_equivalents`` = sampling seconds over network
  seconds: 1.0 for a sampler that does nothing but call its network, more for one whose own work
  per call (S-FLM's exact velocity, a (B, L, |V|) normal draw) is not free;
- :func:`timing_calls`: the same timer on a module's forward hooks, for work that calls a backbone
  directly (a likelihood bound);
- :func:`sample_cost`: a sample cell's derived columns from its totals over batches.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path

import torch

#: the cost columns of a sample row (bench.kinds.sample adds them; bench.results.schema documents
#: them)
SAMPLE_COST_COLUMNS = (
    "sample_s",  # sampling seconds of the cell, net of scoring (model load not included)
    "score_s",  # scoring seconds (sandbox, reference LM, grader), apart from sampling
    "network_s",  # of sample_s, seconds inside the backbone's counted calls
    "network_calls",  # backbone calls made (all batches)
    "forward_equivalents",  # sample_s / network_s: the sampler's work per call in bare forwards
    "fe_mean",  # forward-equivalents per sample: its calls priced as full forwards (item_fe...)
    "tokens_mean",  # generated tokens per sample (up to and with the EOS, where the task has one)
    "tokens_per_call",  # generated tokens / backbone calls (d3LLM's tokens per forward)
    "tokens_per_fe",  # generated tokens / forward-equivalents: the compute-honest version
    "latency_s",  # seconds per sample at batch 1 over the first latency_items items
    "latency_items",  # sample.latency_items (None: not timed)
    "tokens_per_s",  # generated tokens (up to and with the EOS) per sampling second
    "seconds_per_sample",  # sample_s / items
    "peak_mem_mb",  # peak memory while sampling (CUDA max allocated, or CPU resident peak)
    "device_name",  # "cpu: AMD EPYC ..." or "cuda: NVIDIA H100 80GB HBM3"
    "torch_version",
    "cuda_version",  # None on a CPU build
    "threads",  # torch intra-op threads
)
#: the cost columns of a train row
TRAIN_COST_COLUMNS = ("s_per_step", "tokens_per_s", "peak_mem_mb", "device_name",
                      "torch_version", "cuda_version", "threads")  # fmt: skip
#: the cost columns of a likelihood row (bench.likelihood.cells adds them)
LIKELIHOOD_COST_COLUMNS = (
    "eval_s",  # seconds of every block's bound (not: model / corpus load, the bootstrap)
    "network_s",  # of eval_s, seconds inside the backbone's calls
    "network_calls",  # backbone calls made
    "tokens_per_s",  # scored positions (the ``tokens`` metric) per evaluation second
    "peak_mem_mb",  # peak memory while evaluating
    "device_name",
    "torch_version",
    "cuda_version",
    "threads",
)


def cpu_name() -> str:
    """``lscpu``'s model name, read from /proc/cpuinfo (platform's processor elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device | str | None = None) -> str:
    """``cuda: <GPU name>`` for a CUDA device, else ``cpu: <CPU model name>``."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {cpu_name()}"


def environment(device: torch.device | str | None = None) -> dict:
    """The machine columns of a row: device name, torch and CUDA versions, intra-op threads."""
    return {
        "device_name": device_name(device),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "threads": torch.get_num_threads(),
    }


def _proc_status(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class PeakMemory:
    """Peak memory of the work between :meth:`reset` and :meth:`peak_bytes`.

    CUDA: ``torch.cuda.max_memory_allocated`` (what the allocator handed out, not its cache).
    CPU: the process's resident high-water mark; on Linux it is reset by writing 5 to
    ``/proc/self/clear_refs`` (so the peak is this cell's, not the process's lifetime's); where
    that is not possible (not Linux, no permission) it is the process's peak since it started,
    and :attr:`since_start` says so."""

    def __init__(self, device: torch.device | str | None = None):
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.since_start = False

    def reset(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return self
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            self.since_start = True
        return self

    def peak_bytes(self) -> int | None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return int(torch.cuda.max_memory_allocated(self.device))
        hwm = _proc_status("VmHWM")
        if hwm is None:  # not Linux: the process's lifetime peak (ru_maxrss is in kB there too)
            import resource

            scale = 1 if platform.system() == "Darwin" else 1024
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
        return hwm

    def peak_mb(self) -> float | None:
        b = self.peak_bytes()
        return None if b is None else b / 2**20


class CallTimer:
    """Seconds inside the network calls made through :meth:`bench.method.Method.call` while it
    is installed (``method.call_timer = CallTimer(device)``), by class: full calls and partial
    ones (``partial``: a block-only call under a block cache, a KV-cached AR step). On CUDA each
    call records two events and :meth:`seconds` reads them (one synchronisation, at the end).
    :attr:`calls` counts both classes; :attr:`part_calls` the partial ones."""

    def __init__(self, device: torch.device | str | None = None):
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.cuda = self.device.type == "cuda"
        self.calls = 0
        self.part_calls = 0
        self._s = [0.0, 0.0]  # [full, partial]
        self._events: list = []

    def start(self, partial: bool = False):
        self.calls += 1
        self.part_calls += bool(partial)
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return (ev, bool(partial))
        return (time.perf_counter(), bool(partial))

    def stop(self, token) -> None:
        start, partial = token
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((start, end, partial))
        else:
            self._s[partial] += time.perf_counter() - start

    def _read(self) -> None:
        if self._events:
            torch.cuda.synchronize(self.device)
            for a, b, partial in self._events:
                self._s[partial] += a.elapsed_time(b) / 1000.0
            self._events.clear()

    def seconds(self) -> float:
        """Seconds inside every call so far."""
        self._read()
        return self._s[0] + self._s[1]

    def part_seconds(self) -> float:
        """Of :meth:`seconds`, those inside partial calls."""
        self._read()
        return self._s[1]


def time_full_call(method, backbone, x, device) -> float:
    """Seconds of one uncounted full call (:meth:`bench.method.Method.full_forward`) on ``x``,
    after one untimed warm-up call: the unit of a forward-equivalent for a batch whose own calls
    were all partial."""
    timer = CallTimer(device)
    with torch.no_grad():
        method.full_forward(backbone, x)
        token = timer.start()
        method.full_forward(backbone, x)
        timer.stop(token)
    return timer.seconds()


def item_forward_equivalents(cost: dict, row_calls) -> list[float] | None:
    """Each item's forward-equivalents in one batch: its full calls plus its partial calls times
    the batch's partial-over-full seconds per call, all times the batch's sampling seconds over
    its network seconds (the sampler's own work per call), so a batch of fixed full calls gives
    ``nfe x sample_s / network_s`` per item. ``cost``: the batch's ``sample_s``, ``network_s``,
    ``calls``, ``part_calls``, ``part_s``, ``full_call_s`` (a timed uncounted full call, when
    the batch made none); ``row_calls``: each item's [full, partial] calls. None when a number
    is missing (a batch file older than these columns)."""
    need = ("sample_s", "network_s", "calls", "part_calls", "part_s")
    if row_calls is None or any(cost.get(k) is None for k in need) or not cost["network_s"]:
        return None
    full_n = cost["calls"] - cost["part_calls"]
    full_s = cost["network_s"] - cost["part_s"]
    unit = full_s / full_n if full_n else cost.get("full_call_s")
    if cost["part_calls"] and not unit:
        return None
    ratio = cost["part_s"] / cost["part_calls"] / unit if cost["part_calls"] else 0.0
    over = cost["sample_s"] / cost["network_s"]
    return [over * (full + part * ratio) for full, part in row_calls]


@contextlib.contextmanager
def timing_calls(module: torch.nn.Module, timer: CallTimer):
    """Time every call of ``module`` with ``timer`` while inside (forward pre- and post-hooks):
    for work that calls a backbone directly instead of through
    :meth:`bench.method.Method.call` (a likelihood bound). A call that raises is counted but
    not timed."""
    open_calls: list = []

    def pre(_m, _args):
        open_calls.append(timer.start())

    def post(_m, _args, _out):
        if open_calls:
            timer.stop(open_calls.pop())

    hooks = (module.register_forward_pre_hook(pre), module.register_forward_hook(post))
    try:
        yield timer
    finally:
        for h in hooks:
            h.remove()


def sample_cost(
    sample_s: float | None,
    network_s: float | None,
    calls: int | None,
    *,
    items: int,
    generated: int,
) -> dict:
    """The sampling columns of :data:`SAMPLE_COST_COLUMNS` that follow from the cell's totals over
    its batches: ``sample_s`` seconds, of them ``network_s`` inside ``calls`` backbone calls,
    ``items`` samples with ``generated`` positions not given by the prompt (all items). A total
    that is not known (None: a batch resumed from a file written before these were recorded)
    leaves every column computed from it None."""
    known = sample_s is not None
    return {
        "sample_s": sample_s,
        "network_s": network_s,
        "network_calls": calls,
        "forward_equivalents": (
            sample_s / network_s if known and network_s else None  # None: no call was timed
        ),
        "tokens_per_s": generated / sample_s if known and sample_s > 0 else None,
        "seconds_per_sample": sample_s / items if known and items else None,
    }


def threads_env() -> dict:
    """The thread settings a job ran under (OMP / MKL environment), for the records."""
    return {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}
