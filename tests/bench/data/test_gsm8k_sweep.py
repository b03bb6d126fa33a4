"""The program tasks inside the sweep and report: the stand-in end to end, the GSM8K sweep files,
the report's GSM8K section (accuracy with 95 % CIs at every NFE / T, error-bar figure)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench import report, sweep
from bench.config import ConfigError, TaskConfig, load_sweep
from bench.plan import plan
from bench.results import Store

ROOT = Path(__file__).resolve().parents[3]

MINI = """
name: gsm-mini
results_dir: {rd}
task: {{name: arith_standin, n_train: 64, seed: 3, options: {{workers: 4, bootstrap: 200}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 2, batch_size: 8, warmup_steps: 1, checkpoint_every: 1, ema: 0.5}}
sample: {{nfe: [2, 3], temperature: [1.0, 0.5], n_samples: 12, batch_size: 6}}
executor: {{kind: debug}}
methods:
  - {{method: ar, decoding: [greedy]}}
  - {{method: mdlm}}
"""

STATUSES = (
    "ok",
    "wrong",
    "no_answer",
    "syntax_error",
    "runtime_error",
    "timeout",
    "memory",
    "crash",
    "harness_error",
)


@pytest.mark.slow
def test_standin_sweep_end_to_end(tmp_path):
    rd = tmp_path / "results"
    path = tmp_path / "s.yaml"
    path.write_text(MINI.format(rd=rd))
    assert sweep.main([str(path), "--executor", "debug", "--no-progress"]) == 0
    df = Store(rd).read()
    s = df[df["kind"] == "sample"]
    assert set(df["task"]) == {"arith_standin"}  # never labelled GSM8K
    acc = s[s["metric"] == "accuracy"]
    # AR greedy: one cell (temperature-free, NFE = length); MDLM: 2 NFE x 2 T
    assert len(acc) == 1 + 4 and acc["cell_id"].is_unique
    assert set(acc["subset"]) == {"heldout"} and (acc["n"] == 12).all()
    assert (acc["ci_low"] <= acc["value"]).all() and (acc["value"] <= acc["ci_high"]).all()
    assert acc["ci_low"].ge(0).all() and acc["ci_high"].le(1).all()
    mdlm = acc[acc["method"] == "mdlm"]
    assert sorted(zip(mdlm["nfe"], mdlm["temperature"])) == [(2, 0.5), (2, 1.0), (3, 0.5), (3, 1.0)]
    for cell, rows in s.groupby("cell_id"):
        fr = rows.set_index("metric")["value"]
        assert sum(fr[f"status_{k}"] for k in STATUSES) == pytest.approx(1.0), cell
        assert fr["accuracy_plain"] == pytest.approx(fr["status_ok"])
    out = tmp_path / "rep"
    assert report.main(["--results-dir", str(rd), "--out", str(out)]) == 0
    md = (out / "arith_standin.md").read_text()
    assert "### T = 1" in md and "### T = 0.5" in md and "not GSM8K" in md
    assert (out / "arith_standin_accuracy_ci_vs_nfe.png").stat().st_size > 10_000


def _row(method, variant, decoding, nfe, temp, value, lo, hi, n=1319):
    return {
        "sweep": "s",
        "task": "gsm8k",
        "method": method,
        "variant": variant,
        "decoding": decoding,
        "backbone": "small",
        "train_steps": 250_000,
        "seed": 0,
        "kind": "sample",
        "subset": "test",
        "nfe": nfe,
        "temperature": temp,
        "metric": "accuracy",
        "value": value,
        "ci_low": lo,
        "ci_high": hi,
        "n": n,
    }


def test_report_gsm8k_section_and_paper_numbers(tmp_path):
    store = Store(tmp_path)
    rows = [
        _row("ar", "base", "greedy", 311, 1.0, 0.60, 0.57, 0.63),
        _row("mdlm", "base", "ancestral", 8, 1.0, 0.05, 0.04, 0.06),
        _row("mdlm", "base", "ancestral", 1024, 1.0, 0.171, 0.15, 0.19),
        _row("mdlm", "base", "ancestral", 8, 0.1, 0.20, 0.18, 0.22),
        _row("mdlm", "base", "ancestral", 1024, 0.1, 0.33, 0.30, 0.36),
        _row("sflm", "sarch", "top1", 8, 1.0, 0.10, 0.08, 0.12),
        _row("sflm", "sarch", "top1", 1024, 1.0, 0.18, 0.16, 0.20),
    ]
    for i, r in enumerate(rows):
        store.write_cell(f"c{i}", [r])
    text = str(report.program_task_markdown("gsm8k", store.read()))
    t1, t01 = text.split("### T = 1\n")[1].split("### T = 0.1\n")
    assert "| mdlm (ancestral) | 5.0 [4.0, 6.0] | 17.1 [15.0, 19.0] |  |" in t1
    assert "| mdlm (ancestral) | 20.0 [18.0, 22.0] | 33.0 [30.0, 36.0] |  |" in t01
    # AR makes one call per token: its own column; temperature-free decodings in every table
    assert "| ar (greedy) |  |  | 60.0 [57.0, 63.0] (311) |" in t01
    assert "| sflm/sarch (top1) | 10.0 [8.0, 12.0] | 18.0 [16.0, 20.0] |  |" in t01
    assert "not GSM8K" not in text
    out = tmp_path / "rep"
    assert report.main(["--results-dir", str(tmp_path), "--out", str(out)]) == 0
    md = (out / "gsm8k.md").read_text()
    # the generic table: T = 1 at the largest NFE, beside the paper's Table "Accuracy on GSM8K"
    line = next(ln for ln in md.splitlines() if ln.startswith("| mdlm (ancestral) | 1024"))
    assert "17.1 [15.0, 19.0]" in line and line.rstrip(" |").endswith("18.0")
    line = next(ln for ln in md.splitlines() if ln.startswith("| sflm/sarch (top1)"))
    assert line.rstrip(" |").endswith("18.0")
    assert (out / "gsm8k_accuracy_ci_vs_nfe.pdf").stat().st_size > 5_000


def test_paper_numbers_file_matches_the_table():
    paper = pd.read_csv(ROOT / "results" / "paper" / "gsm8k.csv", keep_default_na=False)
    assert set(paper["subset"]) == {"test"} and set(paper["metric"]) == {"accuracy"}
    got = {(r.method, r.variant, r.decoding): r.value for r in paper.itertuples()}
    assert got[("ar", "base", "greedy")] == 0.633 and got[("sflm", "sarch", "top1")] == 0.180
    assert len(got) == len(paper) == 12


def test_sweep_files_plan(monkeypatch):
    smoke = load_sweep(ROOT / "sweeps" / "gsm8k_smoke.yaml")
    assert smoke.task.name == "arith_standin" and smoke.executor.kind == "local"
    p = plan(smoke)
    assert {tc.groups[0] for tc in p.train_cells} == {"heldout"}
    # the paper-scale file plans without its tokenizer (SmolLM's declared |V| = 49,153) or data
    from bench.text import smollm as tokenizers

    def _no_load(*a, **k):
        raise AssertionError("planning loaded the tokenizer")

    monkeypatch.setattr(tokenizers, "load_smollm_tokenizer", _no_load)
    cfg = load_sweep(ROOT / "sweeps" / "gsm8k_nfe.yaml")
    assert (cfg.train.steps, cfg.train.batch_size, cfg.task.options["max_len"]) == (
        250_000,
        512,
        512,
    )
    p = plan(cfg)
    assert {s.subset for s in p.sample_cells} == {"test"}
    assert max(s.nfe for s in p.sample_cells) == 1024
    assert {s.temperature for s in p.sample_cells} == {1.0, 0.1}
    sarch = {s.decoding for s in p.sample_cells if s.train.variant == "sarch"}
    # the paper's S-arch panels: exact, stochastic and the top-k grid, all on one trained model
    from bench.report.paper.catalogue import TOPK_GRID

    assert sarch == {"exact", "stochastic", *(f"top{k}" for k in TOPK_GRID)}
    assert len({s.train.id for s in p.sample_cells if s.train.variant == "sarch"}) == 1
    assert all(s.n_samples == 1319 for s in p.sample_cells)


def test_gsm8k_tokenizer_unavailable_is_a_config_error(tmp_path):
    from bench.data.program.gsm8k import GSM8KTask

    cfg = TaskConfig(
        name="gsm8k", options={"tokenizer": "no/such-tokenizer", "tokenizer_source": "gguf"}
    )
    task = GSM8KTask(cfg)  # cheap: the tokenizer loads on first use
    with pytest.raises(ConfigError, match="task.options.tokenizer"):
        _ = task.tokenizer
    with pytest.raises(ConfigError, match="task.options.tokenizer"):
        _ = task.vocab_size  # not SmolLM: counted from the tokenizer itself


def test_sweep_cli_unavailable_tokenizer_exits_2(tmp_path, capsys):
    path = tmp_path / "g.yaml"
    path.write_text(
        json.dumps(
            {
                "results_dir": str(tmp_path / "r"),
                "task": {
                    "name": "gsm8k",
                    "options": {"tokenizer": "no/such", "tokenizer_source": "gguf"},
                },
                "methods": [{"method": "mdlm"}],
            }
        )
    )
    assert sweep.main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "task.options.tokenizer" in err[0] and "g.yaml" in err[0]
