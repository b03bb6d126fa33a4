"""Training curves: the trainer's CSV log (steps, resume, validation that leaves training alone),
the logging options outside the cell identity, and the report's curves figure."""

import contextlib
import csv
from pathlib import Path

import pytest
import torch
from helpers import sort_train_config, train_sort_mdlm

from bench.config import ConfigError, TrainConfig, build, load_sweep
from bench.data.toy import sort_data
from bench.plan import plan
from bench.train import log_path, make_loggers

QUICKSTART = Path(__file__).resolve().parents[3] / "sweeps" / "quickstart.yaml"


def _cfg(steps, **kw):
    log = {"checkpoint_every": 4, "log_every": 2, "val_every": 3, "val_batches": 2}
    return sort_train_config(steps, **{**log, **kw})


def _train(run_dir, cfg, val=True):
    """MDLM on sort-8 (the trainer tests' run: dropout RNG included); held-out examples from
    another seed."""
    val_data = sort_data(40, seed=77) if val else None
    return train_sort_mdlm(run_dir, cfg, init_seed=123, val_data=val_data)


def _log(run_dir) -> list[dict]:
    with open(log_path(run_dir), newline="") as f:
        return list(csv.DictReader(f))


def _series(rows, key) -> dict[int, float]:
    return {int(r["step"]): float(r[key]) for r in rows if r.get(key)}


def test_log_has_loss_and_val_loss_at_the_expected_steps(tmp_path):
    _train(tmp_path, _cfg(7))
    rows = _log(tmp_path)
    # Lightning logs the loss of update k + 1 at step k when (k + 1) % log_every == 0
    assert sorted(_series(rows, "loss")) == [1, 3, 5]
    # validation after updates 3 and 6, and after the last one
    val = _series(rows, "val_loss")
    assert sorted(val) == [3, 6, 7]
    assert all(0 < v < 10 for v in val.values())  # a per-token NLL bound over 10 symbols
    assert len(rows) == 6  # one row per logged (step, metric): no duplicates


def test_resume_continues_the_log(tmp_path):
    """A run stopped at step 6 whose newest checkpoint is step 4 (last.ckpt lost) logged steps 5
    and 6 that it computes again: the resumed log is the uninterrupted run's, row for row."""
    kw = {"log_every": 1, "val_every": 2}  # a loss and a validation row at the resume step
    _train(tmp_path / "full", _cfg(10, **kw))
    _train(tmp_path / "cut", _cfg(6, **kw))
    (tmp_path / "cut" / "ckpt" / "last.ckpt").unlink()  # resume falls back to step4.ckpt
    assert (tmp_path / "cut" / "ckpt" / "step4.ckpt").is_file()
    _train(tmp_path / "cut", _cfg(10, **kw))
    full, cut = _log(tmp_path / "full"), _log(tmp_path / "cut")
    for key in ("loss", "val_loss"):
        a, b = _series(full, key), _series(cut, key)
        assert sorted(a) == sorted(b), key
        for step in a:  # exact resume: the same numbers
            assert a[step] == pytest.approx(b[step], rel=1e-6, abs=0), (key, step)
    assert len(cut) == len(full)  # nothing logged twice
    assert min(_series(cut, "loss")) == 0  # the first session's rows are still there
    assert 4 in _series(cut, "val_loss")


def test_validation_leaves_the_final_weights_bit_identical(tmp_path, monkeypatch):
    on = _train(tmp_path / "on", _cfg(7, val_every=1))
    off = _train(tmp_path / "off", _cfg(7, val_every=0))
    assert _series(_log(tmp_path / "on"), "val_loss") and not _series(
        _log(tmp_path / "off"), "val_loss"
    )
    a, b = (torch.load(r.weights, weights_only=False) for r in (on, off))
    for k in a["backbone"]:
        assert torch.equal(a["backbone"][k], b["backbone"][k]), k
    assert on.final_loss == off.final_loss
    # nor does logging itself
    quiet = torch.load(
        _train(tmp_path / "quiet", _cfg(7, logger="none")).weights, weights_only=False
    )
    assert all(torch.equal(quiet["backbone"][k], b["backbone"][k]) for k in b["backbone"])
    # guard: the same validation without the forked RNG changes training (the test is sensitive)
    monkeypatch.setattr(torch.random, "fork_rng", lambda devices=None: contextlib.nullcontext())
    leak = torch.load(_train(tmp_path / "leak", _cfg(7, val_every=1)).weights, weights_only=False)[
        "backbone"
    ]
    assert any(not torch.equal(leak[k], b["backbone"][k]) for k in leak)


def test_logger_none_writes_no_log(tmp_path):
    _train(tmp_path, _cfg(3, logger="none"))
    assert not log_path(tmp_path).exists()


def test_bad_logger_values_are_config_errors_naming_the_key(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"^s\.yaml: train\.logger: must be one of"):
        build(TrainConfig, {"logger": "mlflow"}, where="s.yaml: train")
    # a logger whose package is missing: one line naming train.logger, at planning and in fit
    monkeypatch.setitem(
        __import__("bench.config").config._LOGGER_PACKAGES, "wandb", ("no_such_pkg_x1",)
    )
    with pytest.raises(ConfigError, match=r"train\.logger: 'wandb' needs the no_such_pkg_x1"):
        build(TrainConfig, {"logger": "wandb"}, where="s.yaml: train")
    cfg = _cfg(2)
    cfg.logger = "wandb"
    with pytest.raises(ConfigError, match=r"^train\.logger: 'wandb' needs"):
        make_loggers(cfg, tmp_path)


