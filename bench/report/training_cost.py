"""Training cost per model and task (paper table "Training cost", ``tab:training-cost``): steps/s,
duration and device-hours from the store's train rows, in the paper's layout (rows: its models;
columns: steps/s, duration (h), GPU-hours, each for TinyGSM and OWT) with its numbers beside ours
(``results/paper/training_cost.csv``). Tasks the paper has no column for (Sudoku) get their own.

Written as the report section ``training_cost`` (``<out>/training_cost.md`` / ``.csv``, when the
store has train rows) and the paper artifact ``tab-training-cost`` (``--figure``, ``--paper``).

From one train cell's rows (:func:`bench.results.rows.train_rows`): ``train_steps_per_s``,
``train_steps`` and ``wall_s``. Duration (h) = steps / (steps/s) / 3600, as the paper derives it
from its step rate (it equals ``wall_s`` for a run that was never resumed; a resumed run's
``wall_s`` covers only its last process). Device-hours = duration x devices: GPU-hours when the
row records a CUDA ``device``, CPU-hours otherwise. Rows without a ``device`` / ``devices``
column (the store does not record them yet) count one device of unrecorded kind, said so in the
table. Several train cells of one (task, model) (seeds, Sudoku's per-difficulty models): the mean
per run, with the number of runs.

Measured cost (:data:`bench.measure.TRAIN_COST_COLUMNS`, train rows written since): the
column groups ``s/step``, ``tokens/s`` and ``peak mem (MB)`` per task, shown when any run has
them (the paper has no such numbers); the device they were measured on (``device_name``, with
the threads on a CPU) named in a note, or in a ``device`` group per entry where the runs'
devices differ. Stores without them read as before.

``results/paper/training_cost.csv``: one row per (paper model, task, metric); ``variant`` may list
alternatives separated by ``|`` (the first one the store has is used: S-arch is ``sarch`` in the
GSM8K sweeps and ``sarch-trunc-adaptive`` in the quickstart); ``steps`` and ``gpus`` are the
paper's run (250k steps on 8 H100s for TinyGSM, 1M on 16 for OWT).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench import atomic
from bench.report.common import rows
from bench.report.cost import UNRECORDED, device_of
from bench.report.document import Doc, Table, ids
from bench.report.items import Artifact, Section
from bench.report.paper.numbers import PAPER_DIR, one_recipe

LABEL = "tab-training-cost"
#: catalogue data: the paper's task columns: store task (or the task its CPU stand-in replaces)
#: -> header
PAPER_TASKS = {"gsm8k": "TinyGSM", "owt": "OWT"}
#: catalogue data: a store task of this kind fills the paper column of this task (any frontier
#: task, whatever its name, is the paper's OWT column)
PAPER_TASK_OF_KIND = {"frontier": "owt"}
QUANTITIES = (  # (column group, our field, the paper's metric)
    ("steps/s", "steps_per_s", "steps_per_s"),
    ("duration (h)", "duration_h", "duration_h"),
    ("device-hours", "device_hours", "gpu_hours"),
)
#: measured cost of a train row (:data:`bench.measure.TRAIN_COST_COLUMNS`): column groups
#: shown when any run has them (the paper reports none of them); stores written before them
#: have none, and the table reads as before
MEASURED = (  # (column group, our field)
    ("s/step", "s_per_step"),
    ("tokens/s", "tokens_per_s"),
    ("peak mem (MB)", "peak_mem_mb"),
)
#: the column group naming where a run was measured, when the runs' devices differ
DEVICE_GROUP = "device"
SWEEP = (
    "any sweep's train rows; paper columns: sweeps/gsm8k_nfe.yaml, sweeps/owt_frontier.yaml "
    "(CPU: sweeps/gsm8k_smoke.yaml, sweeps/owt_smoke.yaml)"
)


def paper_cost() -> pd.DataFrame:
    """``results/paper/training_cost.csv`` (empty when absent)."""
    p = PAPER_DIR / "training_cost.csv"
    if not p.is_file():
        return pd.DataFrame(columns=["task", "method", "variant", "metric", "value", "label"])
    return pd.read_csv(p, keep_default_na=False)


def _paper_task(task: str, stand_in_for, task_kind) -> str | None:
    """The paper column a store task fills: itself, the benchmark it stands in for, or the one
    of its kind (:data:`PAPER_TASK_OF_KIND`); None for a task the paper has no cost for."""
    for t in (task, str(stand_in_for or "").lower()):
        if t in PAPER_TASKS:
            return t
    return PAPER_TASK_OF_KIND.get(task_kind)


def _is_gpu(device) -> bool:
    d = str(device or "").lower()
    return d.startswith("cuda") or "gpu" in d or "nvidia" in d


def runs(df: pd.DataFrame) -> pd.DataFrame:
    """One row per train cell: task, method, variant, paper task, steps, steps/s, wall_s,
    duration_h, device, devices, device_hours."""
    t = rows(df, kind="train")
    t = t[t["metric"] == "train_steps_per_s"]
    out = []
    for _, r in t.iterrows():
        sps = float(r["value"])
        steps = int(r["train_steps"]) if pd.notna(r["train_steps"]) else int(r["n"])
        dur = steps / sps / 3600 if sps > 0 else float("nan")
        device = r.get("device") if pd.notna(r.get("device")) else None
        measured = {f: _float(r.get(f)) for _, f in MEASURED}
        n_dev = r.get("devices")
        n_dev = int(n_dev) if pd.notna(n_dev) else 1
        out.append(
            {
                "task": r["task"],
                "paper_task": _paper_task(r["task"], r["stand_in_for"], r["task_kind"]),
                "method": r["method"],
                "variant": r["variant"],
                "model": r["model_base"],
                "recipe_id": r["recipe_id"],
                "created_at": r["created_at"],
                "cell": r["train_cell"] if pd.notna(r["train_cell"]) else r["config_hash"],
                "cell_id": r["cell_id"],
                "steps": steps,
                "steps_per_s": sps,
                "wall_s": float(r["wall_s"]) if pd.notna(r["wall_s"]) else float("nan"),
                "duration_h": dur,
                "device": device or "",
                "devices": n_dev,
                "unit": "unrecorded" if device is None else ("GPU" if _is_gpu(device) else "CPU"),
                "device_hours": dur * n_dev,
                **measured,
                "device_name": device_of(r.get("device_name"), r.get("threads")),
            }
        )
    return pd.DataFrame(out)


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def measured_groups(r: pd.DataFrame) -> list[tuple[str, str, None]]:
    """The measured column groups (:data:`MEASURED`) some run of ``r`` has, as quantities with
    no paper metric."""
    if not len(r):
        return []
    return [(head, f, None) for head, f in MEASURED if f in r and r[f].notna().any()]


def _run_devices(g: pd.DataFrame) -> list[str]:
    return sorted({d or UNRECORDED for d in g["device_name"]})


def _columns(r: pd.DataFrame, p: pd.DataFrame) -> list[tuple[str, str | None, str | None]]:
    """(header, our task, paper task) per task column: the paper's TinyGSM and OWT first (our task
    that fills each, or none), then the store's tasks the paper has no cost for."""
    cols = []
    for pt, head in PAPER_TASKS.items():
        ours = sorted(r.loc[r["paper_task"] == pt, "task"].unique()) if len(r) else []
        if ours:
            cols += [(head if o == pt else f"{head} [ours: {o}]", o, pt) for o in ours]
        elif pt in set(p["task"]):
            cols.append((head, None, pt))
    if len(r):
        for task in sorted(r.loc[r["paper_task"].isna(), "task"].unique()):
            cols.append((task, task, None))
    return cols


