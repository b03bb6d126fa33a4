"""Whether a report folder is current: the report run again on inputs nothing changed in writes
nothing (``python -m bench.report`` says so; ``--force`` rewrites it anyway).

A report's inputs, as one digest (:func:`inputs_digest`):

- the results folder: every file under it except the report's own output folder, by relative
  path, size, modification time and inode (the store, the per-item records, the training logs, the
  failed-run records, the run folders' ``cell.json`` and weights that report items read);
- the code that writes the report: the content of every file of the ``bench`` package, of each
  report plug-in's package (entry-point group ``sflm_bench.report``) and of the paper's numbers
  (``results/paper`` of this repository);
- Python's version and the versions of the libraries the report computes and draws with;
- the command's options (all but ``--open`` and ``--force``).

After a full report, :func:`remember` writes the digest and the listing of the output folder
(every file under it by path, size, modification time and inode) to ``<out>/.report-inputs.json``;
:func:`current` is true when both are still the same, so a report file edited, removed or added
since (``--paper`` output, a figure deleted by hand) makes the next report a full one, and so
does a report that stopped half-way (every file it wrote is a new one: atomic writes), while one
that failed before writing anything (a full disk) leaves the previous report current.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

#: the stamp beside the report (a dot file: the page's file listing leaves it out)
STAMP = ".report-inputs.json"
#: stamp format; a stamp of another version is not current
VERSION = 1
#: options that do not change what the report writes
IGNORED_OPTIONS = ("open", "force")
#: libraries whose version can change the report's numbers or figures
LIBRARIES = ("numpy", "pandas", "scipy", "matplotlib", "seaborn", "jinja2", "torch")


def _walk(root: Path, skip: Path | None = None):
    """(path, os.stat_result) of every file under ``root`` (sorted, links not followed),
    leaving out the folder ``skip``."""
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        subdirs = []
        for e in entries:
            p = Path(e.path)
            if e.is_dir(follow_symlinks=False):
                if skip is None or p != skip:
                    subdirs.append(p)
            else:
                try:
                    yield p, e.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed meanwhile (an atomic write's temporary)
                    continue
        stack.extend(reversed(subdirs))


def _listing(root: Path, skip: Path | None = None, *, hidden: bool = True) -> list[list]:
    """[relative path, size, mtime in ns, inode] of every file under ``root`` (without ``skip``;
    without dot files unless ``hidden``). Files are replaced atomically (a new inode), so a
    rewrite shows even within the file system's timestamp granularity."""
    out = []
    for p, st in _walk(root, skip):
        if not hidden and p.name.startswith("."):
            continue
        out.append([p.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns, st.st_ino])
    return out


def code_roots() -> list[Path]:
    """The folders whose files are the report's code: the ``bench`` package, each report
    plug-in's top-level package (found without importing it) and the paper's numbers."""
    import importlib.util
    from importlib.metadata import entry_points

    import bench
    from bench.plugins import GROUPS

    here = Path(bench.__file__).resolve().parent
    roots = {here, here.parent / "results" / "paper"}
    for ep in entry_points(group=GROUPS["report"]):
        top = ep.value.split(":")[0].split(".")[0]
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue
        if spec.submodule_search_locations:
            roots.update(Path(p).resolve() for p in spec.submodule_search_locations)
        elif spec.origin:
            roots.add(Path(spec.origin).resolve())
    return sorted(roots)


def _code_digest() -> str:
    h = hashlib.sha256()
    for root in code_roots():
        files = [(root, None)] if root.is_file() else _walk(root)
        for p, _ in files:
            if "__pycache__" in p.parts or p.suffix == ".pyc":
                continue
            h.update(f"{p.relative_to(root.parent).as_posix()}\0".encode())
            try:
                h.update(hashlib.sha256(p.read_bytes()).digest())
            except OSError:
                h.update(b"unreadable")
    return h.hexdigest()


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _options(args) -> dict:
    return {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in sorted(vars(args).items())
        if k not in IGNORED_OPTIONS
    }


def inputs_digest(args, results_dir: Path, out: Path) -> str:
    """The digest of everything the report of ``results_dir`` into ``out`` depends on."""
    results_dir, out = Path(results_dir).resolve(), Path(out).resolve()
    what = {
        "results_dir": str(results_dir),
        "out": str(out),
        "files": _listing(results_dir, skip=out),
        "code": _code_digest(),
        "versions": _versions(),
        "options": _options(args),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def _read(out: Path) -> dict | None:
    try:
        stamp = json.loads((Path(out) / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) and stamp.get("version") == VERSION else None


def current(out: Path, digest: str) -> dict | None:
    """The stamp of ``out`` when its report is current (same ``digest``, output folder as the
    report left it), else None."""
    stamp = _read(out)
    if stamp is None or stamp.get("digest") != digest:
        return None
    if stamp.get("files") != _listing(Path(out), hidden=False):
        return None
    return stamp


def remember(out: Path, digest: str) -> None:
    """Write ``out``'s stamp after a full report of inputs ``digest``."""
    from bench import atomic

    stamp = {
        "version": VERSION,
        "digest": digest,
        "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "files": _listing(Path(out), hidden=False),
    }
    atomic.write_text(Path(out) / STAMP, json.dumps(stamp, indent=1) + "\n")
