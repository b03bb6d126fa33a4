"""The paper's reported numbers (``results/paper/<task>.csv``) beside ours.

Each CSV row: ``table`` (``main`` or an ablation table's name), ``task``, ``method``, ``variant``,
``decoding`` (empty: the method's default decoding), ``subset``, ``metric``, ``value``, ``label``.
``results/paper/protocols.csv`` says, per task, the protocol behind those numbers;
``results/paper/marks.csv`` holds the numbers the paper gives only in its text (per label).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bench.report.common import cell_text, flag, pct
from bench.report.document import Table, ids
from bench.report.models import flat_recipe
from bench.report.uncertainty import paired_difference

PAPER_DIR = Path(__file__).resolve().parents[3] / "results" / "paper"


def paper_numbers(task: str) -> pd.DataFrame | None:
    """``results/paper/<task>.csv``, or None when the paper reports nothing for ``task``."""
    path = PAPER_DIR / f"{task}.csv"
    if not path.is_file():
        return None
    return pd.read_csv(path, keep_default_na=False)


def marks(label: str) -> pd.DataFrame:
    """The paper's text-only numbers for ``label`` (``results/paper/marks.csv``)."""
    p = PAPER_DIR / "marks.csv"
    if not p.is_file():
        return pd.DataFrame(columns=["label", "panel", "series", "value", "source"])
    m = pd.read_csv(p, keep_default_na=False)
    return m[m["label"] == label]


def protocol(task: str) -> str:
    """The protocol behind the paper's numbers for ``task`` (``results/paper/protocols.csv``)."""
    path = PAPER_DIR / "protocols.csv"
    if path.is_file():
        p = pd.read_csv(path, keep_default_na=False)
        hit = p.loc[p["task"] == task, "protocol"]
        if len(hit):
            return str(hit.iloc[0])
    return "see results/paper"


def protocol_settings(task: str) -> dict:
    """The paper's protocol for ``task`` as recipe settings (``protocols.csv`` column
    ``settings``: ``key=value; ...`` with keys of the flattened recipe, e.g. ``train.steps``, and
    ``nfe``), values parsed as JSON where they are."""
    path = PAPER_DIR / "protocols.csv"
    if not path.is_file():
        return {}
    p = pd.read_csv(path, keep_default_na=False)
    hit = p.loc[p["task"] == task, "settings"] if "settings" in p else []
    out = {}
    for part in str(hit.iloc[0]).split(";") if len(hit) else []:
        if "=" in part:
            k, v = (x.strip() for x in part.split("=", 1))
            try:
                out[k] = json.loads(v)
            except ValueError:
                out[k] = v
    return out


def protocol_differences(task: str, best: pd.DataFrame) -> list[str]:
    """How our headline cells ``best`` depart from the paper's protocol for ``task``
    (:func:`protocol_settings`): ``"task.grid 4 (paper 9)"``, ...; empty when they match or the
    paper states none. An imported file's train and backbone settings are the file's own."""
    want = protocol_settings(task)
    if not want or not len(best):
        return []
    seen: dict[str, set[str]] = {}
    recipes = best["recipe"].dropna().unique() if "recipe" in best else []
    for recipe in recipes:
        flat = flat_recipe(recipe)
        for k in want:
            if k == "nfe" or ("import" in flat and k.split(".")[0] in ("train", "backbone")):
                continue
            v = flat.get(k, flat.get(_RECORDED.get(k, ""), "unrecorded"))
            seen.setdefault(k, set()).add(_show(v))
    if "nfe" in want:
        nfe = best.loc[~flag(best["nfe_is_length"]), "nfe"].dropna()
        seen["nfe"] = {_show(int(x)) for x in nfe.unique()}
    out = []
    for k, v in want.items():
        ours = sorted(seen.get(k, set()) - {_show(v)})
        if ours:
            out.append(f"{k} {', '.join(ours)} (paper {_show(v)})")
    return out