def _g(x: float) -> str:
    if pd.isna(x):
        return ""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def cost_table(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[str], list[str]]:
    """(Markdown-shaped table, tidy table, present, missing): the paper's rows in its order, our
    value beside each of its numbers; store models the paper does not list after them."""
    r, p = runs(df), paper_cost()
    cols = _columns(r, p)
    quantities = [*QUANTITIES, *measured_groups(r)]
    if len(r) and len({d for d in r["device_name"] if d}) and len(_run_devices(r)) > 1:
        quantities.append((DEVICE_GROUP, "device_name", None))  # never two devices unsaid
    models, extra, picked = _picked(r, p, cols)
    table, tidy, have, miss = [], [], [], []
    sources, cells = [], {}  # the train cells behind each row and entry (the page's provenance)
    for i, (label, m, variants) in enumerate(models + extra):
        sources.append(ids(c for (j, _t), g in picked.items() if j == i for c in g["cell_id"]))
        paper_row = i < len(models)
        # the paper's numbers of this row (a store model the paper does not list: none)
        pp = p[(p["method"] == m) & (p["variant"] == "|".join(variants))] if paper_row else p[:0]
        row = {"model": label}
        for qhead, field, pmetric in quantities:
            for head, task, pt in cols:
                if pmetric is None and task is None:
                    continue  # a measured group: no paper number, none of ours for this column
                g = picked.get((i, task)) if task else None
                row[f"{qhead} {head}"] = _entry(g, field)
                cells[(i, f"{qhead} {head}")] = ids(g["cell_id"]) if g is not None else ()
                if pt is not None and paper_row and pmetric:  # one paper column per paper task
                    pcol = f"{qhead} {PAPER_TASKS[pt]} (paper)"
                    pv = pp[(pp["task"] == pt) & (pp["metric"] == pmetric)]["value"]
                    row[pcol] = f"{float(pv.iloc[0]):g}" if len(pv) else ""
        table.append(row)
        for head, task, pt in cols:
            g = picked.get((i, task)) if task else None
            ours = g is not None and len(g)
            if paper_row and pt is not None:
                (have if ours else miss).append(f"{head}: {label}")
            elif ours:
                have.append(f"{head}: {label}")
            rec = {"model": label, "method": m, "column": head, "task": task or "", "runs": 0}
            if ours:
                rec.update(_ours(g))
            if pt is not None and paper_row:
                rec.update(_paper_record(pp[pp["task"] == pt]))
            tidy.append(rec)
    frame = pd.DataFrame(table)
    frame.attrs.update(sources=sources, cells=cells)
    return frame, pd.DataFrame(tidy), have, miss


