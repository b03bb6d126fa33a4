"""Where a training step's time goes: torch.profiler tables of ``bench.perf``'s train step.

    python scripts/perf_profile.py [--scale tinygsm-cpu] [--models bare,mdlm,duo,...]
                                   [--steps 2] [--top 10] [--threads 0] [--out FILE.md]

For each model (``bare`` = the bare backbone; any ``bench.perf`` label, fast-path variants
included) one untimed step, then ``--steps`` profiled steps of exactly ``bench.perf``'s train
step (same batch, AdamW, post-step hook). Prints, per model, the wall time per step and the
top ``--top`` ops by self CPU time as Markdown (written atomically to ``--out`` when given).
CPU activity only (on a GPU, the CUDA kernels' own time needs ProfilerActivity.CUDA).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import types
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from bench import atomic
from bench.cost import catalogue as models
from bench.perf import common
from bench.perf import train as train_bench


def _entry(label: str, scale: dict, device: torch.device):
    if label == "bare":
        bare = train_bench.Bare(scale["vocab"], scale["size"], device)
        return bare, bare.backbone
    known = {m[0]: m for m in models.MODELS + models.VARIANTS}
    _, name, opts = known[label]
    method, backbone = common.make_model(
        name, opts, scale["vocab"], scale["seq_len"], scale["size"], device
    )
    models.fast_path(label, method, backbone)
    return method, backbone


def profile_model(label: str, scale: dict, steps: int, top: int) -> str:
    device = torch.device("cpu")
    method, backbone = _entry(label, scale, device)
    batch = common.sudoku_batch(
        scale["batch"], scale["vocab"], scale["seq_len"], device, prompt_frac=scale["prompt_frac"]
    )
    args = types.SimpleNamespace(batch=scale["batch"], precision="32")
    backbone.train()
    opt = train_bench.optimizer(backbone, device)
    step = functools.partial(train_bench.train_step, method, backbone, opt, batch, args, device)
    step()  # warm-up (allocator, lazy initialisation)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - t0) / steps
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    lines = [
        f"### {label}: {wall * 1e3:.0f} ms/step wall (profiled), "
        f"self CPU {total / steps / 1e3:.0f} ms/step",
        "",
        "| op | self CPU ms/step | % | calls/step |",
        "|---|---|---|---|",
    ]
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]:
        lines.append(
            f"| `{e.key}` | {e.self_cpu_time_total / steps / 1e3:.1f} | "
            f"{100 * e.self_cpu_time_total / max(total, 1):.1f} | {e.count / steps:g} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/perf_profile.py", description=__doc__.split("\n")[0])
    ap.add_argument("--scale", default="tinygsm-cpu", choices=tuple(models.SCALES))
    ap.add_argument("--models", default="bare,mdlm,duo,sflm,sflm/sarch")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--out", help="write the tables here as Markdown (atomically)")
    args = ap.parse_args(argv)
    known = {"bare", *(m[0] for m in models.MODELS + models.VARIANTS)}
    labels = [s for s in args.models.split(",") if s]
    bad = [s for s in labels if s not in known]
    if bad or args.steps < 1:
        what = f"unknown model {bad[0]!r}" if bad else f"--steps {args.steps} < 1"
        print(f"error: {what} (models: {', '.join(sorted(known))})", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    scale = models.SCALES[args.scale]
    cmd = "python scripts/perf_profile.py " + " ".join(sys.argv[1:] if argv is None else argv)
    parts = [f"`{cmd}` ({torch.get_num_threads()} threads, torch {torch.__version__})"]
    for label in labels:
        parts.append(profile_model(label, scale, args.steps, args.top))
        print(parts[-1] + "\n", flush=True)
    if args.out:
        atomic.write_text(Path(args.out), "\n\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
