"""Atomic files and build-once caches.

Files: write a temp file beside the target, fsync, then ``os.replace``. A reader (or a killed
writer) therefore sees either the old file or the whole new one. Temp names end in ``.tmp`` and
start with a dot so globs such as ``*.json`` never pick them up. Every atomic write of the
harness goes through here: text (:func:`write_text`), JSON (:func:`write_json_atomic`: a job's
``result.json``, a run's ``cell.json``), torch files (:func:`atomic_torch_save`: ``weights.pt``,
sample ids), or any writer (:func:`write_with`: the trainer's checkpoints and training log).

Caches: :func:`build_once` builds a data cache once (a folder or a file: the TinyGSM arrays, the
OWT block files, the rebuilt GPT-2 tokenizer, the offline reference LM, the Sudoku splits). A
finished cache is reused without any lock. Otherwise it takes an exclusive ``fcntl.flock`` on
``.<name>.lock`` beside the destination (:func:`build_lock`; the kernel drops it however the
holder ends, SIGKILL included), so concurrent processes (a sweep's jobs, DDP ranks, nodes
sharing the folder over NFS) build it once: the others wait, then reuse it. The builder writes
into ``.<name>.<pid>-<hex>.tmp`` beside the destination; the files and folders are fsynced, the
temp renamed into place and the parent folder fsynced, so the destination is either absent or
complete. Under the lock, a crashed (killed) build's temps are removed first, and a destination
that fails its check is replaced. A failed build leaves no destination and raises
:class:`CacheBuildError`, one line naming the destination. The lock files stay (removing one
would let a late process lock a different inode). Where the filesystem has no ``flock`` (Lustre
without ``-o flock``, some FUSE mounts), each process builds on its own, with a warning: still
correct (the rename is atomic), only not once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def write_with(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp_path)`` to produce the content, then move it over ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Atomically replace ``path`` with ``text``."""
    return write_with(path, lambda tmp: tmp.write_text(text))


