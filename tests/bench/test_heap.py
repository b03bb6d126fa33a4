"""``bench.heap``: a sampling job keeps its freed buffers (``cell_model.keep_freed_heap``), and a
job process's malloc runs on transparent huge pages (``GLIBC_TUNABLES``), set by the local
executor's environment and the SLURM batch script."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import heap

ROOT = Path(__file__).resolve().parents[2]


def test_job_env_adds_the_tunable_and_keeps_the_users():
    if not sys.platform.startswith("linux"):
        assert heap.job_env({}) == {}
        return
    assert heap.job_env({})["GLIBC_TUNABLES"] == heap.HUGE_PAGES
    other = heap.job_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert other["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{heap.HUGE_PAGES}"
    own = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}
    assert heap.job_env(own) == own  # the user's own setting wins
    assert "GLIBC_TUNABLES" not in heap.job_env({"SFLM_HUGE_PAGES": "0"})
    env = {"A": "1"}
    heap.job_env(env)
    assert env == {"A": "1"}  # a new dict: the caller's is left alone


def test_local_jobs_and_slurm_scripts_get_it(monkeypatch):
    from bench.executors.local import _job_env

    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("SFLM_HUGE_PAGES", raising=False)
    if sys.platform.startswith("linux"):
        assert _job_env()["GLIBC_TUNABLES"] == heap.HUGE_PAGES
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    for extra, want in [
        ({"GLIBC_TUNABLES": ""}, heap.HUGE_PAGES),
        (
            {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"},
            f"glibc.malloc.arena_max=2:{heap.HUGE_PAGES}",
        ),
        ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, "glibc.malloc.hugetlb=0"),
        ({"GLIBC_TUNABLES": "", "SFLM_HUGE_PAGES": "0"}, ""),
    ]:
        out = subprocess.run(
            [bash, "-c", f'{heap.SLURM_SETUP}\nprintf %s "$GLIBC_TUNABLES"'],
            env={**os.environ, **extra},
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0 and out.stdout == want, (extra, out.stderr)


_ROUNDS = """
import ctypes, resource, sys
import torch
mode, mb, count, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
libc = ctypes.CDLL("libc.so.6")
if sys.argv[5] == "4k":  # this process's pages 4 kB whatever the kernel's THP mode
    libc.prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
if mode == "keep":
    from bench.cell_model import keep_freed_heap
    keep_freed_heap(torch.device("cpu"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = mb * 2**20
def call():  # a sampling call's pattern: buffers live at once, written, freed (as torch's do)
    ptrs = [libc.malloc(size) for _ in range(count)]
    for ptr in ptrs:
        ctypes.memset(ptr, 1, size)
    for ptr in reversed(ptrs):
        libc.free(ptr)
call()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(rounds):
    call()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(tmp_path, mode: str, mb: int, count: int, rounds: int, pages: str, env=None) -> int:
    """Minor page faults of ``rounds`` calls after the first, in a fresh process (``_ROUNDS``)
    whose environment is ``env`` without ``GLIBC_TUNABLES`` unless ``env`` is given."""
    script = tmp_path / "rounds.py"
    script.write_text(_ROUNDS)
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, str(script), mode, str(mb), str(count), str(rounds), pages],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's malloc settings",
)
def test_cpu_sampling_keeps_freed_buffers_instead_of_faulting_them_in_again(tmp_path):
    """``cell_model.keep_freed_heap`` (what a CPU sampling or likelihood job calls first): after
    the first of 30 calls that each hold eight 1 MB buffers at once, the heap keeps them and
    nothing is faulted in again; with glibc's defaults the freed heap top is trimmed and faulted
    in again at every call (in 4 kB pages: 256 faults per buffer)."""
    kept = _faults(tmp_path, "keep", 1, 8, 30, "4k")
    default = _faults(tmp_path, "default", 1, 8, 30, "4k")
    one_call = 8 * 256
    assert kept < one_call and default > 30 * one_call // 2, (kept, default)


def _thp_on_request_only() -> bool:
    """The kernel grants huge pages where a process asks (madvise), not to every mapping."""
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False
    return "[madvise]" in mode


def _glibc_at_least(major: int, minor: int) -> bool:
    name, version = platform.libc_ver()
    if name != "glibc":
        return False
    return tuple(int(p) for p in version.split(".")[:2]) >= (major, minor)


@pytest.mark.skipif(
    not (_glibc_at_least(2, 35) and _thp_on_request_only()),
    reason="glibc.malloc.hugetlb needs glibc >= 2.35; a difference needs THP on request only",
)
def test_a_job_faults_a_large_buffer_in_huge_pages(tmp_path):
    """Ten 64 MB buffers, each mapped and freed: in 4 kB pages 16,384 faults each; in a job's
    environment (2 MB pages where the kernel grants them) a small fraction of that."""
    base = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "SFLM_HUGE_PAGES")}
    # a (B, L, |V|) buffer above glibc's largest mmap threshold: mapped at every call
    default = _faults(tmp_path, "default", 64, 1, 10, "thp", env=base)
    huge = _faults(tmp_path, "default", 64, 1, 10, "thp", env=heap.job_env(base))
    assert default > 10 * 16_000 * 0.9 and huge < default / 4, (default, huge)
