"""A sweep with a ``likelihood`` section, run by the sweep CLI: every model gets its likelihood
rows and records in the job that samples it (a method without a bound: a "no bound" row), a
second run computes nothing, and the report's likelihood.md has the papers' layout."""

from __future__ import annotations

from bench import records
from bench.report import main as report
from bench.results import Store
from bench.sweep import main as sweep

SWEEP = """
name: lk
results_dir: {rd}
task: {{name: sort, n_train: 256, options: {{n_digits: 4}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 30, batch_size: 32, warmup_steps: 2, checkpoint_every: 30}}
sample: {{nfe: [4], temperature: [1.0], n_samples: 8, batch_size: 8}}
likelihood: {{datasets: [heldout], n_sequences: 16, draws: 2, batch_size: 8}}
executor: {{kind: debug}}
methods:
  - {{method: ar, decoding: [greedy]}}
  - {{method: mdlm}}
  - {{method: sflm}}
"""


def test_sweep_writes_likelihood_rows_and_the_report_table(tmp_path, capsys):
    rd = tmp_path / "results"
    f = tmp_path / "lk.yaml"
    f.write_text(SWEEP.format(rd=rd))
    assert sweep([str(f)]) == 0
    df = Store(rd).read()
    lk = df[df["kind"] == "likelihood"]
    assert set(lk["method"]) == {"ar", "mdlm", "sflm"}
    kinds = lk.groupby("method")["bound_kind"].first().to_dict()
    assert kinds == {"ar": "exact", "mdlm": "upper bound (NELBO)", "sflm": ""}
    assert lk[lk["method"] == "sflm"]["value"].isna().all()
    for m in ("ar", "mdlm"):
        g = lk[lk["method"] == m].set_index("metric")
        assert g.loc["nll", "n"] == 16 and 0 < g.loc["nll", "value"] < 5
        assert g.loc["nll", "ci_low"] <= g.loc["nll", "value"]
        recs = records.read(rd, g.loc["nll", "records"], g.loc["nll", "records_sha256"])
        assert len(recs) == 16
    # a second run computes nothing
    files = {p: p.stat().st_mtime_ns for p in (rd / "store").glob("*.json")}
    assert sweep([str(f)]) == 0
    assert {p: p.stat().st_mtime_ns for p in (rd / "store").glob("*.json")} == files
    capsys.readouterr()
    assert report(["--results-dir", str(rd)]) == 0
    md = (rd / "report" / "likelihood.md").read_text()
    assert "no bound" in md and "<= " in md
    line = next(x for x in md.splitlines() if x.startswith("| ar |"))  # one label per model
    assert "<=" not in line  # exact
    # each table under a heading that names its metric and unit, its caption printed beside it
    heads = [x for x in md.splitlines() if x.startswith("### ")]
    assert heads == ["### Perplexity per token", "### NLL in nats/token"], heads
    nll = md[md.index("### NLL in nats/token") :]
    mdlm = next(x for x in nll.splitlines() if x.startswith("| mdlm |"))
    assert mdlm.count("<= ") == 1  # the NLL of a NELBO is a bound too
