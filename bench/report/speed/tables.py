"""The speed section's numbers and tables (:mod:`bench.report.speed.section`): every setting,
the AUP of every model with its paired interval (:func:`aup_groups`), and the speed-up of every
setting over AR with its KV cache at matched accuracy (:func:`speedups`).

**Matched accuracy** (docs/report.md): a setting matches AR when the paired 95 % interval of its
accuracy minus AR's (:func:`bench.report.uncertainty.paired_difference`: the same items, seeds
per model) reaches 0 or above, i.e. no accuracy loss is shown; its speed-ups are AR's cost over
its cost, in forward-equivalents per sample, seconds per sample at batch 1 and seconds per
sample at the cell's batch, on the same subset, items (hence length) and device. AR's reference
cell per subset, items and device: its default decoding where it ran one, the most accurate of
those cells otherwise. Per model the fastest matched setting by each measure is summarised.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.evaluate.aup import METHOD, TPF, TPFE, GridAUP, grid_aup
from bench.report.common import pct
from bench.report.cost import seconds_text
from bench.report.document import Table, ids
from bench.report.speed.cells import grid_point
from bench.report.uncertainty import paired_difference

COL_TPF, COL_TPFE = "AUP over TPF [95 % CI]", "AUP over tokens / FE [95 % CI]"
SPEEDUPS = (("fe", "FE speed-up"), ("latency", "batch-1 speed-up"), ("batched", "batched speed-up"))


def nfe_text(r) -> str:
    return "length" if r["length_bound"] else ("" if pd.isna(r["nfe"]) else str(int(r["nfe"])))


def setting_name(r) -> str:
    """``NFE 16 [top_p=0.9]`` (AR: ``NFE = length``)."""
    n = "NFE = length" if r["length_bound"] else f"NFE {nfe_text(r)}"
    return f"{n} [{r['options']}]" if r["options"] else n


def _num(v, fmt: str = ".3g") -> str:
    return "" if v is None or not np.isfinite(v) else f"{v:{fmt}}"


def _acc(r) -> str:
    if r["low"] is None or pd.isna(r["low"]):
        return pct(r["value"])
    return f"{pct(r['value'])} [{pct(r['low'])}, {pct(r['high'])}]"


def settings_table(st: pd.DataFrame) -> Table:
    """Every setting: accuracy with its interval, calls, forward-equivalents, TPF, tokens per
    forward-equivalent, seconds per sample at batch 1 and batched, the device."""
    t = pd.DataFrame(
        {
            "subset": st["subset"],
            "model": st["model"],
            "NFE": [nfe_text(r) for _, r in st.iterrows()],
            "T": st["temperature"].map(lambda v: "" if pd.isna(v) else f"{v:g}"),
            "options": st["options"],
            "accuracy (%) [95 % CI]": [_acc(r) for _, r in st.iterrows()],
            "calls / sample": st["calls"].map(lambda v: _num(v, ".1f")),
            "FE / sample": st["fe"].map(lambda v: _num(v, ".2f")),
            "TPF": st["tpf"].map(lambda v: _num(v, ".2f")),
            "tokens / FE": st["tpfe"].map(lambda v: _num(v, ".2f")),
            "s / sample, batch 1": st["latency"].map(seconds_text),
            "s / sample, batched": st["batched"].map(seconds_text),
            "device": st["device"],
        }
    )
    keys = {"subset", "model", "NFE", "T", "options", "device"}
    return Table(t, list(st["cells"]), keys=keys, ci_method="; ".join(_methods(st)))


def _methods(st: pd.DataFrame) -> list[str]:
    return sorted({m for m in st["ci_method"] if isinstance(m, str) and m})


@dataclass
class Group:
    """One comparison: the settings of every model on one subset's items, and their AUPs."""

    subset: str
    settings: pd.DataFrame
    aup: GridAUP
    models: list[str]


def aup_groups(st: pd.DataFrame, results_dir: Path, *, seed: int = 0) -> list[Group]:
    """Per (subset, items): every model's grid of settings with per-item outcomes, scored by
    :func:`bench.evaluate.aup.grid_aup` (one item resample shared by every model)."""
    out = []
    for (sub, _key), g in st.groupby(["subset", "items_key"], sort=True):
        grids: dict[str, list] = {}
        for _, r in g.iterrows():
            p = grid_point(r, results_dir)
            if p is not None:
                grids.setdefault(r["aup_model"], []).append(p)
        if grids:
            out.append(Group(str(sub), g, grid_aup(grids, seed=seed), sorted(grids)))
    return out


def _score_text(s) -> str:
    return "" if s is None else f"{s.value:.1f} [{s.low:.1f}, {s.high:.1f}]"


def _vs_best(a: GridAUP, kind: str, model: str) -> str:
    sc = a.scores.get(kind, {})
    if model not in sc:
        return ""
    best = max(sc, key=lambda m: (sc[m].value, m))
    if best == model:
        return "best"
    d, lo, hi = a.difference(kind, model, best)
    return f"{d:.1f} [{lo:.1f}, {hi:.1f}]"


def _fixed_text(a: GridAUP, model: str) -> str:
    """Where the model's per-item parallelism came from: its records, or (some settings) the
    cell's stored value, held in every resample."""
    held = []
    for kind, name in ((TPF, "TPF"), (TPFE, "tokens / FE")):
        s = a.scores.get(kind, {}).get(model)
        if s is not None and s.fixed:
            held.append(f"{name} {s.fixed} of {s.points}")
    return "records" if not held else "cell value: " + ", ".join(held) + " settings"