def write_json_atomic(obj, path: str | Path) -> Path:
    """Atomically replace ``path`` with ``obj`` as indented JSON, keys sorted (``default=str``:
    paths and other plain objects as their text)."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


def atomic_torch_save(obj, path: str | Path) -> Path:
    """Atomically replace ``path`` with ``torch.save(obj)`` (torch is imported here only, so the
    light modules that write JSON through this one do not load it)."""
    import torch

    return write_with(path, lambda tmp: torch.save(obj, tmp))


# --------------------------------------------------------------------------- build-once caches


class CacheBuildError(RuntimeError):
    """A cache could not be built; the message is one line naming the destination."""


def _usable(found: Any) -> bool:
    return found is not None and found is not False


def _exists(dest: Path) -> Path | None:
    return dest if dest.exists() else None


def lock_path(dest: str | Path) -> Path:
    """The lock file of the cache ``dest``: ``.<name>.lock`` beside it."""
    dest = Path(dest)
    return dest.with_name(f".{dest.name}.lock")


@contextlib.contextmanager
def build_lock(path: str | Path, what: str = "") -> Iterator[bool]:
    """Hold an exclusive ``fcntl.flock`` on ``path`` (created if missing) for the block: one
    holder at a time across the processes (and the nodes) that see the file. Yields True when
    held; False, with a warning, on a filesystem without ``flock`` (the block then runs
    unlocked). Says on stderr when it has to wait for another holder."""
    path = Path(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(
                    f"{what or path}: another process is building it; waiting for it",
                    file=sys.stderr,
                    flush=True,
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
            held = True
        except OSError as e:  # a filesystem without flock (e.g. Lustre without -o flock)
            warnings.warn(
                f"cannot lock {path} ({e}); building {what or path.parent} without the lock",
                stacklevel=3,
            )
            held = False
        yield held
    finally:
        os.close(fd)  # releases the lock


def _temp_pattern(dest: Path) -> re.Pattern:
    """The names of ``dest``'s build temps (and the builder's scratch files named after them)."""
    return re.compile(rf"\.{re.escape(dest.name)}\.\d+-[0-9a-f]{{8}}\.tmp")


def _new_temp(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def _remove_temps(dest: Path, prefix: str | None = None) -> None:
    """Remove ``dest``'s build temps: those whose name starts with ``prefix`` (one build's
    temp and scratch files), else every one (only under the lock: a crashed build's)."""
    pattern = _temp_pattern(dest)
    try:
        names = [p for p in dest.parent.iterdir() if pattern.match(p.name)]
    except FileNotFoundError:
        return
    for p in names:
        if prefix is None or p.name.startswith(prefix):
            _remove(p)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """fsync every file and folder under ``root`` (a file or a folder), ``root`` included."""
    if root.is_dir():
        for folder, _, files in os.walk(root):
            for name in files:
                if not os.path.islink(os.path.join(folder, name)):
                    _fsync(Path(folder) / name)
            _fsync(Path(folder))
    else:
        _fsync(root)


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _publish(tmp: Path, dest: Path, check: Callable[[Path], Any], held: bool) -> None:
    """Rename the finished ``tmp`` to ``dest``, replacing a destination that fails ``check``."""
    if not held and _usable(check(dest)):  # unlocked: another process finished first
        _remove(tmp)
        return
    aside = None
    if dest.is_symlink() or (dest.exists() and (dest.is_dir() or tmp.is_dir())):
        aside = _new_temp(dest)  # a stale destination, out of the way (a temp name: if we
        os.replace(dest, aside)  # crash now, the next build removes it)
    try:
        os.replace(tmp, dest)
    except OSError:
        if held or not _usable(check(dest)):
            raise
        _remove(tmp)  # unlocked: another process renamed its copy in meanwhile
    finally:
        if aside is not None:
            _remove(aside)
    _fsync(dest.parent)


def build_once(
    dest: str | Path,
    build: Callable[[Path], object],
    *,
    check: Callable[[Path], Any] | None = None,
    folder: bool = True,
) -> Any:
    """The cache ``dest``, built by ``build`` once across processes, atomically.

    ``check(dest)`` says whether ``dest`` is a finished, valid cache: it returns what the
    caller wants back (the path, loaded arrays, ...), or None / False for "not there, or not
    valid" (default: ``dest`` if it exists). A usable ``dest`` is returned at once, lock-free.
    Otherwise, under :func:`build_lock` on :func:`lock_path`, it is checked again (another
    process may have built it while this one waited); if still missing, the temps of crashed
    builds are removed and ``build(tmp)`` is called with a fresh temp path beside ``dest``:
    an empty folder to fill when ``folder``, else a path where ``build`` writes one file. The
    builder may also write scratch files named ``tmp.name + suffix`` beside it (moved into
    place by itself, or removed with the temp). The result is fsynced and renamed to ``dest``
    (an invalid ``dest`` is replaced), and ``check(dest)`` is returned.

    When ``build`` raises, its temps are removed, no ``dest`` is left, and
    :class:`CacheBuildError` is raised (``cannot build <dest>: <Type>: <message>``, chained to
    the original). KeyboardInterrupt and the like propagate unchanged, after the same cleanup.
    """
    dest = Path(dest)
    check = check or _exists
    found = check(dest)
    if _usable(found):
        return found
    dest.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(lock_path(dest), str(dest)) as held:
        found = check(dest)
        if _usable(found):
            return found
        if held:
            _remove_temps(dest)  # a crashed build's (the lock says nobody is building now)
        tmp = _new_temp(dest)
        try:
            if folder:
                tmp.mkdir()
            build(tmp)
            if not tmp.exists():
                raise FileNotFoundError(f"the builder wrote nothing at {tmp.name}")
            _fsync_tree(tmp)
            _publish(tmp, dest, check, held)
        except Exception as e:
            raise CacheBuildError(f"cannot build {dest}: {_one_line(e)}") from e
        finally:
            _remove_temps(dest, prefix=tmp.name)
    found = check(dest)
    if not _usable(found):
        raise CacheBuildError(f"cannot build {dest}: built, but it fails its check")
    return found