def test_sweep_cli_exits_2_on_a_bad_logger(tmp_path, capsys):
    from bench.sweep import main

    src = QUICKSTART.read_text().replace("  steps: 1000", "  steps: 1000\n  logger: x")
    f = tmp_path / "s.yaml"
    f.write_text(src)
    assert main([str(f), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.logger" in err[0]


def test_logging_options_are_not_part_of_the_cell_identity(tmp_path):
    src = QUICKSTART.read_text()
    a = tmp_path / "a.yaml"
    a.write_text(src)
    b = tmp_path / "b.yaml"
    b.write_text(
        src.replace(
            "  steps: 1000",
            "  steps: 1000\n  logger: none\n  log_every: 7\n  val_every: 0\n  val_batches: 9",
        )
    )
    pa, pb = plan(load_sweep(a), "a"), plan(load_sweep(b), "b")
    assert [c.id for c in pa.train_cells] == [c.id for c in pb.train_cells]
    assert [c.id for c in pa.sample_cells] == [c.id for c in pb.sample_cells]
    assert pb.train_cells[0].train["val_batches"] == 9  # still carried to the job


def test_train_rows_point_to_the_log(tmp_path):
    from bench.data.toy import SortTask
    from bench.results import Store
    from bench.results.rows import train_rows
    from bench.train import TrainResult

    cell = plan(load_sweep(QUICKSTART), "q").train_cells[0]
    cell.results_dir = str(tmp_path)
    res = TrainResult(3, 1.0, 3.0, 0.5, cell.weights)
    assert {r["train_log"] for r in train_rows(cell, res, 10, task=SortTask)} == {None}
    log_path(cell.run_dir).parent.mkdir(parents=True)
    log_path(cell.run_dir).write_text("step,loss\n0,1.0\n")
    rows = train_rows(cell, res, 10, task=SortTask)
    assert {r["train_log"] for r in rows} == {f"runs/{cell.run_dir.name}/logs/metrics.csv"}
    Store(tmp_path).write_cell(cell.id, rows)  # the store accepts the column
    assert set(Store(tmp_path).read()["train_log"]) == {rows[0]["train_log"]}


def _train_row(cell, method, seed, log, subset="easy"):
    return [
        {
            "task": "sudoku",
            "method": method,
            "variant": "base",
            "seed": seed,
            "kind": "train",
            "subset": subset,
            "train_cell": cell,
            "metric": m,
            "value": 1.0,
            "train_log": log,
            "task_kind": "generic",
        }
        for m in ("train_final_loss", "n_params")
    ]


def test_report_draws_the_curves_and_skips_bad_logs(tmp_path, capsys):
    from bench.report.cli import main
    from bench.report.curves import curves
    from bench.results import Store

    s = Store(tmp_path)
    for i, (method, seed) in enumerate([("mdlm", 0), ("mdlm", 1), ("ar", 0)]):
        log = tmp_path / "runs" / f"r{i}" / "logs" / "metrics.csv"
        log.parent.mkdir(parents=True)
        lines = ["epoch,loss,step,val_loss"]
        for k in range(0, 100, 10):
            lines.append(f"0,{3 - k / 100 + seed / 10},{k},")
            lines.append(f",,{k + 1},{2.5 - k / 200}")
        log.write_text("\n".join(lines) + "\n")
        s.write_cell(f"c{i}", _train_row(f"c{i}", method, seed, f"runs/r{i}/logs/metrics.csv"))
    s.write_cell("gone", _train_row("gone", "duo", 0, "runs/gone/logs/metrics.csv"))
    (tmp_path / "runs" / "bad.csv").write_bytes(b"\x00\x01garbage")
    s.write_cell("bad", _train_row("bad", "flm", 0, "runs/bad.csv"))
    s.write_cell("old", _train_row("old", "candi", 0, None))  # no log: nothing to draw, no note

    assert main(["--results-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "runs/gone/logs/metrics.csv: no such file; skipped" in err
    assert "runs/bad.csv:" in err and err.count("training curves") == 2
    for ext in ("png", "pdf"):
        assert (tmp_path / "report" / f"sudoku_training_curves.{ext}").stat().st_size > 1000

    c = curves(Store(tmp_path).read(), tmp_path)["sudoku"]
    assert set(c["model"]) == {"mdlm", "ar"}
    loss = c[(c["metric"] == "loss") & (c["train_cell"] == "c1")]
    assert list(loss["step"]) == list(range(0, 100, 10))
    assert loss["value"].iloc[0] == pytest.approx(3.1)
    assert sorted(c.loc[c["metric"] == "val_loss", "step"].unique()) == list(range(1, 101, 10))
    # the same rows give the same PDF (no creation date)
    first = (tmp_path / "report" / "sudoku_training_curves.pdf").read_bytes()
    assert main(["--results-dir", str(tmp_path)]) == 0
    assert (tmp_path / "report" / "sudoku_training_curves.pdf").read_bytes() == first