def _picked(r: pd.DataFrame, p: pd.DataFrame, cols):
    """(the paper's rows, the store's models it does not list, the runs of each): rows are
    ``(label, method, [variants])``; ``picked[(row index, task)]`` the runs of that row's model
    on the task (one recipe per paper row: a mean over two recipes is no model's)."""
    models = []  # (label, method, [variants] | None = any variant not in a paper row)
    for (m, v), g in p.groupby(["method", "variant"], sort=False):
        models.append((g["label"].iloc[0], m, str(v).split("|")))
    used: set[tuple[str, str]] = set()  # (task, our model) shown in a paper row
    picked: dict[tuple[int, str], pd.DataFrame] = {}
    for i, (_, m, variants) in enumerate(models):
        for _head, task, _pt in cols:
            if task is None or not len(r):
                continue
            g = r[(r["task"] == task) & (r["method"] == m)]
            v = next((v for v in variants if v in set(g["variant"])), None)
            if v is not None:
                g = one_recipe(g[g["variant"] == v], steps="steps")
                picked[(i, task)] = g
                used.add((task, str(g["model"].iloc[0])))
    extra = []
    if len(r):
        for model, g2 in r.groupby("model", sort=True):
            left = sorted(t for t in set(g2["task"]) if (t, model) not in used)
            if left:
                extra.append((f"{model} (not in the paper's table)", g2["method"].iloc[0],
                              [g2["variant"].iloc[0]]))  # fmt: skip
                for t in left:
                    picked[(len(models) + len(extra) - 1, t)] = g2[g2["task"] == t]
    return models, extra, picked


def _entry(g: pd.DataFrame | None, field: str) -> str:
    """The text of one entry: runs ``g``'s ``field`` (a mean; the device names as they are)."""
    if g is None or not len(g):
        return ""
    if field == "device_name":
        devs = _run_devices(g)
        return devs[0] if len(devs) == 1 else "mixed: " + "; ".join(devs)
    text = _g(g[field].mean())
    if field == "device_hours":
        units = set(g["unit"])
        text += f" {units.pop()}" if len(units) == 1 else " mixed"
    if field == "duration_h":
        text += f" ({int(g['steps'].mean()):,} steps)"
    if len(g) > 1 and field == "steps_per_s":
        text += f" ({len(g)} runs)"
    return text


def _ours(g: pd.DataFrame) -> dict:
    """The tidy table's fields of our runs ``g`` of one model on one task (means over runs)."""
    return dict(
        variant=g["variant"].iloc[0],
        runs=len(g),
        steps=float(g["steps"].mean()),
        steps_per_s=float(g["steps_per_s"].mean()),
        wall_s=float(g["wall_s"].mean()),
        duration_h=float(g["duration_h"].mean()),
        device_hours=float(g["device_hours"].mean()),
        unit="/".join(sorted(set(g["unit"]))),
        devices=int(g["devices"].max()),
        **{f: float(g[f].mean()) for _, f in MEASURED},
        device_name="; ".join(_run_devices(g)),
    )


