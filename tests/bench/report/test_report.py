"""The report puts our numbers beside the right paper rows (main table and ablation tables)
and tabulates alpha*(delta) against its Monte-Carlo check."""

import json

import pandas as pd

from bench import report
from bench.results import Store


def _sample_rows(method, variant, decoding, values, nfe=16):
    return [
        {
            "task": "sudoku",
            "method": method,
            "variant": variant,
            "decoding": decoding,
            "kind": "sample",
            "subset": sub,
            "metric": "exact_match",
            "value": v,
            "n": 256,
            "nfe": nfe,
            "temperature": 1.0,
            "train_steps": 600,
        }
        for sub, v in zip(("easy", "medium", "hard"), values)
    ]


def _write(store, cell, rows):
    for r in rows:  # one cell per subset, as the sweep writes them
        store.write_cell(f"{cell}-{r['subset']}", [r])


def _table(text: str, title: str) -> pd.DataFrame:
    """Parse the markdown table under the section whose heading contains ``title``."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("#") and title in ln)
    body = []
    for ln in lines[i + 1 :]:
        if ln.startswith("#"):
            break
        if ln.startswith("|") and not ln.startswith("|---"):
            body.append([c.strip() for c in ln.strip("|").split("|")])
    return pd.DataFrame(body[1:], columns=body[0])


def test_ablation_rows_get_our_value_and_the_papers(tmp_path):
    """Ablation and main tables take our headline row (paper decoding, largest NFE) beside the
    paper's number; alpha_star.md tabulates alpha* against its Monte-Carlo probability."""
    s = Store(tmp_path)
    _write(s, "a", _sample_rows("sflm", "cos2", "exact", (0.5, 0.25, 0.125)))
    _write(
        s, "b", _sample_rows("sflm", "cos2", "top1", (0.9, 0.9, 0.9))
    )  # not the paper's decoding
    _write(
        s, "c", _sample_rows("sflm", "cos2", "exact", (0.1, 0.1, 0.1), nfe=4)
    )  # smaller NFE: not headline
    _write(s, "d", _sample_rows("mdlm", "base", "ancestral", (0.3, 0.2, 0.1)))
    assert report.main(["--results-dir", str(tmp_path)]) == 0
    md = (tmp_path / "report" / "sudoku.md").read_text()
    abl = _table(md, "Paper table `renorm`").set_index("model")
    assert abl.loc["sflm/cos2", "easy"] == "50.0" and abl.loc["sflm/cos2", "hard"] == "12.5"
    assert abl.loc["sflm/cos2", "easy (paper)"] == "89.9"  # tab:sfm_renorm, Cosine^2 no trunc
    assert abl.loc["sflm/renorm", "easy"] == ""  # not run
    main = _table(md, "sudoku: exact match").set_index("model")
    assert main.loc["mdlm (ancestral)", "medium"].startswith("20.0")
    # these rows record no recipe, so nothing shows the paper's protocol was run: the paper's
    # numbers stand in their own table, not as neighbouring columns
    assert "easy (paper)" not in main.columns
    paper = _table(md, "The paper's numbers").set_index("model")
    assert paper.loc["MDLM", "easy (paper)"] == "92.0"
    assert "train.steps 600 (paper 20000)" in md and "task.grid unrecorded (paper 9)" in md
    alpha = _table(
        (tmp_path / "report" / "alpha_star.md").read_text(), "alpha*(delta) vs Monte Carlo"
    )
    assert len(alpha) == 30  # 3 vocab sizes x 5 d x 2 delta
    row = alpha[
        (alpha["vocab"] == "50,000") & (alpha["d"] == "768") & (alpha["delta"] == "0.1")
    ].iloc[0]
    assert row["alpha*(delta)"] == "0.1215"  # paper: 0.121 (TinyGSM: 1 - 0.879)
    p = float(row["P[target nearest]"].split("+-")[0])
    assert 0.8 < p < 0.95  # a probability near, not at, 1 - delta


def test_no_alpha_star_table_without_sflm_rows(tmp_path):
    _write(Store(tmp_path), "d", _sample_rows("mdlm", "base", "ancestral", (0.3, 0.2, 0.1)))
    assert report.main(["--results-dir", str(tmp_path)]) == 0
    assert not (tmp_path / "report" / "alpha_star.md").exists()
    assert "this sweep ran none of these models" in (tmp_path / "report" / "sudoku.md").read_text()


