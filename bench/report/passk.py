"""``<task>_passk.md`` and the ``<task>_passk`` figure: pass@j for j = 1..k and maj@k of every
cell that drew k > 1 samples per item (``sample.n_per_item``; rows: :mod:`bench.evaluate.draws`),
per model, subset, NFE and temperature, each value with its 95 % interval (the pass@j and maj@k
rows' own, over items; the headline row holds pass@1's two-level interval over items and
draws). Nothing is written for a store without such a cell."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from bench.report.common import rows
from bench.report.items import Section

_PASS = re.compile(r"^pass@(\d+)$")
_KEYS = ["model", "subset", "nfe", "temperature"]


def _draw_rows(store: pd.DataFrame) -> pd.DataFrame:
    """The sample rows of the cells with k > 1 draws per item (every metric of those cells)."""
    if store is None or not len(store) or "n_per_item" not in store:
        return store.iloc[0:0] if store is not None else pd.DataFrame()
    k = pd.to_numeric(store["n_per_item"], errors="coerce")
    cells = set(store.loc[k > 1, "cell_id"])
    if not cells:
        return store.iloc[0:0]
    s = rows(store)
    return s[s["cell_id"].isin(cells)]


def _entry(r) -> str:
    v, lo, hi = (
        100 * float(r[c]) if pd.notna(r[c]) else None for c in ("value", "ci_low", "ci_high")
    )
    return f"{v:.1f}" if lo is None or hi is None else f"{v:.1f} [{lo:.1f}, {hi:.1f}]"


def _table(g: pd.DataFrame) -> pd.DataFrame:
    """One line per cell (and training seed): pass@1..pass@k, maj@k (in %, with intervals)."""
    out = []
    for key, c in g.groupby([*_KEYS, "seed"], dropna=False, sort=True):
        by = {m: r for m, r in zip(c["metric"], c.to_dict("records"))}
        k = max(int(_PASS.match(m).group(1)) for m in by if _PASS.match(m))
        line = dict(zip([*_KEYS, "seed"], key)) | {"k": k}
        line |= {f"pass@{j}": _entry(by[f"pass@{j}"]) for j in range(1, k + 1) if f"pass@{j}" in by}
        if f"maj@{k}" in by:
            line[f"maj@{k}"] = _entry(by[f"maj@{k}"])
        out.append(line)
    return pd.DataFrame(out)


def _curves(task: str, g: pd.DataFrame, out: Path) -> list[Path]:
    """pass@j against j, one line and band per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.report.figures import model_style, save_figure

    g = g[g["metric"].str.match(_PASS)]
    models = sorted(g["model"].unique())
    colour = model_style(models)["palette"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, c in g.groupby([*_KEYS, "seed"], dropna=False, sort=True):
        c = c.assign(j=c["metric"].str.extract(_PASS)[0].astype(int)).sort_values("j")
        label = f"{key[0]} {key[1]} nfe={key[2]} T={key[3]}"
        ax.plot(c["j"], 100 * c["value"], marker="o", color=colour[key[0]], label=label)
        ax.fill_between(c["j"], 100 * c["ci_low"], 100 * c["ci_high"], color=colour[key[0]],
                        alpha=0.2)  # fmt: skip
    ax.set_xlabel("j (draws per item counted)")
    ax.set_ylabel("pass@j (%), 95 % interval over items")
    ax.legend(fontsize=7)
    return save_figure(fig, out / f"{task}_passk")


def _render(sec, store, out: Path, args) -> list[Path]:
    from bench import atomic
    from bench.report.document import Table

    d = _draw_rows(store)
    written: list[Path] = []
    for task in sorted(d["task"].dropna().unique()) if len(d) else []:
        g = d[d["task"] == task]
        text = (
            f"# {task}: pass@j and maj@k of the cells with several draws per item\n\n"
            "Values in %, each with its 95 % interval over items (the percentile bootstrap of "
            "the per-item estimates; Wilson's at 0/N or N/N; the headline row's pass@1 has the "
            "two-level bootstrap over items and draws). pass@j: Chen et al. 2021's unbiased "
            "estimator; maj@k: the majority answer of the k draws (ties: the answer first "
            "reached).\n\n" + Table(_table(g)).markdown() + "\n"
        )
        path = out / f"{task}_passk.md"
        atomic.write_text(path, text)
        written += [path, *_curves(task, g, out)]
    return written


ITEMS = [Section(name="passk", render=_render)]
