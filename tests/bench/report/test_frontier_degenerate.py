"""Degenerate cells in the frontier report (bench/report/frontier/: section.py, data.py,
draw.py, paper.py): labelled, drawn as crosses, never Pareto-optimal, never in
a scalar; older rows without the metric judged from their stored entropy; and the scalar's
interval (covers the value, shrinks with more samples)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.evaluate import degenerate as dg
from bench.evaluate.genppl.score import summarize
from bench.report.frontier import data as FD
from bench.report.frontier import section as F
from bench.results import Store, read


def _rows(method, decoding, nfe, T, H, ppl, *, frac=None, empty=None, ci=True, variant="base"):
    """The store rows of one OWT cell; ``frac``: its ``degenerate_fraction`` (None: a row
    written before that metric); ``ci``: intervals on Gen. PPL and entropy."""
    base = {
        "task": "owt",
        "method": method,
        "variant": variant,
        "decoding": decoding,
        "kind": "sample" if method != "data" else "reference",
        "subset": "standin-x",
        "nfe": nfe,
        "temperature": T,
        "train_steps": 10,
        "seed": 0,
        "task_kind": "frontier",
        "task_title": "OpenWebText",
        "stand_in_for": "OpenWebText",
        "nfe_is_length": False,
        "temperature_free": False,
        "default_decoding": True,
        "n": 8,
        "task_protocol": "corpus=standin-x; L=64; ref=tiny-lm; eot=paper",
    }
    lo = dict(ci_low=ppl * 0.9, ci_high=ppl * 1.1) if ci else {}
    hlo = dict(ci_low=max(H - 0.02, 0.0), ci_high=H + 0.02) if ci else {}
    out = [
        {**base, "metric": "gen_ppl", "value": ppl, "metric_rank": 0, **lo},
        {**base, "metric": "gen_ppl_pooled", "value": ppl * 0.8, "metric_rank": 1},
        {**base, "metric": "entropy", "value": H, "metric_rank": 2, **hlo},
    ]
    if empty is not None:
        out.append({**base, "metric": "gen_ppl_empty_frac", "value": empty})
    if frac is not None:
        out.append({**base, "metric": dg.METRIC, "value": frac, "ci_low": frac, "ci_high": frac})
    return out


def _store(root, *, legacy: bool = False):
    """The smoke's shape: healthy MDLM / Duo curves below the paper's window (L = 64), S-FLM
    collapsed to one repeated token (H = 0) with the lowest Gen. PPL at every NFE and T."""
    s = Store(root)
    f0, f1 = (None, None) if legacy else (0.0, 1.0)
    for nfe in (4, 8):
        for T, H, p in ((0.7, 3.6, 2500.0), (1.3, 4.05, 6000.0)):
            s.write_cell(f"m{nfe}{T}", _rows("mdlm", "default", nfe, T, H, p, frac=f0))
            s.write_cell(f"d{nfe}{T}", _rows("duo", "default", nfe, T, H - 1.2, p, frac=f0))
            s.write_cell(f"s{nfe}{T}", _rows("sflm", "exact", nfe, T, 0.0, 20.9, frac=f1))
    s.write_cell("data", _rows("data", "data", None, None, 3.74, 169.0, frac=f0))
    return read(root)


def _report(tmp_path, df_root) -> str:
    from bench.report.cli import main

    out = tmp_path / "rep"
    assert main(["--results-dir", str(df_root), "--out", str(out)]) == 0
    return (out / "owt_frontier.md").read_text()


@pytest.mark.parametrize("legacy", [False, True])
def test_collapsed_cells_are_labelled_and_never_pareto(tmp_path, legacy):
    df = _store(tmp_path / "st", legacy=legacy)
    c = F.frontier_cells("owt", df)
    sflm = c[c["method"] == "sflm"]
    assert sflm["degenerate"].all() and not c.loc[c["method"] != "sflm", "degenerate"].any()
    assert set(sflm["deg_source"]) == {"stored mean H" if legacy else "measured"}
    window, note = F.effective_window(c, F.Window())
    assert note  # no healthy cell in the paper's window: every cell is drawn
    for nfe in (4, 8):
        par = F.pareto_cells(c, nfe, window)
        assert len(par) and not (par["method"] == "sflm").any()
        # without the flag the collapsed cell (lowest Gen. PPL) would be Pareto-optimal
        at = FD.at_nfe(c, nfe)
        m = at[~at["is_data"] & window.contains(at["H"], at["PPL"])]
        assert (m[FD.pareto_mask(m["H"], m["PPL"])]["method"] == "sflm").any()
    md = _report(tmp_path, tmp_path / "st")
    assert "| sflm exact | 4 | degenerate (every cell in the window) | 2/2 | 2/2 |" in md
    pareto = md.split("## Pareto-optimal cells")[1].split("## Every cell")[0]
    assert "sflm" not in pareto and "mdlm default T 0.7" in pareto
    label = "yes (from mean H)" if legacy else "yes (100 %)"
    sflm_cells = [ln for ln in md.splitlines() if ln.startswith("| sflm exact | 4 | 0.7 |")]
    assert sflm_cells and f"| {label} |" in sflm_cells[0]
    mdlm = [ln for ln in md.splitlines() if ln.startswith("| mdlm default | 4 | 0.7 |")][0]
    assert ("| no (not measured) |" if legacy else "| no (0 %) |") in mdlm
    assert "95 % percentile bootstrap over samples" in md and "parametric bootstrap" in md
    assert (tmp_path / "rep" / "owt_gen_ppl_vs_entropy_all_nfe.png").is_file()


def test_legacy_rows_follow_the_stored_entropy_and_empty_fraction():
    # Markov: mean H < ln(2) / 2 means more than half of the samples below ln 2
    assert dg.cell_is_degenerate(None, 0.0) and dg.cell_is_degenerate(None, 0.34)
    assert not dg.cell_is_degenerate(None, 0.35) and not dg.cell_is_degenerate(None, 2.4)
    assert dg.cell_is_degenerate(None, 3.7, 0.5) and not dg.cell_is_degenerate(None, 3.7, 0.4)
    assert dg.cell_is_degenerate(None, None, None) is None
    # a measured fraction wins over the stored entropy, either way
    assert not dg.cell_is_degenerate(0.25, 0.0) and dg.cell_is_degenerate(0.5, 3.7)
    # the report says what the flag rests on
    rows = (
        _rows("mdlm", "default", 8, 0.5, 3.7, 30.0, empty=0.75)
        + _rows("mdlm", "default", 8, 0.7, 0.2, 20.0, empty=0.0)
        + _rows("mdlm", "default", 8, 1.0, 3.7, 900.0, empty=0.1)
        + _rows("mdlm", "default", 8, 1.3, 3.9, 990.0, frac=0.0)
    )
    c = F.frontier_cells("owt", _filled(pd.DataFrame(rows))).set_index("temperature")
    assert c["deg_source"].to_dict() == {
        0.5: "stored empty fraction",
        0.7: "stored mean H",
        1.0: "stored",
        1.3: "measured",
    }
    assert c["degenerate"].to_dict() == {0.5: True, 0.7: True, 1.0: False, 1.3: False}
    text = F.cell_table(c.reset_index(), F.Window())["degenerate"].tolist()
    assert text == [
        "yes (from empty fraction)",
        "yes (from mean H)",
        "no (not measured)",
        "no (0 %)",
    ]


def test_a_degenerate_cell_never_drives_the_scalar():
    """One curve: healthy cells at H 3.5 and 3.9 around the data (3.74), and between them a
    cell with most samples empty (H 3.7, the lowest Gen. PPL): the scalar interpolates the two
    healthy ones."""
    rows = (
        _rows("mdlm", "default", 8, 0.7, 3.5, 1000.0, frac=0.0)
        + _rows("mdlm", "default", 8, 1.0, 3.7, 30.0, frac=0.75)
        + _rows("mdlm", "default", 8, 1.3, 3.9, 2000.0, frac=0.25)
        + _rows("data", "data", None, None, 3.74, 169.0, frac=0.0)
    )
    c = F.frontier_cells("owt", pd.DataFrame(rows).pipe(_filled))
    assert c[~c["is_data"]].set_index("temperature")["degenerate"].to_dict() == {
        0.7: False,
        1.0: True,
        1.3: False,  # a quarter degenerate: below the cell rule's half
    }
    w = F.Window(2.0, 6.0, 1e4)
    sc = FD.curve_scalar(c[~c["is_data"]], FD.data_point(c), w)
    want = F.ppl_at_entropy([3.5, 3.9], [1000.0, 2000.0], 3.74)
    assert sc.status == "ok" and sc.value == pytest.approx(want)
    assert sc.value != pytest.approx(F.ppl_at_entropy([3.7, 3.9], [30.0, 2000.0], 3.74))
    assert sc.ci[0] < sc.value < sc.ci[1] and sc.degenerate == 1
    par = F.pareto_cells(c, 8, w)
    assert 1.0 not in set(par["temperature"])
    # every cell of a curve degenerate: no scalar at all
    only = c[~c["is_data"]].assign(degenerate=True)
    assert FD.curve_scalar(only, FD.data_point(c), w).status == "degenerate"


def _filled(df: pd.DataFrame) -> pd.DataFrame:
    from bench.results import with_report_columns

    return with_report_columns(df)


def _scalar_from_samples(n: int, seed: int = 0):
    """The scalar of a 3-cell curve whose cells' intervals come from ``n`` synthetic samples
    each (the scorer's bootstrap), the data likewise."""
    rng = np.random.default_rng(seed)
    rows = []
    for T, (h, lp) in {0.7: (3.5, 6.5), 1.0: (3.7, 7.0), 1.3: (3.9, 7.6)}.items():
        k = np.full(n, 60)
        s = summarize(k * rng.normal(lp, 0.6, n), k, rng.normal(h, 0.3, n), n_resamples=300, seed=1)
        r = _rows("mdlm", "default", 8, T, s["entropy"], s["gen_ppl"], frac=0.0)
        r[0].update(ci_low=s["gen_ppl_ci"][0], ci_high=s["gen_ppl_ci"][1])
        r[2].update(ci_low=s["entropy_ci"][0], ci_high=s["entropy_ci"][1])
        rows += r
    d = summarize(np.full(n, 300.0), np.full(n, 60), rng.normal(3.72, 0.3, n), seed=1)
    r = _rows("data", "data", None, None, d["entropy"], d["gen_ppl"], frac=0.0)
    r[2].update(ci_low=d["entropy_ci"][0], ci_high=d["entropy_ci"][1])
    c = F.frontier_cells("owt", _filled(pd.DataFrame(rows + r)))
    return FD.curve_scalar(c[~c["is_data"]], FD.data_point(c), F.Window(2.0, 6.0, 1e5))


def test_scalar_interval_covers_the_value_and_shrinks_with_more_samples():
    small, large = _scalar_from_samples(64), _scalar_from_samples(1024)
    for sc in (small, large):
        assert sc.status == "ok" and sc.ci is not None
        assert sc.ci[0] < sc.value < sc.ci[1]
    w_small = np.log(small.ci[1] / small.ci[0])
    w_large = np.log(large.ci[1] / large.ci[0])
    assert 0 < w_large < 0.5 * w_small  # 16 x the samples: about a quarter of the width
    # seeded: the same rows give the same interval
    assert _scalar_from_samples(64).ci == small.ci


def test_a_cell_without_an_interval_leaves_the_scalar_without_one(tmp_path):
    s = Store(tmp_path / "st")
    s.write_cell("a", _rows("mdlm", "default", 8, 0.7, 4.6, 100.0, frac=0.0, ci=False))
    s.write_cell("b", _rows("mdlm", "default", 8, 1.3, 5.0, 300.0, frac=0.0))
    s.write_cell("d", _rows("data", "data", None, None, 4.8, 50.0, frac=0.0))
    md = _report(tmp_path, tmp_path / "st")
    v = np.sqrt(100.0 * 300.0)
    assert f"| mdlm default | 8 | {v:.1f} [no CI] |" in md


def test_panels_draw_degenerate_cells_as_crosses_with_error_bars(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    c = F.frontier_cells("owt", _store(tmp_path / "st"))
    window, _ = F.effective_window(c, F.Window())
    fig, ax = plt.subplots()
    colors = {k: f"C{i}" for i, k in enumerate(sorted(c["curve"].unique()))}
    F.draw_panel(ax, c, 4, window, colors)
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    cross = lines["sflm exact (degenerate)"]
    assert cross.get_marker() == "X" and cross.get_linestyle() == "None"
    assert "sflm exact" not in lines  # not drawn as a curve
    ringed = [
        coll
        for coll in ax.collections
        if coll.get_label() == "Pareto-optimal"  # the rings: no collapsed point among them
    ]
    assert ringed and not any(np.isclose(ringed[0].get_offsets()[:, 0], 0.0))
    # error bars (LineCollections): the MDLM T 0.7 cell's spans its stored interval
    bars = [coll for coll in ax.collections if isinstance(coll, LineCollection)]
    segs = [seg for coll in bars for seg in coll.get_segments()]
    assert any(np.allclose(seg[:, 1], [2250.0, 2750.0]) for seg in segs)
    plt.close(fig)


def test_paper_figure_csv_carries_the_flag_and_intervals(tmp_path):
    from bench.report.frontier.paper import FrontierFigure, render_frontier

    s = Store(tmp_path / "st")
    s.write_cell("m", _rows("mdlm", "default", 32, 1.0, 5.0, 80.0, frac=0.0))
    s.write_cell("e", _rows("mdlm", "default", 32, 0.5, 4.9, 12.0, frac=0.75))  # mostly empty
    s.write_cell("d", _rows("data", "data", None, None, 5.2, 40.0, frac=0.0))
    a = FrontierFigure(name="fig-test", title="t", sweep="s", nfes=(32,), task="owt")
    out = tmp_path / "fig"
    out.mkdir()
    files = render_frontier(a, read(tmp_path / "st"), out)
    csv = pd.read_csv(out / "fig-test.csv")
    assert {"H_lo", "H_hi", "PPL_lo", "PPL_hi", "degenerate_fraction", "degenerate"} <= set(csv)
    got = csv[~csv["is_data"]].set_index("temperature")["degenerate"].to_dict()
    assert got == {0.5: True, 1.0: False}
    assert any(str(p).endswith(".png") for p in files)
    # inside the paper's window the mostly-empty cell (lowest Gen. PPL) is no Pareto point
    c = F.frontier_cells("owt", read(tmp_path / "st"))
    assert list(F.pareto_cells(c, 32, F.Window())["temperature"]) == [1.0]


def test_cells_with_mauve_show_it_beside_gen_ppl_and_stay_flagged(tmp_path):
    """MAUVE rows (bench/evaluate/mauve_score.py: ``mauve`` with its seed interval and
    ``mauve_seed_sd``) become a cell-table column; a degenerate cell keeps its MAUVE and its
    flag; a store without MAUVE rows has no such column."""
    s = Store(tmp_path / "st")
    proto = "corpus=standin-x; L=64; ref=tiny-lm; eot=paper; mauve=tiny-lm"

    def with_mauve(rows, v, sd):
        extra = {"metric": "mauve", "value": v, "ci_low": max(v - 0.01, 0.0), "ci_high": v + 0.01}
        rows = [{**r, "task_protocol": proto} for r in rows]
        return rows + [{**rows[0], **extra}, {**rows[0], "metric": "mauve_seed_sd", "value": sd}]

    s.write_cell(
        "m", with_mauve(_rows("mdlm", "default", 4, 1.0, 3.6, 2500.0, frac=0.0), 0.41, 0.004)
    )
    s.write_cell("s", with_mauve(_rows("sflm", "exact", 4, 1.0, 0.0, 20.9, frac=1.0), 0.004, 0.0))
    s.write_cell(
        "data", with_mauve(_rows("data", "data", None, None, 3.74, 169.0, frac=0.0), 0.93, 0.01)
    )
    md = _report(tmp_path, tmp_path / "st")
    assert F.MAUVE_COL in md and "mauve=tiny-lm" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| sflm exact | 4 | 1 |"))
    assert "0.004 [0.000, 0.014] (0.000)" in row and "yes (100 %)" in row
    row = next(ln for ln in md.splitlines() if ln.startswith("| mdlm default | 4 | 1 |"))
    assert "0.410 [0.400, 0.420] (0.004)" in row and "no (0 %)" in row
    assert "0.930 [0.920, 0.940] (0.010)" in md
    _store(tmp_path / "st2")  # the same shape without MAUVE rows
    assert F.MAUVE_COL not in _report(tmp_path / "plain", tmp_path / "st2")


def test_a_rescored_cell_is_its_own_row(tmp_path):
    """A cell re-scored by bench.rescore (its rows carry ``scorer``, e.g. with MAUVE added) is
    another evaluation of the model: its own row and label, its values never mixed into the
    sampled cell's."""
    s = Store(tmp_path / "st")
    s.write_cell("m", _rows("mdlm", "default", 4, 1.0, 3.6, 2500.0, frac=0.0))
    sc = {"scorer": '{"mauve":true}', "rescored_from": "m"}
    again = [{**r, **sc} for r in _rows("mdlm", "default", 4, 1.0, 3.6, 2500.0, frac=0.0)]
    again.append({**again[0], "metric": "mauve", "value": 0.2, "ci_low": 0.1, "ci_high": 0.3})
    s.write_cell("m2", again)
    s.write_cell("data", _rows("data", "data", None, None, 3.74, 169.0, frac=0.0))
    c = FD.frontier_cells("owt", read(tmp_path / "st"))
    models = c[~c["is_data"]]
    assert len(models) == 2 and sorted(models["cells"]) == [("m",), ("m2",)]
    assert models.set_index("cells")["MAUVE"].isna().to_dict() == {("m",): True, ("m2",): False}
    md = _report(tmp_path, tmp_path / "st")
    assert "| mdlm [scored mauve=True] default | 4 | 1 |" in md and "| mdlm default | 4 | 1 |" in md