def test_program_task_table_keeps_every_training_seed(tmp_path):
    """GSM8K-style tables show one bootstrap CI per model and seed, never only the first seed."""
    s = Store(tmp_path)
    for seed, v in ((0, 0.25), (1, 0.75)):
        s.write_cell(
            f"g{seed}",
            [
                {
                    "task": "gsm8k",
                    "method": "mdlm",
                    "variant": "base",
                    "decoding": "ancestral",
                    "kind": "sample",
                    "subset": "test",
                    "metric": "accuracy",
                    "value": v,
                    "ci_low": v - 0.1,
                    "ci_high": v + 0.1,
                    "n": 100,
                    "nfe": 8,
                    "temperature": 1.0,
                    "seed": seed,
                    "train_steps": 10,
                }
            ],
        )
    text = str(report.program_task_markdown("gsm8k", report.read(tmp_path)))
    rows = [ln for ln in text.splitlines() if ln.startswith("| mdlm")]
    assert (
        len(rows) == 2
        and "seed 0" in rows[0]
        and "25.0" in rows[0]
        and "seed 1" in rows[1]
        and "75.0" in rows[1]
    )


# ------------------------------------------------------------------- the report reads rows only


def _new_rows(
    task_cls,
    method_cls,
    decoding,
    subset,
    metrics,
    *,
    variant="base",
    nfe=16,
    temperature=1.0,
    ci=0.05,
):
    """Sample rows as bench/results/rows.py builds them (report columns from task and method
    classes)."""
    from bench.results import sample_columns

    return [
        {
            "task": task_cls.name,
            "method": method_cls.name,
            "variant": variant,
            "decoding": decoding,
            "kind": "sample",
            "subset": subset,
            "metric": m,
            "value": v,
            "ci_low": v - ci,
            "ci_high": v + ci,
            "n": 256,
            "nfe": nfe,
            "temperature": temperature,
            "train_steps": 600,
            "seed": 0,
            **sample_columns(task_cls, method_cls, decoding, subset, m),
        }
        for m, v in metrics.items()
    ]


_ISOLATED = """
import sys
from bench import report
assert report.main(["--results-dir", sys.argv[1], "--out", sys.argv[2]]) == 0
heavy = ("bench.registry", "bench.data", "bench.cells", "baselines", "sflm.method", "torch")
print("IMPORTED", sorted(m for m in sys.modules if m.startswith(heavy)))
"""


