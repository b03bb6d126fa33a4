"""A records file changed, cut or deleted after its rows were written is named by
``python -m bench.rescore`` (the cell skipped, exit 1) and ``python -m bench.report`` (one stderr
line per file, the report still written): one check, :func:`bench.records.damaged_files`.

A real tiny store: one MDLM model on 4x4 Sudoku (two subsets x two NFEs: four sample cells), three
of whose records files are damaged three ways while the fourth stays intact."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pandas as pd
import pytest

from bench import cells, records
from bench.config import load_sweep
from bench.plan import plan
from bench.results import Store

SWEEP = """
name: dmg
results_dir: {rd}
task: {{name: sudoku, grid: 4, difficulties: [easy, hard], train_mix: true, n_train: 32,
        n_valid: 8, data_dir: {dd}}}
backbone: {{size: cpu-mini}}
train: {{steps: 2, batch_size: 8, warmup_steps: 1, checkpoint_every: 2, ema: 0.5}}
sample: {{nfe: [2, 4], temperature: [1.0], n_samples: 8, batch_size: 8}}
executor: {{kind: debug}}
methods:
  - {{method: mdlm}}
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("dmg")
    path = tmp / "s.yaml"
    path.write_text(SWEEP.format(rd=tmp / "results", dd=tmp / "data"))
    p = plan(load_sweep(path), str(path))
    for tc in p.train_cells:
        cells.run_train_then_samples(tc, p.samples_of(tc), progress=False)
    return tmp / "results"


def _damage(rd: Path) -> dict[str, tuple[str, Path]]:
    """Damage three of the four sample cells' records files: {how: (cell id, file)}; the
    remaining cell's file is left alone."""
    df = Store(rd).read()
    s = df[(df["kind"] == "sample")].drop_duplicates("cell_id").sort_values("cell_id")
    assert len(s) == 4
    victims = {}
    for how, (_, r) in zip(("truncated", "byte changed", "deleted"), s.iterrows()):
        f = rd / r["records"]
        data = f.read_bytes()
        if how == "truncated":
            f.write_bytes(data[: len(data) // 2])
        elif how == "byte changed":  # one byte of the deflate stream, same length
            i = len(data) // 2
            f.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :])
        else:
            f.unlink()
        victims[how] = (r["cell_id"], f)
    return victims


def _lines_naming(text: str, name: str) -> list[str]:
    return [ln for ln in text.splitlines() if name in ln]


def test_rescore_and_report_name_each_damaged_records_file(store, tmp_path, capsys):
    from bench.commands.rescore import main as rescore_main
    from bench.report import main as report_main

    rd = tmp_path / "results"
    shutil.copytree(store, rd)
    assert rescore_main(["--results-dir", str(rd)]) == 0  # intact: every value reproduces
    capsys.readouterr()
    victims = _damage(rd)

    rc = rescore_main(["--results-dir", str(rd)])
    out, err = capsys.readouterr()
    assert rc == 1
    for cell, f in victims.values():
        (line,) = _lines_naming(err, f.name)
        assert line.startswith("skipped: ") and cell in line
    assert len([ln for ln in err.splitlines() if ln.startswith("skipped: ")]) == 3
    # the intact cell is still scored, and only it
    assert "1 of 1 cells reproduce every stored value" in out

    rc = report_main(["--results-dir", str(rd), "--out", str(tmp_path / "report")])
    out, err = capsys.readouterr()
    assert rc == 0 and (tmp_path / "report" / "results.csv").is_file()
    ours = [ln for ln in err.splitlines() if ln.startswith("warning: cell ")]
    assert len(ours) == 3, err
    for cell, f in victims.values():
        (line,) = [ln for ln in ours if f.name in ln]
        assert cell in line and str(f) in line
    kinds = {how: _lines_naming("\n".join(ours), f.name)[0] for how, (_, f) in victims.items()}
    assert "records file missing" in kinds["deleted"]
    assert "damaged records file" in kinds["truncated"]


def test_damaged_files_checks_each_file_once(tmp_path):
    """The one check, on hand-written files: intact, changed content with a valid gzip (only the
    sha256 finds it), cut, deleted; a file two rows name is reported once, with both cells."""
    recs = [{"index": i, "correct": i % 2} for i in range(8)]
    cols = {c: records.write(tmp_path, c, recs) for c in ("ok", "swapped", "cut", "gone")}
    rows = [{"cell_id": c, **v} for c, v in cols.items()]
    rows.append({"cell_id": "alias", **cols["cut"]})  # a second cell naming the cut file
    rows.append({"cell_id": "none", "records": None, "records_sha256": None})
    df = pd.DataFrame(rows)
    assert records.damaged_files(tmp_path, df) == []

    other = gzip.compress(records.encode(recs[::-1]))  # valid gzip, valid JSON, other text
    (tmp_path / cols["swapped"]["records"]).write_bytes(other)
    p = tmp_path / cols["cut"]["records"]
    p.write_bytes(p.read_bytes()[:-9])
    (tmp_path / cols["gone"]["records"]).unlink()
    bad = {rel: (ids, why) for rel, ids, why in records.damaged_files(tmp_path, df)}
    assert set(bad) == {cols[c]["records"] for c in ("swapped", "cut", "gone")}
    assert bad[cols["swapped"]["records"]][0] == ["swapped"]
    assert "sha256" in bad[cols["swapped"]["records"]][1]
    assert bad[cols["cut"]["records"]][0] == ["cut", "alias"]
    assert "missing" in bad[cols["gone"]["records"]][1]
    lines = records.damaged_lines(tmp_path, df)
    assert len(lines) == 3 and all(ln.startswith("cell ") for ln in lines)
    assert any(ln.startswith("cell cut, alias: ") and str(p) in ln for ln in lines)
    assert records.damaged_files(tmp_path, df.drop(columns="records")) == []


def test_every_changed_byte_is_a_damaged_file_never_a_traceback(tmp_path):
    """Whichever byte of a records file changes (header, deflate stream, CRC, size), the check
    names the file, or, for the header's time and OS bytes, reads the same records: a changed
    deflate byte can fail inside zlib, not only at the CRC."""
    from bench import records as rec

    files = rec.write(tmp_path, "cell", [{"index": i, "output": "3 1 4 1 5"} for i in range(20)])
    p = tmp_path / files["records"]
    data = p.read_bytes()
    for i in range(len(data)):
        p.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :])
        why = rec.check(tmp_path, files["records"], files["records_sha256"])
        if 4 <= i <= 9:  # the gzip header's MTIME, XFL, OS: not the records' text, which reads
            assert why is None and len(rec.read(tmp_path, files["records"])) == 20, i
        else:
            assert why is not None and str(p) in why, i
    p.write_bytes(data)
    assert rec.check(tmp_path, files["records"], files["records_sha256"]) is None
