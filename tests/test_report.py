"""The report puts our numbers beside the right paper rows (main table and ablation tables)
and tabulates alpha*(delta) against its Monte-Carlo check."""

import pandas as pd

from bench import report
from bench.results import Store


def _sample_rows(method, variant, decoding, values, nfe=16):
    return [{"task": "sudoku", "method": method, "variant": variant, "decoding": decoding, "kind": "sample",
             "subset": sub, "metric": "exact_match", "value": v, "n": 256, "nfe": nfe, "temperature": 1.0,
             "train_steps": 600} for sub, v in zip(("easy", "medium", "hard"), values)]


def _write(store, cell, rows):
    for r in rows:  # one cell per subset, as the sweep writes them
        store.write_cell(f"{cell}-{r['subset']}", [r])


def _table(text: str, title: str) -> pd.DataFrame:
    """Parse the markdown table under the section whose heading contains ``title``."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("#") and title in ln)
    body = []
    for ln in lines[i + 1:]:
        if ln.startswith("#"):
            break
        if ln.startswith("|") and not ln.startswith("|---"):
            body.append([c.strip() for c in ln.strip("|").split("|")])
    return pd.DataFrame(body[1:], columns=body[0])


def test_ablation_rows_get_our_value_and_the_papers(tmp_path):
    s = Store(tmp_path)
    _write(s, "a", _sample_rows("sflm", "cos2", "exact", (0.5, 0.25, 0.125)))
    _write(s, "b", _sample_rows("sflm", "cos2", "top1", (0.9, 0.9, 0.9)))  # not the paper's decoding
    _write(s, "c", _sample_rows("sflm", "cos2", "exact", (0.1, 0.1, 0.1), nfe=4))  # smaller NFE: not headline
    _write(s, "d", _sample_rows("mdlm", "base", "ancestral", (0.3, 0.2, 0.1)))
    assert report.main(["--results-dir", str(tmp_path)]) == 0
    md = (tmp_path / "report" / "sudoku.md").read_text()
    abl = _table(md, "Paper table `renorm`").set_index("model")
    assert abl.loc["sflm/cos2", "easy"] == "50.0" and abl.loc["sflm/cos2", "hard"] == "12.5"
    assert abl.loc["sflm/cos2", "easy (paper)"] == "89.9"  # tab:sfm_renorm, Cosine^2 no trunc
    assert abl.loc["sflm/renorm", "easy"] == ""  # not run
    main = _table(md, "sudoku: exact match").set_index("model")
    assert main.loc["mdlm (ancestral)", "easy (paper)"] == "92.0"
    assert main.loc["mdlm (ancestral)", "medium"].startswith("20.0")
    alpha = _table((tmp_path / "report" / "alpha_star.md").read_text(), "alpha*(delta) vs Monte Carlo")
    assert len(alpha) == 30  # 3 vocab sizes x 5 d x 2 delta
    row = alpha[(alpha["vocab"] == "50,000") & (alpha["d"] == "768") & (alpha["delta"] == "0.1")].iloc[0]
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
        s.write_cell(f"g{seed}", [{"task": "gsm8k", "method": "mdlm", "variant": "base", "decoding": "ancestral",
                                   "kind": "sample", "subset": "test", "metric": "accuracy", "value": v,
                                   "ci_low": v - 0.1, "ci_high": v + 0.1, "n": 100, "nfe": 8,
                                   "temperature": 1.0, "seed": seed, "train_steps": 10}])
    text = report.program_task_markdown("gsm8k", report.read(tmp_path))
    rows = [ln for ln in text.splitlines() if ln.startswith("| mdlm")]
    assert len(rows) == 2 and "seed 0" in rows[0] and "25.0" in rows[0] and "seed 1" in rows[1] and "75.0" in rows[1]
