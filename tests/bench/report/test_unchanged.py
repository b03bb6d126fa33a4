"""A report run again on inputs nothing changed in writes nothing and says so; a new cell, other
options, other code, a report file removed or ``--force`` give a full report; an interrupted
report is never taken as current (bench.report.unchanged)."""

import pytest

from bench import report
from bench.report import cli, unchanged
from bench.results import Store


def _rows(value, method="mdlm"):
    return [
        {
            "task": "sudoku",
            "method": method,
            "variant": "base",
            "decoding": "ancestral",
            "kind": "sample",
            "subset": "easy",
            "metric": "exact_match",
            "value": value,
            "n": 256,
            "nfe": 16,
            "temperature": 1.0,
            "train_steps": 600,
        }
    ]


def _files(out):
    """{relative path: (mtime_ns, size)} of every file of the report folder."""
    return {
        p.relative_to(out).as_posix(): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def _report(tmp_path, capsys, *extra):
    assert report.main(["--results-dir", str(tmp_path), "--no-html", *extra]) == 0
    return capsys.readouterr().out


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    s.write_cell("a", _rows(0.5))
    return s


def test_a_second_report_on_the_same_inputs_writes_nothing(tmp_path, store, capsys):
    out = tmp_path / "report"
    first = _report(tmp_path, capsys)
    assert "rows ->" in first and (out / unchanged.STAMP).is_file()
    before = _files(out)
    again = _report(tmp_path, capsys)
    assert "nothing changed since the report of" in again and "nothing written" in again
    assert "rows ->" not in again
    assert _files(out) == before  # not one file rewritten, the stamp included


def test_a_new_cell_or_force_gives_a_full_report(tmp_path, store, capsys):
    out = tmp_path / "report"
    _report(tmp_path, capsys)
    md = (out / "sudoku.md").read_text()
    store.write_cell("b", _rows(0.25, method="duo"))
    assert "rows ->" in _report(tmp_path, capsys)
    assert (out / "sudoku.md").read_text() != md and "duo" in (out / "sudoku.md").read_text()
    before = _files(out)
    forced = _report(tmp_path, capsys, "--force")
    assert "rows ->" in forced and "nothing changed" not in forced
    assert _files(out)["sudoku.md"] != before["sudoku.md"]  # rewritten (same content)
    assert "nothing changed" in _report(tmp_path, capsys)  # and current again


def test_other_options_or_a_removed_report_file_give_a_full_report(tmp_path, store, capsys):
    out = tmp_path / "report"
    _report(tmp_path, capsys)
    assert "nothing changed" in _report(tmp_path, capsys)
    assert "rows ->" in _report(tmp_path, capsys, "--samples", "2")
    assert "rows ->" in _report(tmp_path, capsys)  # back to the default options
    (out / "sudoku.md").unlink()
    assert "rows ->" in _report(tmp_path, capsys)
    assert (out / "sudoku.md").is_file()
    (out / "extra.txt").write_text("added by hand\n")  # the page would list it: not current
    assert "rows ->" in _report(tmp_path, capsys)


def test_a_change_of_the_code_gives_a_full_report(tmp_path, store, capsys, monkeypatch):
    code = tmp_path / "code"
    code.mkdir()
    (code / "mod.py").write_text("X = 1\n")
    monkeypatch.setattr(unchanged, "code_roots", lambda: [code])
    _report(tmp_path, capsys)
    assert "nothing changed" in _report(tmp_path, capsys)
    (code / "mod.py").write_text("X = 2\n")
    assert "rows ->" in _report(tmp_path, capsys)


def test_a_report_stopped_half_way_is_not_current(tmp_path, store, capsys, monkeypatch):
    """Same inputs, a forced report that stops after writing results.csv: the folder is not the
    report of its stamp any more, so the next report is a full one."""
    out = tmp_path / "report"
    _report(tmp_path, capsys)
    stamp = (out / unchanged.STAMP).read_text()

    def fail(*a, **k):
        raise RuntimeError("stopped")

    monkeypatch.setattr(cli, "task_markdown", fail)
    with pytest.raises(RuntimeError, match="stopped"):
        report.main(["--results-dir", str(tmp_path), "--no-html", "--force"])
    assert (out / unchanged.STAMP).read_text() == stamp  # the stamp of the last whole report
    monkeypatch.undo()
    assert "rows ->" in _report(tmp_path, capsys)  # results.csv is not the one it lists
    assert "nothing changed" in _report(tmp_path, capsys)


def test_the_stamp_is_not_a_report_file(tmp_path, store, capsys):
    """The page lists the report folder's files: the stamp (a dot file) is not one of them."""
    from bench.report.html import files

    assert report.main(["--results-dir", str(tmp_path)]) == 0
    out = tmp_path / "report"
    assert (out / unchanged.STAMP).is_file()
    assert unchanged.STAMP not in files._listing(out, "")
    assert unchanged.STAMP not in (out / "index.html").read_text()
