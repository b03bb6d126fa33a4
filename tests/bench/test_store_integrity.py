"""A damaged store file never counts as done: it is reported by name, moved
to ``store/corrupt/``, its cell is planned and computed again, and the report goes on."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.results import COLUMNS, Store

ROOT = Path(__file__).resolve().parents[2]


def _rows(v):
    return [
        {"task": "sudoku", "method": "mdlm", "metric": "exact_match", "value": v, "n": 10},
        {"task": "sudoku", "method": "mdlm", "metric": "cell_accuracy", "value": v / 2, "n": 10},
    ]


def _warnings(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.strip()]


def _tamper(path: Path, edit) -> None:
    """Change the file's rows in place, keeping valid JSON and the old checksum."""
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=1))


def test_truncated_file_is_moved_aside_and_not_done(tmp_path, capsys):
    s = Store(tmp_path)
    p = s.write_cell("abc", _rows(0.5))
    s.write_cell("def", _rows(0.1))
    p.write_text(p.read_text()[:57])  # a torn write: valid prefix, truncated JSON
    capsys.readouterr()
    assert not s.has("abc")
    [line] = _warnings(capsys.readouterr().err)
    assert str(p) in line and "truncated JSON" in line and "corrupt" in line
    assert not p.exists()
    [aside] = list((tmp_path / "store" / "corrupt").glob("abc.*.json"))
    assert aside.read_text().startswith('{\n "format"')  # moved, not deleted
    assert set(s.read()["cell_id"]) == {"def"}  # the rest still reads
    assert Store(tmp_path).has("def") and not Store(tmp_path).has("abc")
    assert capsys.readouterr().err == ""  # reported once: the file is gone from the store
    s.write_cell("abc", _rows(0.6))  # recomputed: done again
    assert Store(tmp_path).has("abc") and len(Store(tmp_path).read()) == 4


def test_bad_checksum_is_moved_aside(tmp_path, capsys):
    s = Store(tmp_path)
    p = s.write_cell("abc", _rows(0.5))
    _tamper(p, lambda d: d["rows"][0].update(value=0.9))
    assert not Store(tmp_path).has("abc")
    [line] = _warnings(capsys.readouterr().err)
    assert str(p) in line and "checksum mismatch" in line
    assert len(list((tmp_path / "store" / "corrupt").iterdir())) == 1


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda d: d.update(format="other"), "not a sflm-bench-results file"),
        (lambda d: d.update(version=9), "unknown format version 9"),
        (lambda d: d.update(cell_id="zzz"), "under the name of 'abc'"),
        (lambda d: d.pop("sha256"), "missing ['sha256']"),
    ],
)
def test_wrong_schema_is_moved_aside(tmp_path, capsys, edit, needle):
    s = Store(tmp_path)
    p = s.write_cell("abc", _rows(0.5))
    _tamper(p, edit)
    assert not s.has("abc")
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda r: r[0].update(n={"a": 1}), "non-scalar values in ['n']"),
        (lambda r: r[0].update(value="high"), "non-numeric value"),
        (lambda r: r[0].update(cell_id="zzz"), "cell_id 'zzz'"),
        (lambda r: r[1].update(metric="exact_match"), "duplicate metrics"),
        (lambda r: r.append(7), "row 2 is a int"),
    ],
)
def test_wrong_row_schema_is_moved_aside_even_with_a_matching_checksum(
    tmp_path, capsys, edit, needle
):
    from bench.results import rows_checksum

    s = Store(tmp_path)
    p = s.write_cell("abc", _rows(0.5))

    def rewrite(d):
        edit(d["rows"])
        d["sha256"] = rows_checksum(d["rows"])

    _tamper(p, rewrite)
    assert not s.has("abc")
    assert needle in capsys.readouterr().err


