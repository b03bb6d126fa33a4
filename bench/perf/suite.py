"""``python -m bench.perf [BENCH ...] [flags]``: the table of benchmarks, the shared flags, and
the output (a Markdown table per benchmark on stdout; ``--out`` JSON and ``--md`` Markdown,
written atomically).

A benchmark is a module with ``HELP`` (one line), ``add_arguments(group)`` (its own flags) and
``run(models, args, device) -> rows``; adding one is a new module and one line of
:data:`BENCHMARKS`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

from bench import atomic
from bench.config import ConfigError
from bench.cost.catalogue import BARE, LEGACY, MODELS, SCALES, VARIANTS
from bench.perf import (
    agreement,
    arcache,
    blockcache,
    calibrate,
    genppl,
    sample,
    sandbox,
    startup,
    train,
    velocity,
)

#: name -> benchmark module, in run (and report) order
BENCHMARKS = {
    "train": train,
    "sample": sample,
    "velocity": velocity,
    "agreement": agreement,
    "arcache": arcache,
    "blockcache": blockcache,
    "genppl": genppl,
    "startup": startup,
    "calibrate": calibrate,
    "sandbox": sandbox,
}
BENCHES = tuple(BENCHMARKS)
#: what runs without a benchmark named
DEFAULT = ["train", "sample", "velocity"]


def _loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def table(rows: list[dict]) -> str:
    """A Markdown table of ``rows`` (columns in first-seen order, ``bench`` and ``note`` left
    out; floats to 4 significant digits)."""
    cols = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in ("bench", "note")]
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.perf",
        description="Speed and memory benchmarks: ``python -m bench.perf [train|sample|velocity "
        "...]``.",
    )
    ap.add_argument(
        "benches",
        nargs="*",
        default=list(DEFAULT),
        help=f"any of {', '.join(BENCHMARKS)} (default: {', '.join(DEFAULT)}); each one's "
        "flags are in its group below",
    )
    ap.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda")
    ap.add_argument(
        "--precision",
        default="auto",
        choices=("auto", "32", "bf16-mixed"),
        help="auto: bf16-mixed autocast on CUDA, fp32 on CPU (as the trainer)",
    )
    ap.add_argument(
        "--models",
        default="",
        help="comma-separated labels (default: all of "
        + ", ".join(m[0] for m in MODELS)
        + "; opt-in variants: "
        + ", ".join(m[0] for m in VARIANTS)
        + f"; {BARE!r}, the bare backbone, is always the train table's first row)",
    )
    ap.add_argument(
        "--scale",
        choices=tuple(SCALES),
        help="preset size / |V| / L / batch: "
        + "; ".join(
            f"{k} = {v['size']}, |V| {v['vocab']}, L {v['seq_len']}, batch {v['batch']}"
            for k, v in SCALES.items()
        )
        + " (explicit flags override it)",
    )
    ap.add_argument(
        "--size", help="DiT size for train/sample (default cpu-small; tiny = paper Sudoku)"
    )
    ap.add_argument("--vocab", type=int, help="train/sample vocabulary (default Sudoku: 12)")
    ap.add_argument("--seq-len", type=int, help="train/sample length (default 9x9 Sudoku: 180)")
    ap.add_argument("--batch", type=int, help="train batch (default 32)")
    ap.add_argument("--sample-batch", type=int, help="sampling batch (default: --batch)")
    ap.add_argument(
        "--prompt-frac", type=float, help="fraction of each row given as prompt (default 0.5)"
    )
    ap.add_argument("--nfe", type=int, default=16, help="sampling NFE")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--out", help="write results JSON here (atomically)")
    ap.add_argument("--md", help="also write the tables as Markdown here (atomically)")
    for name, bench in BENCHMARKS.items():
        bench.add_arguments(ap.add_argument_group(name, bench.HELP))
    return ap


def _error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for key, val in {**LEGACY, **(SCALES[args.scale] if args.scale else {})}.items():
        if getattr(args, key) is None:
            setattr(args, key, val)
    if args.sample_batch is None:
        args.sample_batch = args.batch

    unknown = [b for b in args.benches if b not in BENCHMARKS]
    if unknown:
        return _error(f"unknown benchmark {unknown[0]!r} (known: {', '.join(BENCHMARKS)})")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device not in ("cpu", "cuda") or (
        args.device == "cuda" and not torch.cuda.is_available()
    ):
        return _error(f"--device {args.device!r} is not available here")
    if args.precision == "auto":
        args.precision = "bf16-mixed" if args.device == "cuda" else "32"
    named = [s for s in args.models.split(",") if s]
    labels = [s for s in named if s != BARE] if named else [m[0] for m in MODELS]
    bad = [s for s in labels if s not in {m[0] for m in MODELS + VARIANTS}]
    if bad:
        known = ", ".join([BARE] + [m[0] for m in MODELS + VARIANTS])
        return _error(f"--models: unknown model {bad[0]!r} (known: {known})")
    models = [m for m in MODELS + VARIANTS if m[0] in labels]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows: list[dict] = []
    try:
        for name, bench in BENCHMARKS.items():
            if name in args.benches:
                rows += bench.run(models, args, device)
    except ConfigError as e:
        return _error(str(e))
    env = _env(args, argv, device)
    md = _markdown(env, rows, args)
    print("\n".join(md))
    if args.md:
        atomic.write_text(Path(args.md), "\n".join(md) + "\n")
    if args.out:
        atomic.write_text(Path(args.out), json.dumps({"env": env, "rows": rows}, indent=2))
        print(f"\n-> {args.out}")
    return 0


def _env(args, argv, device) -> dict:
    """What the results JSON records of the run: the device, torch, threads, precision, the
    command line, the scale and the 1-min load average at the end."""
    env = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "precision": args.precision,
        "argv": sys.argv[1:] if argv is None else argv,
    }
    env["scale"] = {
        k: getattr(args, k)
        for k in (
            "scale",
            "size",
            "vocab",
            "seq_len",
            "batch",
            "sample_batch",
            "prompt_frac",
            "nfe",
        )
    }
    env["loadavg_1min"] = _loadavg()
    return env


def _markdown(env: dict, rows: list[dict], args) -> list[str]:
    """The Markdown lines: the command, the scale and a table per benchmark that gave rows."""
    md = [
        f"`python -m bench.perf {' '.join(env['argv'])}`",
        "",
        "Scale: "
        + ", ".join(f"{k} {v}" for k, v in env["scale"].items())
        + f"; 1-min load average at the end: {env['loadavg_1min']}",
    ]
    for name in BENCHMARKS:
        sel = [r for r in rows if r["bench"] == name]
        if sel:
            md += [
                "",
                f"## {name} ({env['device']}, {args.precision}, {env['threads']} threads)",
                "",
                table(sel),
            ]
    return md
