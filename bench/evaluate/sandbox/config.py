"""The limits and choices of one :class:`~bench.evaluate.sandbox.runner.Sandbox`
(:class:`SandboxConfig`, re-exported by :mod:`bench.evaluate.sandbox.runner`)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class SandboxConfig:
    """Limits of one program run. Defaults suit GSM8K-style programs (milliseconds of work).

    Attributes:
        timeout_s: wall-clock limit from spawn, enforced by the parent (the reference harness
            uses 5 s, `gsm8k.timeout`).
        cpu_s: CPU-time limit (RLIMIT_CPU soft; hard = soft + 1 s); 0 = ceil(timeout_s) + 1.
        memory_mb: address-space limit (RLIMIT_AS) of the fresh interpreter.
        nproc: RLIMIT_NPROC (processes + threads of the program's uid; only meaningful with the
            "uid" feature or in a user namespace).
        fsize_mb: largest file the program may write (RLIMIT_FSIZE).
        nofile: open file descriptors (RLIMIT_NOFILE).
        max_output_bytes: bytes of stdout and of stderr kept (the last ones); the rest is
            read and dropped so a chatty program is not blocked.
        isolation: "auto" (strongest level that passes the canary), "rlimits" (no namespaces,
            no uid change), or "full" (require network + PID namespaces; error otherwise).
        python: interpreter for the programs ('' = sys.executable).
        base_dir: parent of the private run directories ('' = the system temp dir).
        workers: programs run at once by :meth:`Sandbox.run_many` (0 = min(4 x cores, 32)):
            on the cold path a run is mostly interpreter start-up and namespace set-up latency,
            so several per core keep the CPUs busy (docs/gsm8k-sandbox.md).
        runner: dotted name of a standard-library-only module whose ``run_program(src)`` the
            child calls on each program instead of its plain ``exec`` ('' = none), e.g.
            ``bench.evaluate.gsm8k_reference`` (the paper harness's namespace). Canaries and
            probes always run plainly.
        warm: fork each program from a pre-imported parent inside the sandbox where the level
            allows it (:mod:`bench.evaluate.sandbox.warm`); False = a fresh interpreter each.
        cache_dir: folder of the verdict cache ('' = none; :mod:`bench.evaluate.sandbox.cache`).
    """

    timeout_s: float = 5.0
    cpu_s: int = 0
    memory_mb: int = 1024
    nproc: int = 16
    fsize_mb: int = 16
    nofile: int = 64
    max_output_bytes: int = 65536
    isolation: str = "auto"
    python: str = ""
    base_dir: str = ""
    workers: int = 0
    runner: str = ""
    warm: bool = True
    cache_dir: str = ""

    def __post_init__(self):
        for key in ("timeout_s", "memory_mb", "nproc", "fsize_mb", "nofile", "max_output_bytes"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"sandbox: {key} must be a positive number, got {v!r}")
        if self.cpu_s < 0 or self.workers < 0:
            raise ValueError("sandbox: cpu_s and workers must be >= 0")
        if self.isolation not in ("auto", "rlimits", "full"):
            raise ValueError(
                f"sandbox: isolation must be auto, rlimits or full, got {self.isolation!r}"
            )