def _paper_record(pp: pd.DataFrame) -> dict:
    """The tidy table's paper fields of one paper row on one task (``pp``: its numbers)."""
    rec = {f"paper_{x['metric']}": float(x["value"]) for _, x in pp.iterrows()}
    if len(pp):
        rec["paper_steps"], rec["paper_gpus"] = int(pp["steps"].iloc[0]), int(pp["gpus"].iloc[0])
    return rec


def markdown(df: pd.DataFrame, title: str) -> tuple[Doc, pd.DataFrame]:
    table, tidy, _have, miss = cost_table(df)
    r = runs(df)
    units = set(r["unit"]) if len(r) else set()
    notes = [
        "Ours: mean per training run (train cell) of the store's train rows; duration = steps / "
        "(steps/s), as the paper derives it; device-hours = duration x devices, suffixed GPU / "
        "CPU by the device the row records. The recorded wall time of each run's last process "
        "(`wall_s`) is in the CSV.",
        "Paper: tab:training-cost, 250k steps on 8 H100s (TinyGSM) and 1M steps on 16 H100s "
        "(OWT), bfloat16; its GPU-hours are duration x GPUs. Our runs are far shorter and on "
        "other hardware: compare ratios between models, not absolute numbers.",
    ]
    if "unrecorded" in units:
        notes.append(
            "`unrecorded`: the train rows carry no device kind or count (no `device` / `devices` "
            "column), so device-hours count one device of unknown kind (= duration)."
        )
    stand = [c for c in table.columns if "[ours:" in c and c.startswith("steps/s")]
    if stand:
        notes.append(
            "A column `X [ours: task]` holds our task filling the paper's column X (a CPU "
            "stand-in is not the paper's task)."
        )
    if not len(r):
        notes.append("The store has no train rows: only the paper's numbers are shown.")
    notes += _measured_notes(r)
    t = Table(
        table.fillna(""),
        table.attrs["sources"],
        table.attrs["cells"],
        paper={c for c in table.columns if c.endswith("(paper)")},
        keys={"model"},
    )
    text = Doc([f"# {title}", "", t, ""] + [f"- {n}" for n in notes])
    if miss:
        text += ["", "Not in the store: " + "; ".join(miss)]
    return text, tidy


def _measured_notes(r: pd.DataFrame) -> list[str]:
    """What the measured column groups are and where they were measured (none for a store whose
    train rows record neither)."""
    groups = measured_groups(r)
    named = len(r) and any(d for d in r["device_name"])
    if not groups and not named:
        return []
    what = {
        "s_per_step": "`s/step`: seconds per optimiser step as the run measured it",
        "tokens_per_s": "`tokens/s`: training tokens per second",
        "peak_mem_mb": "`peak mem (MB)`: peak memory while training (CUDA: the allocator's "
        "maximum; CPU: the process's resident peak)",
    }
    text = "; ".join(what[f] for _, f, _p in groups)
    devs = _run_devices(r)
    if len(devs) > 1:
        where = (
            f"the runs were measured on different devices ({'; '.join(devs)}): the "
            f"`{DEVICE_GROUP}` columns name each entry's; compare rates only within one device"
        )
    elif devs[0] == UNRECORDED:
        where = "the train rows do not record the device (`device_name`)"
    else:
        where = f"measured on {devs[0]}"
    return [f"{text}; {where}." if text else f"Rates {where}."]


def _section(sec: Section, df: pd.DataFrame, out: Path, args) -> list[Path]:
    if not len(runs(df)):
        return []
    text, tidy = markdown(df, "Training cost (paper table tab:training-cost)")
    atomic.write_with(out / "training_cost.csv", lambda t: tidy.to_csv(t, index=False))
    return [text.write(out / "training_cost.md"), out / "training_cost.csv"]


def _render(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    text, tidy = markdown(df, f"{a.label}: {a.title}")
    stem = out / a.label
    atomic.write_with(stem.with_suffix(".csv"), lambda t: tidy.to_csv(t, index=False))
    return [text.write(stem.with_suffix(".md")), stem.with_suffix(".csv")]


def _needs(a: Artifact, df: pd.DataFrame) -> tuple[list[str], list[str]]:
    _t, _tidy, have, miss = cost_table(df)
    return have, miss


ITEMS = [
    Section(name="training_cost", render=_section),
    Artifact(
        name=LABEL,
        kind="table",
        title="Training cost (steps/s, duration, GPU-hours)",
        sweep=SWEEP,
        render=_render,
        needs=_needs,
    ),
]
