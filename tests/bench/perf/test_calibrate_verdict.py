"""``python -m bench.perf calibrate`` on a busy or noisy machine: its decision (:func:`verdict`)
from injected loads and spreads, the median and spread of repeated timings, refusal before
anything is measured, refusal / ``--calib-force`` after (the measurements stubbed: no real
calibration here), what the written entry records, and ``--dry-run`` naming the table it used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench import perf, sweep
from bench.cost import table
from bench.perf import calibrate as C
from bench.perf.calibrate import timing


@pytest.fixture(autouse=True)
def _no_user_tables(tmp_path, monkeypatch):
    """Only the tables a test writes (never the user's calibrations); torch's threads restored
    (calibrate's ``--threads 1`` sets them process-wide)."""
    monkeypatch.setenv(table.ENV_DIR, str(tmp_path / "calibration"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


# --------------------------------------------------------------------------- the decision


def test_others_load_is_the_load_before_or_the_load_after_less_this_run():
    assert C.others_load(0.2, 1.3, 1) == pytest.approx(0.3)
    assert C.others_load(3.0, 1.5, 1) == 3.0
    assert C.others_load(None, 0.6, 1) == 0.0  # this run's own thread, nothing else
    assert C.others_load(None, None, 1) is None


def test_verdict_on_idle_busy_and_noisy_machines():
    tight = {"forward a": 0.01, "forward b": 0.02, "train step a": 0.015}
    assert C.verdict(tight, 0.1, 2, 1) == ("ok", "")
    assert C.verdict(tight, None, 2, 1) == ("ok", "")  # no load average: judged on spreads
    # the reported case: load 4-6 on 2 cores, one thread measured
    v, why = C.verdict(tight, 5.0, 2, 1)
    assert v == "refuse" and "machine busy" in why and "5.0" in why and "2 CPUs" in why
    assert C.verdict({}, 1.5, 2, 1)[0] == "refuse"  # before measuring: the load alone
    assert C.verdict({}, 1.5, 4, 2)[0] == "warn"  # 2.5 free CPUs for 2 threads, not idle
    assert C.verdict({}, 2.5, 4, 2)[0] == "refuse"  # 1.5 free CPUs for 2 threads
    v, why = C.verdict(tight, 0.8, 2, 1)  # a second job on the other core: measured, warned
    assert v == "warn" and "not idle" in why
    # spreads: most timings vary by 30 %: refused, naming the noisiest
    noisy = {"forward a": 0.3, "forward b": 0.25, "sample mdlm ancestral": 0.9}
    v, why = C.verdict(noisy, 0.0, 2, 1)
    assert v == "refuse" and "timings noisy" in why and "sample mdlm ancestral" in why
    assert "90%" in why and "30%" in why  # the noisiest timing's spread and the median
    assert C.verdict({"a": 0.08, "b": 0.07, "c": 0.09}, 0.0, 2, 1)[0] == "warn"
    v, why = C.verdict({"a": 0.01, "b": 0.02, "c": 0.8}, 0.0, 2, 1)  # one outlier
    assert v == "warn" and "one timing noisy: c" in why
    # busy and noisy: one line with both reasons
    v, why = C.verdict(noisy, 5.0, 2, 1)
    assert v == "refuse" and "machine busy" in why and "timings noisy" in why
    assert "\n" not in why


def test_timed_is_the_median_of_its_runs_and_records_their_spread(monkeypatch):
    ticks = iter([0.0, 1.0, 10.0, 13.0, 20.0, 22.0])  # runs of 1, 3 and 2 s
    monkeypatch.setattr(timing, "_clock", lambda device: next(ticks))
    timing._SPREADS.clear()
    calls = []
    s = timing._timed(lambda: calls.append(1), 3, torch.device("cpu"), warmup=2, what="x")
    assert s == 2.0 and len(calls) == 5
    assert timing._SPREADS == {"x": pytest.approx((3.0 - 1.0) / 2.0)}


# --------------------------------------------------------------------------- the command

ARGV = ["calibrate", "--device", "cpu", "--threads", "1", "--calib-quick", "--models", "mdlm",
        "--calib-kind", "testcpu"]  # fmt: skip


def test_a_busy_machine_is_refused_before_anything_is_measured(tmp_path, monkeypatch, capsys):
    d = tmp_path / "cal"
    monkeypatch.setattr(C, "_loadavg", lambda: 5.0)
    monkeypatch.setattr(C.os, "cpu_count", lambda: 2)

    def never(*a, **k):
        raise AssertionError("measured on a busy machine")

    monkeypatch.setattr(C, "_forward_fit", never)
    assert perf.main([*ARGV, "--calib-dir", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: calibrate: machine busy")
    assert "load 5.0" in err[0] and "--calib-force" in err[0]
    assert not d.exists()


def _stub_measurements(monkeypatch, spreads: dict, load_before: float, load_after: float):
    """calibrate's measurements replaced by fixed numbers (and the timings' ``spreads``); the
    1-min load is ``load_before`` at the start and ``load_after`` at the end, on 2 CPUs."""
    loads = iter([load_before, load_after])
    monkeypatch.setattr(C, "_loadavg", lambda: next(loads))
    monkeypatch.setattr(C.os, "cpu_count", lambda: 2)

    def forward(shapes, args, device, rows, bare):
        C._SPREADS.update(spreads)
        return {"overhead_s": 1e-3, "flops_per_s": 5e10}

    monkeypatch.setattr(C, "_forward_fit", forward)
    monkeypatch.setattr(C, "_train_fit", lambda *a: {"overhead_s": 5e-3, "flops_per_s": 5e10,
                                                     "param_s": 2e-9})  # fmt: skip
    monkeypatch.setattr(C, "_method_factors", lambda *a: {})


def test_noisy_timings_are_refused_after_measuring_unless_forced(tmp_path, monkeypatch, capsys):
    d = tmp_path / "cal"
    noisy = {"forward cpu-mini |V| 12 L 8 batch 2": 0.4, "train step x": 0.35}
    _stub_measurements(monkeypatch, noisy, 0.1, 1.1)
    assert perf.main([*ARGV, "--calib-dir", str(d)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith("error: calibrate: timings noisy") and "forward cpu-mini" in line
    assert table.calibrated("testcpu", d) == {}  # nothing written

    _stub_measurements(monkeypatch, noisy, 0.1, 1.1)
    assert perf.main([*ARGV, "--calib-dir", str(d), "--calib-force"]) == 0
    err = capsys.readouterr().err
    assert len([ln for ln in err.splitlines() if ln.startswith("warning: calibrate:")]) == 1
    e = json.loads((d / "testcpu.json").read_text())["entries"]["1"]
    assert e["verdict"].startswith("forced: timings noisy")
    assert e["load"] == {"start_1min": 0.1, "end_1min": 1.1, "cpus": 2,
                         "besides_this_run": pytest.approx(0.1)}  # fmt: skip
    assert e["repeats"]["median_spread"] == pytest.approx(0.375)
    assert e["repeats"]["noisiest"] == "forward cpu-mini |V| 12 L 8 batch 2"
    assert e["calibrated_at"] in e["source"]


def test_a_quiet_calibration_is_written_with_its_time_and_load(tmp_path, monkeypatch, capsys):
    d = tmp_path / "cal"
    _stub_measurements(monkeypatch, {"a": 0.01, "b": 0.02, "c": 0.015}, 0.05, 1.02)
    assert perf.main([*ARGV, "--calib-dir", str(d)]) == 0
    assert "warning" not in capsys.readouterr().err
    e = table.calibrated("testcpu", d)[1]
    assert e["verdict"] == "ok" and e["load"]["end_1min"] == 1.02
    assert e["repeats"]["runs_per_timing"] == 1 and e["repeats"]["timings"] == 3


# --------------------------------------------------------------------------- --dry-run

SWEEP = (
    "name: t\ntask: {{name: sudoku, grid: 4, difficulties: [easy], n_valid: 64}}\n"
    "backbone: {{size: cpu-mini}}\nsample: {{nfe: [4], n_samples: 64}}\n"
    "executor: {{kind: local, max_parallel: 1{device}}}\nmethods: [{{method: mdlm}}]\n"
)


def _dry_run(tmp_path: Path, capsys, device: str = "") -> str:
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.format(device=f", device: {device}" if device else ""))
    capsys.readouterr()
    assert sweep.main([str(path), "--dry-run", "--results-dir", str(tmp_path / "r")]) == 0
    return next(ln for ln in capsys.readouterr().out.splitlines() if "predicted cost (" in ln)


def test_dry_run_names_the_calibrated_file_and_when_it_was_measured(tmp_path, capsys):
    d = tmp_path / "calibration"  # the fixture's $SFLM_CALIBRATION_DIR
    load = {"start_1min": 0.1, "end_1min": 1.04, "cpus": 2, "besides_this_run": 0.1}
    entry = {**table.load("cpu", 1), "kind": "testcpu", "threads": 1,
             "calibrated_at": "2026-12-01T09:30:00Z", "verdict": "ok", "load": load}  # fmt: skip
    for k in ("calibrated", "measured", "table_path"):
        entry.pop(k, None)
    path = table.save(entry, d)
    line = _dry_run(tmp_path, capsys, "testcpu")
    assert "calibrated testcpu table" in line and str(path) in line
    assert "measured 2026-12-01T09:30:00Z at 1-min load 1.0 on 2 CPUs" in line


def test_dry_run_names_the_built_in_table_when_none_is_calibrated(tmp_path, capsys):
    line = _dry_run(tmp_path, capsys, "h100")
    assert "shipped h100 table (built-in default, bench/cost/defaults.py)" in line
    assert "measured: training from the paper's table" in line
    line = _dry_run(tmp_path, capsys, "cpu")
    assert "shipped cpu table" in line and "measured: 2026-11-27 (idle)" in line


def test_calib_vocab_moves_the_large_factor_shape(tmp_path, monkeypatch, capsys):
    """--calib-vocab V: the method factors' large shape at |V| = V (its L and batch kept); a
    |V| below 2 is one error line, exit 2, nothing measured."""
    seen = {}
    _stub_measurements(monkeypatch, {}, 0.1, 0.1)
    monkeypatch.setattr(C, "_method_factors", lambda ml, shapes, *a: seen.update(shapes) or {})
    d = tmp_path / "cal"
    assert perf.main([*ARGV, "--calib-dir", str(d), "--calib-vocab", "50257"]) == 0
    size, _, L, B = C.SHAPES["quick"]["large"]
    assert seen["large"] == (size, 50257, L, B) and seen["small"] == C.SHAPES["quick"]["small"]
    assert C.SHAPES["quick"]["large"][1] != 50257  # the table itself is untouched
    capsys.readouterr()
    assert perf.main([*ARGV, "--calib-dir", str(d), "--calib-vocab", "1"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: --calib-vocab: must be >= 2"


def test_a_large_shape_without_a_jobs_huge_pages_is_warned_and_recorded(tmp_path, monkeypatch,
                                                                       capsys):  # fmt: skip
    """A large factor shape whose float64 (B, L, |V|) buffer is above glibc's 32 MB mmap
    threshold, measured without the jobs' GLIBC_TUNABLES: one warning line, ``huge_pages``
    False in the entry; with it (or below the threshold) no warning."""
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    d = tmp_path / "cal"
    _, _, L, B = C.SHAPES["quick"]["large"]
    big = str(32 * 2**20 // (8 * L * B) + 1)  # one class above the threshold
    _stub_measurements(monkeypatch, {}, 0.1, 0.1)
    assert perf.main([*ARGV, "--calib-dir", str(d), "--calib-vocab", big]) == 0
    err = capsys.readouterr().err
    assert "warning: calibrate: the |V| " + big + " shape's buffers are above" in err
    assert table.calibrated("testcpu", d)[1]["huge_pages"] is False
    small = str(int(big) - 1)
    _stub_measurements(monkeypatch, {}, 0.1, 0.1)
    assert perf.main([*ARGV, "--calib-dir", str(d), "--calib-vocab", small]) == 0
    assert "mmap threshold" not in capsys.readouterr().err
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    _stub_measurements(monkeypatch, {}, 0.1, 0.1)
    assert perf.main([*ARGV, "--calib-dir", str(d), "--calib-vocab", big]) == 0
    assert "mmap threshold" not in capsys.readouterr().err
    assert table.calibrated("testcpu", d)[1]["huge_pages"] is True
