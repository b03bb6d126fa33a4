"""k draws per item (``sample.n_per_item``, bench/evaluate/draws.py) on a tiny trained model:
sort-4 MDLM (cpu-mini, 20 steps), sampled once with one draw and once with four, in one results
folder. The rows' pass@1, pass@j and maj@k come from the per-draw records; draw 0 is the one-draw
cell's samples; bench.rescore reproduces the rows; k < 1 is a one-line usage error."""

from __future__ import annotations

import numpy as np
import pytest

from bench import cells, records
from bench.config import load_sweep
from bench.evaluate.paired import decode_outcomes
from bench.evaluate.passk import majority, pass_at
from bench.plan import plan
from bench.results import Store

SWEEP = """
name: draws
results_dir: {rd}
task: {{name: sort, n_train: 256, options: {{n_digits: 4}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 20, batch_size: 16, warmup_steps: 5, ema: 0.5, val_every: 0}}
sample: {{nfe: [2], temperature: [1.0], n_samples: 16, batch_size: 8, n_per_item: {k}}}
executor: {{kind: debug}}
methods:
  - {{method: mdlm}}
"""
K = 4


def _plan(tmp, k: int):
    path = tmp / f"k{k}.yaml"
    path.write_text(SWEEP.format(rd=tmp / "results", k=k))
    return plan(load_sweep(path), str(path))


@pytest.fixture(scope="module")
def two_cells(tmp_path_factory):
    """(results folder, the one-draw cell, the four-draw cell): one model, sampled twice."""
    tmp = tmp_path_factory.mktemp("draws")
    out = []
    for k in (1, K):
        p = _plan(tmp, k)
        for tc in p.train_cells:
            cells.run_train_then_samples(tc, p.samples_of(tc), progress=False)
        (c,) = p.sample_cells
        out.append(c)
    assert out[0].train.id == out[1].train.id  # one model
    return tmp / "results", out[0], out[1]


def _rows(rd, cid) -> dict:
    return {r["metric"]: r for r in Store(rd).rows(cid)}


def test_the_rows_of_k_draws_come_from_the_per_draw_records(two_cells):
    rd, _, c = two_cells
    rows = _rows(rd, c.id)
    head = rows["exact_match"]
    recs = records.read(rd, head["records"], head["records_sha256"])
    assert len(recs) == K * 16 and [r["draw"] for r in recs[::16]] == list(range(K))
    y = np.array([r["correct"] for r in recs], dtype=float).reshape(K, 16)
    assert head["n_per_item"] == K
    assert head["value"] == pytest.approx(y.mean())  # pass@1: the mean over draws and items
    assert head["ci_low"] <= head["value"] <= head["ci_high"]
    assert "two-level" in head["ci_method"] or head["ci_method"].startswith("Wilson")
    # item_outcomes: draw 0's; draw_outcomes: the others', in order
    assert (decode_outcomes(head["item_outcomes"]) == y[0]).all()
    others = [decode_outcomes(s) for s in head["draw_outcomes"].split(",")]
    assert np.array_equal(np.stack(others), y[1:])
    for j in range(1, K + 1):
        r = rows[f"pass@{j}"]
        assert r["value"] == pytest.approx(pass_at(K, y.sum(axis=0), j).mean())
        assert r["ci_low"] <= r["value"] <= r["ci_high"] and r["ci_method"]
    assert rows["pass@1"]["value"] == pytest.approx(head["value"])
    assert rows[f"pass@{K}"]["value"] >= rows["pass@1"]["value"]
    answers = [[r["output"] for r in recs[d * 16 : (d + 1) * 16]] for d in range(K)]
    maj = rows[f"maj@{K}"]
    assert maj["value"] == pytest.approx(majority(answers, y).mean())
    assert "ties" in maj["ci_method"]


def test_draw_zero_is_the_one_draw_cells_samples_and_the_draws_differ(two_cells):
    rd, c1, c4 = two_cells
    assert c1.id != c4.id
    one = records.read(rd, records.relpath(c1.id))
    four = records.read(rd, records.relpath(c4.id))
    assert [r["output_ids"] for r in four[:16]] == [r["output_ids"] for r in one]
    draws = [[tuple(r["output_ids"]) for r in four[d * 16 : (d + 1) * 16]] for d in range(K)]
    assert len({tuple(d) for d in draws}) == K  # distinct generator streams
    head1 = _rows(rd, c1.id)["exact_match"]
    assert not isinstance(head1.get("draw_outcomes"), str)
    assert "pass@1" not in _rows(rd, c1.id)


def test_one_draw_records_have_no_draw_field(two_cells):
    rd, c1, _ = two_cells
    assert all("draw" not in r for r in records.read(rd, records.relpath(c1.id)))


