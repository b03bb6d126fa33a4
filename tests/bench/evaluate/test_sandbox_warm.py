"""The warm path (a pre-imported parent inside the sandbox forks one child per program), the
fixed clock and entropy, and the verdict cache (bench/evaluate/sandbox/{warm,zygote,cache}.py).

What one program does must not reach the next one in the same parent: files, environment,
modules, signal handlers, limits, processes, System V IPC; a timeout or memory bomb ends its
child only. Two runs of a program give the same result (warm or cold); the cache serves a
repeat only under the same program, grader and settings, and a damaged entry is run again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from test_sandbox import PROGRAMS, require_warm  # rootdir-relative, as test_html_browser

from bench.evaluate.gsm8k import REFERENCE_RUNNER, grade
from bench.evaluate.sandbox import cache as sandbox_cache
from bench.evaluate.sandbox import runner as sandbox_runner
from bench.evaluate.sandbox import warm as sandbox_warm
from bench.evaluate.sandbox.runner import Sandbox, SandboxConfig

# program A: changes everything a later program could notice, then answers 7
_SPOIL = """
import os, sys, math, signal, resource, subprocess, builtins, json
def simple_math_problem():
    for d in (".", "/tmp", os.environ.get("HOME", "."), "/dev/shm", "/var/tmp"):
        try:
            with open(os.path.join(d, "left_by_a.txt"), "w") as f:
                f.write("a")
        except OSError:
            pass
    os.makedirs("sub/dir", exist_ok=True)
    os.environ["LEFT_BY_A"] = "1"
    os.putenv("LEFT_BY_A_PUT", "1")
    math.pi = 3
    sys.modules["json"] = None
    sys.modules["spoiled_mod"] = math
    builtins.sum = lambda *a: 41
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, lambda *a: None)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    resource.setrlimit(resource.RLIMIT_NOFILE, (8, 8))
    resource.setrlimit(resource.RLIMIT_CPU, (1, 1))
    os.umask(0o777)
    if os.fork() == 0:  # a process that outlives the program, in its own session
        os.setsid()
        import time
        while True:
            time.sleep(1)
    os.chmod(".", 0o500)
    return 7
"""

# program B: 42 when nothing of A is visible, else a code naming what leaked
_CHECK = """
import os, sys, math, signal, resource, builtins
def zombie(pid):
    with open("/proc/" + pid + "/stat") as f:
        return f.read().rpartition(")")[2].split()[0] == "Z"
def simple_math_problem():
    checks = [
        not any(
            os.path.exists(os.path.join(d, "left_by_a.txt"))
            for d in (".", "/tmp", os.environ.get("HOME", "."), "/dev/shm", "/var/tmp")
        ),
        not os.path.exists("sub"),
        "LEFT_BY_A" not in os.environ and "LEFT_BY_A_PUT" not in os.environ,
        math.pi > 3.14 and sys.modules.get("json") is not None,
        "spoiled_mod" not in sys.modules and sum([1, 2]) == 3,
        signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL,
        not signal.pthread_sigmask(signal.SIG_BLOCK, []),
        resource.getrlimit(resource.RLIMIT_NOFILE) == (__NOFILE__, __NOFILE__),
        resource.getrlimit(resource.RLIMIT_CPU)[0] > 1,
        os.umask(0o022) == 0o022,
        os.access(".", os.W_OK),
        not [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()
             and os.stat("/proc/" + p).st_uid == os.getuid() and not zombie(p)],
    ]
    bad = [i for i, ok in enumerate(checks) if not ok]
    return 42 if not bad else 100 + bad[0]
"""

_IPC = """
import ctypes
def simple_math_problem():
    libc = ctypes.CDLL(None, use_errno=True)
    return 7 if libc.shmget(0, 4096, 0o1000 | 0o600) >= 0 else -1  # IPC_PRIVATE, IPC_CREAT
"""
_IPC_CHECK = """
import os
def simple_math_problem():
    with open("/proc/sysvipc/shm") as f:
        return 42 if len(f.read().splitlines()) == 1 else 1