def test_files_written_before_checksums_still_read(tmp_path, capsys):
    """Version 1 was a bare JSON list of full rows: trusted when it parses and fits the schema."""
    s = Store(tmp_path)
    s.dir.mkdir(parents=True)
    old_columns = COLUMNS[: COLUMNS.index("wall_s") + 1]  # the columns of that time
    rows = [{**dict.fromkeys(old_columns), **r, "cell_id": "old"} for r in _rows(0.5)]
    s.path("old").write_text(json.dumps(rows, indent=1))
    assert s.has("old") and len(s.read()) == 2 and s.rows("old") == rows
    assert capsys.readouterr().err == ""
    assert s.verify() == ([], 1, 1, 0)
    s.path("old").write_text(json.dumps(rows)[:-3])
    assert not Store(tmp_path).has("old")


def _add_newer_columns(path: Path, **extra) -> None:
    """What a newer version of the code writes: rows with more columns, checksummed."""
    from bench.results import rows_checksum

    def edit(d):
        for r in d["rows"]:
            r.update(extra)
        d["sha256"] = rows_checksum(d["rows"])

    _tamper(path, edit)


def test_rows_from_a_newer_version_are_read_in_place(tmp_path, capsys):
    """A checksummed file whose rows carry columns this code does not know was written by a
    newer version: it is valid (done, not recomputed), read with the known columns, left in
    place (not moved to corrupt/), and the store is named on stderr once."""
    s = Store(tmp_path)
    p = s.write_cell("abc", _rows(0.5))
    q = s.write_cell("def", _rows(0.1))
    want = {c: s.rows(c) for c in ("abc", "def")}
    _add_newer_columns(p, joules_per_sample=12.5, note="new")
    _add_newer_columns(q, joules_per_sample=3.0, extra={"nested": [1, 2]})  # dropped unchecked
    before = {f: f.read_bytes() for f in (p, q)}
    capsys.readouterr()
    fresh = Store(tmp_path)
    assert fresh.has("abc") and fresh.rows("abc") == want["abc"]
    assert fresh.has("def") and fresh.rows("def") == want["def"]
    df = Store(tmp_path).read()  # a second reader in the same process: no second warning
    assert len(df) == 4 and list(df.columns) == [c for c in COLUMNS if c in df.columns]
    assert "joules_per_sample" not in df.columns and "note" not in df.columns
    [line] = _warnings(capsys.readouterr().err)
    assert "newer version" in line and str(p) in line and "'joules_per_sample'" in line
    assert "stays in place" in line
    assert {f: f.read_bytes() for f in (p, q)} == before  # untouched, in place
    assert not (tmp_path / "store" / "corrupt").exists()
    assert Store(tmp_path).verify(move=True) == ([], 2, 0, 2)
    r = _verify("verify", "--results-dir", str(tmp_path))
    assert r.returncode == 0 and "2 files checked, 0 bad" in r.stdout, r.stdout + r.stderr
    assert "2 from a newer version" in r.stdout and p.exists() and q.exists()


def test_newer_columns_do_not_excuse_a_bad_file(tmp_path, capsys):
    """Unknown columns are a newer version's only where the checksum vouches for the rows:
    a checksum mismatch, or a version-1 file (no checksum; only older code wrote those),
    is still moved aside."""
    s = Store(tmp_path)
    p = s.write_cell("abc", _rows(0.5))
    _add_newer_columns(p, joules_per_sample=1.0)
    _tamper(p, lambda d: d["rows"][0].update(joules_per_sample=2.0))  # after the checksum
    assert not Store(tmp_path).has("abc")
    assert "checksum mismatch" in capsys.readouterr().err
    rows = [{**dict.fromkeys(COLUMNS), **r, "cell_id": "old", "zz": 1} for r in _rows(0.5)]
    s.path("old").write_text(json.dumps(rows))
    assert not Store(tmp_path).has("old")
    assert "unknown columns ['zz']" in capsys.readouterr().err
    assert len(list((tmp_path / "store" / "corrupt").iterdir())) == 2


