"""glibc's heap settings for CPU work: how freed buffers are kept or given back. Where the
process does not run on glibc, every call does nothing and returns False.

Three users set them differently: a sampling job keeps freed buffers (:func:`keep_freed`), the
rehearsal and the memory benchmarks give them back so that a resident peak follows what is live
(:func:`give_back_freed`, :func:`trim`). Job processes also start with transparent huge pages for
malloc (:func:`job_env`)."""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1  # free heap kept at the top before it is trimmed
M_MMAP_THRESHOLD = -3  # allocations from this size up get a mapping of their own
#: the largest mmap threshold 64-bit glibc accepts (it also stops growing there by itself)
MMAP_THRESHOLD_MAX = 32 * 2**20


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _call(name: str, *args) -> bool:
    fn = getattr(_libc(), name, None)
    if fn is None:
        return False
    fn(*args)
    return True


def keep_freed() -> bool:
    """Serve buffers up to 32 MB from the heap and keep up to 512 MB of freed heap, instead of
    mapping, faulting in and unmapping them at every call (glibc's threshold starts at 128 kB and
    rises only as such buffers are freed)."""
    return _call("mallopt", M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) and _call(
        "mallopt", M_TRIM_THRESHOLD, 512 * 2**20
    )


def give_back_freed() -> bool:
    """Serve every allocation of 128 kB or more by its own mapping, unmapped when freed, and stop
    the threshold from rising: the resident set then holds what is live."""
    return _call("mallopt", M_MMAP_THRESHOLD, 128 * 1024)


def trim() -> bool:
    """Give the freed top of the heap back to the system now (``malloc_trim(0)``)."""
    return _call("malloc_trim", 0)


#: glibc >= 2.35 (older ones ignore it): malloc asks the kernel for transparent huge pages
#: (madvise) on its mappings and heap, where the kernel grants them on request (THP "madvise" or
#: "always"). Read when a process starts, so it is set in a job's environment.
HUGE_PAGES = "glibc.malloc.hugetlb=1"


def job_env(env: dict) -> dict:
    """``env`` for a job process on Linux: ``GLIBC_TUNABLES`` gains :data:`HUGE_PAGES` unless it
    sets ``glibc.malloc.hugetlb`` already or ``SFLM_HUGE_PAGES=0``. Buffers above the largest mmap
    threshold (32 MB: a (B, L, |V|) tensor at a GPT-2 vocabulary) are mapped and faulted in at
    every step: in 2 MB pages instead of 4 kB, far fewer faults for the same values (what it
    saved: docs/measurements/cost_model.md)."""
    if not sys.platform.startswith("linux") or env.get("SFLM_HUGE_PAGES") == "0":
        return env
    tunables = env.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in tunables:
        return env
    return {**env, "GLIBC_TUNABLES": f"{tunables}:{HUGE_PAGES}" if tunables else HUGE_PAGES}


#: the same for a SLURM job's batch script (it inherits the submitting shell's environment)
SLURM_SETUP = (
    'if [ "${SFLM_HUGE_PAGES:-1}" != 0 ]; then case "$GLIBC_TUNABLES" in '
    "*glibc.malloc.hugetlb*) ;; "
    f'*) export GLIBC_TUNABLES="${{GLIBC_TUNABLES:+$GLIBC_TUNABLES:}}{HUGE_PAGES}";; esac; fi'
)
