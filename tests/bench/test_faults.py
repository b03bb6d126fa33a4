"""Fault injection: real faults on the smallest real sweep, each followed by
a re-run to completion that must leave exactly one row per (cell, metric), none lost, no
duplicate training, every checkpoint loadable, and the values of an uninterrupted run (CPU
training resumes bitwise: bench/train/__init__.py's module docstring).

The sweep: sort-8, cpu-mini, MDLM + AR, 20 steps with a checkpoint after every step, one
sample cell per model, local executor with one job at a time (so every job gets the same
thread count and results compare bitwise). Trainings are counted from the jobs' logs: each
``fit`` prints Lightning's ``GPU available`` line, a resumed one also ``Restoring states``.

A summary per fault (trials, rows lost, duplicate trainings, unloadable checkpoints) is
printed and written to ``<pytest basetemp>/faults_summary.json``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import run, wait_until

from bench import locks

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
TIMING = {"train_steps_per_s"}  # metrics that measure time: never equal between runs

SWEEP = """
name: faults
results_dir: {rd}
task: {{name: sort, difficulties: [sort8], n_train: 256, n_valid: 16}}
backbone: {{size: cpu-mini}}
train: {{steps: 20, batch_size: 16, warmup_steps: 2, checkpoint_every: 1, ema: 0.9}}
sample: {{nfe: [4], temperature: [1.0], n_samples: 16, batch_size: 16}}
executor: {{kind: {kind}, max_parallel: 1{extra}}}
methods:
  - {{method: mdlm}}
  - {{method: ar}}
"""

SUMMARY: dict[str, dict] = {}


@pytest.fixture(scope="module", autouse=True)
def summary(tmp_path_factory):
    yield SUMMARY
    if SUMMARY:
        path = tmp_path_factory.getbasetemp() / "faults_summary.json"
        path.write_text(json.dumps(SUMMARY, indent=1, sort_keys=True))
        print(f"\nfault summary ({path}):")
        for fault, c in sorted(SUMMARY.items()):
            print(f"  {fault}: " + ", ".join(f"{k} {v}" for k, v in c.items()))


def _note(fault: str, counts: dict, injected: int = 1) -> None:
    s = SUMMARY.setdefault(
        fault,
        {
            "trials": 0,
            "faults_injected": 0,
            "rows_lost": 0,
            "duplicate_rows": 0,
            "duplicate_trainings": 0,
            "unloadable_checkpoints": 0,
            "values_differing": 0,
        },
    )
    s["trials"] += 1
    s["faults_injected"] += injected
    for k in (
        "rows_lost",
        "duplicate_rows",
        "duplicate_trainings",
        "unloadable_checkpoints",
        "values_differing",
    ):
        s[k] += counts[k]


def _sweep(base: Path, rd: Path | None = None, kind: str = "local", extra: str = "") -> Path:
    path = base / "s.yaml"
    path.write_text(SWEEP.format(rd=rd or base / "results", kind=kind, extra=extra))
    return path


def _plan(path: Path):
    from bench.config import load_sweep
    from bench.plan import plan

    return plan(load_sweep(path), path)


def _driver(path: Path, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.sweep", str(path), "--no-progress", *args],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _complete(path: Path, *args) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [sys.executable, "-m", "bench.sweep", str(path), "--no-progress", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def _rows(rd: Path) -> list[dict]:
    """Every row of every store file (duplicates kept), read without the store's validation."""
    out = []
    for f in sorted((rd / "store").glob("*.json")):
        out += json.loads(f.read_text())["rows"]
    return out


