"""The verdict cache: what a program did, kept so a repeat (in the same batch, another cell, a
re-score) is not run again.

A program's run is a function of its text and of the sandbox, not of the moment: the clock, the
seeds and the entropy sources are fixed in the child
(:func:`bench.evaluate.sandbox.child.freeze`) and so is the hash seed. An entry's key is the
SHA-256 of the program text, whether the runner ran it, and the **context**: the cache format,
the sandbox's own code (every module of this package, :data:`HARNESS_VERSION`), the runner
module's name and text (the grader: ``grader: reference`` runs the programs through
:mod:`bench.evaluate.gsm8k_reference`), every limit of
:class:`~bench.evaluate.sandbox.runner.SandboxConfig` that can change a verdict, the isolation
level and the interpreter the programs ran on. Grading against the gold answer happens after, so
the entry is the :class:`~bench.evaluate.sandbox.result.ExecResult`, not the verdict.

Not kept: harness errors; wall-clock timeouts (they depend on the machine's load); programs
whose text names a way around the fixed clock and entropy (:data:`ESCAPES`: ``ctypes``,
``/proc``, ``/dev/``, the C ``_datetime`` / ``_random`` modules, pids, ids, file times).

Files: ``<root>/<context digest>/<shard>.jsonl``, one shard per batch, written atomically
(:func:`bench.atomic.write_text`); each line carries a checksum of its key and result. A line
that does not parse, fails its checksum or holds a value a run could not have produced is
ignored: that program runs again. Never a wrong verdict from a damaged file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import threading
from dataclasses import asdict
from pathlib import Path

from bench import atomic
from bench.evaluate.sandbox.result import STATUSES, ExecResult

#: the entry format (bump to drop every entry)
CACHE_FORMAT = 1
_FILES = sorted(p for p in Path(__file__).parent.glob("*.py"))
#: digest of the sandbox's own code: a change in any module of it starts a fresh cache
HARNESS_VERSION = hashlib.sha256(b"".join(p.read_bytes() for p in _FILES)).hexdigest()[:16]
#: program texts whose run may read the real clock or entropy: never cached
ESCAPES = re.compile(
    r"ctypes|/proc|/dev/|_datetime|_random|\bgetpid|\bid\(|st_[amc]time|get[amc]time"
)
_FIELDS = ("status", "kind", "value", "detail", "stdout", "stderr", "returncode", "elapsed_s")
_KINDS = ("", "int", "float", "none", "str", "huge_int", "other")


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        b = p.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "big") + b)
    return h.hexdigest()


def cacheable(program: str, res: ExecResult) -> bool:
    """Whether ``res`` is a verdict a later run of ``program`` would reproduce."""
    if res.status == "harness_error" or (res.status == "timeout" and res.detail == "wall clock"):
        return False
    return ESCAPES.search(program) is None


def _valid(r) -> bool:
    """An entry's result holds only what a run can produce."""
    if not isinstance(r, dict) or set(r) != set(_FIELDS):
        return False
    ok_types = (
        (r["status"] == "done" or r["status"] in STATUSES)
        and r["status"] != "harness_error"
        and r["kind"] in _KINDS
        and all(isinstance(r[k], str) for k in ("detail", "stdout", "stderr"))
        and (r["returncode"] is None or type(r["returncode"]) is int)
        and type(r["elapsed_s"]) in (int, float)
    )
    if not ok_types:
        return False
    v, kind = r["value"], r["kind"]
    if kind == "int":
        return type(v) is int
    if kind == "float":
        return type(v) is float or v in ("nan", "inf", "-inf")
    if kind in ("str", "huge_int", "other"):
        return isinstance(v, str)
    return v is None


class VerdictCache:
    """Entries of one context under ``root`` (see the module docstring); thread-safe."""

    def __init__(self, root: str | Path, context: dict):
        ctx = {"format": CACHE_FORMAT, "harness": HARNESS_VERSION, **context}
        self.context_digest = _digest(json.dumps(ctx, sort_keys=True))[:32]
        self.dir = Path(root) / self.context_digest
        self._index: dict[str, dict] | None = None
        self._new: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.damaged = 0  # lines ignored while loading

    def key(self, program: str, runner: bool) -> str:
        return _digest(self.context_digest, "runner" if runner else "plain", program)

    def _load(self) -> dict[str, dict]:
        index: dict[str, dict] = {}
        try:
            shards = sorted(self.dir.glob("*.jsonl"))
        except OSError:
            shards = []
        for shard in shards:
            try:
                lines = shard.read_bytes().splitlines()
            except OSError:
                continue
            for line in lines:
                try:
                    e = json.loads(line)
                    ok = e["c"] == _digest(e["k"], json.dumps(e["r"], sort_keys=True))
                    ok = ok and _valid(e["r"])
                except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                    ok = False
                if ok:
                    index.setdefault(e["k"], e["r"])
                else:
                    self.damaged += 1
        return index

    def get(self, key: str) -> ExecResult | None:
        with self._lock:
            if self._index is None:
                self._index = self._load()
            r = self._index.get(key) or self._new.get(key)
        return None if r is None else ExecResult(**r, cached=True)

    def put(self, key: str, program: str, res: ExecResult) -> None:
        if not cacheable(program, res):
            return
        d = asdict(res)
        r = {k: d[k] for k in _FIELDS}
        with self._lock:
            self._new[key] = r

    def flush(self) -> Path | None:
        """Write the entries added since the last flush as one new shard (atomically)."""
        with self._lock:
            new, self._new = self._new, {}
            if self._index is not None:
                self._index.update(new)
        if not new:
            return None
        lines = []
        for k, r in new.items():
            c = _digest(k, json.dumps(r, sort_keys=True))
            lines.append(json.dumps({"k": k, "r": r, "c": c}, sort_keys=True))
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{os.getpid()}-{secrets.token_hex(8)}.jsonl"
        return atomic.write_text(path, "\n".join(lines) + "\n")
