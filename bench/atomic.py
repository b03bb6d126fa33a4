"""Atomic file replacement: write a temp file beside the target, fsync, then ``os.replace``.

A reader (or a killed writer) therefore sees either the old file or the whole new one. Temp
names end in ``.tmp`` and start with a dot so globs such as ``*.json`` never pick them up.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


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
