import json

import pytest

from bench.results import COLUMNS, Store


def _rows(v):
    return [
        {"task": "sudoku", "method": "mdlm", "metric": "exact_match", "value": v, "n": 10},
        {"task": "sudoku", "method": "mdlm", "metric": "cell_accuracy", "value": v / 2, "n": 10},
    ]


def test_rows_have_the_store_columns_and_provenance(tmp_path):
    """A read store has exactly bench.results.COLUMNS, and every row a git_sha and created_at."""
    s = Store(tmp_path)
    s.write_cell("abc", _rows(0.5))
    df = s.read()
    assert list(df.columns) == COLUMNS
    assert len(df) == 2 and set(df["cell_id"]) == {"abc"}
    assert df["git_sha"].notna().all() and df["created_at"].notna().all()


def test_rewriting_a_cell_deduplicates(tmp_path):
    s = Store(tmp_path)
    s.write_cell("abc", _rows(0.5))
    s.write_cell("abc", _rows(0.7))
    s.write_cell("def", _rows(0.1))
    df = s.read()
    assert len(df) == 4
    assert df.groupby(["cell_id", "metric"]).size().max() == 1
    assert float(df[(df.cell_id == "abc") & (df.metric == "exact_match")]["value"].iloc[0]) == 0.7


def test_half_written_temp_file_is_ignored(tmp_path):
    s = Store(tmp_path)
    s.write_cell("abc", _rows(0.5))
    (s.dir / ".def.json.123.tmp").write_text('[{"cell_id": "def", "met')  # a killed writer
    assert set(s.read()["cell_id"]) == {"abc"}


def test_bad_rows_rejected_without_writing(tmp_path):
    s = Store(tmp_path)
    with pytest.raises(ValueError, match="duplicate metrics"):
        s.write_cell("x", _rows(0.5) + _rows(0.5))
    with pytest.raises(ValueError, match="unknown result columns"):
        s.write_cell("x", [{"metric": "m", "value": 1, "nested": {"a": 1}}])
    assert not s.has("x")


def test_store_file_is_plain_json(tmp_path):
    s = Store(tmp_path)
    p = s.write_cell("abc", _rows(0.5))
    data = json.loads(p.read_text())
    assert (data["format"], data["version"], data["cell_id"]) == ("sflm-bench-results", 2, "abc")
    assert [r["metric"] for r in data["rows"]] == ["exact_match", "cell_accuracy"]
