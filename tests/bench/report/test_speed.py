"""The report's speed section (bench/report/speed/): on a synthetic Sudoku store whose rows carry
the speed columns and records, the page (every setting, AUP over TPF and over tokens per
forward-equivalent with intervals, the speed-ups over AR at matched accuracy) and its figures,
its numbers worked out by hand; absent when the rows carry no batch-1 seconds."""

from __future__ import annotations

import math
from argparse import Namespace

import numpy as np
import pandas as pd
import pytest

from bench import records
from bench.evaluate.aup import aup
from bench.evaluate.paired import encode_outcomes
from bench.report.document import read_page_data
from bench.results import Store, read, sample_columns

N = 20
H200 = "cuda: NVIDIA H200"
#: the outcomes: MDLM at NFE 16 is AR's (16 of 20), NFE 8 loses item 0 (15), NFE 4 is at 8
AR_OUT = [0] * 4 + [1] * 16
MDLM_OUT = {16: AR_OUT, 8: [0] * 5 + [1] * 15, 4: [1] * 8 + [0] * 12}


def _cell(root, cell_id, method_cls, decoding, nfe, outcomes, *, calls, fe, latency, sps,
          with_records=True, with_latency=True):  # fmt: skip
    """One sample cell: its headline row (exact match, Wilson-free: outcomes only) with the speed
    columns (10 generated tokens per item) and, ``with_records``, its per-item records."""
    from bench.data.sudoku.task import SudokuTask

    o = np.asarray(outcomes)
    row = {
        "task": "sudoku", "method": method_cls.name, "variant": "base", "decoding": decoding,
        "kind": "sample", "subset": "easy", "metric": "exact_match", "value": float(o.mean()),
        "n": N, "nfe": nfe, "temperature": 1.0, "seed": 0, "train_steps": 100,
        "item_outcomes": encode_outcomes(o), "items_key": "same-items",
        "device_name": H200, "calls_mean": float(calls), "fe_mean": float(fe),
        "tokens_mean": 10.0, "tokens_per_call": 10.0 / calls, "tokens_per_fe": 10.0 / fe,
        "seconds_per_sample": sps, "sample_s": sps * N,
        **sample_columns(SudokuTask, method_cls, decoding, "easy", "exact_match"),
    }  # fmt: skip
    if with_latency:
        row |= {"latency_s": latency, "latency_items": 4}
    if with_records:
        recs = [{"cell_id": cell_id, "index": i, "correct": int(v), "tokens": 10, "calls": calls,
                 "fe": fe} for i, v in enumerate(o)]  # fmt: skip
        row |= records.write(root, cell_id, recs)
    Store(root).write_cell(cell_id, [row])


def _store(root, **kw):
    from baselines.ar import AR
    from baselines.mdlm import MDLM

    # AR with its KV cache: 10 calls per item, 9 of them partial: 2 forward-equivalents
    _cell(root, "ar", AR, "sample", 10, AR_OUT, calls=10, fe=2.0, latency=0.5, sps=0.05, **kw)
    for nfe, lat, sps in ((16, 0.2, 0.02), (8, 0.1, 0.01), (4, 0.05, 0.005)):
        _cell(root, f"mdlm{nfe}", MDLM, "ancestral", nfe, MDLM_OUT[nfe], calls=nfe, fe=nfe,
              latency=lat, sps=sps, **kw)  # fmt: skip
    return root


def _table(md: str, first_col: str, after: str = "") -> pd.DataFrame:
    """The first Markdown table of ``md`` (after the line ``after``) whose header starts with
    ``| first_col |``."""
    lines = md[md.index(after) :].splitlines() if after else md.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(f"| {first_col} |"))
    head = [c.strip() for c in lines[i].strip().strip("|").split("|")]
    body = []
    for ln in lines[i + 2 :]:
        if not ln.startswith("|"):
            break
        body.append([c.strip() for c in ln.strip().strip("|").split("|")])
    return pd.DataFrame(body, columns=head)


def _section(root, out):
    """What the speed section writes for the store ``root`` (the report's other items not run)."""
    from bench.report.common import rows
    from bench.report.speed.section import ITEMS

    (sec,) = ITEMS
    args = Namespace(results_dir=str(root), fraction_tasks=["sudoku"])
    out.mkdir(parents=True, exist_ok=True)
    return sec.render(sec, rows(read(root), kind=None), out, args)


