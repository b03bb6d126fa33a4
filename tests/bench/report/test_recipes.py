"""A model in the report is its whole training recipe: two recipes of one method in one store
(a sort sweep run at 100 steps, then a copy named ``mysort800`` at 800 steps into the same
results folder) are two models in every table, never one pooled row.

The store is written the way jobs write it (planned cells -> ``bench.cells`` row builders ->
``Store``), with synthetic per-item outcomes instead of trained models: each recipe gets its own
scores, so a table that pools the recipes shows a number neither model scored.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from bench.config import SweepConfig, build
from bench.evaluate.metrics import MetricValue
from bench.plan import plan
from bench.report.cli import main as report_main
from bench.report.models import with_models
from bench.results import Store, read
from bench.results import rows as store_rows

N_ITEMS = 128
#: (sweep, steps) -> method -> the fraction of items it gets right (different per recipe)
SCORES = {
    ("mysort", 100): {"mdlm": 0.0, "sflm": 0.0},
    ("mysort800", 800): {"mdlm": 0.227, "sflm": 0.172},
}


def _sweep(name: str, steps: int, results: str) -> SweepConfig:
    return build(
        SweepConfig,
        {
            "name": name,
            "results_dir": results,
            "task": {"name": "sort"},
            "backbone": {"size": "cpu-mini"},
            "train": {"steps": steps, "batch_size": 32},
            "sample": {"nfe": [4, 16], "temperature": [1.0], "n_samples": N_ITEMS},
            "methods": [
                {"method": "mdlm"},
                {
                    "method": "sflm",
                    "variant": "trunc-adaptive",
                    "options": {"alpha_max": "star", "adaptive": True},
                },  # fmt: skip
            ],
        },
        where="sweep",
    )


class _Res:
    def __init__(self, steps):
        self.steps, self.seconds, self.steps_per_s = steps, steps / 50.0, 50.0
        self.final_loss = 10.0 / steps
        self.device, self.devices = "cpu", 1


def _outcomes(p: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.zeros(N_ITEMS, dtype=int)
    out[rng.permutation(N_ITEMS)[: round(p * N_ITEMS)]] = 1
    return out


def write_store(results: str, *, legacy: bool = False) -> dict:
    """Both sweeps' cells into one store; ``legacy``: rows without the ``recipe`` column (a store
    written before it existed). Returns (sweep, method) -> the score of its cells."""
    from bench import registry

    store = Store(results)
    truth = {}
    for (name, steps), scores in SCORES.items():
        p = plan(_sweep(name, steps, results))
        task = registry.make_task(p.cfg.task)
        for tc in p.train_cells:
            method = registry.make_method(tc.method, tc.options, task)
            rows = store_rows.train_rows(tc, _Res(steps), 1000, task=task)
            truth[(name, tc.method)] = scores[tc.method]
            for sc in p.samples_of(tc):
                out = _outcomes(scores[tc.method], hash((name, tc.method, sc.nfe)) % 2**32)
                m = MetricValue("exact_match", float(out.mean()), N_ITEMS, outcomes=out)
                rows_s = store_rows.sample_rows(sc, [m], method=method, task=task,
                                                train_steps=steps, nfe=sc.nfe, wall_s=1.0,
                                                items="same-items")  # fmt: skip
                if legacy:
                    rows_s = [{k: v for k, v in r.items() if k != "recipe"} for r in rows_s]
                store.write_cell(sc.id, rows_s)
            if legacy:
                rows = [{k: v for k, v in r.items() if k != "recipe"} for r in rows]
            store.write_cell(tc.id, rows)
    return truth


def _table(md: str, first_header: str) -> pd.DataFrame:
    """The first Markdown table of ``md`` whose first header cell is ``first_header``."""
    lines = md.splitlines()
    for i, line in enumerate(lines):
        cells_ = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells_[0] == first_header:
            body = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                body.append([c.strip() for c in row.strip().strip("|").split("|")])
            return pd.DataFrame(body, columns=cells_)
    raise AssertionError(f"no table with header {first_header!r}")


@pytest.mark.parametrize("legacy", [False, True], ids=["recipe-column", "older-store"])
def test_two_recipes_are_two_models(tmp_path, legacy):
    results = str(tmp_path / "results")
    write_store(results, legacy=legacy)
    assert report_main(["--results-dir", results, "--no-html"]) == 0
    out = tmp_path / "results" / "report"
    sort = (out / "sort.md").read_text()

    head = _table(sort, "model")
    labels = sorted(head["model"])
    # two labelled rows per method, each saying what differs (the training steps)
    assert labels == sorted(
        [
            "mdlm [100 steps] (ancestral)",
            "mdlm [800 steps] (ancestral)",
            "sflm/trunc-adaptive [100 steps] (exact)",
            "sflm/trunc-adaptive [800 steps] (exact)",
        ]
    ), labels
    sub = [
        c for c in head.columns if c not in ("model", "nfe", "T", "train steps", "seeds x items")
    ]
    col = sub[0]
    for _, r in head.iterrows():
        steps = int(re.search(r"\[(\d+) steps\]", r["model"]).group(1))
        method = r["model"].split("/")[0].split(" ")[0]
        want = SCORES[("mysort", 100) if steps == 100 else ("mysort800", 800)][method]
        got = float(r[col].split()[0])
        assert got == pytest.approx(100 * want, abs=0.8), (r["model"], got, want)
        assert r["train steps"] == str(steps)
        assert r["seeds x items"] == f"1 seed x {N_ITEMS}"

    # the grid: every cell is one recipe's score, no mean of the 100- and 800-step models
    grid = sort[sort.index("## Every cell of the grid") :]
    g = _table(grid, "model")
    for _, r in g.iterrows():
        steps = int(re.search(r"\[(\d+) steps\]", r["model"]).group(1))
        method = r["model"].split("/")[0].split(" ")[0]
        want = SCORES[("mysort", 100) if steps == 100 else ("mysort800", 800)][method]
        assert float(r[col]) == pytest.approx(100 * want, abs=0.8)

    # differences: the 800-step MDLM against the 800-step S-FLM is one pair; any pair of
    # different step counts says so in its labels
    d = pd.read_csv(out / "sort_differences.csv")
    for _, r in d.iterrows():
        sa = re.search(r"\[(\d+) steps\]", r["model_a"]).group(1)
        sb = re.search(r"\[(\d+) steps\]", r["model_b"]).group(1)
        assert sa and sb
    like = d[d["model_a"].str.contains("800") & d["model_b"].str.contains("800")]
    assert len(like)
    r = like[like["nfe"] == like["nfe"].max()].iloc[0]
    assert r["model_a"].startswith("mdlm [800 steps]")
    assert r["diff"] == pytest.approx(0.227 - 0.172, abs=0.01)

    # training tables: one row per recipe, its own steps and loss
    tr = _table((out / "training.md").read_text(), "task")
    assert len(tr) == 4
    for _, r in tr.iterrows():
        steps = int(r["train_steps"])
        assert f"[{steps} steps]" in r["model"]
        assert float(r["train_final_loss"]) == pytest.approx(10.0 / steps, rel=1e-2)


def test_sweep_flag_restricts_the_report(tmp_path):
    results = str(tmp_path / "results")
    write_store(results)
    out = tmp_path / "only800"
    assert report_main(["--results-dir", results, "--out", str(out), "--no-html",
                        "--sweep", "mysort800"]) == 0  # fmt: skip
    head = _table((out / "sort.md").read_text(), "model")
    # one recipe per method left: no suffix needed
    assert sorted(head["model"]) == ["mdlm (ancestral)", "sflm/trunc-adaptive (exact)"]
    assert set(pd.read_csv(out / "results.csv")["sweep"]) == {"mysort800"}
    assert report_main(["--results-dir", results, "--out", str(out), "--sweep", "nope"]) == 2


def test_labels_name_what_differs(tmp_path):
    """One differing setting is named; several: the sweep; seeds never split a model."""
    base = {"task": "sort", "method": "mdlm", "variant": "base", "decoding": "ancestral",
            "kind": "sample", "metric": "exact_match", "value": 0.5}  # fmt: skip

    def rec(**kw):
        import json

        r = {"train": {"steps": 100, "lr": 0.001}, "backbone": {"size": "cpu-mini"}}
        for k, v in kw.items():
            sec, key = k.split("__")
            r[sec][key] = v
        return json.dumps(r, sort_keys=True)

    df = pd.DataFrame(
        [
            {**base, "sweep": "a", "seed": 0, "recipe": rec()},
            {**base, "sweep": "a", "seed": 1, "recipe": rec()},
            {**base, "sweep": "b", "seed": 0, "recipe": rec(train__lr=0.003)},
            {**base, "sweep": "c", "seed": 0, "recipe": rec(train__lr=0.003, train__steps=5)},
        ]
    )
    m = with_models(df)
    assert m["model"].nunique() == 3
    assert m.loc[0, "model"] == m.loc[1, "model"]  # seeds pool within a recipe
    # three recipes, two settings differ among them: the sweeps name them
    assert sorted(m["model"].unique()) == [
        "mdlm [a] (ancestral)",
        "mdlm [b] (ancestral)",
        "mdlm [c] (ancestral)",
    ]
    two = with_models(df.iloc[:3])
    assert sorted(two["model"].unique()) == ["mdlm [lr 0.001] (ancestral)",
                                             "mdlm [lr 0.003] (ancestral)"]  # fmt: skip
    one = with_models(df.iloc[:2])
    assert set(one["model"]) == {"mdlm (ancestral)"}


def test_old_rows_join_the_recorded_recipe(tmp_path):
    """A store whose seed-0 rows predate the recipe column and whose seed-1 rows carry it (seeds
    added by a newer version) is one model, not two."""
    results = str(tmp_path / "results")
    write_store(results, legacy=True)
    df = read(results)
    new = df[df["sweep"] == "mysort800"].copy()
    new["seed"] = 1
    new["cell_id"] = new["cell_id"] + "-s1"
    new["train_cell"] = new["train_cell"] + "-s1"
    recorded = with_models(read(str(tmp_path / "results")))  # fallback recipes
    assert recorded["model_base"].nunique() == 4
    import json

    new["recipe"] = json.dumps({"train": {"steps": 800}, "method": "x"})
    both = with_models(pd.concat([df, new], ignore_index=True))
    m800 = both[(both["method"] == "mdlm") & (both["train_steps"] == 800)]
    assert m800["model_base"].nunique() == 1


def test_paper_columns_only_beside_the_papers_protocol(tmp_path):
    """A 4x4 Sudoku recipe (the quickstart's) gets the paper's 9x9 numbers in a table of their
    own that names what differs; a recipe at the paper's settings gets them beside ours."""
    import json

    from bench.report.paper.numbers import protocol_differences, protocol_settings

    want = protocol_settings("sudoku")
    assert want["task.grid"] == 9 and want["train.steps"] == 20000 and want["nfe"] == 180
    paper = {"task": {"grid": 9}, "joint_subsets": False, "backbone": {"size": "tiny"},
             "train": {"steps": 20000}}  # fmt: skip
    qs = {"task": {"grid": 4}, "joint_subsets": True, "backbone": {"size": "cpu-mini"},
          "train": {"steps": 600}}  # fmt: skip
    row = {"nfe_is_length": False, "nfe": 180}
    same = pd.DataFrame([{**row, "recipe": json.dumps(paper)}])
    assert protocol_differences("sudoku", same) == []
    other = pd.DataFrame([{**row, "nfe": 16, "recipe": json.dumps(qs)}])
    diff = protocol_differences("sudoku", other)
    assert "task.grid 4 (paper 9)" in diff and "nfe 16 (paper 180)" in diff
    assert "train.steps 600 (paper 20000)" in diff
    # an imported released file is the paper's own model: its train settings are not ours
    imp = {**paper, "import": "abc", "train": None, "backbone": {"size": "?"}}
    assert protocol_differences("sudoku", pd.DataFrame([{**row, "recipe": json.dumps(imp)}])) == []


def test_labels_name_options_and_imported_files():
    """Recipes of one sweep that differ in method options are named by those options (not a
    hash); imported models by their files' names (the digest only where two names agree)."""
    import json

    base = {"task": "sort", "method": "sflm", "variant": "trunc", "decoding": "exact",
            "kind": "sample", "metric": "exact_match", "value": 0.5, "sweep": "one"}  # fmt: skip

    def rec(**opts):
        return json.dumps({"train": {"steps": 100}, "options": opts}, sort_keys=True)

    df = pd.DataFrame(
        [
            {**base, "seed": 0, "recipe": rec(schedule="adaptive")},
            {**base, "seed": 0, "recipe": rec(schedule="linear", alpha_max="star")},
        ]
    )
    assert sorted(with_models(df)["model"].unique()) == [
        "sflm/trunc [alpha_max star, schedule linear] (exact)",
        "sflm/trunc [no alpha_max, schedule adaptive] (exact)",
    ]
    imp = {**base, "method": "flm", "variant": "base", "decoding": "euler"}

    def irec(sha):
        return json.dumps({"import": sha, "options": {"k": sha[:1]}}, sort_keys=True)

    files = [("runs/a/flm_owt.ckpt@aaaaaaaaaaaa", "a" * 64), ("hf://x/flm_lm1b.ckpt@bb", "b" * 64),
             ("other/flm_owt.ckpt@cccccccccccc", "c" * 64)]  # fmt: skip
    df = pd.DataFrame([{**imp, "seed": 0, "checkpoint": c, "recipe": irec(s)} for c, s in files])
    assert sorted(with_models(df)["model"]) == [
        "flm [flm_lm1b.ckpt] (euler)",
        "flm [flm_owt.ckpt@aaaaaaaaaaaa] (euler)",
        "flm [flm_owt.ckpt@cccccccccccc] (euler)",
    ]


def test_results_csv_carries_the_model_label(tmp_path):
    results = str(tmp_path / "results")
    write_store(results)
    assert report_main(["--results-dir", results, "--no-html"]) == 0
    csv = pd.read_csv(tmp_path / "results" / "report" / "results.csv")
    assert len(csv) == len(read(results))
    s = csv[csv["kind"] == "sample"]
    assert s["model_label"].str.contains(r"\[(100|800) steps\]").all()
    assert s["recipe_id"].str.fullmatch(r"[0-9a-f]{8}").all()
