"""Sudoku generator, token layout, cache and evaluator
(bench/data/sudoku/)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from bench.atomic import CacheBuildError
from bench.config import ConfigError, TaskConfig
from bench.data.sudoku import splits as sudoku_splits
from bench.data.sudoku import task as S
from bench.data.sudoku.score import evaluate_sudoku, valid_grids

# --------------------------------------------------------------------------- independent solvers


def _box(n):
    return {4: (2, 2), 6: (2, 3), 9: (3, 3)}[n]


def _brute_grids_4x4():
    """All 4x4 Sudoku grids by filtering products of row permutations (no shared code)."""
    perms = list(itertools.permutations(range(1, 5)))
    out = []
    for rows in itertools.product(perms, repeat=4):
        if any(len({rows[r][c] for r in range(4)}) < 4 for c in range(4)):
            continue
        if all(
            len({rows[r][c] for r in (br, br + 1) for c in (bc, bc + 1)}) == 4
            for br in (0, 2)
            for bc in (0, 2)
        ):
            out.append(np.array(rows))
    return out


_GRIDS_4 = None


def _grids_4():
    global _GRIDS_4
    if _GRIDS_4 is None:
        _GRIDS_4 = _brute_grids_4x4()
    return _GRIDS_4


def _count_plain(puzzle, limit=2):
    """Plain row-major backtracking solution counter (no bitmasks, no propagation)."""
    g = [list(map(int, r)) for r in puzzle]
    n = len(g)
    br, bc = _box(n)

    def ok(r, c, d):
        if d in g[r] or any(g[i][c] == d for i in range(n)):
            return False
        r0, c0 = r - r % br, c - c % bc
        return all(g[i][j] != d for i in range(r0, r0 + br) for j in range(c0, c0 + bc))

    def rec(k):
        if k == n * n:
            return 1
        r, c = divmod(k, n)
        if g[r][c]:
            return rec(k + 1)
        total = 0
        for d in range(1, n + 1):
            if ok(r, c, d):
                g[r][c] = d
                total += rec(k + 1)
                g[r][c] = 0
                if total >= limit:
                    break
        return total

    return rec(0)


# --------------------------------------------------------------------------- generator


def test_solver_counts_match_brute_force():
    grids = _grids_4()
    assert len(grids) == 288
    assert {tuple(g.reshape(-1)) for g in grids} == set(S.all_grids(4))
    assert S.count_solutions(np.zeros((4, 4), int), limit=10_000) == 288
    assert S.count_solutions(np.zeros((9, 9), int), limit=2) == 2
    bad = np.zeros((4, 4), int)
    bad[0, 0] = bad[0, 1] = 1  # conflicting givens
    assert S.count_solutions(bad) == 0


@pytest.mark.parametrize("difficulty", S.DIFFICULTIES)
def test_4x4_puzzles_unique_by_brute_force(difficulty):
    pz, sl = S.generate_stream(4, difficulty, "train", 3, 0, 60, workers=1)
    grids = _grids_4()
    for p, s in zip(pz, sl):
        given = p > 0
        matches = [g for g in grids if np.array_equal(g[given], p[given])]
        assert len(matches) == 1
        assert np.array_equal(matches[0], s)


@pytest.mark.parametrize("n,count", [(6, 12), (9, 4)])
def test_larger_puzzles_unique_by_plain_counter(n, count):
    pz, sl = S.generate_stream(n, "hard" if n == 6 else "easy", "valid", 5, 0, count, workers=1)
    for p, s in zip(pz, sl):
        assert _count_plain(p) == 1
        assert np.array_equal(np.where(p > 0, p, s), s)  # givens agree with the solution
    assert valid_grids(sl).all()


@pytest.mark.parametrize("n,expected", [(4, (8, 7, 6)), (6, (18, 16, 13)), (9, (40, 35, 30))])
def test_givens_per_difficulty(n, expected):
    m = 6 if n == 9 else 20
    for d, k in zip(S.DIFFICULTIES, expected):
        assert S.givens_for(n, d) == k
        pz, _ = S.generate_stream(n, d, "train", 11, 0, m, workers=1)
        assert ((pz > 0).sum(axis=(1, 2)) == k).all()


def test_determinism_across_processes_and_chunks():
    a = S.generate_stream(6, "hard", "train", 7, 0, 24, workers=1)
    b = S.generate_stream(6, "hard", "train", 7, 0, 24, workers=2)
    c = S.generate_stream(6, "hard", "train", 7, 10, 24, workers=2)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
    for x, y in zip(a, c):
        assert np.array_equal(x[10:], y)
    d = S.generate_stream(6, "hard", "train", 8, 0, 24, workers=1)  # another seed differs
    assert not np.array_equal(a[1], d[1])
    e = S.generate_stream(6, "hard", "valid", 7, 0, 24, workers=1)  # another split differs
    assert not np.array_equal(a[1], e[1])


# --------------------------------------------------------------------------- splits


def _task(tmp_path, **kw):
    base = {
        "grid": 6,
        "n_train": 30,
        "n_valid": 10,
        "seed": 1,
        "data_dir": str(tmp_path),
        "options": {"workers": 1},
    }
    base.update(kw)
    return S.SudokuTask(TaskConfig(**base))


def test_select_skips_excluded_and_duplicate_solutions():
    pz, sl = S.generate_stream(6, "easy", "train", 2, 0, 8, workers=1)
    exclude = {sl[0].tobytes(), sl[3].tobytes()}
    p2, s2 = sudoku_splits._select(6, "easy", "train", 2, 5, exclude, 1, False, dedup=True)
    assert np.array_equal(p2, pz[[1, 2, 4, 5, 6]])
    assert np.array_equal(s2, sl[[1, 2, 4, 5, 6]])


def test_train_excludes_validation_grids_of_every_difficulty(tmp_path):
    """A validation grid of 'hard' that the 'easy' train stream would produce is dropped."""
    pz, sl = S.generate_stream(6, "easy", "train", 1, 0, 3, workers=1)
    key = {
        "split": "valid",
        "grid": 6,
        "difficulty": "hard",
        "n": 10,
        "n_valid": 10,
        "seed": 1,
        "v": S.GENERATOR_VERSION,
    }
    fake_p = np.repeat(pz[:1], 10, axis=0)
    fake_s = np.repeat(sl[:1], 10, axis=0)
    path = sudoku_splits._cache_path(S.data_root(str(tmp_path)), key)
    sudoku_splits.write_npz_cache(path, key, puzzles=fake_p, solutions=fake_s)
    task = _task(tmp_path, difficulties=["easy"])
    train = task.train_data(["easy"])
    sols = {s.tobytes() for s in train.meta["solution"]}
    assert sl[0].tobytes() not in sols
    assert np.array_equal(train.meta["solution"][0], sl[1])
    assert len(sols) == len(train)  # no repeated grid within train
    valid = {s.tobytes() for s in task.eval_data("easy", 10).meta["solution"]}
    assert not sols & valid


def test_4x4_grid_level_split(tmp_path):
    """4x4 has only 288 solution grids: train and validation draw from disjoint grid sets
    (245 / 43), each grid reused across puzzles, for every difficulty."""
    task = _task(tmp_path, grid=4, n_train=400, n_valid=100)
    split = S.grid_split_4x4(1)
    assert len(split["valid"]) == 43 and len(split["train"]) == 245
    assert not set(split["valid"]) & set(split["train"])
    train_all, valid_all = set(), set()
    for d in S.DIFFICULTIES:
        tr = {tuple(s.reshape(-1)) for s in task.train_data([d]).meta["solution"]}
        va = {tuple(s.reshape(-1)) for s in task.eval_data(d, 100).meta["solution"]}
        assert tr <= set(split["train"]) and va <= set(split["valid"])
        assert len(tr) > 100 and len(va) > 20  # many grids used, repeated within a split
        train_all |= tr
        valid_all |= va
    assert not train_all & valid_all


# --------------------------------------------------------------------------- tokens


def test_token_layout_9x9():
    pz, sl = S.generate_stream(9, "medium", "valid", 4, 0, 3, workers=1)
    x, clean, loss = S.encode(pz, sl)
    assert x.shape == clean.shape == loss.shape == (3, 180)
    assert x.dtype == torch.long and clean.dtype == torch.bool and loss.dtype == torch.bool
    assert S.seq_len(9) == 180 and S.prompt_len(9) == 91
    assert (S.seq_len(4), S.seq_len(6)) == (40, 84)
    assert (x[:, [0, 90]] == S.BOS).all()
    sep = [10 * k for k in range(1, 9)] + [90 + 10 * k for k in range(1, 9)]
    assert (x[:, sep] == S.SEP).all()
    assert ((x == S.BOS).sum(1) == 2).all() and ((x == S.SEP).sum(1) == 16).all()
    assert torch.equal(x[0, 1:10], torch.as_tensor(pz[0, 0], dtype=torch.long))
    assert torch.equal(x[0, 171:180], torch.as_tensor(sl[0, 8], dtype=torch.long))
    assert clean[:, :91].all() and not loss[:, :91].any()
    blank = torch.as_tensor(pz.reshape(3, -1) == 0)
    _, sp = S.cell_positions(9)
    assert torch.equal(loss[:, sp], blank)  # only the solution's blank cells are scored
    assert torch.equal(clean, ~loss)
    assert not loss[:, sep].any() and not loss[:, 90].any()
    assert (loss.sum(1) == 81 - 35).all()
    p, s = S.decode(x)
    assert np.array_equal(p, pz) and np.array_equal(s, sl)
    text = S.format_grid(pz[0])
    assert len(text.splitlines()) == 11 and text.count(".") == 81 - 35


def test_task_attributes_and_errors(tmp_path):
    t = _task(tmp_path, grid=9)
    assert (t.name, t.vocab_size, t.seq_len, t.prompt_len) == ("sudoku", 12, 180, 91)
    assert t.groups() == ["easy", "medium", "hard"]
    with pytest.raises(ConfigError, match="task.grid"):
        _task(tmp_path, grid=5)
    with pytest.raises(ConfigError, match="task.options.bogus"):
        _task(tmp_path, options={"bogus": 1})
    with pytest.raises(ValueError, match="n_valid"):
        _task(tmp_path, grid=4).eval_data("easy", 11)
    with pytest.raises(ValueError, match="length"):
        S.decode(np.zeros(50, int))


# --------------------------------------------------------------------------- cache


def test_cache_hit_returns_identical_data(tmp_path, monkeypatch):
    task = _task(tmp_path)
    tr, ev = task.train_data(["medium"]), task.eval_data("medium", 10)
    files = sorted(p.name for p in (tmp_path / "sudoku").iterdir() if p.suffix != ".lock")
    assert files and all(f.endswith(".npz") for f in files)  # no temp files left behind

    def boom(*a, **k):
        raise AssertionError("regenerated despite a cache hit")

    monkeypatch.setattr(sudoku_splits, "_generate_split", boom)
    again = _task(tmp_path)
    tr2, ev2 = again.train_data(["medium"]), again.eval_data("medium", 10)
    for a, b in ((tr, tr2), (ev, ev2)):
        assert torch.equal(a.x, b.x) and torch.equal(a.loss_mask, b.loss_mask)
        assert all(np.array_equal(p, q) for p, q in zip(a.meta["solution"], b.meta["solution"]))
    with pytest.raises(CacheBuildError, match="regenerated"):  # the seed is part of the key
        _task(tmp_path, seed=2).eval_data("medium", 10)


def test_data_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SFLM_BENCH_DATA", str(tmp_path / "env"))
    task = _task(tmp_path, grid=4, data_dir="", n_valid=5)
    task.eval_data("easy", 5)
    assert list((tmp_path / "env" / "sudoku").glob("*.npz"))


# --------------------------------------------------------------------------- evaluator


def _metrics(rows):
    return {r.metric: r for r in rows}


def test_evaluator_perfect_and_one_wrong_cell():
    pz, sl = S.generate_stream(9, "hard", "valid", 6, 0, 4, workers=1)
    x, _, _ = S.encode(pz, sl)
    m = _metrics(evaluate_sudoku(x, pz, sl))
    for k in ("exact_match", "cell_accuracy", "blank_accuracy", "valid_grid"):
        assert m[k].value == 1.0 and m[k].n == 4
    assert m["exact_match"].ci_low < 1.0 and m["exact_match"].ci_high == pytest.approx(1.0)

    _, sp = S.cell_positions(9)
    r, c = map(int, np.argwhere(pz[0] == 0)[0])  # a blank cell of puzzle 0
    y = x[:1].clone()
    y[0, sp[r * 9 + c]] = sl[0, r, c] % 9 + 1
    m = _metrics(evaluate_sudoku(y, pz[:1], sl[:1]))
    assert m["exact_match"].value == 0.0
    assert m["cell_accuracy"].value == pytest.approx(80 / 81)
    assert m["blank_accuracy"].value == pytest.approx(50 / 51)
    assert m["valid_grid"].value == 0.0
    y = x.clone()  # a wrong separator is layout, not scored
    y[:, 10] = 3
    assert _metrics(evaluate_sudoku(y, pz, sl))["exact_match"].value == 1.0


def test_evaluator_valid_but_different_grid():
    pz, sl = S.generate_stream(6, "easy", "valid", 6, 0, 2, workers=1)
    swapped = sl.copy()
    swapped[sl == 1], swapped[sl == 2] = 2, 1  # relabel digits: still a Sudoku, not the answer
    x, _, _ = S.encode(pz, swapped)
    m = _metrics(evaluate_sudoku(x, pz, sl))
    assert m["valid_grid"].value == 1.0 and m["exact_match"].value == 0.0
    assert 0 < m["cell_accuracy"].value < 1
    x[1] = S.encode(pz, sl)[0][1]  # second sample correct
    m = _metrics(evaluate_sudoku(x, pz, sl))
    assert (
        m["exact_match"].value == 0.5 and m["exact_match"].ci_low < 0.5 < m["exact_match"].ci_high
    )


def test_valid_grids_checks_boxes():
    for n in (4, 6, 9):
        latin = (np.arange(n)[:, None] + np.arange(n)[None, :]) % n + 1  # rows/cols fine, boxes not
        assert not valid_grids(latin[None])[0]
        _, sl = S.generate_stream(n, "easy", "train", 0, 0, 1, workers=1)
        assert valid_grids(sl)[0]
        broken = sl.copy()
        broken[0, 0, 0] = 0
        assert not valid_grids(broken)[0]


def test_task_evaluate_delegates(tmp_path):
    """SudokuTask.evaluate scores its own eval batch with the Sudoku evaluator: the reference
    solutions get exact match 1, blanks left blank get 0 (givens still count in cell accuracy)."""
    task = _task(tmp_path, grid=4, n_valid=8)
    data = task.eval_data("hard", 8)
    rows = _metrics(task.evaluate(data.x, data, "hard"))
    assert rows["exact_match"].value == 1.0 and rows["exact_match"].n == 8
    noisy = data.x.clone()
    noisy[data.loss_mask] = 0  # blanks left blank
    rows = _metrics(task.evaluate(noisy, data, "hard"))
    assert rows["exact_match"].value == 0.0 and rows["blank_accuracy"].value == 0.0
    assert rows["cell_accuracy"].value == pytest.approx(6 / 16)