"""

# every clock and entropy source a program would ordinarily read, printed
_NOISE = """
import time, random, os, uuid, secrets, datetime, hashlib
def simple_math_problem():
    r = random.Random()
    random.seed()
    print(time.time(), time.time_ns(), time.monotonic(), time.perf_counter(),
          time.process_time(), time.localtime(), time.strftime("%Y-%m-%d %H:%M:%S"),
          datetime.datetime.now(), datetime.datetime.utcnow(), datetime.date.today(),
          random.random(), r.random(), os.urandom(8).hex(), uuid.uuid4(),
          secrets.token_hex(8), random.SystemRandom().random(), hash("abc"),
          list({"x", "y", "z", "w"}), hashlib.sha256(os.urandom(4)).hexdigest())
    return 42
"""


def _sandbox(tmp_path, **kw) -> Sandbox:
    kw.setdefault("timeout_s", 5)
    kw.setdefault("workers", 1)
    return Sandbox(SandboxConfig(base_dir=str(tmp_path / "sbx"), **kw))


def _parent_pid(sb: Sandbox, slot: int = 0) -> int:
    return sb._warm._parents[slot].proc.pid


def test_a_program_cannot_affect_the_next_one(tmp_path):
    nofile = SandboxConfig().nofile
    check = _CHECK.replace("__NOFILE__", str(nofile))
    with _sandbox(tmp_path) as sb:
        require_warm(sb)
        first = sb.run(check)
        assert (first.status, first.value) == ("done", 42), first
        spoil = sb.run(_SPOIL)
        assert (spoil.status, spoil.value) == ("done", 7), spoil
        after = sb.run(check)
        assert (after.status, after.value) == ("done", 42), after
        # one slot, one parent: both checks ran in children of the same warm parent, and it
        # is not the parent that ran anything (its modules are the pristine ones)
        assert sb.run(check).value == 42


def test_ipc_left_by_a_program_gets_a_fresh_parent(tmp_path):
    with _sandbox(tmp_path) as sb:
        require_warm(sb)
        assert sb.run(_IPC_CHECK).value == 42
        before = _parent_pid(sb)
        assert sb.run(_IPC).value == 7
        assert sb.run(_IPC_CHECK).value == 42  # a new IPC namespace: the segment is gone
        assert _parent_pid(sb) != before


def test_bombs_end_their_child_only(tmp_path):
    """A timeout, memory bomb, fork bomb or kill of the parent ends that child; the parent
    (the same process throughout) and the programs beside and after it go on."""
    names = ["memory_bomb", "infinite_loop", "fork_bomb", "kill_parent_and_group", "memory_creep"]
    with _sandbox(tmp_path, timeout_s=3, memory_mb=128, workers=2) as sb:
        require_warm(sb)
        assert sb.run(PROGRAMS["benign_math"][0]).value == 42
        parents = {0: _parent_pid(sb)}
        progs = [PROGRAMS[n][0] for n in names] + [PROGRAMS["benign_math"][0]] * 4
        res = sb.run_many(progs)
        statuses = [grade(r, 42)["status"] for r in res]
        assert statuses[3] in ("crash", "ok")  # it may kill its own group: itself
        statuses[3] = "ok"
        assert statuses == ["memory", "timeout", "timeout", "ok", "memory"] + ["ok"] * 4, [
            (r.status, r.detail) for r in res
        ]
        parents[1] = _parent_pid(sb, 1)
        assert sb.run(PROGRAMS["benign_math"][0]).value == 42
        assert {s: _parent_pid(sb, s) for s in parents} == parents


def test_a_warm_parent_that_cannot_start_leaves_the_cold_path(tmp_path, monkeypatch):
    """A parent that never says it is ready: the sandbox ends it, says why and runs programs on
    the cold path, with nothing of that parent left (its bwrap, its run directory)."""
    with _sandbox(tmp_path) as sb:
        require_warm(sb)
    monkeypatch.setattr(sandbox_warm, "ZYGOTE_TEXT", "import time\ntime.sleep(600)\n")
    monkeypatch.setattr(sandbox_runner, "CANARY_TIMEOUT_S", 5.0)  # the wait for "ready"
    # the warm parents of sandboxes other tests' tasks still hold (a task keeps its sandbox
    # until it is collected) are this process's children too: only new ones count
    before = {p for p in _children(os.getpid()) if _comm(p) == "bwrap"}
    with _sandbox(tmp_path) as sb:
        assert sb.mode == "cold"
        assert any(r.startswith("warm: harness_error") for r in sb.rejected), sb.rejected
        assert sb.run(PROGRAMS["benign_math"][0]).value == 42
        assert os.listdir(sb.warm_dir) == []
        bwraps = {p for p in _children(os.getpid()) if _comm(p) == "bwrap"} - before
        assert bwraps == set()


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def test_clock_and_entropy_are_fixed_on_both_paths(tmp_path):
    outs = []
    for warm in (True, False):
        with _sandbox(tmp_path, warm=warm) as sb:
            if warm:
                require_warm(sb)
            for _ in range(2):
                r = sb.run(_NOISE)
                assert r.status == "done", r
                outs.append(r.stdout)
    assert len(set(outs)) == 1, outs
    assert "2000-01-01 00:00:00" in outs[0]


def _entries(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.jsonl"))


def test_cache_serves_repeats_and_misses_on_another_grader_or_setting(tmp_path):
    root = tmp_path / "cache"
    progs = [PROGRAMS[n][0] for n in ("benign_math", "wrong_answer", "read_stdin")]
    with _sandbox(tmp_path, cache_dir=str(root), workers=2) as sb:
        first = sb.run_many(progs + [progs[0]])  # a repeat inside the batch runs once
    assert [r.cached for r in first] == [False, False, False, True]
    assert first[3].value == first[0].value == 42
    assert len(_entries(root)) == 1
    with _sandbox(tmp_path, cache_dir=str(root), workers=2) as sb:
        again = sb.run_many(progs)
    assert all(r.cached for r in again)
    assert [(r.status, r.value, r.detail) for r in again] == [
        (r.status, r.value, r.detail) for r in first[:3]
    ]
    for other in ({"runner": REFERENCE_RUNNER}, {"memory_mb": 512}, {"timeout_s": 4}):
        with _sandbox(tmp_path, cache_dir=str(root), workers=2, **other) as sb:
            assert not any(r.cached for r in sb.run_many(progs)), other
    # a program text that names a way around the fixed clock is never kept, nor a wall-clock
    # timeout (it depends on the machine's load)
    with _sandbox(tmp_path, cache_dir=str(root), timeout_s=1) as sb:
        k = [PROGRAMS["segfault"][0], PROGRAMS["infinite_loop"][0]]
        sb.run_many(k)
        assert not any(r.cached for r in sb.run_many(k))


def test_a_damaged_cache_entry_is_run_again(tmp_path):
    root = tmp_path / "cache"
    progs = [PROGRAMS["benign_math"][0], PROGRAMS["wrong_answer"][0]]
    with _sandbox(tmp_path, cache_dir=str(root)) as sb:
        sb.run_many(progs)
    (shard,) = _entries(root)
    lines = shard.read_text().splitlines()
    # entry 0: its answer changed (valid JSON, stale checksum); entry 1: cut in the middle
    e = json.loads(lines[0])
    e["r"]["value"] = 41 if e["r"]["value"] == 42 else 42
    shard.write_text(json.dumps(e) + "\n" + lines[1][: len(lines[1]) // 2] + "\n")
    # a forged entry with a right checksum but a value no run can produce
    forged = dict(json.loads(lines[0]))
    forged["r"] = {**forged["r"], "kind": "int", "value": "42"}
    forged["c"] = sandbox_cache._digest(forged["k"], json.dumps(forged["r"], sort_keys=True))
    (shard.parent / "forged.jsonl").write_text(json.dumps(forged) + "\n")
    with _sandbox(tmp_path, cache_dir=str(root)) as sb:
        res = sb.run_many(progs)
        assert sb.cache.damaged == 3
    assert [r.cached for r in res] == [False, False]
    assert [grade(r, 42)["status"] for r in res] == ["ok", "wrong"]
