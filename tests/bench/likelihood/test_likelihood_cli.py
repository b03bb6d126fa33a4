"""``python -m bench.eval RUN --likelihood ...`` on the tiny sort-4 runs of ``eval_runs``: a table,
store rows (``kind = likelihood``) and one record per sequence, the ids a sweep's ``likelihood``
section plans, a re-run that computes nothing; one line and exit 2 for a method without a bound,
an unknown dataset and blocks longer than the model's positions; "no bound" rows on the sweep
path; a trained model's bound below its initialisation's.

AR's bound is exact (the chain rule), MDLM's the NELBO (baselines/)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/bench: eval_runs
from eval_runs import SWEEP, copy_runs, snapshot  # noqa: E402

from bench import records, registry, source_model  # noqa: E402
from bench.commands import eval as bench_eval  # noqa: E402
from bench.commands import likelihood as command  # noqa: E402
from bench.config import load_sweep  # noqa: E402
from bench.kinds.likelihood import LikelihoodCell  # noqa: E402
from bench.likelihood.cells import Settings, cell_id, run_likelihood  # noqa: E402
from bench.likelihood.datasets import load_blocks  # noqa: E402
from bench.likelihood.evaluate import evaluate  # noqa: E402
from bench.method import BOUND_ELBO, BOUND_EXACT  # noqa: E402
from bench.plan import plan  # noqa: E402
from bench.results import Store  # noqa: E402


@pytest.fixture
def runs(tmp_path_factory, tmp_path):
    return copy_runs(tmp_path_factory, tmp_path / "results")


@pytest.fixture
def digits(tmp_path) -> Path:
    f = tmp_path / "digits.txt"
    f.write_text(
        "".join(f"{' '.join(str((i * 7 + k) % 10) for k in range(8))}\n" for i in range(9))
    )
    return f


def _eval(capsys, *argv) -> tuple[int, str, str]:
    rc = bench_eval.main([*map(str, argv), "--no-progress"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_heldout_and_text_rows_records_and_sweep_ids(runs, digits, tmp_path, capsys):
    rd = tmp_path / "results"
    spec = f"heldout,text:{digits}"
    assert registry.METHODS["ar"].bound_kind == BOUND_EXACT
    rc, out, err = _eval(capsys, runs["ar"], "--likelihood", spec, "--limit", "8")
    assert rc == 0, err
    lines = [ln for ln in out.splitlines() if " exact " in ln]
    assert len(lines) == 2 and all("exact" in ln for ln in lines), out
    cols = ("dataset", "nll nats/tok", "ppl", "bits/tok", "ppl CI", "sequences", "tokens", "MC se")
    for col in cols:
        assert col in out
    lp = command.prepare(str(runs["ar"]), spec.split(","), limit=8)
    store = Store(rd)
    for c in lp.cells:
        rows = {r["metric"]: r for r in store.load(c.id)}
        assert set(rows) == {"nll", "ppl", "bpd", "nll_mc_se", "tokens"}
        r = rows["nll"]
        assert r["kind"] == "likelihood" and r["subset"] == c.subset and r["nfe"] is None
        assert r["decoding"] == "" and r["bound_kind"] == BOUND_EXACT and r["n"] == 8
        assert r["item_limit"] == 8 and r["ci_low"] < r["value"] < r["ci_high"]
        assert rows["nll_mc_se"]["value"] == 0
        recs = records.read(rd, r["records"], r["records_sha256"])
        assert [x["index"] for x in recs] == list(range(8))
        assert sum(x["n_tokens"] for x in recs) == rows["tokens"]["value"]
        assert all(x["cell_id"] == c.id and x["text"] for x in recs)
    # the ids a sweep with the same likelihood section plans, and the cell module's rule
    sweep = tmp_path / "same.yaml"
    sweep.write_text(
        SWEEP.format(rd=rd).replace("name: tiny", "name: other")
        + f"likelihood: {{datasets: [heldout, 'text:{digits}'], n_sequences: 8}}\n"
    )
    planned = [c for c in plan(load_sweep(sweep), str(sweep)).sample_cells
               if isinstance(c, LikelihoodCell) and c.train.method == "ar"]  # fmt: skip
    assert sorted(c.id for c in planned) == sorted(c.id for c in lp.cells)
    s = Settings(n_sequences=8)
    assert {cell_id(c.train, c.subset, s) for c in lp.cells} == {c.id for c in lp.cells}
    # a re-run computes nothing and prints the same table
    before = snapshot(rd)
    rc, again, _ = _eval(capsys, runs["ar"], "--likelihood", spec, "--limit", "8")
    assert rc == 0 and "(0 computed now" in again and snapshot(rd) == before
    assert [ln for ln in again.splitlines() if " exact " in ln] == lines


def test_a_bound_with_draws_has_a_monte_carlo_error(runs, tmp_path, capsys):
    rc, out, err = _eval(capsys, runs["mdlm"], "--likelihood", "heldout", "--limit", "8",
                         "--draws", "3")  # fmt: skip
    assert rc == 0, err
    assert "upper bound (NELBO)" in out and "<= " in out
    (c,) = command.prepare(str(runs["mdlm"]), ["heldout"], limit=8, draws=3).cells
    rows = {r["metric"]: r for r in Store(tmp_path / "results").load(c.id)}
    assert rows["nll"]["bound_kind"] == BOUND_ELBO and rows["nll_mc_se"]["value"] > 0
    recs = records.read(tmp_path / "results", rows["nll"]["records"])
    assert {r["draws"] for r in recs} == {3} and all(r["mc_se"] > 0 for r in recs)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--likelihood", "heldout,wikitext4"], "unknown"),
        (["--likelihood", "text:{tmp}/x.txt", "--set", "likelihood.block=64"], "longer than"),
        (["--likelihood", "heldout", "--limit", "0"], "--limit"),
        (["--likelihood", "heldout", "--nfe", "2"], "not with --likelihood"),
        (["--likelihood", "owt-valid"], "owt-valid"),
        (["--likelihood", "text:{tmp}/none.txt"], "no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runs, tmp_path, capsys, argv, words):
    (tmp_path / "x.txt").write_text("3 1 4 1 5 9 2 6\n")  # a file that exists (none.txt: not)
    before = snapshot(tmp_path / "results")
    rc, _, err = _eval(capsys, runs["ar"], *(a.format(tmp=tmp_path) for a in argv))
    assert rc == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(tmp_path / "results") == before


def test_a_method_without_a_bound_exits_2(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(registry.METHODS["mdlm"], "bound_kind", "")
    before = snapshot(tmp_path / "results")
    rc, _, err = _eval(capsys, runs["mdlm"], "--likelihood", "heldout")
    assert rc == 2 and "no likelihood bound" in err and len(err.strip().splitlines()) == 1
    assert snapshot(tmp_path / "results") == before


def test_sweep_path_writes_no_bound_rows(runs, tmp_path, monkeypatch):
    monkeypatch.setattr(registry.METHODS["mdlm"], "bound_kind", "")
    tc = source_model.trained_cell(source_model.resolve_source(str(runs["mdlm"])))
    store = Store(tmp_path / "results")
    cid = run_likelihood(tc, "heldout", Settings(n_sequences=4), store)
    rows = store.load(cid)
    assert {r["metric"] for r in rows} == {"nll", "ppl", "bpd"}
    assert all(r["bound_kind"] == "" and r["value"] is None for r in rows)


def test_training_lowers_the_bound(runs):
    """AR on sort-4 held-out: the trained model (20 steps) scores below its initialisation."""
    from bench.cell_model import cell_task, method_backbone
    from bench.weights import load_weights

    tc = source_model.trained_cell(source_model.resolve_source(str(runs["ar"])))
    task = cell_task(tc)
    data = load_blocks(task, "heldout", groups=tc.groups, n=64)

    def nll(trained: bool) -> float:
        torch.manual_seed(int(tc.train["seed"]))  # the initial weights training started from
        method, backbone = method_backbone(tc, task)
        if trained:
            load_weights(method, backbone, tc.weights)
        m, _ = evaluate(method, backbone, data, n_draws=1, batch_size=32, seed=0, device="cpu")
        return next(x.value for x in m if x.metric == "nll")

    init, trained = nll(False), nll(True)
    assert init == pytest.approx(math.log(10), abs=1e-6)  # zero-initialised head: uniform
    assert trained < init - 0.02, (init, trained)
