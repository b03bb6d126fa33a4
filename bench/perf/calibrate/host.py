"""What the machine adds around the models: the trainer's own cost (:func:`_trainer`), a job's
process start and the disk's rates (:func:`_job`), the GSM8K sandbox (:func:`_sandbox`), the
opt-in tokenizer and Gen. PPL reference LM (:func:`_tokenizer`, :func:`_genppl`) and the
device's memory (:func:`_memory`)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.cost import catalogue as models
from bench.perf import common
from bench.perf.calibrate.backbone import _net
from bench.perf.calibrate.timing import _clock


def _trainer(shape, entry, args, device, rows) -> dict:
    """What ``bench.train.fit`` adds to plain steps: per step (hooks, EMA, clipping, logging) and
    once (trainer set-up, the weights file), from runs of two lengths of the catalogue's
    diffusion reference model without validation or periodic checkpoints (the cost model prices
    those apart)."""
    from bench.config import TrainConfig
    from bench.cost.model import train_factor, train_step_s
    from bench.data.base import TaskData
    from bench.train import fit as train_fit

    size, V, L, B = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, V, (512, L), generator=g)
    clean = torch.zeros_like(x, dtype=torch.bool)
    clean[:, : L // 2] = True
    data = TaskData(x, clean, ~clean)
    # the diffusion reference model of the catalogue (bench.cost.catalogue.REFERENCES)
    label = models.REFERENCES[-1]
    _, name, opts = next(m for m in models.MODELS if m[0] == label)
    runs = {}
    for steps in (10, 40):
        method, bb = common.make_model(name, opts, V, L, size, device)
        cfg = TrainConfig(steps=steps, batch_size=B, lr=1e-3, warmup_steps=2, ema=0.99,
                          checkpoint_every=10_000, logger="csv", val_every=0,
                          threads=torch.get_num_threads())  # fmt: skip
        with tempfile.TemporaryDirectory() as d:
            t0 = _clock(device)
            train_fit(method, bb, data, cfg, d, progress=False)
            runs[steps] = _clock(device) - t0
    per = (runs[40] - runs[10]) / 30
    net = _net(size, V)
    ft, loss_s = train_factor(entry, label, net.head_share(L))
    plain = ft * train_step_s(entry, net, B, L, L) + loss_s
    step_s = max(0.0, per - plain)
    start_s = max(0.0, runs[10] - 10 * per)
    rows.append({"bench": "calibrate", "what": "trainer", "seconds": per, "plain_s": plain,
                 "start_s": start_s})  # fmt: skip
    common.progress(f"calibrate trainer: +{step_s * 1e3:.1f} ms per step, {start_s:.2f} s once")
    return {"step_s": step_s, "start_s": start_s}


def _job(rows) -> dict:
    """A job's process start: ``import bench.cells`` (the trainer, the methods) in a fresh
    interpreter; the disk's write and read rates (a 64 MiB torch file, atomically)."""
    from bench.atomic import atomic_torch_save

    root = Path(__file__).resolve().parents[3]  # the repository
    times = []
    for _ in range(2):
        t0 = _children_cpu()
        subprocess.run([sys.executable, "-c", "import bench.cells, bench.registry"], cwd=root,
                       check=True, capture_output=True)  # fmt: skip
        times.append(_children_cpu() - t0)
    start = min(times)
    buf = torch.zeros(16 * 2**20)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "w.pt"
        t0 = time.perf_counter()
        atomic_torch_save({"w": buf}, p)
        w = time.perf_counter() - t0
        t0 = time.perf_counter()
        torch.load(p, weights_only=True)
        r = time.perf_counter() - t0
    n = buf.numel() * 4
    rows.append({"bench": "calibrate", "what": "job start", "seconds": start,
                 "write_MBps": n / w / 1e6, "read_MBps": n / r / 1e6})  # fmt: skip
    common.progress(f"calibrate job: start {start:.2f} s; disk write {n / w / 1e6:.0f} MB/s")
    return {"start_s": start, "write_bytes_per_s": n / w, "load_bytes_per_s": n / r}


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _sandbox(rows) -> dict:
    """CPU seconds per program of the GSM8K sandbox (32 short programs over every core)."""
    from bench.evaluate.sandbox.runner import Sandbox, SandboxConfig

    prog = "def simple_math_problem():\n    return sum(range(10)) * 3\n"
    programs = [prog] * 32
    try:
        with Sandbox(SandboxConfig()) as sb:
            sb.run_many(programs[:2])  # probe the isolation level first
            t0 = time.perf_counter()
            sb.run_many(programs)
            s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - no sandbox here: keep the shipped value
        common.progress(f"calibrate sandbox: not measured ({type(e).__name__}: {e})")
        return {}
    # wall seconds over every core (the programs' own CPU time leaves out the interpreters'
    # start-up in their namespaces, which is most of a program's cost): on a loaded machine
    # this counts the waits for a core too
    cpu_s = s * (os.cpu_count() or 1) / len(programs)
    rows.append({"bench": "calibrate", "what": "sandbox", "seconds": s, "cpu_s": cpu_s})
    common.progress(f"calibrate sandbox: {cpu_s * 1e3:.1f} CPU-ms per program")
    return {"sandbox_cpu_s": cpu_s}


def _tokenizer(rows) -> dict:
    from bench.text.gpt2 import load_gpt2_tokenizer

    t0 = time.perf_counter()
    tok = load_gpt2_tokenizer()
    s = time.perf_counter() - t0
    rows.append({"bench": "calibrate", "what": "tokenizer", "seconds": s,
                 "source": tok.sflm_source})  # fmt: skip
    common.progress(f"calibrate tokenizer: {s:.1f} s ({tok.sflm_source})")
    return {"tokenizer_load_s": s}


def _genppl(device, rows) -> dict:
    from bench.evaluate.genppl import evaluator as genppl

    t0 = _clock(device)
    try:
        ref = genppl.load_reference("smollm2-135m", device=device)
    except genppl.ReferenceModelError as e:
        common.progress(f"calibrate genppl: not measured ({e})")
        return {}
    load = _clock(device) - t0
    V = int(ref.model.get_output_embeddings().weight.shape[0])
    g = torch.Generator().manual_seed(0)
    items = []
    for _ in range(8):
        ids = torch.randint(0, V, (64,), generator=g)
        ids[ids == ref.eot_id] = (ref.eot_id + 1) % V
        items.append(genppl.Prepared([ref.context_id, *ids.tolist()], [False] + [True] * 64, False))
    genppl.score_prepared(ref, items[:1], batch_tokens=4096)
    t0 = _clock(device)
    _, cnt = genppl.score_prepared(ref, items, batch_tokens=4096)
    s = _clock(device) - t0
    tps = float(cnt.sum()) / s
    rows.append({"bench": "calibrate", "what": "genppl", "seconds": s, "load_s": load,
                 "tokens_per_s": tps})  # fmt: skip
    common.progress(f"calibrate genppl: load {load:.1f} s, {tps:.0f} tokens/s")
    return {"genppl_load_s": load, "genppl_tokens_per_s": tps}


def _memory(device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0
