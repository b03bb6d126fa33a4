"""The differences tables, seed-aware cell intervals and power.md from a synthetic store whose
rows carry per-item outcomes."""

import numpy as np
import pandas as pd
from helpers import outcome_row

from bench import report
from bench.results import Store

N = 200


def _rows(method, seed, p, *, key="k1", nfe=16, temperature=1.0, rng=None, outcomes=None):
    out = (rng.random(N) < p) if outcomes is None else outcomes
    v = float(np.mean(out))
    return [
        outcome_row(
            method,
            seed,
            out,
            items_key=key,
            nfe=nfe,
            temperature=temperature,
            train_steps=100,
            ci_low=v - 0.05,
            ci_high=v + 0.05,
            ci_method="Wilson score interval",
            subset_rank=0,
        )
    ]


def _store(tmp_path, seeds=(0, 1, 2)):
    rng = np.random.default_rng(0)
    s = Store(tmp_path)
    for seed in seeds:
        s.write_cell(f"a{seed}", _rows("good", seed, 0.7, rng=rng))
        s.write_cell(f"b{seed}", _rows("bad", seed, 0.3, rng=rng))
        s.write_cell(f"c{seed}", _rows("twin", seed, 0.7, rng=rng))
        s.write_cell(f"x{seed}", _rows("other_items", seed, 0.7, key="k2", rng=rng))
    return s


def _table(text):
    lines = [ln for ln in text.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
    body = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return pd.DataFrame(body[1:], columns=body[0])


def test_differences_pair_models_on_the_same_items_only(tmp_path):
    _store(tmp_path)
    assert report.main(["--results-dir", str(tmp_path)]) == 0
    out = tmp_path / "report"
    d = pd.read_csv(out / "sudoku_differences.csv")
    d[["model_a", "model_b"]] = d[["model_a", "model_b"]].map(lambda m: m.split(" (")[0])
    pairs = {frozenset((a, b)) for a, b in zip(d["model_a"], d["model_b"])}
    assert pairs == {frozenset(p) for p in (("good", "bad"), ("good", "twin"), ("twin", "bad"))}
    gb = d[(d["model_a"] == "good") & (d["model_b"] == "bad")].iloc[0]
    assert gb["seeds_a"] == 3 and gb["items"] == N
    assert gb["low"] > 0.25 and gb["low"] <= gb["diff"] <= gb["high"]
    assert not gb["covers_zero"]
    twin = d[d[["model_a", "model_b"]].isin(["good", "twin"]).all(axis=1)].iloc[0]
    assert twin["covers_zero"] and twin["low"] < 0 < twin["high"]
    md = (out / "sudoku_differences.md").read_text()
    assert "yes: no difference shown" in md and "3, 3 x 200" in md


def test_headline_cells_pool_seeds_with_the_two_level_interval(tmp_path):
    _store(tmp_path)
    assert report.main(["--results-dir", str(tmp_path)]) == 0
    text = (tmp_path / "report" / "sudoku.md").read_text()
    assert "two-level percentile bootstrap" in text
    t = _table(text.split("\n## ")[0])
    good = t[t["model"] == "good (default)"].iloc[0]
    assert good["seeds x items"] == "3 seeds x 200"
    v, ci = good["easy"].split(" [")
    lo, hi = (float(x) for x in ci.rstrip("]").split(", "))
    assert lo < float(v) < hi


def test_one_seed_is_labelled_and_rows_without_outcomes_fall_back_to_sd(tmp_path):
    s = Store(tmp_path)
    rng = np.random.default_rng(1)
    s.write_cell("a0", _rows("good", 0, 0.7, rng=rng))
    for seed in (0, 1):  # an older store: no outcomes
        r = _rows("old", seed, 0.5, rng=rng)[0]
        for k in ("item_outcomes", "items_key", "ci_method", "ci_low", "ci_high"):
            r.pop(k)
        s.write_cell(f"o{seed}", [r])
    assert report.main(["--results-dir", str(tmp_path)]) == 0
    text = (tmp_path / "report" / "sudoku.md").read_text()
    t = _table(text.split("\n## ")[0])
    assert t.loc[t["model"] == "good (default)", "seeds x items"].iloc[0] == "1 seed x 200"
    assert "(sd, 2 seeds)" in t.loc[t["model"] == "old (default)", "easy"].iloc[0]
    assert "not a CI" in text
    assert not (tmp_path / "report" / "sudoku_differences.md").exists()  # nothing to pair


def test_power_section_and_flag(tmp_path, capsys):
    _store(tmp_path, seeds=(0,))
    assert report.main(["--results-dir", str(tmp_path), "--power"]) == 0
    printed = capsys.readouterr().out
    assert "How many items are enough" in printed
    t = _table((tmp_path / "report" / "power.md").read_text())
    row = t.iloc[0]
    assert row["items"] == str(N)
    worst = float(row["detectable, worst case (pp)"])
    assert 12 < worst < 16  # 2.80 x sqrt(0.5) / sqrt(200) = 14.0 points
    assert float(row["detectable, this store's spread (pp)"]) <= worst + 1


def test_program_table_pools_seeds_that_carry_outcomes(tmp_path):
    """GSM8K-style accuracy table: seeds with per-item outcomes become one row with the
    two-level interval, which is wider than either seed's item-only interval when the seeds
    disagree."""
    from bench.report import program_task_markdown, read

    s = Store(tmp_path)
    rng = np.random.default_rng(5)
    for seed, p in ((0, 0.3), (1, 0.7)):
        r = _rows("mdlm", seed, p, rng=rng)[0]
        r.update(task="gsm8k", metric="accuracy", subset="test", ci_method="percentile bootstrap")
        s.write_cell(f"g{seed}", [r])
    text = str(program_task_markdown("gsm8k", read(tmp_path)))
    rows = [ln for ln in text.splitlines() if ln.startswith("| mdlm")]
    assert len(rows) == 1 and "seed" not in rows[0]
    assert "2 training seeds x 200 problems" in text and "two-level" in text
    v, ci = rows[0].split("|")[2].strip().split(" [")
    lo, hi = (float(x) for x in ci.rstrip("]").split(", "))
    assert lo < 40 and hi > 60 and lo < float(v) < hi  # spans both seeds' accuracies


def test_paper_ablation_table_gets_the_paired_difference_to_its_first_row(tmp_path):
    """The paper's renorm ablation compares rows: ours minus its first row we ran, per subset,
    with the paired interval (here a 40-point gap, well clear of 0)."""
    s = Store(tmp_path)
    rng = np.random.default_rng(2)
    for variant, p in (("base", 0.3), ("cos2", 0.7)):
        r = _rows("sflm", 0, p, rng=rng)[0]
        r.update(variant=variant, decoding="exact", default_decoding=True)
        s.write_cell(f"s-{variant}", [r])
    assert report.main(["--results-dir", str(tmp_path)]) == 0
    text = (tmp_path / "report" / "sudoku.md").read_text()
    part = text.split("Ours minus `Linear, no trunc`")[1]
    row = next(ln for ln in part.splitlines() if ln.startswith("| Cosine^2, no trunc"))
    v, ci = row.split("|")[2].strip().split(" [")
    lo, hi = (float(x) for x in ci.split("]")[0].split(", "))
    assert 25 < lo < float(v) < hi and "covers 0" not in row