def _trainings(rd: Path, since: set[str] = frozenset()) -> dict[str, tuple[int, int]]:
    """Train-cell id prefix -> (fits, resumed fits), from the local jobs' logs (skipping the
    job folders in ``since``)."""
    out: dict[str, list[int]] = {}
    for folder in sorted((rd / "logs" / "local").glob("*")):
        if folder.name in since:
            continue
        err = (
            (folder / "log.err").read_text(errors="replace")
            if (folder / "log.err").exists()
            else ""
        )
        key = re.match(r"[^-]+-[^-]+-([0-9a-f]{10})-", folder.name).group(1)
        c = out.setdefault(key, [0, 0])
        c[0] += err.count("GPU available:")
        c[1] += err.count("Restoring states from the checkpoint")
    return {k: (a, b) for k, (a, b) in out.items()}


def _job_folders(rd: Path) -> set[str]:
    d = rd / "logs" / "local"
    return {f.name for f in d.iterdir()} if d.is_dir() else set()


def _unloadable(rd: Path) -> list[str]:
    bad = []
    for f in sorted([*(rd / "runs").glob("*/ckpt/*.ckpt"), *(rd / "runs").glob("*/weights.pt")]):
        try:
            obj = torch.load(f, map_location="cpu", weights_only=False)
            assert "global_step" in obj if f.suffix == ".ckpt" else "backbone" in obj
        except Exception as e:  # noqa: BLE001 - any failure to load counts
            bad.append(f"{f.name}: {type(e).__name__}")
    return bad


def _check(
    fault: str,
    rd: Path,
    reference: dict,
    *,
    fits: dict[str, int] | None = None,
    max_resumes: int = 0,
    since: set[str] = frozenset(),
    injected: int = 1,
) -> dict:
    """Compare the store at ``rd`` with ``reference``; count the faults' damage, note it in the
    summary, and return the counts (the caller asserts). ``fits``: expected trainings per
    train-cell id prefix in the job folders not in ``since`` (None: exactly one fresh fit per
    model, at most ``max_resumes`` resumed fits in all)."""
    rows = _rows(rd)
    keys = [(r["cell_id"], r["metric"]) for r in rows]
    got = {(r["cell_id"], r["metric"]): r["value"] for r in rows}
    lost = sorted(set(reference) - set(got))
    differ = sorted(
        k
        for k in set(reference) & set(got)
        if k[1] not in TIMING
        and not (got[k] == reference[k] or (got[k] != got[k] and reference[k] != reference[k]))
    )
    tr = _trainings(rd, since)
    if fits is not None:
        dup = sum(max(0, n - fits.get(k, 0)) for k, (n, _) in tr.items())
    else:
        dup = sum(max(0, (n - r) - 1) for n, r in tr.values()) + max(
            0, sum(r for _, r in tr.values()) - max_resumes
        )
    counts = {
        "rows_lost": len(lost),
        "duplicate_rows": len(keys) - len(set(keys)),
        "duplicate_trainings": dup,
        "unloadable_checkpoints": len(_unloadable(rd)),
        "values_differing": len(differ),
        "extra_rows": sorted(set(got) - set(reference)),
        "detail": {"lost": lost, "differ": differ, "trainings": tr, "unloadable": _unloadable(rd)},
    }
    _note(fault, counts, injected)
    return counts


