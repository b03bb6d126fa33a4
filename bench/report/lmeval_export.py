"""The results store as lm-evaluation-harness result files: ``results_<date>.json`` and
``samples_<task>_<date>.jsonl``, one folder per model and sampling setting, the layout and keys of
lm-eval 0.4 (``lm_eval/result_schema.py``; ``loggers/evaluation_tracker.py`` writes
``<output>/<model_name_sanitized>/results_<date>.json``), so its readers, leaderboards and its W&B
logger read them (docs/report.md, "lm-eval result files").

What maps to what:

- an lm-eval **task** is one (task, subset) of the store: ``sudoku_easy``, ``gsm8k_test``; a
  likelihood cell is the task ``<task>_likelihood_<dataset>``;
- an lm-eval **run** (one results file) is one model (train cell and variant) at one sampling
  setting (NFE, temperature, decoding, sampling options, ``bench.eval`` protocol): that setting is
  the run's ``config.gen_kwargs``, its measured cost (network calls, forward-equivalents, seconds
  per sample) under ``config.sflm_bench``;
- a metric is ``"<metric>,none"`` with ``"<metric>_stderr,none"``: the standard error of the mean
  of the per-item outcomes (lm-eval's ``mean_stderr``: sample standard deviation over sqrt(n))
  where the row carries them, else the interval's half-width over z_0.975 (a normal reading of
  our interval), else ``"N/A"``; how, and our 95 % interval itself, are under the extra top-level
  key ``intervals`` (``{task: {metric: {"low", "high", "method", "stderr_method"}}}``);
- a sample line is one per-item record (:mod:`bench.records`): the prompt as ``arguments``, the
  output as ``resps``, the headline outcome as the metric, and lm-eval's three sha256 hashes.

The date in a file name is the newest ``created_at`` of the rows it holds (so exporting the same
store twice writes the same files), in lm-eval's form (ISO 8601, ``:`` as ``-``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pandas as pd

from bench import records
from bench.report.common import prepared

#: metrics where a lower value is better (every other metric of the built-in tasks: higher)
LOWER_IS_BETTER = {"gen_ppl", "nll", "ppl", "bpd", "nll_mc_se", "gen_ppl_empty_frac"}
#: metrics that describe a cell rather than score it: kept out of the results
NOT_SCORES = {"tokens", "gen_ppl_tokens_per_sample"}
Z975 = 1.959963984540054  # the 97.5 % point of the standard normal
#: the row columns that make one lm-eval run (one results file) of a model
RUN_KEYS = [
    "model",
    "train_cell",
    "kind",
    "nfe",
    "temperature",
    "decoding",
    "sampling",
    "evaluation",
    "item_limit",
]
#: a run's measured cost, per sample cell, into config.sflm_bench
COST_COLUMNS = [
    "network_calls",
    "forward_equivalents",
    "seconds_per_sample",
    "tokens_per_s",
    "sample_s",
    "device_name",
    "torch_version",
]


class ExportError(ValueError):
    """A bad export request (one line naming the folder or the selection)."""


def _sha(text: str) -> str:
    # lm_eval.utils.hash_string
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sanitize(name: str) -> str:
    # lm_eval.utils.sanitize_model_name (spaces and "=" too)
    return re.sub(r"[\"<>:/|\\?*\[\]\s=]+", "__", name).strip("_")


def _task_name(row) -> str:
    subset = str(row["subset"])
    if row["kind"] == "likelihood":
        subset = "likelihood_" + subset
    return re.sub(r"\W", "_", f"{row['task']}_{subset}")  # lm_eval.utils.sanitize_task_name


def _date(created: pd.Series) -> tuple[str, float]:
    stamp = max(str(v) for v in created.dropna()) if created.notna().any() else "1970-01-01"
    t = datetime.fromisoformat(stamp)
    return t.replace(tzinfo=None).isoformat().replace(":", "-"), t.timestamp()


def _value(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "item"):
        v = v.item()
    return v


def _nfe(v):
    v = _value(v)
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _outcomes(v) -> list[int] | None:
    if isinstance(v, str) and v and set(v) <= {"0", "1"}:
        return [int(c) for c in v]
    return None


def stderr(row) -> tuple[float | str, str]:
    """The row's standard error and how it was obtained (module docstring)."""
    out = _outcomes(row.get("item_outcomes")) if row.get("metric_rank") == 0 else None
    if out is not None and len(out) > 1:
        n, mean = len(out), sum(out) / len(out)
        var = sum((x - mean) ** 2 for x in out) / (n - 1)
        return math.sqrt(var / n), "sample standard deviation of the item outcomes / sqrt(n)"
    lo, hi = _value(row.get("ci_low")), _value(row.get("ci_high"))
    if lo is not None and hi is not None:
        return (float(hi) - float(lo)) / (2 * Z975), "95 % interval half-width / 1.96"
    return "N/A", "none"


