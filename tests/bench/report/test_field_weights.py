"""field_weights.md (bench/report/field.py) on synthetic rows: each of the authors' numbers
beside ours for the same published weights, with the verdict (within our interval widened by
the Monte-Carlo error, or outside with the known cause: the other layout of the corpus)."""

from __future__ import annotations

import pandas as pd

from bench.report import field

MDLM = "hf://kuleshov-group/mdlm-owt"
DUO = "hf://s-sahoo/duo-distilled"


def _paper(*rows) -> pd.DataFrame:
    base = dict.fromkeys(field.COLUMNS, "")
    return pd.DataFrame([{**base, "paper": "P", "source": "Table 9, row X", **r} for r in rows])


def _row(cell, checkpoint, kind, subset, metric, value, lo=None, hi=None, nfe=None, **kw):
    return {"cell_id": cell, "checkpoint": f"{checkpoint}@abcdef012345", "kind": kind,
            "subset": subset, "metric": metric, "value": value, "ci_low": lo, "ci_high": hi,
            "nfe": nfe, "decoding": kw.get("decoding", ""), "bound_kind": kw.get("bound", ""),
            "method": "m", "variant": "base", "task": "owt"}  # fmt: skip


ROWS = pd.DataFrame(
    [
        # ptb, wrapped only: ppl 70 [68, 72], mc s.e. 0.05 nats
        _row("c1", MDLM, "likelihood", "ptb@wrapped", "ppl", 70.0, 68.0, 72.0, bound="upper"),
        _row("c1", MDLM, "likelihood", "ptb@wrapped", "nll_mc_se", 0.05),
        # lambada padded, one draw (no mc s.e.)
        _row("c2", MDLM, "likelihood", "lambada@padded", "ppl", 51.0, 49.5, 52.5, bound="upper"),
        # Duo-distilled Gen. PPL at 8 steps
        _row("c3", DUO, "sample", "valid", "gen_ppl", 100.0, 95.0, 105.0, nfe=8, decoding="greedy"),
    ]
)


def test_each_paper_number_gets_ours_and_a_verdict():
    paper = _paper(
        {"checkpoint": MDLM, "kind": "likelihood", "subset": "ptb", "layout": "wrapped",
         "metric": "ppl", "value": "71.0", "bound": "<="},
        # inside only thanks to the Monte-Carlo widening: [68, 72] x exp(+-1.96 x 0.05)
        {"checkpoint": MDLM, "kind": "likelihood", "subset": "ptb", "layout": "wrapped",
         "metric": "ppl", "value": "77.0"},
        # the paper's ptb is padded; ours is wrapped only: outside, cause = the layout
        {"checkpoint": MDLM, "kind": "likelihood", "subset": "ptb", "layout": "padded",
         "metric": "ppl", "value": "95.0"},
        {"checkpoint": MDLM, "kind": "likelihood", "subset": "lambada", "layout": "padded",
         "metric": "ppl", "value": "50.0"},
        {"checkpoint": DUO, "kind": "sample", "subset": "valid", "metric": "gen_ppl", "nfe": "8",
         "decoding": "greedy", "value": "90.0"},
        {"checkpoint": DUO, "kind": "sample", "subset": "valid", "metric": "gen_ppl",
         "nfe": "1024", "value": "40.0"},
    )  # fmt: skip
    t = field.comparison(paper, ROWS)
    assert list(t["verdict"]) == ["within", "within", "outside", "within", "outside",
                                  "not measured"]  # fmt: skip
    assert t["ours"][0] == "<= 70.00" and t["mc s.e."][0] == "0.0500"
    # 77 is outside [68, 72] but inside the widened interval
    assert t["interval"][1] == "[61.65, 79.41]"
    assert t["cause"][2] == "layout: the paper's blocks are padded, ours wrapped (mdlm#29)"
    assert t["mc s.e."][3] == "unknown (1 draw)" and t["interval"][3] == "[49.50, 52.50]"
    assert t["cause"][4] == "none known" and t["interval"][4] == "[95.00, 105.00]"
    assert t["source"][0] == "P, Table 9, row X" and t["paper"][0] == "<= 71.0"
    assert t["_cells"][0] == ("c1",) and t["_cells"][5] == ()


def test_the_report_writes_the_page_only_with_paper_numbers_and_our_rows(tmp_path, monkeypatch):
    csv = tmp_path / "field_weights.csv"
    _paper(
        {"checkpoint": MDLM, "kind": "likelihood", "subset": "ptb", "layout": "padded",
         "metric": "ppl", "value": "95.0"}
    ).to_csv(csv, index=False)  # fmt: skip
    monkeypatch.setattr(field, "PAPER_CSV", csv)
    monkeypatch.setattr(field, "prepared", lambda df: df)
    files = field._render(None, ROWS, tmp_path, None)
    text = files[0].read_text()
    assert "| outside |" in text and "ours wrapped (mdlm#29)" in text
    # the repository's own file holds only verified numbers; with none, no page
    monkeypatch.setattr(field, "PAPER_CSV", tmp_path / "none.csv")
    assert field._render(None, ROWS, tmp_path / "b", None) == []
    assert list(field.paper_rows(field.Path(__file__).parents[3] / "results" / "paper" /
                                 "field_weights.csv").columns) == field.COLUMNS  # fmt: skip
