"""bench.sweep (bench.plan, bench.status) / bench.report as a user runs them."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench import report, sweep
from bench.plan import plan

GOOD = """
name: t
results_dir: {rd}
task: {{name: sudoku, grid: 4, difficulties: [easy, hard], train_mix: true, n_train: 64, \
n_valid: 8, data_dir: {dd}}}
backbone: {{size: cpu-mini}}
train: {{steps: 2, batch_size: 8, warmup_steps: 1, checkpoint_every: 1, ema: 0.5}}
sample: {{nfe: [2], temperature: [1.0], n_samples: 8, batch_size: 4}}
executor: {{kind: debug}}
methods:
  - {{method: ar, decoding: [greedy]}}
  - {{method: mdlm}}
"""


def _write(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def _snapshot(rd: Path):
    return {p: p.stat().st_mtime_ns for p in rd.rglob("*") if p.is_file()} if rd.exists() else {}


BAD = [
    (None, "no such file"),
    ("name: [unclosed\n", "malformed YAML"),
    ("methods: [{method: mdlm}]\nsample: {nfe: [4], bogus: 1}\n", "sample.bogus: unknown key"),
    ("methods: [{method: transformerxl}]\n", "unknown method 'transformerxl'"),
    ("methods: [{method: mdlm}]\nsample: {nfe: [0]}\n", "sample.nfe[0]: must be > 0"),
    (
        "methods: [{method: mdlm}]\nsample: {temperature: [0]}\n",
        "sample.temperature[0]: must be > 0",
    ),
    ("methods: []\n", "methods: must not be empty"),
    ("methods: [{method: mdlm}]\ntask: {difficulties: [extreme]}\n", "task.difficulties[0]"),
    ("methods: [{method: mdlm}]\nseeds: [0, -1]\n", "seeds[1]: must be >= 0"),
]


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    """Per case of :data:`BAD`: ``(path, proc, before, rd)``: the sweep file, the finished
    ``python -m bench.sweep`` run on it (a CompletedProcess), and its results folder with the
    snapshot taken before the run. The nine runs start at once (each mostly waits on its own
    imports, one core each; nothing of one run is another's)."""
    cases = []
    for i, (text, _) in enumerate(BAD):
        tmp = tmp_path_factory.mktemp(f"bad{i}")
        rd = tmp / "results"
        rd.mkdir()
        (rd / "keep.txt").write_text("x")
        before = _snapshot(rd)
        path = tmp / "missing.yaml" if text is None else _write(tmp, f"results_dir: {rd}\n" + text)
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.sweep", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        cases.append((path, proc, before, rd))
    out = []
    try:
        for path, proc, before, rd in cases:
            stdout, stderr = proc.communicate(timeout=300)
            done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
            out.append((path, done, before, rd))
    finally:
        for _, proc, _, _ in cases:
            proc.kill()
            proc.wait()
    return out


@pytest.mark.parametrize("case", range(len(BAD)), ids=[f"{t}-{n}" for t, n in BAD])
def test_bad_input_exits_2_with_one_line(case, bad_runs):
    needle = BAD[case][1]
    path, proc, before, rd = bad_runs[case]
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and str(path.name) in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert _snapshot(rd) == before


def test_end_to_end_then_rerun_does_nothing(tmp_path, capsys):
    """A debug-executor sweep fills the store (one file per cell), a re-run touches no file, and
    the report's CSV / table / figure show both methods with the NFE the samplers really spent."""
    rd, dd = tmp_path / "results", tmp_path / "data"
    path = _write(tmp_path, GOOD.format(rd=rd, dd=dd))
    assert sweep.main([str(path), "--no-progress"]) == 0
    store = sorted((rd / "store").glob("*.json"))
    # 2 train cells + AR (greedy, 2 subsets) + MDLM (1 nfe x 1 T x 2 subsets)
    assert len(store) == 2 + 2 + 2
    before = _snapshot(rd)
    assert sweep.main([str(path), "--no-progress"]) == 0
    assert _snapshot(rd) == before, "re-running a finished sweep must not touch anything"
    out = tmp_path / "rep"
    assert report.main(["--results-dir", str(rd), "--out", str(out)]) == 0
    res = pd.read_csv(out / "results.csv")
    em = res[res.metric == "exact_match"]
    assert set(em.method) == {"ar", "mdlm"} and set(em.subset) == {"easy", "hard"}
    assert res.groupby(["cell_id", "metric"]).size().max() == 1
    assert (out / "sudoku.md").read_text().count("| ar (greedy)") >= 1
    assert (out / "sudoku_exact_match_vs_nfe.png").stat().st_size > 10_000
    # the recorded NFE is what the sampler really spent (AR: generated length of 4x4 = 19)
    assert set(em[em.method == "ar"].nfe) == {19} and set(em[em.method == "mdlm"].nfe) == {2}


def test_dry_run_writes_nothing_and_counts_cells(tmp_path, capsys):
    """--dry-run prints the plan (here "2 train cells") and creates no store."""
    rd, dd = tmp_path / "results", tmp_path / "data"
    path = _write(tmp_path, GOOD.format(rd=rd, dd=dd))
    assert sweep.main([str(path), "--dry-run"]) == 0
    assert not (rd / "store").exists()
    assert "2 train cells" in capsys.readouterr().out


def test_seeds_replicate_models_and_the_report_averages_them(tmp_path):
    """seeds: [0, 3] trains every model twice; the seed-0 cells are the cells of a sweep without
    seeds (its results stay valid), and the report pools the seeds: the mean over seeds and items
    with its two-level interval, and says so (2 seeds x items)."""
    from bench.config import load_sweep

    rd, dd = tmp_path / "results", tmp_path / "data"
    one = plan(load_sweep(_write(tmp_path, GOOD.format(rd=rd, dd=dd))))
    two = plan(load_sweep(_write(tmp_path, GOOD.format(rd=rd, dd=dd) + "seeds: [0, 3]\n")))
    assert len(two.train_cells) == 2 * len(one.train_cells) and len(two.sample_cells) == 2 * len(
        one.sample_cells
    )
    assert {c.id for c in one.train_cells} <= {c.id for c in two.train_cells}
    assert sorted(c.train["seed"] for c in two.train_cells) == [0, 0, 3, 3]
    path = _write(tmp_path, GOOD.format(rd=rd, dd=dd) + "seeds: [0, 3]\n")
    assert sweep.main([str(path), "--no-progress"]) == 0
    res = report.read(rd)
    em = res[(res.metric == "exact_match") & (res.method == "mdlm") & (res.subset == "easy")]
    assert sorted(em["seed"]) == [0, 3]
    out = tmp_path / "rep"
    assert report.main(["--results-dir", str(rd), "--out", str(out)]) == 0
    line = next(
        ln
        for ln in (out / "sudoku.md").read_text().splitlines()
        if ln.startswith("| mdlm (ancestral)")
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[4] == f"2 seeds x {int(em['n'].iloc[0])}"
    v, ci = cells[5].split(" [")
    lo, hi = (float(x) for x in ci.rstrip("]").split(", "))
    assert float(v) == float(f"{100 * em['value'].mean():.1f}") and lo <= float(v) <= hi


def test_status_model_stands_apart_from_its_views_and_the_trainer():
    """The cell-status model (bench.executors.cell_status) loads neither the trainer nor Lightning,
    and the SLURM executor loads the model, not the CLI's views (bench.status)."""
    code = (
        "import sys\n"
        "import bench.executors.cell_status\n"
        "heavy = ('lightning', 'bench.train', 'bench.status')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "import bench.executors.slurm\n"
        "print('bench.status' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["[]", "False"]