def _task_block(task: str, rows: pd.DataFrame) -> tuple[dict, dict, dict]:
    """(results[task], higher_is_better[task], intervals[task]) of one task's rows."""
    res, hib, iv = {"alias": task}, {}, {}
    for _, r in rows.iterrows():
        m, v = str(r["metric"]), _value(r["value"])
        if m in NOT_SCORES or v is None:
            continue
        se, how = stderr(r)
        res[f"{m},none"] = float(v)
        res[f"{m}_stderr,none"] = se
        hib[m] = m not in LOWER_IS_BETTER
        iv[m] = {
            "low": _value(r.get("ci_low")),
            "high": _value(r.get("ci_high")),
            "method": _value(r.get("ci_method")),
            "stderr_method": how,
        }
    res["sample_len"] = int(rows["n"].max()) if rows["n"].notna().any() else 0
    return res, hib, iv


def _gen_kwargs(first) -> dict:
    out = {
        "nfe": _nfe(first.get("nfe")),
        "temperature": _value(first.get("temperature")),
        "decoding": _value(first.get("decoding")),
    }
    sampling = _value(first.get("sampling"))
    out["sampling"] = json.loads(sampling) if sampling else {}
    return out


def _cell_cost(rows: pd.DataFrame) -> dict:
    cost = {}
    for cell, r in rows.drop_duplicates("cell_id").set_index("cell_id").iterrows():
        cost[cell] = {
            "task": r["lm_eval_task"],
            **{k: _value(r.get(k)) for k in COST_COLUMNS if k in r},
        }
    return cost


def results_file(run: pd.DataFrame, n_params: dict[str, int], date: tuple[str, float]) -> dict:
    """One lm-eval results dict of one run's rows (a frame of :func:`plan_export`; module
    docstring)."""
    first = run.iloc[0]
    out: dict = {
        "results": {},
        "configs": {},
        "versions": {},
        "n-shot": {},
        "higher_is_better": {},
        "n-samples": {},
        "intervals": {},
        "task_hashes": {},
    }
    for task, rows in run.groupby("lm_eval_task", sort=True):
        res, hib, iv = _task_block(task, rows)
        r0 = rows.iloc[0]
        out["results"][task] = res
        out["higher_is_better"][task] = hib
        out["intervals"][task] = iv
        out["n-shot"][task] = 0
        out["versions"][task] = _value(r0.get("task_protocol")) or "N/A"
        n = res["sample_len"]
        limit = _value(r0.get("item_limit"))
        out["n-samples"][task] = {"original": n, "effective": int(limit) if limit else n}
        out["configs"][task] = {
            "task": task,
            "dataset_name": str(r0["subset"]),
            "output_type": "loglikelihood_rolling"
            if r0["kind"] == "likelihood"
            else "generate_until",
            "metric_list": [{"metric": m, "higher_is_better": h} for m, h in hib.items()],
            "metadata": {
                "sflm_bench_task": str(r0["task"]),
                "task_kind": _value(r0.get("task_kind")),
                "stand_in_for": _value(r0.get("stand_in_for")),
            },
        }
        if _value(r0.get("items_key")):
            out["task_hashes"][task] = str(r0["items_key"])
    label = str(first["model"])
    setting = (
        ""
        if first["kind"] == "likelihood"
        else (f" nfe{_nfe(first['nfe'])} T{_value(first['temperature']):g}")
    )
    evaluation = _value(first.get("evaluation")) or ""
    name = f"{label}{setting}{' [' + evaluation + ']' if evaluation else ''}"
    train_cell = str(first["train_cell"])
    out["config"] = {
        "model": "sflm-bench",
        "model_args": {
            "method": str(first["method"]),
            "variant": _value(first.get("variant")),
            "train_cell": train_cell,
            "checkpoint": _value(first.get("checkpoint")),
        },
        "model_num_parameters": n_params.get(train_cell),
        "device": _value(first.get("device")),
        "limit": _value(first.get("item_limit")),
        "gen_kwargs": {} if first["kind"] == "likelihood" else _gen_kwargs(first),
        "random_seed": _value(first.get("sample_seed")),
        "torch_seed": _value(first.get("sample_seed")),
        "sflm_bench": {
            "sweep": _value(first.get("sweep")),
            "evaluation": evaluation,
            "train_seed": _value(first.get("train_seed")),
            "recipe": json.loads(first["recipe"]) if _value(first.get("recipe")) else None,
            "cells": _cell_cost(run),
        },
    }
    out["git_hash"] = str(first["git_sha"])[:7] if _value(first.get("git_sha")) else None
    out["date"] = date[1]
    out["model_source"] = "sflm-bench"
    out["model_name"] = name
    out["model_name_sanitized"] = _sanitize(name)
    return out


def _generation(rec: dict, metric: str, gen_kwargs: dict) -> dict:
    prompt, output = str(rec.get("prompt") or ""), str(rec.get("output") or "")
    target = "" if rec.get("target") is None else str(rec["target"])
    correct = rec.get("correct")
    return {
        "doc": {"item": rec.get("item"), "prompt": prompt, "target": target},
        "target": target,
        "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": gen_kwargs}},
        "resps": [[output]],
        "filtered_resps": [output],
        "metrics": [metric],
        metric: None if correct is None else float(correct),
        "prompt_hash": _sha(prompt),
        "target_hash": _sha(target),
    }


