"""``startup`` (opt-in): wall seconds of the CLI calls that do little work, each a fresh process.

``python -m bench.sweep --help``, ``--list``, ``SWEEP --status`` and ``SWEEP --dry-run`` (on
``--startup-sweep``, default ``sweeps/quickstart.yaml``, with a fresh ``--results-dir`` each
run) and ``python -m bench.report`` on a small synthetic store (``--startup-rows`` Sudoku sample
rows, one per registered method in turn, then the next subset; written once, a fresh ``--out``
each run). Each command runs ``--startup-runs`` times in a subprocess (the interpreter of this
process, in ``--startup-root``: this repository unless another tree is named, e.g. an older
checkout for a before / after comparison); the rows give the median, min and max wall seconds.
Most of what these calls cost is importing (``python -X importtime``), so the median moves with
the machine's load: compare runs made back to back (docs/measurements/startup.md).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.config import ConfigError
from bench.perf import common

HELP = "wall seconds of the sweep / report CLIs that do little work (opt-in)"

_ROOT = Path(__file__).resolve().parents[2]
_SUBSETS = ("easy", "medium", "hard")


def add_arguments(group) -> None:
    group.add_argument("--startup-runs", type=int, default=3, help="startup: runs per command")
    group.add_argument(
        "--startup-sweep",
        default="sweeps/quickstart.yaml",
        help="startup: the sweep file of --status / --dry-run (relative: to --startup-root)",
    )
    group.add_argument(
        "--startup-rows", type=int, default=10, help="startup: rows of the report's store"
    )
    group.add_argument(
        "--startup-root",
        default=str(_ROOT),
        help="startup: the tree whose CLIs run (default: this repository)",
    )


def small_store(results_dir: Path, n_rows: int) -> Path:
    """A store of ``n_rows`` synthetic Sudoku sample rows (one cell each): the registered
    methods in turn at their default decoding, each pass over them one subset further."""
    from bench import registry
    from bench.results import Store

    store = Store(results_dir)
    names = sorted(registry.METHODS)
    for i in range(n_rows):
        method = names[i % len(names)]
        subset = _SUBSETS[(i // len(names)) % len(_SUBSETS)]
        row = {
            "task": "sudoku",
            "method": method,
            "variant": "base",
            "decoding": registry.METHODS[method].decodings[0],
            "kind": "sample",
            "subset": subset,
            "metric": "exact_match",
            "value": round(0.1 + 0.8 * ((i * 37) % 100) / 100, 4),
            "n": 256,
            "nfe": 16,
            "temperature": 1.0,
            "train_steps": 600,
            "seed": 0,
        }
        store.write_cell(f"startup-{i:03d}", [row])
    return Path(results_dir)


def _time(argv: list[str], root: Path, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="sflm-startup-") as tmp:
            cmd = [a.replace("{tmp}", tmp) for a in argv]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
            times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            raise ConfigError(f"startup: {' '.join(argv[1:])} exited {proc.returncode}: {tail}")
    return times


def run(model_list, args, device) -> list[dict]:
    if args.startup_runs < 1 or args.startup_rows < 1:
        raise ConfigError("startup: --startup-runs and --startup-rows must be >= 1")
    root = Path(args.startup_root).resolve()
    sweep = Path(args.startup_sweep)
    sweep = sweep if sweep.is_absolute() else root / sweep
    if not sweep.is_file():
        raise ConfigError(f"startup: --startup-sweep: {sweep}: no such file")
    rows = []
    with tempfile.TemporaryDirectory(prefix="sflm-startup-store-") as store:
        small_store(Path(store), args.startup_rows)
        cli = [sys.executable, "-m", "bench.sweep"]
        fresh = ["--results-dir", "{tmp}"]  # a fresh results folder each run
        report = [sys.executable, "-m", "bench.report", "--results-dir", store, "--out", "{tmp}"]
        commands = {
            "sweep --help": [*cli, "--help"],
            "sweep --list": [*cli, "--list"],
            "sweep --status": [*cli, str(sweep), "--status", *fresh],
            "sweep --dry-run": [*cli, str(sweep), "--dry-run", *fresh],
            f"report ({args.startup_rows}-row store)": report,
        }
        for name, argv in commands.items():
            times = _time(argv, root, args.startup_runs)
            common.progress(f"startup {name}: " + ", ".join(f"{t:.2f}" for t in times) + " s")
            rows.append(
                {
                    "bench": "startup",
                    "command": name,
                    "runs": len(times),
                    "median_s": statistics.median(times),
                    "min_s": min(times),
                    "max_s": max(times),
                }
            )
    return rows
