"""Atomic file replacement: write a temp file beside the target, fsync, then ``os.replace``.

A reader (or a killed writer) therefore sees either the old file or the whole new one. Temp
names end in ``.tmp`` and start with a dot so globs such as ``*.json`` never pick them up.
Every atomic write of the harness goes through here: text (:func:`write_text`), JSON
(:func:`write_json_atomic`: a job's ``result.json``, a run's ``cell.json``), torch files
(:func:`atomic_torch_save`: ``weights.pt``, sample ids), or any writer (:func:`write_with`: the
trainer's checkpoints and training log).
"""

from __future__ import annotations

import json
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


def write_json_atomic(obj, path: str | Path) -> Path:
    """Atomically replace ``path`` with ``obj`` as indented JSON, keys sorted (``default=str``:
    paths and other plain objects as their text)."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


def atomic_torch_save(obj, path: str | Path) -> Path:
    """Atomically replace ``path`` with ``torch.save(obj)`` (torch is imported here only, so the
    light modules that write JSON through this one do not load it)."""
    import torch

    return write_with(path, lambda tmp: torch.save(obj, tmp))