def test_rescore_reproduces_the_k_draw_rows(two_cells, capsys):
    from bench.commands.rescore import main as rescore_main

    rd, _, c4 = two_cells
    assert rescore_main(["--results-dir", str(rd)]) == 0
    assert "2 of 2 cells reproduce every stored value" in capsys.readouterr().out


def test_rescore_finds_changed_draw_outcomes():
    from bench.commands.rescore import differences

    stored = [{"metric": "exact_match", "value": 0.5, "draw_outcomes": "01,10"}]
    fresh = [{"metric": "exact_match", "value": 0.5, "draw_outcomes": "01,11"}]
    assert differences(stored, fresh) == ["exact_match.draw_outcomes: stored '01,10', now '01,11'"]


def test_the_id_at_one_draw_is_the_old_one(tmp_path):
    from bench.config import config_hash

    (c1,), (c4,) = _plan(tmp_path, 1).sample_cells, _plan(tmp_path, K).sample_cells
    assert c1.n_per_item == 1 and c4.n_per_item == K and c1.id != c4.id
    old = {"train": c1.train.id, "subset": c1.subset, "nfe": c1.nfe,
           "temperature": c1.temperature, "decoding": c1.decoding, "n": c1.n_samples,
           "float64": c1.float64, "seed": c1.seed}  # fmt: skip
    assert c1.id == config_hash(old)  # the key sweeps always had
    assert c4.id == config_hash({**old, "n_per_item": K})


@pytest.mark.parametrize("k", ["0", "-1"])
def test_k_below_one_is_one_line_naming_the_key(tmp_path, capsys, k):
    from bench.sweep import main as sweep_main

    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.format(rd=tmp_path / "results", k=1))
    rc = sweep_main([str(path), "--dry-run", "--set", f"sample.n_per_item={k}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "sample.n_per_item" in err[0], err
    assert not (tmp_path / "results").exists()


def test_the_cost_model_predicts_k_times_the_cell(tmp_path, monkeypatch):
    from bench.cost import table
    from bench.cost.defaults import DEFAULTS
    from bench.cost.model import predict_plan

    monkeypatch.setenv(table.ENV_DIR, str(tmp_path / "calibration"))
    pred = {}
    for k in (1, K):
        (job,) = predict_plan(_plan(tmp_path, k), "cpu", entry=DEFAULTS["cpu"]).jobs
        (pred[k],) = job.samples
    for part in ("network", "score"):
        assert pred[K].parts[part] == pytest.approx(K * pred[1].parts[part], rel=1e-9)
    assert pred[K].seconds == pytest.approx(K * pred[1].seconds, rel=1e-9)
    assert pred[K].calls == K * pred[1].calls


def test_eval_n_per_item_below_one_is_one_line(two_cells, capsys):
    from bench.commands.eval import main as eval_main

    rd, c1, _ = two_cells
    rc = eval_main([str(c1.train.run_dir), "--n-per-item", "0", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "sample.n_per_item" in err[0], err


def test_the_report_shows_a_passk_table_and_curve_for_the_k_draw_cell(two_cells, tmp_path):
    from bench.report import main as report

    rd, _, c4 = two_cells
    out = tmp_path / "rep"
    assert report(["--results-dir", str(rd), "--out", str(out), "--no-html"]) == 0
    text = (out / "sort_passk.md").read_text()
    rows = _rows(rd, c4.id)
    for j in range(1, K + 1):
        r = rows[f"pass@{j}"]
        assert f"{100 * r['value']:.1f} [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}]" in text
    assert f"maj@{K}" in text and (out / "sort_passk.svg").is_file()
    assert text.count("\n| ") == 2  # the header and one cell: the one-draw cell is not in it


def test_maj_votes_on_the_executed_answer_of_a_program_task_and_the_output_otherwise():
    from bench import registry
    from bench.config import TaskConfig
    from bench.evaluate.draws import _hashable

    prog = registry.make_task(TaskConfig(name="arith_standin"))
    sort = registry.make_task(TaskConfig(name="sort"))
    rec = {"output": "def f(): return 5", "answer": 5}
    assert prog.record_answer(rec) == 5 and prog.record_answer({"output": "x"}) is None
    assert sort.record_answer(rec) == "def f(): return 5"
    # two programs with one executed answer are one vote; a list answer is hashable
    recs = [
        {"output": "a", "answer": 5},
        {"output": "b", "answer": 5},
        {"output": "c", "answer": 6},
    ]
    answers = [[_hashable(prog.record_answer(r))] for r in recs]
    assert majority(answers, [[0], [0], [1]]).tolist() == [0.0]  # 5 wins 2 to 1, scored wrong
    assert _hashable([1, 2]) == "[1, 2]"