def _assert_clean(c: dict) -> None:
    assert (
        c["rows_lost"],
        c["duplicate_rows"],
        c["duplicate_trainings"],
        c["unloadable_checkpoints"],
        c["values_differing"],
        c["extra_rows"],
    ) == (0, 0, 0, 0, 0, []), c


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: {(cell_id, metric): value}, its wall time, its results folder."""
    base = tmp_path_factory.mktemp("reference")
    path = _sweep(base)
    t0 = time.monotonic()
    _complete(path)
    wall = time.monotonic() - t0
    rd = base / "results"
    rows = _rows(rd)
    p = _plan(path)
    ids = {c.id for c in (*p.train_cells, *p.sample_cells)}
    assert {r["cell_id"] for r in rows} == ids and len(rows) == len(
        {(r["cell_id"], r["metric"]) for r in rows}
    )
    assert all(n == 1 and r == 0 for n, r in _trainings(rd).values()) and len(_trainings(rd)) == 2
    assert _unloadable(rd) == []
    return {
        "values": {(r["cell_id"], r["metric"]): r["value"] for r in rows},
        "wall": wall,
        "rd": rd,
    }


def _copy_reference(reference, dst: Path) -> Path:
    """A finished results folder to damage (paths inside it are recomputed from the sweep file)."""
    shutil.copytree(reference["rd"], dst, ignore=shutil.ignore_patterns("logs", "sweeps"))
    return dst


# --------------------------------------------------------------------------- the driver dies


@pytest.mark.slow
def test_driver_killed_at_random_points(tmp_path, reference):
    """SIGKILL the driver at seeded random moments (two per trial), re-run it each time: its
    job keeps running and the re-run attaches, so every model is trained exactly once."""
    rng = random.Random(1505)
    for trial in range(2):
        base = tmp_path / f"t{trial}"
        base.mkdir()
        path = _sweep(base)
        for _ in range(2):
            d = _driver(path)
            time.sleep(rng.uniform(1.0, 0.8 * reference["wall"]))
            d.kill()  # SIGKILL: no handler, no clean-up
            d.wait()
        _complete(path)
        c = _check(
            "driver SIGKILL", base / "results", reference["values"], max_resumes=0, injected=2
        )
        _assert_clean(c)


# --------------------------------------------------------------------------- a training job dies


def _train_pid(tc) -> int:
    owner = wait_until(
        lambda: locks.holder(locks.train_lock_path(tc.run_dir)), 600, f"{tc.label()}'s job"
    )
    return owner["pid"]


def _kill_during_checkpoint_write(tc, timeout: float = 600) -> str:
    """SIGKILL the job training ``tc`` while a checkpoint temp file exists (a save in
    progress: bench/atomic.py writes ``.<name>.<pid>.tmp`` then renames it)."""
    pid = _train_pid(tc)
    ckpt = tc.run_dir / "ckpt"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            names = os.listdir(ckpt)
        except FileNotFoundError:
            names = []
        tmp = [n for n in names if n.endswith(".tmp")]
        if tmp and any(n.endswith(".ckpt") for n in names):  # not the very first save
            os.kill(pid, signal.SIGKILL)
            return tmp[0]
        time.sleep(0.002)
    pytest.fail(f"no checkpoint write of {tc.label()} seen in {timeout} s")


@pytest.mark.slow
def test_training_job_killed_while_writing_a_checkpoint(tmp_path, reference):
    """SIGKILL each model's training job: MDLM's in the middle of a checkpoint write, AR's at a
    seeded random moment after its first checkpoint. The re-run resumes both from their last
    complete checkpoint and reaches the uninterrupted run's values."""
    path = _sweep(tmp_path)
    rd = tmp_path / "results"
    mdlm, ar = _plan(path).train_cells
    d = _driver(path)
    _kill_during_checkpoint_write(mdlm)
    wait_until(lambda: (ar.run_dir / "ckpt" / "last.ckpt").exists(), 600, "AR's first checkpoint")
    time.sleep(random.Random(1515).uniform(0.0, 3.0))
    holder = locks.holder(locks.train_lock_path(ar.run_dir))
    if holder is not None:  # else AR's job already finished: one fault fewer
        os.kill(holder["pid"], signal.SIGKILL)
    _, err = d.communicate(timeout=900)
    assert d.returncode == 1 and "mdlm" in err, err  # the killed job is reported as failed
    assert not (mdlm.run_dir / "weights.pt").exists()
    _complete(path)
    c = _check(
        "training job SIGKILL (mid-checkpoint write)",
        rd,
        reference["values"],
        max_resumes=2,
        injected=1 + (holder is not None),
    )
    _assert_clean(c)
    tr = _trainings(rd)
    assert tr[mdlm.id[:10]][1] == 1, tr  # resumed, not restarted
    assert not list(mdlm.run_dir.glob("ckpt/.*.tmp"))  # the killed save's temp file is cleaned up


