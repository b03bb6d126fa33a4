"""The warm parent inside the sandbox: one pre-imported interpreter per worker slot that forks a
fresh child per program and never runs a program itself.

:mod:`bench.evaluate.sandbox.warm` starts this file's text as ``python -s -S -B -u -c <text>``
inside the slot's bubblewrap namespaces (read-only view, no network, own PID namespace), as
root with only ``CAP_SETUID`` / ``CAP_SETGID``. Standard library only, like
:mod:`bench.evaluate.sandbox.child`. Frames on stdin / stdout are a 4-byte big-endian length
and a JSON object:

- first the set-up: the texts of :mod:`~bench.evaluate.sandbox.proc` and
  :mod:`~bench.evaluate.sandbox.child`, the slot's ``uid``, the kernel limits ``lim``,
  ``max_out`` (bytes of stdout / stderr kept), the ``runner`` text ('' = none), the programs'
  ``env`` and ``tmp`` (the slot's run directory, the programs' ``/tmp``); the parent loads the
  two texts, imports :data:`PREIMPORT` (``datetime`` as its pure-Python implementation,
  :func:`~bench.evaluate.sandbox.child.block_c_datetime`), freezes its heap and says ready;
- then one request per program (``program``, ``timeout``, ``runner``: bool) and its answer:
  the result channel ``ch``, its byte count ``tot``, the tails ``out`` / ``err`` (latin-1
  text), the exit status ``rc`` (negative = signal), ``timed_out``, and ``clean`` (false when a
  process of the uid survived or ``/tmp`` could not be emptied: the harness then ends this
  parent and starts a fresh one).

Per program: ``fork``; the child gets ``/dev/null`` as stdin, fresh pipes as stdout / stderr /
result channel (descriptor 3) and no other descriptor of the parent, drops to the slot's uid (no
groups; bubblewrap has set ``no_new_privs``), takes ``/tmp`` (the slot's run directory, owned by
that uid, mode 0755) as its working directory and the programs' environment, then
:func:`bench.evaluate.sandbox.child.run` sets the kernel limits and runs the program. The parent
reads the three pipes with the deadline (:func:`bench.evaluate.sandbox.proc.collect`), then
(unless it sees nothing left) a helper forked as the same uid SIGKILLs every process of it
(``kill(-1)``: the program and anything it left, ``setsid`` or not) and empties ``/tmp``; only
then is the child reaped and the next program read. A child therefore starts from the parent's
state, which no program has touched: the same modules, signal dispositions, limits, environment
and an empty ``/tmp``."""

import gc
import json
import os
import signal
import struct
import sys
import time
import types

#: modules the parent imports once, so a program's ``import`` finds them loaded
#: (not ``hashlib``, ``calendar``: the memory they map makes every fork slower, and GSM8K
#: programs seldom import them; a child that does imports them itself)
PREIMPORT = (
    "math", "cmath", "decimal", "fractions", "datetime", "statistics", "random", "re", "json",
    "collections", "itertools", "functools", "operator", "heapq", "bisect", "string", "typing",
    "copy", "numbers",
)  # fmt: skip
RESULT_FD = 3


