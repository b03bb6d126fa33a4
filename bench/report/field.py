"""``field_weights.md``: the numbers MDLM's and Duo's authors report for the weights they published
(``results/paper/field_weights.csv``) beside ours for the same weights (import cells of
``hf://kuleshov-group/mdlm-owt``, ``hf://s-sahoo/duo``, ``hf://s-sahoo/duo-distilled``;
``sweeps/field_weights.yaml``), each with a verdict.

Each CSV row: ``paper`` and ``source`` (the table and row the number is read from), the
``checkpoint`` it was measured on, ``kind`` (``likelihood`` | ``sample``), ``subset`` (a corpus,
``owt-valid``, or the sampled split), ``layout`` (a corpus's: ``wrapped`` | ``padded``; empty
otherwise), ``metric`` (``ppl``, ``gen_ppl``, ``entropy``), ``nfe``, ``decoding`` (empty: any),
``value``, and ``bound`` (``<=`` when the paper's number is an upper bound).

The verdict: **within** when the paper's number lies in our 95 % interval widened by the
Monte-Carlo error of our estimate (likelihood: 1.96 x ``nll_mc_se``, in nats, applied to the
perplexity's interval as a factor exp(+-); unknown with one draw, then the plain interval and the
note "mc s.e. unknown"); **outside** otherwise, with the known cause where one applies: ours is
the other layout of the corpus than the paper's (wrapped against padded blocks: mdlm#29,
discrete-diffusion-guidance#4), or another NFE / decoding than the paper's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from bench.report.common import prepared
from bench.report.document import Doc, Table, ids
from bench.report.items import Section

PAPER_CSV = Path(__file__).resolve().parents[2] / "results" / "paper" / "field_weights.csv"
COLUMNS = ["paper", "source", "checkpoint", "kind", "subset", "layout", "metric", "nfe",
           "decoding", "value", "bound"]  # fmt: skip
LAYOUT_CAUSE = "layout: the paper's blocks are {paper}, ours {ours} (mdlm#29)"


def paper_rows(path: Path | None = None) -> pd.DataFrame:
    """The authors' numbers (rows with a value; the file may hold only its header)."""
    path = path or PAPER_CSV
    if not path.is_file():
        return pd.DataFrame(columns=COLUMNS)
    df = pd.read_csv(path, keep_default_na=False, dtype=str)
    return df[df["value"].astype(str).str.strip() != ""]


def _num(v) -> float | None:
    v = pd.to_numeric(v, errors="coerce")
    return None if pd.isna(v) else float(v)


def _layout_of(subset: str) -> str:
    return subset.partition("@")[2] or "wrapped"  # a corpus without "@": the section's default


def _ours(p: pd.Series, rows: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Our rows for paper row ``p`` (same checkpoint, kind, metric, setting) and the layout they
    have: the paper's layout where we have it, else the other (its rows, to show the cause)."""
    ck = rows["checkpoint"].astype(str)
    r = rows[(ck == p["checkpoint"]) | ck.str.startswith(p["checkpoint"] + "@")]
    r = r[(r["kind"] == p["kind"]) & (r["metric"] == p["metric"])]
    if p["nfe"]:
        r = r[pd.to_numeric(r["nfe"], errors="coerce") == float(p["nfe"])]
    if p["decoding"]:
        r = r[r["decoding"].astype(str) == p["decoding"]]
    sub = r["subset"].astype(str)
    if p["kind"] != "likelihood" or not p["layout"]:
        return r[sub == p["subset"]], ""
    corpus = sub.str.partition("@")[0]
    same = r[(corpus == p["subset"]) & (sub.map(_layout_of) == p["layout"])]
    if len(same):
        return same, p["layout"]
    other = r[corpus == p["subset"]]
    return other, (_layout_of(str(other["subset"].iloc[0])) if len(other) else "")


def verdict(p: pd.Series, ours: pd.DataFrame, layout: str, mc_se: float | None) -> dict:
    """One comparison: our value, interval, Monte-Carlo error, verdict and known cause."""
    out = {"ours": "", "interval": "", "mc s.e.": "", "verdict": "not measured", "cause": ""}
    if not len(ours):
        return out
    r = ours.iloc[0]
    value, lo, hi = _num(r["value"]), _num(r.get("ci_low")), _num(r.get("ci_high"))
    paper = float(p["value"])
    if value is None:
        return out
    out["ours"] = (
        f"{'<= ' if str(r.get('bound_kind') or '') not in ('', 'exact') else ''}{value:.2f}"
    )
    if lo is None or hi is None:
        lo = hi = value
    widen = 1.0
    if p["kind"] == "likelihood":
        if mc_se is None:
            out["mc s.e."] = "unknown (1 draw)"
        else:
            out["mc s.e."] = f"{mc_se:.4f}"
            widen = math.exp(1.96 * mc_se)
    lo, hi = lo / widen, hi * widen
    out["interval"] = f"[{lo:.2f}, {hi:.2f}]"
    inside = lo <= paper <= hi
    out["verdict"] = "within" if inside else "outside"
    if not inside:
        causes = []
        if layout and p["layout"] and layout != p["layout"]:
            causes.append(LAYOUT_CAUSE.format(paper=p["layout"], ours=layout))
        out["cause"] = "; ".join(causes) or "none known"
    return out


def comparison(paper: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The table: each paper number beside ours (``rows``: the store's rows)."""
    table = []
    for _, p in paper.iterrows():
        ours, layout = _ours(p, rows)
        mc = None
        if p["kind"] == "likelihood" and len(ours):
            se = rows[
                (rows["cell_id"] == ours["cell_id"].iloc[0]) & (rows["metric"] == "nll_mc_se")
            ]
            mc = _num(se["value"].iloc[0]) if len(se) else None
        setting = p["subset"] + (f" ({p['layout']})" if p["layout"] else "")
        if p["nfe"]:
            setting += f", NFE {p['nfe']}"
        table.append({
            "checkpoint": p["checkpoint"].removeprefix("hf://"),
            "setting": setting,
            "metric": p["metric"],
            "paper": f"{p['bound']} {p['value']}".strip(),
            "source": f"{p['paper']}, {p['source']}",
            **verdict(p, ours, layout, mc),
            "_cells": ids(ours["cell_id"]) if len(ours) else (),
        })  # fmt: skip
    return pd.DataFrame(table)


def _render(item, df: pd.DataFrame, out: Path, args) -> list[Path]:
    paper = paper_rows()
    if not len(df) or "checkpoint" not in df or not len(paper):
        return []
    rows = prepared(df)
    rows = rows[rows["checkpoint"].notna()]
    frame = comparison(paper, rows)
    if not (frame["verdict"] != "not measured").any():
        return []
    doc = Doc([
        "# The authors' published weights against their papers",
        "",
        "Each number MDLM's and Duo's papers report for the weights their authors published, "
        "beside ours for the same weights (results/paper/field_weights.csv; verdict: within our "
        "95 % interval widened by 1.96 Monte-Carlo standard errors, or outside with the known "
        "cause where one applies; bench/report/field.py).",
        "",
        Table(frame.drop(columns="_cells"), sources=list(frame["_cells"]),
              paper=frozenset({"paper", "source"}),
              keys=frozenset({"checkpoint", "setting", "metric"})),
    ])  # fmt: skip
    return [doc.write(out / "field_weights.md")]


ITEMS = [Section(name="field_weights", render=_render)]