# --------------------------------------------------------------------------- two drivers


@pytest.mark.slow
def test_two_drivers_on_one_store(tmp_path, reference):
    """Two drivers started together on one sweep: each model is trained by one job only (the
    other driver attaches to it), and the store ends with one row per (cell, metric)."""
    path = _sweep(tmp_path)
    a, b = _driver(path), _driver(path)
    outs = [p.communicate(timeout=900) for p in (a, b)]
    assert (a.returncode, b.returncode) == (0, 0), outs
    c = _check("two drivers at once", tmp_path / "results", reference["values"], max_resumes=0)
    _assert_clean(c)


# --------------------------------------------------------------------------- truncated files


def test_truncated_store_and_checkpoint_files(tmp_path, reference):
    """A finished sweep with damaged files: MDLM's train row and both of its checkpoints
    truncated, its weights gone (training must start again cleanly and reach the same
    weights); AR's sample row truncated and its last.ckpt truncated (only that row is
    recomputed, from the kept sample batches). The re-run trains MDLM once and nothing else."""
    rd = _copy_reference(reference, tmp_path / "results")
    path = _sweep(tmp_path, rd)
    p = _plan(path)
    mdlm, ar = p.train_cells
    [ar_sample] = p.samples_of(ar)
    for f in (
        rd / "store" / f"{mdlm.id}.json",
        rd / "store" / f"{ar_sample.id}.json",
        *(mdlm.run_dir / "ckpt").glob("*.ckpt"),
        ar.run_dir / "ckpt" / "last.ckpt",
    ):
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])
    (mdlm.run_dir / "weights.pt").unlink()
    r = _complete(path)
    assert (rd / "store" / "corrupt").is_dir() and len(
        list((rd / "store" / "corrupt").iterdir())
    ) == 2, r.stderr
    # the truncated AR last.ckpt is not needed (weights and train row are intact): replace it
    # by the trainer's next save is not expected, so drop it before counting unloadable files
    (ar.run_dir / "ckpt" / "last.ckpt").unlink()
    c = _check(
        "truncated store / checkpoint files",
        rd,
        reference["values"],
        fits={mdlm.id[:10]: 1, ar.id[:10]: 0},
    )
    _assert_clean(c)


def test_truncated_weights_are_rebuilt_and_the_train_row_kept(tmp_path, reference):
    """A damaged weights.pt whose train row is in the store: the next job that needs the weights
    (AR's sample row is gone) moves the file aside, rebuilds it from the run's last checkpoint,
    leaves the train row as it was, and recomputes the sample row to the uninterrupted value."""
    rd = _copy_reference(reference, tmp_path / "results")
    path = _sweep(tmp_path, rd)
    p = _plan(path)
    mdlm, ar = p.train_cells
    [ar_sample] = p.samples_of(ar)
    w = ar.run_dir / "weights.pt"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 3])
    (rd / "store" / f"{ar_sample.id}.json").unlink()
    train_row = (rd / "store" / f"{ar.id}.json").read_bytes()
    _complete(path)
    assert len(list(ar.run_dir.glob("weights.pt.corrupt-*"))) == 1
    assert (rd / "store" / f"{ar.id}.json").read_bytes() == train_row
    c = _check(
        "truncated weights.pt (train row intact)",
        rd,
        reference["values"],
        fits={mdlm.id[:10]: 0, ar.id[:10]: 1},
    )
    _assert_clean(c)