def read_frame(fd):
    """The next JSON frame on ``fd``; None at end of file."""
    head = _read_exact(fd, 4)
    if head is None:
        return None
    body = _read_exact(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        data = os.read(fd, n - len(buf))
        if not data:
            return None
        buf += data
    return bytes(buf)


def write_frame(fd, obj) -> None:
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def load(name, text):
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    exec(compile(text, name + ".py", "exec"), mod.__dict__)
    return mod


def start_child(req, cfg, child, pipes) -> None:
    """In the forked child: descriptors, uid, working directory, environment, the program."""
    (_, w_res), (_, w_out), (_, w_err) = pipes
    # no setsid / setpgid: a session or group leader could not call setsid() itself (as under
    # the cold path it may); what it starts is ended by uid, not by group (sweep)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(w_out, 1)
    os.dup2(w_err, 2)
    os.dup2(w_res, RESULT_FD)
    os.closerange(RESULT_FD + 1, 1 << 16)
    uid = cfg["uid"]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    os.chdir(cfg["tmp"])  # as the uid: the parent (root without DAC capabilities) cannot enter
    os.environ.clear()
    os.environ.update(cfg["env"])
    runner = cfg["runner"] if req.get("runner") and cfg["runner"] else None
    child.run(RESULT_FD, cfg["lim"], req["program"], runner)


def sweep(cfg, proc) -> bool:
    """Fork a helper as the slot's uid: SIGKILL every process of that uid, empty ``/tmp``.
    True when nothing of the uid is left. Skipped when the parent sees nothing left: no live
    process of the uid, an empty ``/tmp`` it may list (mode 0755, as the harness made it) and no
    System V IPC object of the uid."""
    try:
        if not os.listdir(cfg["tmp"]) and not _alive(cfg["uid"]) and not _ipc_left(cfg["uid"]):
            return True
    except OSError:  # the program changed the mode of /tmp: the helper puts it back
        pass
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            uid, tmp = cfg["uid"], cfg["tmp"]
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(100):
                try:
                    os.kill(-1, signal.SIGKILL)  # every process this uid may signal, but itself
                except OSError:
                    pass
                if not _alive(uid):
                    break
                time.sleep(0.002)
            os.chmod(tmp, 0o755)
            for name in os.listdir(tmp):
                path = os.path.join(tmp, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    proc.rmtree(path)
                else:
                    os.unlink(path)
            code = 0 if not os.listdir(tmp) and not _alive(uid) and not _ipc_left(uid) else 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _alive(uid) -> bool:
    """A process of ``uid`` other than this one that is not a zombie (a zombie runs nothing:
    the program's own, until the parent reaps it, and orphans until bwrap's init does)."""
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if pid.isdigit() and pid != me:
            try:
                if os.stat("/proc/" + pid).st_uid != uid:
                    continue
                with open("/proc/" + pid + "/stat", "rb") as f:
                    state = f.read().rpartition(b")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if state != b"Z":
                return True
    return False


def _ipc_left(uid) -> bool:
    """A System V shared memory segment, semaphore set or message queue of ``uid`` survives
    its process (the slot's IPC namespace outlives the program: the harness restarts it)."""
    for kind in ("shm", "sem", "msg"):
        try:
            with open("/proc/sysvipc/" + kind) as f:
                head, *rows = f.read().splitlines()
        except (OSError, ValueError):
            continue
        cols = [i for i, c in enumerate(head.split()) if c in ("uid", "cuid")]
        for row in rows:
            cells = row.split()
            if any(i < len(cells) and cells[i] == str(uid) for i in cols):
                return True
    return False


def serve(req, cfg, proc, child) -> dict:
    """Run one program in a forked child; the answer frame."""
    t0 = time.monotonic()
    pipes = [os.pipe() for _ in range(3)]
    pid = os.fork()
    if pid == 0:
        try:
            start_child(req, cfg, child, pipes)
        finally:
            os._exit(70)
    for _, w in pipes:
        os.close(w)
    res, out, err = proc.Tail(65536), proc.Tail(cfg["max_out"]), proc.Tail(cfg["max_out"])
    streams = {pipes[0][0]: res, pipes[1][0]: out, pipes[2][0]: err}
    clean = []
    try:
        rc, timed_out = proc.collect(
            pid,
            streams,
            t0 + float(req["timeout"]),
            exited=lambda: proc.exited_nowait(pid, lambda: False),
            kill=lambda: clean.append(sweep(cfg, proc)),
            reap=lambda: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]),
        )
    finally:
        for r, _ in pipes:
            os.close(r)
    return {
        "ch": bytes(res.buf).decode("latin-1"),
        "tot": res.total,
        "out": bytes(out.buf[-out.limit :]).decode("latin-1"),
        "err": bytes(err.buf[-err.limit :]).decode("latin-1"),
        "rc": rc,
        "timed_out": timed_out,
        "clean": all(clean) and bool(clean),
    }


def main() -> None:
    cfg = read_frame(0)
    if cfg is None:
        return
    proc = load("sflm_sandbox_proc", cfg.pop("proc"))
    child = load("sflm_sandbox_child", cfg.pop("child"))
    child.block_c_datetime()
    for name in PREIMPORT:
        __import__(name)
    gc.collect()
    gc.freeze()  # the children share these pages instead of copying them on the first GC
    write_frame(1, {"ready": True})
    while True:
        req = read_frame(0)
        if req is None:
            return
        write_frame(1, serve(req, cfg, proc, child))


if __name__ == "__main__":
    main()
