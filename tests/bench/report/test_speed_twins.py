"""The speed section's "each speed-up against the same model without it" (bench.report.speed.
twins): a block cache is paired with the same decoding and options without it, a parallel
decoding with LLaDA's confidence order at the same options but its rule's own; the accuracy
difference is paired on the items, the forward-equivalents ratio and speed-ups are the cells'."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import records
from bench.evaluate.paired import encode_outcomes
from bench.report.speed.cells import settings, speed_rows
from bench.report.speed.twins import twins
from bench.results import Store, read, sample_columns

N = 20
BASE = [1] * 15 + [0] * 5


def _cell(root, cid, decoding, sampling: dict, outcomes, fe, latency, variant):
    from baselines.mdlm import MDLM
    from bench.data.sudoku.task import SudokuTask

    o = np.asarray(outcomes)
    row = {
        "task": "sudoku", "method": "mdlm", "variant": variant, "decoding": decoding,
        "kind": "sample", "subset": "easy", "metric": "exact_match", "value": float(o.mean()),
        "n": N, "nfe": 8, "temperature": 1.0, "seed": 0, "train_steps": 100, "recipe": "r",
        "item_outcomes": encode_outcomes(o), "items_key": "same-items", "device_name": "cpu: X",
        "calls_mean": 8.0, "fe_mean": fe, "tokens_mean": 10.0, "tokens_per_call": 1.25,
        "tokens_per_fe": 10.0 / fe, "seconds_per_sample": latency / 4, "sample_s": latency * 5,
        "latency_s": latency, "latency_items": 4,
        "sampling": json.dumps(sampling, sort_keys=True) if sampling else "",
        **sample_columns(SudokuTask, MDLM, decoding, "easy", "exact_match"),
    }  # fmt: skip
    recs = [{"cell_id": cid, "index": i, "correct": int(v), "tokens": 10, "calls": 8, "fe": fe}
            for i, v in enumerate(o)]  # fmt: skip
    Store(root).write_cell(cid, [{**row, **records.write(root, cid, recs)}])


def test_a_cache_and_a_threshold_are_paired_with_their_twins(tmp_path):
    root = tmp_path / "results"
    blocks = {"block_length": 4}
    _cell(root, "plain", "ancestral", blocks, BASE, fe=8.0, latency=0.4, variant="b4")
    # the dual cache loses item 0 and costs half the forward-equivalents
    dual = [0] + BASE[1:]
    _cell(root, "dual", "ancestral", {**blocks, "block_cache": "dual"}, dual, fe=4.0,
          latency=0.2, variant="b4-dual")  # fmt: skip
    _cell(root, "conf", "confidence", blocks, BASE, fe=8.0, latency=0.4, variant="b4")
    _cell(root, "thr", "threshold", {**blocks, "tau": 0.7}, BASE, fe=2.0, latency=0.1,
          variant="b4-tau")  # fmt: skip
    st = settings(speed_rows("sudoku", read(root)))
    tw = twins(st)
    got = {(r["decoding"], t["decoding"], t["cells"][0]) for r, t in zip(tw["setting"], tw["twin"])}
    assert got == {("ancestral", "ancestral", "plain"), ("threshold", "confidence", "conf")}
    by = {r["decoding"]: line for (_, line), r in zip(tw.iterrows(), tw["setting"])}
    assert by["ancestral"]["diff"] == pytest.approx(-1 / N)  # item 0 lost
    assert by["ancestral"]["fe_ratio"] == pytest.approx(0.5)
    assert by["ancestral"]["latency"] == pytest.approx(2.0)
    assert by["ancestral"]["what"] == "block_cache=dual"
    # the same outcomes: a zero-width interval at 0, so no loss is shown
    thr = by["threshold"]
    assert (thr["diff"], thr["low"], thr["high"]) == (0.0, 0.0, 0.0) and bool(thr["free"])
    assert thr["fe_ratio"] == pytest.approx(0.25)