def test_truncated_last_checkpoint_falls_back_to_the_previous_one(tmp_path, reference):
    """A truncated ckpt/last.ckpt (torn write on a filesystem without atomic rename, or a bad
    copy) with an intact earlier checkpoint: training resumes from the earlier one (a one-line
    warning), not from scratch and not with a crash, and the results match."""
    rd = _copy_reference(reference, tmp_path / "results")
    path = _sweep(tmp_path, rd)
    mdlm, _ = _plan(path).train_cells
    ckpt = mdlm.run_dir / "ckpt"
    last = ckpt / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    (mdlm.run_dir / "weights.pt").unlink()
    (rd / "store" / f"{mdlm.id}.json").unlink()
    r = _complete(path)
    c = _check("truncated last.ckpt", rd, reference["values"], fits={mdlm.id[:10]: 1})
    _assert_clean(c)
    tr = _trainings(rd)
    assert tr[mdlm.id[:10]] == (1, 1), tr  # resumed (from step20.ckpt)
    [job] = (rd / "logs" / "local").iterdir()
    assert (
        "last.ckpt" in (job / "log.err").read_text()
        and "unreadable" in (job / "log.err").read_text()
    ), r


# --------------------------------------------------------------------------- a full disk


@pytest.fixture
def small_fs(tmp_path):
    """A 24 MiB tmpfs (a real ENOSPC); skips where mounting is not allowed."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here: cannot make a small filesystem")
    r = run("mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt))
    if r.returncode != 0:
        pytest.skip(
            f"cannot mount a size-limited tmpfs (needs root / CAP_SYS_ADMIN): {r.stderr.strip()}"
        )
    try:
        yield mnt
    finally:
        run("umount", "-l", str(mnt))


def _fill(mnt: Path, leave: int) -> Path:
    """Fill ``mnt`` until ``leave`` bytes are free; returns the filler file."""
    filler = mnt / "filler"
    free = shutil.disk_usage(mnt).free
    with open(filler, "ab") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


@pytest.mark.slow
def test_disk_full_while_checkpointing_and_writing_the_report(tmp_path, small_fs, reference):
    """ENOSPC during a checkpoint save fails the job (the previous checkpoint intact, no torn
    file); once space is freed the re-run completes with the uninterrupted values. ENOSPC while
    the report is written fails the report without touching the files of the previous one."""
    rd = small_fs / "results"
    path = _sweep(tmp_path, rd)
    mdlm, _ = _plan(path).train_cells
    filler = _fill(small_fs, 8 << 20)  # room for one step's two checkpoints (~6 MB), not two
    r = subprocess.run(
        [sys.executable, "-m", "bench.sweep", str(path), "--no-progress"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 1 and "No space left on device" in (
        r.stderr
        + "".join(f.read_text(errors="replace") for f in (rd / "logs" / "local").glob("*/log.err"))
    ), r.stderr
    assert not list((rd / "runs").glob("*/ckpt/.*.tmp"))  # the failed save left no temp file
    assert _unloadable(rd) == []
    filler.unlink()
    _complete(path)
    c = _check("disk full (checkpoint)", rd, reference["values"], max_resumes=2)
    _assert_clean(c)

    out = rd / "report"
    rep = [sys.executable, "-m", "bench.report", "--results-dir", str(rd), "--out", str(out)]
    assert (
        subprocess.run(
            rep, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300
        ).returncode
        == 0
    )
    before = {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()}
    assert before
    filler = _fill(small_fs, 0)
    # --force: the store did not change, and a report of unchanged inputs writes nothing
    r = subprocess.run(
        [*rep, "--force"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert r.returncode != 0 and "No space left on device" in r.stderr, r.stderr[-2000:]
    assert not [f.name for f in out.iterdir() if f.name.endswith(".tmp")]
    assert {
        f.name: f.read_bytes() for f in out.iterdir() if f.is_file()
    } == before  # old report intact
    filler.unlink()
    r = subprocess.run(rep, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert {f.name for f in out.iterdir() if f.is_file()} == set(before)


# --------------------------------------------------------------------------- a SLURM node fails


def _slurm_trainings(rd: Path) -> dict[str, tuple[int, int]]:
    """Train-cell id prefix -> (fits, resumed fits), from the SLURM train jobs' logs."""
    state = json.loads((rd / "sweeps" / "faults" / "state.json").read_text())
    out: dict[str, list[int]] = {}
    for jid, info in state["jobs"].items():
        if info.get("kind") != "train":
            continue
        c = out.setdefault(info["cells"][0][:10], [0, 0])
        for log in (rd / "logs" / jid).glob("*_log.err"):
            err = log.read_text(errors="replace")
            c[0] += err.count("GPU available:")
            c[1] += err.count("Restoring states from the checkpoint")
    return {k: (a, b) for k, (a, b) in out.items()}