def _rolling(rec: dict, metric: str, gen_kwargs: dict) -> dict:
    # lm-eval's loglikelihood_rolling line: the text as the one argument, its log-likelihood as
    # the response, the metric as (summed NLL in nats, tokens), a pair aggregated sum over sum
    text, nll = str(rec.get("text") or ""), rec.get("nll")
    ll = None if nll is None else -float(nll)
    return {
        "doc": {"item": rec.get("index"), "text": text},
        "target": "",
        "arguments": {"gen_args_0": {"arg_0": text}},
        "resps": [[ll]],
        "filtered_resps": [ll],
        "metrics": ["nll"],
        "nll": [None if nll is None else float(nll), int(rec.get("n_tokens") or 0)],
        "prompt_hash": _sha(text),
        "target_hash": _sha(""),
    }


#: a stored row's kind -> how one of its records reads as an lm-eval sample line
LINES = {"sample": _generation, "likelihood": _rolling}


def sample_lines(results_dir, rows: pd.DataFrame, gen_kwargs: dict) -> list[dict]:
    """lm-eval sample lines of one task's cell (its headline row names the records)."""
    head = rows[pd.to_numeric(rows["metric_rank"], errors="coerce") == 0]
    r = (head if len(head) else rows).iloc[0]
    rel, line = _value(r.get("records")), LINES.get(str(r["kind"]))
    if not rel or line is None:
        return []
    out = []
    for rec in records.read(results_dir, rel, _value(r.get("records_sha256"))):
        x = line(rec, str(r["metric"]), gen_kwargs)
        out.append(
            {
                "doc_id": int(rec["index"]),
                **x,
                "filter": "none",
                "doc_hash": _sha(json.dumps(x["doc"], sort_keys=True)),
            }
        )
    return out


def plan_export(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The store's scored rows (sample and likelihood cells), prepared, by run folder name."""
    s = prepared(df)
    s = s[s["kind"].isin(["sample", "likelihood"])].copy()
    if not len(s):
        return {}
    for k in RUN_KEYS:
        if k not in s:
            s[k] = None
    key = s[RUN_KEYS].apply(lambda r: "\x1f".join(map(str, r)), axis=1)
    s["lm_eval_task"] = s.apply(_task_name, axis=1)  # each row's lm-eval task, named once
    return {k: g for k, g in s.groupby(key, sort=True)}


def check_folder(out_dir) -> None:
    """ExportError unless ``out_dir`` does not exist or is an empty folder (checked before any
    work, so a command that would fail to export computes nothing)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ExportError(f"{out_dir}: exists and is not an empty folder")


def export_cells(results_dir, cell_ids, out_dir) -> list[Path]:
    """:func:`export` of the store's rows of ``cell_ids`` (scored cells and their models)."""
    from bench.results import Store

    df = Store(results_dir).read()
    return export(results_dir, df[df["cell_id"].isin(set(cell_ids))], out_dir)


def export(results_dir, df: pd.DataFrame, out_dir) -> list[Path]:
    """Write every run of ``df`` (the store's rows, already selected) under ``out_dir``, which must
    not exist or be an empty folder; the files written. All of it is written in a temporary
    sibling folder renamed to ``out_dir`` at the end: a failure leaves nothing behind."""
    out_dir = Path(out_dir)
    check_folder(out_dir)
    runs = plan_export(df)
    if not runs:
        raise ExportError(f"{results_dir}: no sample or likelihood cell matches the selection")
    everything = prepared(df)
    params = everything[
        (everything["kind"].isin(["train", "import"])) & (everything["metric"] == "n_params")
    ]
    n_params = {str(r["cell_id"]): int(r["value"]) for _, r in params.iterrows()}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        names = _write_runs(results_dir, runs, n_params, tmp)
        if out_dir.exists():
            out_dir.rmdir()
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [out_dir / n for n in names]


def _write_runs(results_dir, runs: dict, n_params: dict, root: Path) -> list[Path]:
    written, folders = [], defaultdict(int)
    for run in runs.values():
        date = _date(run["created_at"])
        res = results_file(run, n_params, date)
        folder = res["model_name_sanitized"]
        folders[folder] += 1
        if folders[folder] > 1:  # two runs that print alike (never silently merged)
            folder = f"{folder}__{folders[folder]}"
            res["model_name_sanitized"] = folder
        (root / folder).mkdir()
        for task, rows in run.groupby("lm_eval_task", sort=True):
            lines = sample_lines(results_dir, rows, res["config"]["gen_kwargs"])
            if lines:
                name = Path(folder) / f"samples_{task}_{date[0]}.jsonl"
                text = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
                (root / name).write_text(text, encoding="utf-8")
                written.append(name)
        name = Path(folder) / f"results_{date[0]}.json"
        (root / name).write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n", "utf-8")
        written.append(name)
    return written