def _verify(*args):
    return subprocess.run(
        [sys.executable, "-m", "bench.results", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_verify_cli_exit_codes(tmp_path):
    s = Store(tmp_path)
    s.write_cell("abc", _rows(0.5))
    p = s.write_cell("def", _rows(0.1))
    r = _verify("verify", "--results-dir", str(tmp_path))
    assert r.returncode == 0 and "2 files checked, 0 bad" in r.stdout, r.stdout + r.stderr
    p.write_text(p.read_text()[:-10])
    r = _verify("verify", "--results-dir", str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    [bad] = [ln for ln in r.stdout.splitlines() if ln.startswith("bad:")]
    assert str(p) in bad and "truncated JSON" in bad
    assert p.exists(), "verify without --move changes nothing"
    r = _verify("verify", "--results-dir", str(tmp_path), "--move")
    assert r.returncode == 1 and not p.exists() and r.stderr == ""
    r = _verify("verify", "--results-dir", str(tmp_path))
    assert (
        r.returncode == 0 and "1 files checked, 0 bad" in r.stdout and "1 in corrupt/" in r.stdout
    )
    for args in ((), ("verfy",), ("verify", "--bogus")):
        r = _verify(*args)
        assert r.returncode == 2 and "usage:" in r.stderr, args
    r = _verify("verify", "--results-dir", str(tmp_path / "nothing"))
    assert (
        r.returncode == 2
        and r.stderr.strip() == f"error: {tmp_path / 'nothing' / 'store'}: no results store"
    )


SWEEP = """
name: integrity
results_dir: {rd}
task: {{name: sudoku, grid: 4, difficulties: [easy, hard], train_mix: true, n_train: 64, \
n_valid: 8, data_dir: {dd}}}
backbone: {{size: cpu-mini}}
train: {{steps: 2, batch_size: 8, warmup_steps: 1, checkpoint_every: 1, ema: 0.5}}
sample: {{nfe: [2], temperature: [1.0], n_samples: 8, batch_size: 8}}
executor: {{kind: debug}}
methods:
  - {{method: mdlm}}
"""


def _pending(status: str) -> int:
    """Cells --status lists as pending (one line per cell, the state first)."""
    return sum(ln.startswith("pending") for ln in status.splitlines())


def test_damaged_rows_are_planned_again_and_the_report_goes_on(tmp_path, capsys):
    """The issue's reproduction: a truncated store file made the report crash and the re-run
    count the cell as done. Now --status shows it pending, the report warns and renders, and
    the re-run computes the damaged cells again."""
    from bench import sweep

    rd = tmp_path / "results"
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.format(rd=rd, dd=tmp_path / "data"))
    assert sweep.main([str(path), "--no-progress"]) == 0
    files = sorted((rd / "store").glob("*.json"))
    assert len(files) == 3  # 1 train cell + 2 sample cells (easy, hard)
    samples = [f for f in files if Store(rd).rows(f.stem)[0]["kind"] == "sample"]
    truncated, tampered = samples
    capsys.readouterr()
    assert sweep.main([str(path), "--status"]) == 0
    assert _pending(capsys.readouterr().out) == 0

    truncated.write_text(truncated.read_text()[: len(truncated.read_text()) // 2])
    assert sweep.main([str(path), "--status"]) == 0
    out, err = capsys.readouterr()
    assert _pending(out) == 1 and str(truncated) in err and not truncated.exists()

    _tamper(tampered, lambda d: d["rows"][0].update(value=1.0))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.report",
            "--results-dir",
            str(rd),
            "--out",
            str(tmp_path / "rep"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert (
        "Traceback" not in r.stderr
        and str(tampered) in r.stderr
        and "checksum mismatch" in r.stderr
    )
    assert (tmp_path / "rep" / "sudoku.md").is_file()

    assert sweep.main([str(path), "--no-progress"]) == 0  # recomputes exactly the two cells
    assert sorted((rd / "store").glob("*.json")) == files
    assert len(list((rd / "store" / "corrupt").glob("*.json"))) == 2
    store = Store(rd)
    assert all(store.has(f.stem) for f in files)
    df = store.read()
    assert df.groupby(["cell_id", "metric"]).size().max() == 1
    capsys.readouterr()
    assert sweep.main([str(path), "--status"]) == 0
    assert _pending(capsys.readouterr().out) == 0