def _show(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


#: the recipe keys of a store written before the recipe column (bench.report.models)
_RECORDED = {"train.steps": "recorded.train_steps", "backbone.size": "recorded.backbone"}


def lookup(paper: pd.DataFrame | None, r, subset: str, metric: str) -> float | None:
    """The paper's main-table value for our model ``r`` (method, variant, decoding): its own
    decoding's row, else the row that names no decoding."""
    if paper is None:
        return None
    p = paper[
        (paper["table"] == "main")
        & (paper["method"] == r["method"])
        & (paper["variant"] == r["variant"])
        & (paper["subset"] == subset)
        & (paper["metric"] == metric)
    ]
    exact = p[p["decoding"] == r["decoding"]]
    p = exact if len(exact) else p[p["decoding"] == ""]
    return float(p["value"].iloc[0]) if len(p) else None


def ours_for(best: pd.DataFrame, method: str, variant: str, decoding: str) -> pd.DataFrame:
    """Our headline rows for one paper row: same method and variant; the paper's decoding when it
    names one, else the method's default decoding (what the paper ran; ``default_decoding``)."""
    g = one_recipe(best[(best["method"] == method) & (best["variant"] == variant)])
    if decoding:
        return g[g["decoding"] == decoding]
    d = g[flag(g["default_decoding"])]
    if len(d) or not len(g):
        return d
    return g[g["decoding"] == g["decoding"].min()]  # no default-decoding rows: one decoding, stably


def one_recipe(g: pd.DataFrame, steps: str = "train_steps") -> pd.DataFrame:
    """The rows of one training recipe of ``g`` (one paper row is one model, never a pool of
    two recipes): the one trained longest (column ``steps``), then the one written last."""
    if "recipe_id" not in g or g["recipe_id"].nunique() <= 1:
        return g
    steps = pd.to_numeric(g[steps], errors="coerce").fillna(-1)
    order = g.assign(_s=steps).groupby("recipe_id").agg(s=("_s", "max"), t=("created_at", "max"))
    pick = order.sort_values(["s", "t"], ascending=False).index[0]
    return g[g["recipe_id"] == pick]


def ablation_markdown(
    best: pd.DataFrame,
    headline: str,
    subsets: list[str],
    paper: pd.DataFrame | None,
    *,
    comparable: bool = True,
) -> list[str]:
    """One table per non-main table of the paper's CSV (e.g. the S-FLM renorm / schedule
    ablation): the paper's rows in its order, our value beside each where the sweep ran that
    (method, variant). ``comparable``: False when the store's protocol is not the paper's
    (:func:`protocol_differences`); the title then says the paper columns are not comparable."""
    if paper is None:
        return []
    out = []
    best = best[best["metric"] == headline]
    for name in [t for t in dict.fromkeys(paper["table"]) if t != "main"]:
        p = paper[(paper["table"] == name) & (paper["metric"] == headline)]
        table, any_ours, ours_rows, sources, cells = [], False, [], [], {}
        for (method, variant, decoding), g in p.groupby(
            ["method", "variant", "decoding"], sort=False
        ):
            ours = ours_for(best, method, variant, decoding)
            ours_rows.append((g["label"].iloc[0], ours))
            sources.append(ids(ours["cell_id"]))
            row = {
                "paper row": g["label"].iloc[0],
                "model": f"{method}/{variant}" + (f" ({decoding})" if decoding else ""),
            }
            for sub in subsets:
                o = ours[ours["subset"] == sub]
                any_ours |= bool(len(o))
                row[sub] = cell_text(o) if len(o) else ""
                cells[(len(table), sub)] = ids(o["cell_id"])
                pv = g[g["subset"] == sub]
                row[f"{sub} (paper)"] = pct(float(pv["value"].iloc[0])) if len(pv) else ""
            table.append(row)
        if table:
            note = "" if any_ours else " (this sweep ran none of these models)"
            if not comparable:
                note += " (paper columns: another protocol, not comparable)"
            title = f"## Paper table `{name}`: {headline.replace('_', ' ')} (%){note}"
            frame = pd.DataFrame(table)
            paper_cols = {c for c in frame.columns if c.endswith("(paper)")}
            t = Table(frame, sources, cells, paper=paper_cols, keys={"paper row", "model"})
            out += ["", title, "", t]
            out += _versus_first(ours_rows, subsets)
    return out


def _versus_first(ours_rows: list, subsets: list[str]) -> list[str]:
    """Each of our ablation rows minus the first row we ran, per subset, with the paired
    two-level CI (rows scored on the same items; ``bench.report.uncertainty``)."""
    ran = [(label, o) for label, o in ours_rows if len(o)]
    if len(ran) < 2:
        return []
    base_label, base = ran[0]
    table, sources, cells = [], [], {}
    for label, o in ran[1:]:
        row = {"paper row": label}
        sources.append(ids([*o["cell_id"], *base["cell_id"]]))
        for sub in subsets:
            a, b = o[o["subset"] == sub], base[base["subset"] == sub]
            cells[(len(table), sub)] = ids([*a["cell_id"], *b["cell_id"]])
            d = paired_difference(a, b)
            row[sub] = (
                ""
                if d is None
                else f"{pct(d['diff'])} [{pct(d['low'])}, {pct(d['high'])}]"
                + (" (CI covers 0)" if d["covers_zero"] else "")
            )
        table.append(row)
    if all(not v for r in table for k, v in r.items() if k != "paper row"):
        return []
    return [
        "",
        f"Ours minus `{base_label}` (percentage points, paired 95 % CI over the same items and "
        "the seeds of each row):",
        "",
        Table(pd.DataFrame(table), sources, cells, keys={"paper row"}),
    ]
