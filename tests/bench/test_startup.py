"""What the CLIs that do little work import: ``python -m bench.sweep --help / --list / --status
/ --dry-run`` never import the trainer (Lightning) or the libraries only training, sampling,
scoring or figures use, and ``--help`` not even torch; ``python -m bench.report`` imports no
Lightning. Each case runs in a fresh interpreter and reads ``sys.modules``. (The wall times are
``python -m bench.perf startup``'s; docs/measurements/startup.md.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: never imported by the sweep CLI's planning views
HEAVY = (
    "lightning",
    "pytorch_lightning",
    "matplotlib",
    "seaborn",
    "transformers",
    "datasets",
    "submitit",
    "bench.train",  # the trainer
    "bench.cells",  # the work of a job (imports the trainer)
)

_SWEEP = """
import json, sys

HEAVY = tuple(json.loads(sys.argv[1]))
seen = {}


def heavy(m):
    return any(m == h or m.startswith(h + ".") for h in HEAVY)


def record(step):
    seen[step] = sorted(m for m in sys.modules if m == "torch" or heavy(m))


import bench.sweep
record("import bench.sweep")
from bench import sweep

try:
    sweep.main(["--help"])
except SystemExit:
    pass
record("--help")
assert sweep.main(["--list"]) == 0
record("--list")
for flag in ("--status", "--dry-run"):
    assert sweep.main([sys.argv[2], flag, "--results-dir", sys.argv[3]]) == 0
    record(flag)
print("SEEN " + json.dumps(seen))
"""


def _run(code: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("SEEN ")][-1]
    return json.loads(line[len("SEEN ") :])


def test_sweep_cli_views_import_no_trainer_and_no_heavy_library(tmp_path):
    seen = _run(
        _SWEEP, json.dumps(HEAVY), str(ROOT / "sweeps" / "quickstart.yaml"), str(tmp_path / "r")
    )
    assert list(seen) == [
        "import bench.sweep",
        "--help",
        "--list",
        "--status",
        "--dry-run",
    ]
    # --help parses arguments only: not even torch (the methods' modules need it, planning does)
    assert seen["import bench.sweep"] == [] and seen["--help"] == [], seen
    for step, mods in seen.items():
        assert [m for m in mods if m != "torch"] == [], (step, mods)


_REPORT = """
import json, sys

import bench.report.cli
import bench.report

HEAVY = ("lightning", "pytorch_lightning", "torch", "transformers", "datasets", "submitit",
         "bench.train", "bench.cells")
print("SEEN " + json.dumps(sorted(
    m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in HEAVY)
)))
"""


def test_report_cli_imports_no_lightning_or_torch():
    assert _run(_REPORT) == []


def test_startup_benchmark_times_every_cli_call(tmp_path):
    """``python -m bench.perf startup`` runs each CLI call in a fresh process and writes one row
    per call (the numbers themselves are read off its output, not asserted)."""
    from bench import perf

    out = tmp_path / "startup.json"
    assert perf.main(["startup", "--startup-runs", "1", "--device", "cpu", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["command"] for r in rows] == [
        "sweep --help",
        "sweep --list",
        "sweep --status",
        "sweep --dry-run",
        "report (10-row store)",
    ]
    assert all(r["bench"] == "startup" and r["runs"] == 1 and r["median_s"] > 0 for r in rows)
