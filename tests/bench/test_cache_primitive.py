"""bench.atomic.build_once: a cache built once across processes, atomically, crash-safe.

(a) N processes racing on an empty cache run the builder once and all get the finished cache;
(b) a build that raises, or whose process is SIGKILLed mid-build, leaves no destination, and the
next call builds it cleanly (removing the killed build's temp); (c) a finished cache is reused
without the builder and without the lock. Each for a folder cache and a one-file cache.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from bench import atomic
from bench.atomic import CacheBuildError, build_once

KINDS = ["folder", "file"]


def _builder(kind: str, log: Path, hold_s: float = 0.0, payload: str = "done"):
    """A builder that appends its pid to ``log`` (one line per build), then writes the cache
    (a folder: ``part.txt`` then the ``complete`` marker; a file: ``payload``)."""

    def build(tmp: Path) -> None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(hold_s)
        if kind == "folder":
            (tmp / "part.txt").write_text(payload)
            (tmp / "sub").mkdir()
            (tmp / "sub" / "complete").write_text("1")
        else:
            tmp.write_text(payload)

    return build


def _check(kind: str):
    if kind == "folder":
        return lambda d: d if (d / "sub" / "complete").is_file() else None
    return lambda p: p.read_text() if p.is_file() else None


def _call(dest: Path, kind: str, log: Path, hold_s: float = 0.0):
    return build_once(
        dest, _builder(kind, log, hold_s), check=_check(kind), folder=kind == "folder"
    )


def _leftovers(dest: Path) -> list[str]:
    """Names beside ``dest`` other than ``dest`` and its lock file: build temps."""
    keep = {dest.name, atomic.lock_path(dest).name}
    return sorted(p.name for p in dest.parent.iterdir() if p.name not in keep)


def _racer(dest, kind, log, barrier, out_q):
    barrier.wait(timeout=60)
    found = _call(Path(dest), kind, Path(log), hold_s=0.5)
    out_q.put(str(Path(found) / "part.txt") if kind == "folder" else found)


@pytest.mark.parametrize("kind", KINDS)
def test_racing_processes_build_once(tmp_path, kind):
    dest, log, n = tmp_path / "cache" / "entry", tmp_path / "builds.log", 4
    ctx = mp.get_context("fork")
    barrier, out_q = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_racer, args=(str(dest), kind, str(log), barrier, out_q))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    seen = [out_q.get(timeout=5) for _ in procs]
    assert len(log.read_text().split()) == 1  # one build; the others waited and reused it
    if kind == "folder":
        assert {Path(s).read_text() for s in seen} == {"done"}
        assert (dest / "sub" / "complete").is_file()
    else:
        assert seen == ["done"] * n
    assert _leftovers(dest) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_build_leaves_nothing_and_the_next_call_builds(tmp_path, kind):
    dest, log = tmp_path / "cache" / "entry", tmp_path / "builds.log"

    def broken(tmp: Path) -> None:
        if kind == "folder":
            (tmp / "part.txt").write_text("half")
        else:
            tmp.write_text("half")
        tmp.with_name(tmp.name + ".scratch").write_text("x")  # a builder's scratch file
        raise ValueError("disk on fire\nsecond line")

    with pytest.raises(CacheBuildError) as err:
        build_once(dest, broken, check=_check(kind), folder=kind == "folder")
    msg = str(err.value)
    assert str(dest) in msg and "ValueError: disk on fire" in msg and "\n" not in msg
    assert isinstance(err.value.__cause__, ValueError)
    assert not dest.exists() and _leftovers(dest) == []
    found = _call(dest, kind, log)
    assert len(log.read_text().split()) == 1 and found
    assert _leftovers(dest) == []


def _killed_builder(dest, kind, started):
    def build(tmp: Path) -> None:
        if kind == "folder":
            (tmp / "part.txt").write_text("half")
        else:
            tmp.write_text("half")
        started.set()
        time.sleep(60)  # SIGKILLed here

    build_once(Path(dest), build, check=_check(kind), folder=kind == "folder")


@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_build_leaves_no_destination_and_is_cleaned_up(tmp_path, kind):
    dest, log = tmp_path / "cache" / "entry", tmp_path / "builds.log"
    ctx = mp.get_context("fork")
    started = ctx.Event()
    child = ctx.Process(target=_killed_builder, args=(str(dest), kind, started))
    child.start()
    assert started.wait(30)
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    assert not dest.exists()
    assert len(_leftovers(dest)) == 1  # the killed build's temp, until the next build
    # the kernel released the killed holder's lock: the next call builds at once
    found = _call(dest, kind, log)
    assert len(log.read_text().split()) == 1 and found
    assert _leftovers(dest) == []
    if kind == "folder":
        assert (dest / "part.txt").read_text() == "done"
    else:
        assert dest.read_text() == "done"


@pytest.mark.parametrize("kind", KINDS)
def test_a_destination_failing_its_check_is_rebuilt(tmp_path, kind):
    dest, log = tmp_path / "cache" / "entry", tmp_path / "builds.log"
    dest.parent.mkdir()
    if kind == "folder":
        dest.mkdir()
        (dest / "part.txt").write_text("old, no marker")
    else:
        dest.write_text("stale")
    check = _check(kind) if kind == "folder" else lambda p: p.read_text() == "done" or None
    build_once(dest, _builder(kind, log), check=check, folder=kind == "folder")
    assert len(log.read_text().split()) == 1 and _leftovers(dest) == []
    assert (dest / "part.txt" if kind == "folder" else dest).read_text() == "done"


@pytest.mark.parametrize("kind", KINDS)
def test_a_finished_cache_is_reused_without_builder_or_lock(tmp_path, kind):
    dest, log = tmp_path / "cache" / "entry", tmp_path / "builds.log"
    first = _call(dest, kind, log)

    def boom(tmp: Path) -> None:
        raise AssertionError("rebuilt a finished cache")

    got = []
    with atomic.build_lock(atomic.lock_path(dest)):  # would block a caller that locks
        t = threading.Thread(
            target=lambda: got.append(
                build_once(dest, boom, check=_check(kind), folder=kind == "folder")
            ),
            daemon=True,
        )
        t.start()
        t.join(10)
    assert got == [first]
    assert len(log.read_text().split()) == 1