def test_the_speed_page_figures_and_numbers(tmp_path):
    from bench.report import renderers
    from bench.report.html import write_page

    assert "speed" in [s.name for s in renderers.sections()]  # registered once, built in
    root = _store(tmp_path / "results")
    out = tmp_path / "rep"
    written = _section(root, out)  # the section alone: the report's other figures take long
    write_page(out, read(root), root)
    assert out / "sudoku_speed.md" in written
    md = (out / "sudoku_speed.md").read_text()
    for stem in ("sudoku_speed_pareto", "sudoku_speed_aup"):
        for ext in ("svg", "png", "pdf"):
            assert (out / f"{stem}.{ext}").is_file()
    every = _table(md, "subset")
    assert len(every) == 4 and set(every["model"]) == {"ar (sample)", "mdlm (ancestral)"}
    ar = every[every["model"] == "ar (sample)"].iloc[0]
    assert (ar["NFE"], ar["TPF"], ar["tokens / FE"], ar["FE / sample"]) == (
        "length", "1.00", "5.00", "2.00")  # fmt: skip
    # AUP over TPF, by hand: MDLM's settings at TPF 10/16, 10/8, 10/4 with 80, 75, 40 %;
    # y_1 = 80, y_min = 75 cuts NFE 4; y_max = 80 (AR and MDLM at NFE 16)
    w75 = math.exp(-3 * (1 - 75 / 80))
    mdlm = 0.625 * 80 + 0.5 * (1.25 - 0.625) * (75 * w75 + 80)
    assert mdlm == pytest.approx(aup([0.625, 1.25, 2.5], [80, 75, 40], 80))
    t = _aup(md).set_index("model")
    assert t.loc["mdlm (ancestral)", "settings kept / scored"] == "2 / 3"
    assert t.loc["mdlm (ancestral)", "AUP over TPF [95 % CI]"].startswith(f"{mdlm:.1f} [")
    assert t.loc["ar (sample)", "AUP over TPF [95 % CI]"].startswith("80.0 [")  # 1 x 80
    # over tokens per FE: AR's KV-cached calls make 5 tokens per forward-equivalent: 5 x 80;
    # MDLM's calls are full forwards: the same as over TPF
    assert t.loc["ar (sample)", "AUP over tokens / FE [95 % CI]"].startswith("400.0 [")
    assert t.loc["mdlm (ancestral)", "AUP over tokens / FE [95 % CI]"].startswith(f"{mdlm:.1f} [")
    # MDLM's area beats AR's over TPF; priced by forward-equivalents AR is far ahead
    assert t.loc["mdlm (ancestral)", "minus best (TPF)"] == "best"
    assert t.loc["ar (sample)", "minus best (TPF)"].startswith(f"{80 - mdlm:.1f} [")
    assert t.loc["ar (sample)", "minus best (tokens / FE)"] == "best"
    assert t.loc["mdlm (ancestral)", "parallelism per item from"] == "records"
    # speed-ups over AR: FE 2 / NFE, batch 1 0.5 s / latency, batched 0.05 / s per sample
    sp = _table(md, "subset", after="## Speed-up").set_index("setting")
    assert sp.loc["NFE 16", "minus AR (pp) [95 % CI]"] == "0.0 [0.0, 0.0]"
    assert sp.loc["NFE 16", "batch-1 speed-up"] == "2.50x"
    assert sp.loc["NFE 16", "FE speed-up"] == "0.12x"  # AR's cached steps are cheaper
    assert sp.loc["NFE 8", "batched speed-up"] == "5.00x"
    # NFE 8 loses one item of 20 (-5 pp): the paired interval reaches 0 (the item drawn in
    # (19/20)^20 = 36 % of resamples is none): no loss shown; NFE 4 loses 40 pp
    assert sp.loc["NFE 8", "minus AR (pp) [95 % CI]"].startswith("-5.0 [")
    assert sp.loc["NFE 8", "minus AR (pp) [95 % CI]"].endswith(", 0.0]")
    assert list(sp["no accuracy loss shown"]) == ["no", "yes", "yes"]  # NFE 4, 8, 16
    best = _table(md, "subset", after="### Per model").iloc[0]
    assert best["no loss shown"] == "2 of 3 settings"
    assert best["fastest, batch-1"] == "5.00x (NFE 8)"
    assert best["fastest, FE"] == "0.25x (NFE 8)"
    # the page: its tables with their sources
    blocks = read_page_data(out / "sudoku_speed.md")
    tables = [b for b in blocks if b["kind"] == "table"]
    assert len(tables) == 4 and all(any(s) for b in tables for s in b["sources"])
    assert "sudoku_speed_pareto.svg" in (out / "index.html").read_text()


def _aup(md: str) -> pd.DataFrame:
    return _table(md, "subset", after="## AUP")


def test_without_batch_1_seconds_there_is_no_speed_section(tmp_path):
    root = _store(tmp_path / "results", with_latency=False)
    assert _section(root, tmp_path / "rep") == []
    assert not list((tmp_path / "rep").iterdir())


def test_without_records_the_parallelism_is_held_at_the_cell_value(tmp_path, monkeypatch):
    from bench.report.speed import section

    monkeypatch.setattr(section, "speed_figures", lambda *a: [])  # the numbers only
    root = _store(tmp_path / "results", with_records=False)
    (md,) = _section(root, tmp_path / "rep")
    t = _aup(md.read_text()).set_index("model")
    held = "cell value: TPF 3 of 3, tokens / FE 3 of 3 settings"
    assert t.loc["mdlm (ancestral)", "parallelism per item from"] == held
    w75 = math.exp(-3 * (1 - 75 / 80))
    mdlm = 0.625 * 80 + 0.5 * (1.25 - 0.625) * (75 * w75 + 80)
    assert t.loc["mdlm (ancestral)", "AUP over TPF [95 % CI]"].startswith(f"{mdlm:.1f} [")


def test_records_without_forward_equivalents_give_tpf_per_item_and_hold_the_other(tmp_path):
    from bench.report.speed.cells import grid_point

    o = [1, 0, 1, 1]
    recs = [{"index": i, "tokens": 8, "calls": 4 + i} for i in range(4)]  # no "fe"
    files = records.write(tmp_path, "c", recs)
    rows = pd.DataFrame([{"item_outcomes": encode_outcomes(o), "items_key": "k", **files}])
    p = grid_point({"rows": rows, "tpf": 1.0, "tpfe": 3.0}, tmp_path)
    assert p.tokens.tolist() == [8.0] * 4 and p.calls.tolist() == [4.0, 5.0, 6.0, 7.0]
    assert p.fe is None and not p.fixed("tpf") and p.fixed("tpfe")
    files["records_sha256"] = "0" * 64  # a damaged file: nothing per item
    rows = pd.DataFrame([{"item_outcomes": encode_outcomes(o), "items_key": "k", **files}])
    p = grid_point({"rows": rows, "tpf": 1.0, "tpfe": 3.0}, tmp_path)
    assert p.fixed("tpf") and p.fixed("tpfe") and p.outcomes.tolist() == o
