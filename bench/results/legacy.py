"""The defaults of older stores: what the report derived from task and method names before rows
carried the report columns (:data:`bench.results.schema.REPORT_COLUMNS`). The one place that
knows them: :func:`with_report_columns` completes a store written before those columns existed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.results.schema import REPORT_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

# What the code before REPORT_COLUMNS existed decided from task and method names (bench/report.py
# and bench/registry.py at that time). Only rows without ``task_kind`` are completed from it.
_LEGACY_HEADLINE = ("exact_match", "accuracy")  # the first one a task's sample rows have
_LEGACY_SECONDARY = ("cell_accuracy", "blank_accuracy", "valid_grid")
_LEGACY_SUBSET_ORDER = ("easy", "medium", "hard")
_LEGACY_PROGRAM_TASKS = ("gsm8k", "arith_standin")
_LEGACY_TITLE = {"gsm8k": "GSM8K"}
_LEGACY_STAND_IN = {"arith_standin": "GSM8K"}
_LEGACY_NFE_IS_LENGTH = ("ar",)
# before the protocol options existed there was one generator and one grader
_LEGACY_PROTOCOL = {
    "sudoku": "generator=fast",
    "gsm8k": "grader=standard; separator=newline",
    "arith_standin": "grader=standard; separator=newline",
}
_LEGACY_TEMPERATURE_FREE = {("ar", "greedy"), ("sflm", "top1")}
_LEGACY_DEFAULT_DECODING = {
    "ar": "sample",
    "mdlm": "ancestral",
    "candi": "cached",
    "duo": "ancestral",
    "flm": "euler",
    "sflm": "exact",
}


def with_report_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every :data:`REPORT_COLUMNS` column filled: rows written before those columns
    existed (no ``task_kind``) get what the report then derived from task and method names
    (the ``_LEGACY_*`` tables above; the methods and tasks of that time are the only ones such a
    store can hold). Rows that have ``task_kind`` are left as written. Idempotent."""
    import pandas as pd

    df = df.copy()
    for c in REPORT_COLUMNS:
        if c not in df:
            df[c] = None
        df[c] = df[c].astype(object)
    old = df["task_kind"].isna()
    if not old.any():
        return df
    o = df[old]
    sample = (o["kind"] == "sample").tolist()
    headline = {
        task: next((m for m in _LEGACY_HEADLINE if m in set(g["metric"])), None)
        for task, g in o[o["kind"] == "sample"].groupby("task")
    }

    def metric_rank(task, metric):
        if metric == headline.get(task):
            return 0
        return _LEGACY_SECONDARY.index(metric) + 1 if metric in _LEGACY_SECONDARY else None

    tasks, methods, decodings = o["task"].tolist(), o["method"].tolist(), o["decoding"].tolist()
    per_row = {  # column -> value per row, sample rows only where marked
        "task_kind": (
            ["program" if t in _LEGACY_PROGRAM_TASKS else "generic" for t in tasks],
            False,
        ),
        "task_title": ([_LEGACY_TITLE.get(t, t) for t in tasks], False),
        "stand_in_for": ([_LEGACY_STAND_IN.get(t, "") for t in tasks], False),
        "metric_rank": ([metric_rank(t, m) for t, m in zip(tasks, o["metric"])], True),
        "subset_rank": (
            [
                _LEGACY_SUBSET_ORDER.index(s) if s in _LEGACY_SUBSET_ORDER else None
                for s in o["subset"]
            ],
            True,
        ),
        "nfe_is_length": ([m in _LEGACY_NFE_IS_LENGTH for m in methods], True),
        "temperature_free": (
            [(m, d) in _LEGACY_TEMPERATURE_FREE for m, d in zip(methods, decodings)],
            True,
        ),
        "default_decoding": (
            [_LEGACY_DEFAULT_DECODING.get(m) == d for m, d in zip(methods, decodings)],
            True,
        ),
        "task_protocol": ([_LEGACY_PROTOCOL.get(t, "") for t in tasks], False),
    }
    for col, (values, sample_only) in per_row.items():
        values = [v if k or not sample_only else None for v, k in zip(values, sample)]
        df.loc[old, col] = pd.Series(values, index=o.index, dtype=object)
    return df
