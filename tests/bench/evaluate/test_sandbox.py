"""The sandbox against checked-in hostile programs (tests/fixtures/gsm8k_hostile).

Each fixture states its expected status(es) on a ``# expect:`` line and the isolation features
it needs on ``# needs:`` lines (a fork bomb is only run where RLIMIT_NPROC binds, i.e. with a
private uid or a user namespace). The whole set runs once per path (the warm path: children
forked from a parent inside the sandbox; the cold path: a fresh interpreter each), in parallel,
with a 1.5 s deadline; the tests then check grading, deadlines, bounded output, leftovers and
untouched files.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.evaluate.gsm8k import grade
from bench.evaluate.sandbox import levels as sandbox_levels
from bench.evaluate.sandbox.result import interpret
from bench.evaluate.sandbox.runner import (
    STATUSES,
    ExecResult,
    Sandbox,
    SandboxConfig,
    SandboxError,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "gsm8k_hostile"
GOLD = 42
TIMEOUT = 1.5
MAX_OUT = 4096
MEMORY_MB = 128  # small, so the memory bombs fail fast (they touch every page they get)
SECRET = "SFLM_HOSTILE_SECRET"
README = Path(__file__).resolve().parents[3] / "README.md"


def _load() -> dict[str, tuple[str, set[str], list[str]]]:
    out = {}
    for p in sorted([*FIXTURES.glob("*.py"), *FIXTURES.glob("*.prog")]):
        text = p.read_text(encoding="utf-8")
        expect = re.search(r"^# expect: (\S+)$", text, re.M)
        assert expect, f"{p.name}: no '# expect:' line"
        out[p.stem] = (
            text,
            set(expect.group(1).split("|")),
            re.findall(r"^# needs: (\S+)$", text, re.M),
        )
    return out


PROGRAMS = _load()


def _supported(need: str, feats: set[str]) -> bool:
    return {
        "nproc": bool({"uid", "userns"} & feats),
        "separate_uid_or_pidns": bool({"uid", "pidns"} & feats),
        "uid": "uid" in feats,
        "netns": "netns" in feats,
        "fsview": "bwrap" in feats,
    }[need]


@pytest.fixture(scope="module")
def outside_file():
    """A file any user may read, in a directory any user may enter, outside every run dir."""
    d = tempfile.mkdtemp(prefix="sflm-outside-")
    os.chmod(d, 0o755)
    path = Path(d) / "dataset.txt"
    path.write_text("world-readable data")
    path.chmod(0o644)
    yield path
    shutil.rmtree(d, ignore_errors=True)


def _with_paths(text: str, outside: Path) -> str:
    return text.replace("__OUTSIDE_FILE__", str(outside)).replace("__README__", str(README))


def _procs_left(sb: Sandbox) -> list[str]:
    """Processes that belong to this sandbox: its uids, or a cwd inside its base dir."""
    left = []
    uids = sb.uid_range
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            st = os.stat(f"/proc/{pid}")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if (uids is not None and st.st_uid in uids) or cwd.startswith(sb.base_dir):
            with open(f"/proc/{pid}/stat") as f:
                left.append(f"{pid} uid={st.st_uid} cwd={cwd} {f.read()[:60]}")
    return left


def require_warm(sb: Sandbox) -> None:
    """Skip where this machine has no warm path (no bubblewrap, not root); fail where it has
    one that did not start."""
    if sb.level.warm is None:
        if os.environ.get("SFLM_REQUIRE_BWRAP") == "1" and os.geteuid() == 0:
            pytest.fail(f"SFLM_REQUIRE_BWRAP=1 as root but no warm path: {sb.rejected}")
        pytest.skip(f"no warm path under {sb.isolation} (bubblewrap as root)")
    assert sb.mode == "warm", sb.rejected


@pytest.fixture(scope="module", params=["warm", "cold"])
def batch(request, tmp_path_factory, outside_file):
    victim_dir = tmp_path_factory.mktemp("victim")
    (victim_dir / "victim.txt").write_text("precious")
    sbx_parent = tmp_path_factory.mktemp("sbx")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    old_cwd = os.getcwd()
    os.environ[SECRET] = "s3cret"
    sb = Sandbox(
        SandboxConfig(
            timeout_s=TIMEOUT,
            workers=4,
            max_output_bytes=MAX_OUT,
            memory_mb=MEMORY_MB,
            base_dir=str(sbx_parent),
            warm=request.param == "warm",
        )
    )
    if request.param == "warm":
        require_warm(sb)
    else:
        assert sb.mode == "cold"
    feats = set(sb.isolation.split("+"))
    names, texts, skipped = [], [], {}
    for name, (text, _, needs) in PROGRAMS.items():
        missing = [n for n in needs if not _supported(n, feats)]
        if missing:
            skipped[name] = missing
            continue
        names.append(name)
        text = text.replace("__PORT__", str(port)).replace("__VICTIM_DIR__", str(victim_dir))
        texts.append(_with_paths(text, outside_file))
    try:
        os.chdir(victim_dir)  # the harness's cwd holds victim.txt: relative paths must miss it
        t0 = time.monotonic()
        results = sb.run_many(texts)
        wall = time.monotonic() - t0
    finally:
        os.chdir(old_cwd)
        os.environ.pop(SECRET, None)
    time.sleep(0.2)
    ns = SimpleNamespace(
        sb=sb,
        feats=feats,
        victim_dir=victim_dir,
        listener=listener,
        wall=wall,
        skipped=skipped,
        left=_procs_left(sb),
        run_dirs=os.listdir(sb.base_dir),
        # the warm parents' run directories (the programs' /tmp) are emptied after each program
        warm_left=[
            f"{d.name}/{f}" for d in Path(sb.warm_dir).glob("slot-*") for f in os.listdir(d)
        ],
        res={n: r for n, r in zip(names, results)},
        graded={n: grade(r, GOLD) for n, r in zip(names, results)},
    )
    yield ns
    listener.close()
    sb.close()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_fixture_graded_as_expected(batch, name):
    if name in batch.skipped:
        pytest.skip(f"isolation {batch.sb.isolation} lacks {batch.skipped[name]}")
    _, expect, _ = PROGRAMS[name]
    row, res = batch.graded[name], batch.res[name]
    assert row["status"] in expect, (name, row, res.detail, res.stderr[-300:])
    assert row["correct"] == (row["status"] == "ok")
    assert row["status"] in STATUSES


def test_deadline_is_enforced_from_outside(batch):
    for name, res in batch.res.items():
        # wall-clock deadline + kill + bounded drain; never the 3600 s the programs ask for
        assert res.elapsed_s < TIMEOUT + 2.0, (name, res.elapsed_s)
    for name in ("orphan_keeps_pipe", "orphan_same_group", "thread_left_running"):
        if name in batch.res:  # answered at once: the leftover pipe holder did not stall us
            assert batch.res[name].elapsed_s < TIMEOUT, (name, batch.res[name].elapsed_s)


def test_nothing_left_behind(batch):
    assert batch.left == []
    assert batch.run_dirs == []  # every private directory was removed
    assert batch.warm_left == []
    if "delete_absolute" in batch.res:
        assert not os.path.exists("/tmp/sflm_hostile_leftover")
        assert not os.path.exists("/etc/sflm_hostile_marker")


def test_files_outside_the_sandbox_untouched(batch):
    assert (batch.victim_dir / "victim.txt").read_text() == "precious"
    assert batch.res["delete_relative"].detail == "FileNotFoundError"


def test_output_is_bounded_and_drained(batch):
    flood = batch.res["output_flood"]
    assert 0 < len(flood.stdout.encode()) <= MAX_OUT and set(flood.stdout) <= {"x", "\n"}
    chatty = batch.res["chatty_then_answer"]
    assert chatty.value == GOLD and len(chatty.stderr.encode()) <= MAX_OUT
    assert batch.res["benign_prints"].stdout.strip() == "The answer is 42"
    assert batch.graded["benign_prints"]["value_source"] == "stdout"


def test_malicious_values_never_compare(batch):
    assert batch.res["always_equal"].kind == "other"
    assert batch.res["always_equal_object"].value == "<Always>"
    assert batch.res["huge_int"].kind == "huge_int"
    assert batch.res["bool_return"].value == "<bool>"
    assert batch.res["nan_return"].value == "nan"
    assert batch.graded["benign_fractions"]["value"] == 42  # Fraction(42, 1) -> int


def test_no_network_in_netns(batch):
    if "netns" not in batch.feats:
        pytest.skip("no network namespace here")
    assert batch.res["network"].value == GOLD
    with pytest.raises(BlockingIOError):
        batch.listener.accept()


def test_harness_and_siblings_survive(batch):
    # kill_parent_and_group, fork_bomb and memory bombs ran beside benign programs
    for name in ("benign_math", "benign_datetime", "benign_float", "orphan_same_group"):
        assert batch.graded[name]["status"] == "ok", (name, batch.res[name])
    batch.sb.self_test()


def test_runtime_errors_and_crashes_are_named(batch):
    assert batch.res["segfault"].detail == "SIGSEGV"
    assert batch.res["read_stdin"].detail == "EOFError"
    assert batch.res["sys_exit"].detail == "SystemExit"
    assert batch.res["big_file"].detail in ("OSError", "FileTooLarge")
    assert batch.res["os_exit_nonzero"].detail.startswith("exit 3")


def test_files_outside_the_run_dir_are_invisible(tmp_path, outside_file, monkeypatch):
    """Under bubblewrap's view a program can neither see nor read a world-readable file
    outside its run directory (the test's, the repository's README, /etc/passwd); under the
    levels without the view the same program reads them."""
    program = _with_paths(PROGRAMS["read_outside"][0], outside_file)

    def unavailable(msg):  # CI (.ci/run sets SFLM_REQUIRE_BWRAP=1) must have the view
        if os.environ.get("SFLM_REQUIRE_BWRAP") == "1":
            pytest.fail(f"SFLM_REQUIRE_BWRAP=1 but {msg}")
        pytest.skip(msg)

    if sandbox_levels.find_bwrap() is None:
        unavailable("bubblewrap (bwrap) not installed: apt-get install bubblewrap (setup.sh)")
    with Sandbox(SandboxConfig(timeout_s=5, workers=1, base_dir=str(tmp_path))) as sb:
        if not sb.level.fsview:
            unavailable(f"bwrap is installed but its levels failed here: {sb.rejected}")
        assert sb.isolation.startswith("bwrap+rlimits+") and "pidns" in sb.isolation
        res = sb.run(program)
        assert (res.status, res.value) == ("done", 42), res
        assert sb.run(_CAT_TMP).value == 0  # the private /tmp holds only the program itself
    # the same program without the view reads at least the test's file and /etc/passwd (the
    # README too where the checkout is readable by the programs' uid)
    monkeypatch.setattr(sandbox_levels, "find_bwrap", lambda: None)
    with Sandbox(SandboxConfig(timeout_s=5, workers=1, base_dir=str(tmp_path))) as sb:
        assert not sb.level.fsview
        res = sb.run(program)
        assert res.status == "done" and res.value >= 42 + 4, (sb.isolation, res)


def test_best_level_without_the_view_leaves_nothing(tmp_path, monkeypatch):
    """Where bwrap is missing, the next level still ends everything (a program that left the
    group with setsid is killed by uid: util-linux's --kill-child does not survive setpriv)."""
    monkeypatch.setattr(sandbox_levels, "find_bwrap", lambda: None)
    names = ["benign_math", "setsid_sleep", "orphan_keeps_pipe", "segfault"]
    with Sandbox(
        SandboxConfig(timeout_s=1.0, workers=2, memory_mb=MEMORY_MB, base_dir=str(tmp_path))
    ) as sb:
        feats = set(sb.isolation.split("+"))
        if not _supported("separate_uid_or_pidns", feats):
            pytest.skip(f"isolation {sb.isolation} cannot end a setsid program")
        res = sb.run_many(PROGRAMS[n][0] for n in names)
        time.sleep(0.2)
        assert [grade(r, GOLD)["status"] for r in res] == ["ok", "timeout", "ok", "crash"]
        assert res[3].detail == "SIGSEGV"
        assert _procs_left(sb) == []


_CAT_TMP = (
    "import os\n"
    "def simple_math_problem():\n"
    "    return len(set(os.listdir('/tmp')) - {'program.py'})\n"
)


def test_rlimits_level_without_namespaces(tmp_path):
    """The weakest level (no namespaces, no uid change) still kills the group and cleans up."""
    progs = [
        PROGRAMS[n][0] for n in ("benign_math", "infinite_loop", "orphan_same_group", "memory_bomb")
    ]
    with Sandbox(
        SandboxConfig(
            timeout_s=1.0,
            workers=2,
            isolation="rlimits",
            memory_mb=MEMORY_MB,
            base_dir=str(tmp_path),
        )
    ) as sb:
        assert sb.isolation == "rlimits" and sb.uid_range is None
        res = sb.run_many(progs)
        time.sleep(0.2)
        assert [grade(r, GOLD)["status"] for r in res] == ["ok", "timeout", "ok", "memory"]
        assert _procs_left(sb) == []
        assert os.listdir(sb.base_dir) == []


def test_results_do_not_depend_on_worker_count(tmp_path):
    names = [
        "benign_math",
        "wrong_answer",
        "read_stdin",
        "float_close",
        "float_far",
        "missing_function",
        "syntax_error",
        "os_exit_zero",
    ]
    statuses = []
    for workers in (1, 3):
        with Sandbox(SandboxConfig(timeout_s=5, workers=workers, base_dir=str(tmp_path))) as sb:
            statuses.append(
                [grade(r, GOLD)["status"] for r in sb.run_many(PROGRAMS[n][0] for n in names)]
            )
    assert statuses[0] == statuses[1]
    assert statuses[0] == [
        "ok",
        "wrong",
        "runtime_error",
        "ok",
        "wrong",
        "no_answer",
        "syntax_error",
        "no_answer",
    ]


def test_broken_interpreter_is_a_sandbox_error_not_wrong_answers(tmp_path):
    with pytest.raises(SandboxError, match="canary"):
        Sandbox(SandboxConfig(python="/bin/false", base_dir=str(tmp_path)))


def test_interpret_result_channel():
    assert interpret(b"", 0, 1, False).status == "harness_error"  # never started
    assert interpret(b"", 0, None, True).status == "harness_error"
    assert interpret(b"S\n", 2, -9, True).status == "timeout"
    assert interpret(b"S\n", 2, -24, False).status == "timeout"  # SIGXCPU
    assert interpret(b"S\n", 2, -11, False).detail == "SIGSEGV"
    assert interpret(b"S\n", 2, 0, False).status == "no_answer"
    ok = interpret(b"S\nR\tdone\tint\t-17\t\n", 20, 0, False)
    assert (ok.status, ok.kind, ok.value) == ("done", "int", -17)
    assert interpret(b"S\nR\tdone\tfloat\t1.5\t\n", 20, 0, False).value == 1.5
    # forged / doubled / malformed lines are not answers
    for bad in (
        b"S\nR\tdone\tint\t1\t\nR\tdone\tint\t2\t\n",
        b"S\nR\tdone\tint\t1e9\t\n",
        b"S\nR\tdone\tint\t1\n",
        b"S\nR\tbogus\t\t\t\n",
        b"S\nhello\n",
    ):
        assert interpret(bad, len(bad), 0, False).status == "no_answer", bad
    assert interpret(b"S\nR\truntime_error\t\t\tKeyError\n", 30, 0, False).detail == "KeyError"


def test_config_validation():
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxConfig(timeout_s=0)
    with pytest.raises(ValueError, match="isolation"):
        SandboxConfig(isolation="docker")
    assert ExecResult("ok").to_dict()["status"] == "ok"
