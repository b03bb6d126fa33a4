"""``<task>_samples.md``: what the models wrote, side by side on the same items.

For each task and evaluation subset, the headline cells (the headline metric at the headline
point, :func:`bench.report.common.at_headline`; the lowest training seed of each model) and
their per-item records (:mod:`bench.records`): the first ``--samples K`` items of the task's
order, then up to K items the models disagree on (some right, some wrong), then up to K that
every model got wrong. One row per (item, model): the item's prompt and target once, then each
model's outcome and output. Only cells that scored the same items (equal ``items_key``) share a
table. Long text is cut (the records hold all of it: ``python -m bench.samples``); the page
shows every string as text.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from bench.report.common import at_headline, headline_rows, rows, subsets
from bench.report.document import Doc, Table
from bench.report.items import Section, cli_flag

#: characters of a prompt / target / output shown (the records keep the whole text)
WIDTH = {"prompt": 240, "target": 120, "output": 400}


def _cut(v, width: int) -> str:
    t = "" if v is None else str(v)
    return t if len(t) <= width else t[: width - 1] + "…"


def choose_items(outcomes: dict[str, list], n_items: int, k: int) -> list[int]:
    """Item indices to show: the first ``k``, then up to ``k`` the models disagree on, then up to
    ``k`` every model got wrong (``outcomes``: model -> per-item 0/1/None)."""
    first = list(range(min(k, n_items)))
    split, wrong = [], []
    for i in range(len(first), n_items):
        got = [o[i] for o in outcomes.values() if i < len(o) and o[i] is not None]
        if not got:
            continue
        if 0 < sum(got) < len(got):
            split.append(i)
        elif sum(got) == 0:
            wrong.append(i)
    return first + split[:k] + wrong[:k]


def _mark(c) -> str:
    return "" if c is None else ("right" if c else "wrong")


def samples_table(cells: pd.DataFrame, results_dir: Path, k: int) -> Table | None:
    """One table for ``cells`` (store rows, one per model, that scored the same items)."""
    from bench import records

    recs = {}
    for _, r in cells.iterrows():
        try:
            recs[r["model"]] = (
                r["cell_id"],
                records.read(results_dir, r["records"], r.get("records_sha256")),
            )
        except records.RecordsError as e:
            print(f"warning: samples view: {e}; its model is left out", file=sys.stderr)
    if not recs:
        return None
    n_items = min(len(v) for _, v in recs.values())
    outcomes = {m: [x.get("correct") for x in v] for m, (_, v) in recs.items()}
    has_outcome = any(o is not None for v in outcomes.values() for o in v)
    out, sources = [], []
    for i in choose_items(outcomes, n_items, k):
        for j, (model, (cell, rs)) in enumerate(recs.items()):
            x = rs[i]
            row = {
                "item": str(x.get("item", i)),
                "prompt": _cut(x.get("prompt"), WIDTH["prompt"]) if j == 0 else "",
                "target": _cut(x.get("target"), WIDTH["target"]) if j == 0 else "",
                "model": model,
            }
            if has_outcome:
                row["outcome"] = _mark(x.get("correct"))
            row["output"] = _cut(x.get("output"), WIDTH["output"])
            out.append(row)
            sources.append((cell,))
    frame = pd.DataFrame(out)
    if not frame["target"].astype(bool).any():
        frame = frame.drop(columns="target")
    if not frame["prompt"].astype(bool).any():
        frame = frame.drop(columns="prompt")
    return Table(
        frame,
        sources=sources,
        keys=frozenset({"item", "prompt", "target", "model"}),
        caption="first items, then items the models disagree on, then items all got wrong",
        folded=True,
    )


def task_doc(task: str, t: pd.DataFrame, results_dir: Path, k: int) -> Doc | None:
    h = at_headline(headline_rows(t), ["model", "subset", "metric"])
    h = h.sort_values(["seed", "cell_id"]).drop_duplicates(["model", "subset"])
    doc = Doc(
        [
            f"# {task}: what the models wrote",
            "",
            "The headline cells' records (lowest training seed of each model, largest NFE, the "
            "temperature closest to 1), side by side on the same items. All of them: "
            f"`python -m bench.samples --task {task}`.",
        ]
    )
    wrote = False
    for sub in subsets(h):
        g = h[h["subset"] == sub]
        for _, same in g.groupby(g["items_key"].fillna(""), sort=False):
            tab = samples_table(same.sort_values("model"), results_dir, k)
            if tab is None:
                continue
            n_items = int(pd.to_numeric(same["n"], errors="coerce").max())
            doc += ["", f"## {sub} ({len(same)} models, {n_items} items)", "", tab]
            wrote = True
    return doc if wrote else None


def _render(item, df: pd.DataFrame, out: Path, args) -> list[Path]:
    k = getattr(args, "samples", 3)
    if not k or "records" not in df:
        return []
    s = rows(df)
    s = s[s["records"].notna() & (s["records"].astype(str) != "")]
    files = []
    results_dir = Path(getattr(args, "results_dir", "results"))
    for task, t in s.groupby("task", sort=True):
        doc = task_doc(str(task), t, results_dir, k)
        if doc is not None:
            files.append(doc.write(out / f"{task}_samples.md"))
    return files


ITEMS = [
    Section(
        name="samples",
        render=_render,
        flags=(
            cli_flag(
                "--samples",
                type=int,
                default=3,
                metavar="K",
                help="<task>_samples.md: K first items, K the models disagree on, K all got "
                "wrong, per subset (0: none)",
            ),
        ),
    )
]