def _resume_node(node: str) -> None:
    """`state=resume` the node, or check it is already back: with ReturnToService=2 slurmctld
    may return a DOWN node to service itself when its slurmd re-registers, and then resume is
    refused as 'Invalid node state specified'."""
    r = run("scontrol", "update", f"nodename={node}", "state=resume")
    if r.returncode == 0:
        return
    wait_until(
        lambda: (
            not re.search(
                r"down|drain|fail", run("sinfo", "-h", "-n", node, "-o", "%T").stdout, re.I
            )
        ),
        60,
        f"node {node} back in service (resume said: {r.stderr.strip()})",
    )


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_node_down_mid_training(tmp_path, slurm_cluster):
    """`scontrol update state=down` on the node running a train job (SLURM kills the job and
    requeues or fails it), then `state=resume`: a re-run of the driver completes the sweep,
    training resumed from the last checkpoint, never from scratch, one row per (cell, metric).
    Values are not compared with the local reference: one CPU thread per SLURM task."""
    rd = tmp_path / "results"
    path = _sweep(tmp_path, rd, kind="slurm", extra=", time_min: 10, cpus_per_task: 1, mem_gb: 1")
    p = _plan(path)
    mdlm = p.train_cells[0]
    r = subprocess.run(
        [sys.executable, "-m", "bench.sweep", str(path), "--no-progress", "--no-wait"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    state = json.loads((rd / "sweeps" / "faults" / "state.json").read_text())
    jobs = sorted(state["jobs"])
    wait_until(
        lambda: (mdlm.run_dir / "ckpt" / "last.ckpt").exists(),
        600,
        "MDLM's first checkpoint on SLURM",
    )
    out = run("squeue", "-h", "-j", ",".join(jobs), "-t", "R", "-o", "%N").stdout.split()
    node = out[0] if out else run("sinfo", "-h", "-N", "-o", "%N").stdout.split()[0]
    assert (
        run(
            "scontrol", "update", f"nodename={node}", "state=down", "reason=sflm-fault-test"
        ).returncode
        == 0
    )
    try:
        wait_until(
            lambda: (
                not run("squeue", "-h", "-j", ",".join(jobs), "-t", "R", "-o", "%i").stdout.strip()
            ),
            120,
            "the jobs on the downed node to stop",
        )
    finally:
        _resume_node(node)
    try:
        _complete(path)
    finally:
        state = json.loads((rd / "sweeps" / "faults" / "state.json").read_text())
        run("scancel", *sorted(state["jobs"]))
    rows = _rows(rd)
    keys = [(r["cell_id"], r["metric"]) for r in rows]
    want = {c.id for c in (*p.train_cells, *p.sample_cells)}
    tr = _slurm_trainings(rd)
    counts = {
        "rows_lost": len(want - {k[0] for k in keys}),
        "duplicate_rows": len(keys) - len(set(keys)),
        "duplicate_trainings": sum(max(0, (n - r) - 1) for n, r in tr.values()),
        "unloadable_checkpoints": len(_unloadable(rd)),
        "values_differing": 0,
    }
    _note("SLURM node down mid-job", counts)
    assert counts == {
        "rows_lost": 0,
        "duplicate_rows": 0,
        "duplicate_trainings": 0,
        "unloadable_checkpoints": 0,
        "values_differing": 0,
    }, (counts, tr)
    assert tr[mdlm.id[:10]][1] >= 1, tr  # MDLM resumed from its checkpoint