def aup_table(groups: list[Group]) -> Table:
    """Per comparison and model: its settings (kept of scored), the AUP over TPF and over
    tokens per forward-equivalent with their intervals, each minus the best model's (paired)."""
    out, sources = [], []
    for grp in groups:
        for model in grp.models:
            tpf, tpfe = grp.aup.scores[TPF].get(model), grp.aup.scores[TPFE].get(model)
            base = tpf or tpfe
            mine = grp.settings[grp.settings["aup_model"] == model]
            out.append(
                {
                    "subset": grp.subset,
                    "model": model,
                    "settings kept / scored": f"{base.kept} / {base.points}" if base else "",
                    COL_TPF: _score_text(tpf),
                    "minus best (TPF)": _vs_best(grp.aup, TPF, model),
                    COL_TPFE: _score_text(tpfe),
                    "minus best (tokens / FE)": _vs_best(grp.aup, TPFE, model),
                    "parallelism per item from": _fixed_text(grp.aup, model),
                }
            )
            sources.append(ids(c for cs in mine["cells"] for c in cs))
    return Table(pd.DataFrame(out), sources, keys={"subset", "model"}, ci_method=METHOD)


def _reference(ar: pd.DataFrame):
    """AR's reference setting among ``ar`` (one subset, items and device): module docstring."""
    pref = ar[ar["default_decoding"]] if ar["default_decoding"].any() else ar
    return pref.sort_values(["value", "model"], ascending=[False, True], kind="stable").iloc[0]


def speedups(st: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every non-AR setting against AR's reference on its subset, items and device: the paired
    accuracy difference, the three speed-ups and ``matched``; the AR references)."""
    out, refs = [], []
    for (_sub, _key, _dev), g in st.groupby(["subset", "items_key", "device"], sort=True):
        ar = g[g["is_ar"]]
        if not len(ar):
            continue
        ref = _reference(ar)
        refs.append(ref)
        for _, r in g[~g["is_ar"]].iterrows():
            d = paired_difference(r["rows"], ref["rows"])
            if d is None:
                continue
            line = {"setting": r, "ref": ref, **{k: d[k] for k in ("diff", "low", "high")}}
            for col, _name in SPEEDUPS:
                ok = np.isfinite(r[col]) and np.isfinite(ref[col]) and r[col] > 0
                line[col] = ref[col] / r[col] if ok else np.nan
            line["matched"] = d["high"] >= 0
            out.append(line)
    return pd.DataFrame(out), pd.DataFrame(refs)


def _x(v) -> str:
    return "" if not np.isfinite(v) else f"{v:.2f}x"


def speedup_table(sp: pd.DataFrame) -> Table:
    """Every setting against AR: accuracy minus AR's with its paired interval, the speed-ups,
    and whether it loses no accuracy within that interval."""
    t = pd.DataFrame(
        {
            "subset": [r["subset"] for r in sp["setting"]],
            "model": [r["model"] for r in sp["setting"]],
            "setting": [setting_name(r) for r in sp["setting"]],
            "device": [r["device"] for r in sp["setting"]],
            "accuracy (%)": [pct(r["value"]) for r in sp["setting"]],
            "minus AR (pp) [95 % CI]": [
                f"{pct(d)} [{pct(lo)}, {pct(hi)}]"
                for d, lo, hi in zip(sp["diff"], sp["low"], sp["high"])
            ],
            **{name: sp[col].map(_x) for col, name in SPEEDUPS},
            "no accuracy loss shown": sp["matched"].map(lambda m: "yes" if m else "no"),
        }
    )
    sources = [ids([*a["cells"], *b["cells"]]) for a, b in zip(sp["setting"], sp["ref"])]
    keys = {"subset", "model", "setting", "device"}
    return Table(t, sources, keys=keys, ci_method="paired two-level percentile bootstrap")


def _fastest(g: pd.DataFrame, col: str) -> str:
    m = g[g["matched"] & g[col].notna()]
    if not len(m):
        return "none"
    best = m.loc[m[col].idxmax()]
    return f"{best[col]:.2f}x ({setting_name(best['setting'])})"


def matched_table(sp: pd.DataFrame) -> Table:
    """Per model, subset and device: its settings that lose no accuracy shown, and the fastest
    of them by each speed-up."""
    sp = sp.assign(
        model=[r["model"] for r in sp["setting"]],
        subset=[r["subset"] for r in sp["setting"]],
        device=[r["device"] for r in sp["setting"]],
    )
    out, sources = [], []
    for (sub, model, dev), g in sp.groupby(["subset", "model", "device"], sort=True):
        line = {"subset": sub, "model": model, "device": dev,
                "no loss shown": f"{int(g['matched'].sum())} of {len(g)} settings"}  # fmt: skip
        line |= {f"fastest, {name.replace(' speed-up', '')}": _fastest(g, col)
                 for col, name in SPEEDUPS}  # fmt: skip
        out.append(line)
        sources.append(ids(c for r in g["setting"] for c in r["cells"]))
    return Table(pd.DataFrame(out), sources, keys={"subset", "model", "device"})