def test_report_of_synthetic_store_imports_no_method_registry_or_torch(tmp_path):
    """Given only rows (no training), the report renders the per-task tables and figures in a
    process that never imports the registry, a task, a method or torch."""
    import subprocess
    import sys
    from pathlib import Path

    from baselines.ar import AR
    from baselines.mdlm import MDLM
    from bench.data.program.gsm8k import GSM8KTask
    from bench.data.sudoku.task import SudokuTask

    s = Store(tmp_path)
    for sub in (
        "hard",
        "easy",
        "medium",
    ):  # written out of order: the task's subset_order sorts them
        sm = {
            "exact_match": 0.5,
            "cell_accuracy": 0.75,
            "blank_accuracy": 0.625,
            "valid_grid": 0.25,
        }
        s.write_cell(f"m-{sub}", _new_rows(SudokuTask, MDLM, "ancestral", sub, sm))
        s.write_cell(
            f"a-{sub}", _new_rows(SudokuTask, AR, "greedy", sub, {"exact_match": 0.125}, nfe=19)
        )
    for nfe, v in ((8, 0.1), (64, 0.2)):
        s.write_cell(
            f"g{nfe}", _new_rows(GSM8KTask, MDLM, "ancestral", "test", {"accuracy": v}, nfe=nfe)
        )
    s.write_cell("gar", _new_rows(GSM8KTask, AR, "greedy", "test", {"accuracy": 0.6}, nfe=311))
    out = tmp_path / "rep"
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run(
        [sys.executable, "-c", _ISOLATED, str(tmp_path), str(out)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "IMPORTED []" in proc.stdout, proc.stdout
    md = (out / "sudoku.md").read_text()
    main = _table(md, "sudoku: exact match").set_index("model")
    # model, nfe, T, train steps, seeds x items, subsets (no paper columns: these rows record no
    # recipe, so nothing shows the paper's protocol)
    assert list(main.columns[-3:]) == ["easy", "medium", "hard"], list(main.columns)
    assert main.loc["mdlm (ancestral)", "medium"] == "50.0 [45.0, 55.0]"
    assert main.loc["ar (greedy)", "nfe"] == "19"
    # the secondary metrics, in the task's declared order
    heads = [
        ln for ln in md.splitlines() if ln.startswith("## ") and "(%)" in ln and "Paper" not in ln
    ]
    assert heads[:3] == ["## cell accuracy (%)", "## blank accuracy (%)", "## valid grid (%)"]
    g = (out / "gsm8k.md").read_text()
    # the program kind: CI table, AR's NFE is its length (own column), "GSM8K" is no stand-in
    assert "| ar (greedy) |  |  | 60.0 [55.0, 65.0] (311) |" in g and "not GSM8K" not in g
    assert (out / "gsm8k_accuracy_ci_vs_nfe.png").is_file() and (
        out / "sudoku_exact_match_vs_nfe.pdf"
    ).is_file()
    assert not (out / "alpha_star.md").exists()


def test_the_rows_decide_not_the_names(tmp_path):
    """A task and a method the report has never heard of render from their report columns alone:
    subset order, headline metric, program kind, NFE-is-length and temperature-free flags."""
    cols = {
        "task": "newtask",
        "method": "newm",
        "variant": "base",
        "kind": "sample",
        "n": 100,
        "train_steps": 1,
        "seed": 0,
        "task_kind": "program",
        "task_title": "New Task",
        "stand_in_for": "Big Benchmark",
    }
    rows = []
    for sub, rank in (("zeta", 0), ("alpha", 1)):  # declared order, not alphabetical
        for metric, mrank, v in (("score", 0, 0.5), ("accuracy", None, 0.9)):
            rows.append(
                {
                    **cols,
                    "subset": sub,
                    "subset_rank": rank,
                    "metric": metric,
                    "metric_rank": mrank,
                    "value": v,
                    "ci_low": v - 0.1,
                    "ci_high": v + 0.1,
                    "nfe": 7,
                    "temperature": 1.0,
                    "decoding": "once",
                    "nfe_is_length": True,
                    "temperature_free": True,
                    "default_decoding": True,
                }
            )
    for i, r in enumerate(rows):
        Store(tmp_path).write_cell(f"c{i}", [r])
    Store(tmp_path).write_cell(
        "t",
        [
            {
                **cols,
                "kind": "sample",
                "subset": "zeta",
                "subset_rank": 0,
                "metric": "score",
                "metric_rank": 0,
                "value": 0.25,
                "ci_low": 0.2,
                "ci_high": 0.3,
                "nfe": 4,
                "temperature": 0.5,
                "decoding": "multi",
                "nfe_is_length": False,
                "temperature_free": False,
                "default_decoding": False,
            }
        ],
    )
    out = tmp_path / "rep"
    assert report.main(["--results-dir", str(tmp_path), "--out", str(out)]) == 0
    md = (out / "newtask.md").read_text()
    main = _table(md, "newtask: score").set_index("model")
    assert list(main.columns[4:]) == ["zeta", "alpha"]  # after model, nfe, T, steps, seeds x items
    assert (
        main.loc["newm (once)", "alpha"] == "50.0 [40.0, 60.0]"
    )  # the headline is `score`, not accuracy
    assert "Task `newtask` is the CPU stand-in, not Big Benchmark." in md
    t05 = md.split("### T = 0.5")[1]
    # the temperature-free decoding appears at T = 0.5 too, in the `length` column (NFE = length)
    assert (
        "| newm (once) |  | 50.0 [40.0, 60.0] (7) |" in t05
        and "| newm (multi) | 25.0 [20.0, 30.0] |  |" in t05
    )


def test_rows_of_older_stores_get_the_old_defaults(tmp_path):
    """Rows without report columns (stores written before them) are completed in one place with
    what the report then derived from names; results.csv of such a store keeps its old columns."""
    from bench.results import COLUMNS, REPORT_COLUMNS, with_report_columns

    s = Store(tmp_path)
    _write(s, "a", _sample_rows("ar", "base", "greedy", (0.5, 0.5, 0.5)))
    _write(s, "f", _sample_rows("sflm", "base", "top1", (0.5, 0.5, 0.5)))
    _write(s, "m", _sample_rows("mdlm", "base", "ancestral", (0.5, 0.5, 0.5)))
    s.write_cell(
        "cell", [{**_sample_rows("mdlm", "base", "greedy", (0.5,))[0], "metric": "cell_accuracy"}]
    )
    s.write_cell(
        "g",
        [
            {
                **_sample_rows("ar", "base", "sample", (0.5,))[0],
                "task": "arith_standin",
                "subset": "heldout",
                "metric": "accuracy",
            }
        ],
    )
    raw = s.read()
    for p in s.dir.glob("*.json"):  # as an older writer left them: no report keys at all
        rows = s.rows(p.stem)
        p.write_text(
            json.dumps([{k: v for k, v in r.items() if k not in REPORT_COLUMNS} for r in rows])
        )
    old = Store(tmp_path).read()
    assert list(old.columns) == [c for c in COLUMNS if c not in REPORT_COLUMNS]
    assert len(old) == len(raw)
    f = with_report_columns(old)
    key = f.set_index(["task", "method", "decoding", "subset", "metric"])
    assert key.loc[
        ("sudoku", "ar", "greedy", "easy", "exact_match"), ["nfe_is_length", "temperature_free"]
    ].tolist() == [True, True]
    assert key.loc[("sudoku", "sflm", "top1", "hard", "exact_match"), "temperature_free"]
    assert key.loc[("sudoku", "sflm", "top1", "hard", "exact_match"), "subset_rank"] == 2
    assert not key.loc[("sudoku", "sflm", "top1", "hard", "exact_match"), "default_decoding"]
    assert key.loc[("sudoku", "mdlm", "ancestral", "easy", "exact_match"), "default_decoding"]
    assert key.loc[("sudoku", "mdlm", "greedy", "easy", "cell_accuracy"), "metric_rank"] == 1
    assert key.loc[("sudoku", "mdlm", "ancestral", "medium", "exact_match"), "metric_rank"] == 0
    g = key.loc[("arith_standin", "ar", "sample", "heldout", "accuracy")]
    assert (g["task_kind"], g["stand_in_for"], g["metric_rank"]) == ("program", "GSM8K", 0)
    assert not g["temperature_free"] and g["nfe_is_length"]
    # rows that carry the columns are left as written, even where the old names would say otherwise
    f.loc[f["method"] == "ar", "nfe_is_length"] = False
    assert with_report_columns(f).equals(f)


def test_cells_write_the_report_columns_of_their_task_and_method_instances(tmp_path):
    """bench/results/rows.py's rows carry the columns the report reads, from the instances that ran:
    AR greedy (NFE = length, temperature-free), S-FLM with a sampled last step (top-1 then
    depends on T), Sudoku's subset order and metric ranks, GSM8K's kind and title."""
    from types import SimpleNamespace

    from helpers import make_method

    from bench.data.program.gsm8k import GSM8KTask
    from bench.data.sudoku.task import SudokuTask
    from bench.evaluate.metrics import MetricValue
    from bench.results import rows as store_rows

    tc = SimpleNamespace(
        sweep="s",
        task={"name": "sudoku"},
        method="ar",
        variant="base",
        backbone={"size": "cpu-mini"},
        train={"seed": 0},
        options={},
        id="t0",
        groups=["easy"],
        results_dir=str(tmp_path),
        run_dir=tmp_path / "runs" / "ar-base-t0",
    )
    c = SimpleNamespace(train=tc, temperature=1.0, decoding="greedy", subset="medium")
    metrics = [
        MetricValue("exact_match", 0.5, 8),
        MetricValue("valid_grid", 0.25, 8),
        MetricValue("other", 0.1, 8),
    ]
    kw = {"task": SudokuTask, "train_steps": 1, "nfe": 19, "wall_s": 0.1}
    em, vg, other = store_rows.sample_rows(c, metrics, method=make_method("ar"), **kw)
    assert (em["nfe_is_length"], em["temperature_free"], em["default_decoding"]) == (
        True,
        True,
        False,
    )
    assert (em["subset_rank"], em["metric_rank"], vg["metric_rank"], other["metric_rank"]) == (
        1,
        0,
        3,
        None,
    )
    assert (em["task_kind"], em["task_title"], em["stand_in_for"]) == ("generic", "sudoku", "")
    c.decoding = "top1"
    sflm = make_method("sflm", {"final_decode": "sample"})
    (row, *_) = store_rows.sample_rows(c, metrics, method=sflm, **kw)
    assert (row["nfe_is_length"], row["temperature_free"]) == (False, False)
    res = SimpleNamespace(steps=10, seconds=1.0, steps_per_s=10.0, final_loss=0.5)
    train = store_rows.train_rows(tc, res, 123, task=GSM8KTask)
    assert {(r["task_kind"], r["task_title"]) for r in train} == {("program", "GSM8K")}
    assert all(r["metric_rank"] is None for r in train if "metric_rank" in r)
    Store(tmp_path).write_cell("c", [em, vg, other])  # the store accepts them as written
    assert Store(tmp_path).read()["nfe_is_length"].tolist() == [True, True, True]


_PLUGIN = '''
"""Report items of a package that is not ours: a section with its own flag, a paper label."""
from bench import atomic
from bench.report.items import Artifact, Section, cli_flag


def _hello(sec, df, out, args):
    return [atomic.write_text(out / "hello.md", f"# hello {args.hello_name}: {len(df)} rows\\n")]


def _figure(a, df, out, args):
    return [atomic.write_text(out / f"{a.label}.md", f"# {a.title}\\n")]


ITEMS = [
    Section(name="hello", render=_hello, flags=(cli_flag("--hello-name", default="world"),)),
    Artifact(name=LABEL, kind="table", title="A demo table", sweep="none", render=_figure),
]
'''


def _outside_package(site, entry: str, label: str) -> None:
    """An installed distribution ``demo-report`` (its dist-info written by hand: what pip leaves)
    whose entry point of group sflm_bench.report is ``entry``."""
    import textwrap

    (site / "demo_report").mkdir(parents=True)
    (site / "demo_report" / "__init__.py").write_text(f"LABEL = {label!r}\n" + _PLUGIN)
    info = site / "demo_report-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-report\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(f"""
        [sflm_bench.report]
        {entry}
        """)
    )


def _report(site, *args):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(root)])}
    cmd = [sys.executable, "-m", "bench.report", *args]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_an_outside_package_adds_report_items(tmp_path):
    """A section with its own flag and a paper label, from an installed package's entry point:
    written by the report, listed by --list, rendered by --figure."""
    site = tmp_path / "site"
    _outside_package(site, "demo = demo_report:ITEMS", "tab-demo")
    _write(Store(tmp_path), "a", _sample_rows("ar", "base", "greedy", (0.5, 0.5, 0.5)))
    out = tmp_path / "rep"
    r = _report(site, "--results-dir", str(tmp_path), "--out", str(out), "--hello-name", "you")
    assert r.returncode == 0, r.stderr
    assert (out / "hello.md").read_text() == "# hello you: 3 rows\n"
    assert (out / "sudoku.md").is_file() and (out / "training.md").is_file()
    r = _report(site, "--results-dir", str(tmp_path), "--list")
    assert r.returncode == 0, r.stderr
    labels = [ln.split()[0] for ln in r.stdout.splitlines() if not ln.startswith(" ")]
    assert labels[-1] == "tab-demo" and "tab-sudoku" in labels  # after the paper's labels
    r = _report(site, "--results-dir", str(tmp_path), "--out", str(out), "--figure", "tab-demo")
    assert r.returncode == 0, r.stderr
    assert (out / "paper" / "tab-demo.md").read_text() == "# A demo table\n"


def test_a_clashing_or_broken_report_plugin_is_one_line_naming_the_package(tmp_path):
    cases = [
        ("demo = demo_report:ITEMS", "tab-sudoku", "'tab-sudoku' is already taken by sflm-bench"),
        ("demo = demo_report:LABEL", "tab-x", "is not a list of report items"),
        ("demo = demo_report.missing:ITEMS", "tab-x", "failed to import"),
    ]
    for i, (entry, label, message) in enumerate(cases):
        site = tmp_path / f"site{i}"
        _outside_package(site, entry, label)
        r = _report(site, "--results-dir", str(tmp_path), "--list")
        assert r.returncode == 2, (entry, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and "demo-report" in lines[0], r.stderr
