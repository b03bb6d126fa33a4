"""``python -m bench.report.compare``: a change that flips a few items per seed is within the
seed spread; one that moves a cell by far more than its seeds do is not."""

import numpy as np
from helpers import outcome_row

from bench.report import compare
from bench.results import Store

N = 300


def _row(seed, out, method="duo"):
    return [outcome_row(method, seed, out)]


def _stores(tmp_path, shift):
    rng = np.random.default_rng(0)
    before, after = Store(tmp_path / "before"), Store(tmp_path / "after")
    for seed, p in ((0, 0.4), (1, 0.55), (2, 0.5)):
        out = rng.random(N) < p
        new = out.copy()
        flip = rng.choice(N, 6, replace=False)  # float rounding: a few items change
        new[flip] = ~new[flip]
        if shift:  # a real change: 40 % of the failures now succeed
            fails = np.flatnonzero(~new)
            new[fails[: int(0.4 * len(fails))]] = True
        before.write_cell(f"c{seed}", _row(seed, out))
        after.write_cell(f"c{seed}", _row(seed, new))
    return tmp_path / "before", tmp_path / "after"


def test_rounding_flips_are_within_and_a_real_change_is_not(tmp_path, capsys):
    b, a = _stores(tmp_path / "same", shift=False)
    assert compare.main([str(b), str(a)]) == 0
    out = capsys.readouterr().out
    assert "1 of 1 cells within" in out
    b, a = _stores(tmp_path / "moved", shift=True)
    c = compare.compare(compare.read(b), compare.read(a))
    assert c["change"].iloc[0] > 0.15 and c["low"].iloc[0] > 0
    assert c["change"].iloc[0] > c["seed_spread"].iloc[0]
    assert not compare.within(c).iloc[0]


def test_usage_errors_exit_2(tmp_path, capsys):
    assert compare.main([str(tmp_path / "nope"), str(tmp_path)]) == 2
    assert "no results store" in capsys.readouterr().err


def test_by_model_matches_sweeps_whose_cell_ids_differ(tmp_path):
    """Two sweeps with different cell ids (a train option changed): matched by model, subset,
    NFE and temperature; the same outcomes give a change of 0 inside its interval."""
    rng = np.random.default_rng(1)
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    for seed, p in ((0, 0.3), (1, 0.6)):
        out = rng.random(N) < p
        a.write_cell(f"x{seed}", _row(seed, out))
        b.write_cell(f"y{seed}", _row(seed, out))
    assert not len(compare.compare(compare.read(tmp_path / "a"), compare.read(tmp_path / "b")))
    c = compare.compare(compare.read(tmp_path / "a"), compare.read(tmp_path / "b"), by_model=True)
    assert len(c) == 1 and c["change"].iloc[0] == 0.0
    assert c["low"].iloc[0] < 0 < c["high"].iloc[0]  # seeds independent: the spread shows
