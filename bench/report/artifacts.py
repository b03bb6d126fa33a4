"""The paper's tables and figures by label: ``python -m bench.report --paper | --figure LABEL |
--list``.

One registry (:data:`ARTIFACTS` plus the ``ARTIFACTS`` of the modules in :data:`PROVIDERS`):
label -> :class:`Artifact` (what it needs, how it is rendered). A paper label ``fig:x`` is
``fig-x`` here and names the files: ``<out>/paper/<label>.pdf`` / ``.png`` for a figure (with
``<label>.csv``: every plotted point, reference mark and missing series), ``<label>.md`` /
``.csv`` for a table. A figure with missing cells is drawn with what exists and a note naming
what is missing. Numbers the paper gives only in its text (``results/paper/marks.csv``) are
drawn as dashed reference marks.

A new figure of GSM8K-style curves is one :class:`Artifact` line with its panels; any other
artifact is one render function plus one line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench import atomic
from bench.report.common import flag, headline_cells, md_table, pct, rows
from bench.report.figures import log2_nfe_axis, save_figure
from bench.report.paper import PAPER_DIR, ours_for, paper_numbers, protocol

#: modules that contribute artifacts (their ``ARTIFACTS`` list), after the built-in ones
PROVIDERS: tuple[str, ...] = ("sflm.paper_artifacts", "bench.report.training_cost")
#: the top-k grid of the appendix figure (the paper does not list its k; "k >= 10 plateau");
#: sweeps/gsm8k_nfe.yaml samples the S-arch model with exactly these decodings
TOPK_GRID = (1, 2, 5, 10, 50, 100)
GSM8K_SWEEP = "sweeps/gsm8k_nfe.yaml (CPU stand-in: sweeps/gsm8k_smoke.yaml)"
SUDOKU_SWEEP = "sweeps/sudoku.yaml (CPU: sweeps/quickstart.yaml)"


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Series:
    """One curve: ``method`` / first present of ``variants`` / ``decoding`` (None: the method's
    default decoding) at the panel's temperature (temperature-free decodings: their T = 1 rows)."""

    label: str
    method: str
    variants: tuple[str, ...] = ("base",)
    decoding: str | None = None
    temperature: float | None = None  # None: the panel's

    def need(self, t: float) -> str:
        dec = self.decoding or "default decoding"
        return f"{self.method}/{self.variants[0]} {dec} T={self.temp(t):g}"

    def temp(self, t: float) -> float:
        return t if self.temperature is None else self.temperature


@dataclass(frozen=True)
class Panel:
    title: str
    temperature: float
    series: tuple[Series, ...]


@dataclass(frozen=True)
class Artifact:
    """``render(artifact, store, out_dir, args) -> files``; ``needs(artifact, store) ->
    (present, missing)`` descriptions (both empty: needs no store)."""

    label: str
    kind: str  # "figure" | "table"
    title: str
    sweep: str
    render: Callable
    needs: Callable
    panels: tuple[Panel, ...] = ()
    task: str = ""  # the paper's task ("gsm8k", "sudoku"); its CPU stand-in is accepted
    meta: dict = field(default_factory=dict)


def registry() -> dict[str, Artifact]:
    import importlib

    out = {a.label: a for a in ARTIFACTS}
    for name in PROVIDERS:
        for a in importlib.import_module(name).ARTIFACTS:
            if a.label in out:
                raise ValueError(f"paper artifacts: duplicate label {a.label!r}")
            out[a.label] = a
    return out


# --------------------------------------------------------------------------- store access


def task_rows(df: pd.DataFrame, task: str) -> tuple[pd.DataFrame, str]:
    """The sample rows of ``task``, else of its CPU stand-in (rows whose ``stand_in_for`` names
    it), and the name to print ("arith_standin (stand-in for GSM8K)")."""
    s = rows(df, task=None)
    own = s[s["task"] == task]
    if len(own):
        return own, task
    st = s[s["stand_in_for"].astype(str).str.lower() == task.lower()]
    if len(st):
        name = str(st["task"].iloc[0])
        return st[st["task"] == name], f"{name} (CPU stand-in, not {task.upper()})"
    return own, task


def _headline(s: pd.DataFrame) -> pd.DataFrame:
    r = pd.to_numeric(s["metric_rank"], errors="coerce")
    return s[r == 0]


def series_rows(s: pd.DataFrame, ser: Series, t: float) -> tuple[pd.DataFrame, str | None]:
    """Headline rows of one series and the variant used (None: none present)."""
    h = _headline(s)
    h = h[h["method"] == ser.method]
    if ser.decoding is None:
        h = h[flag(h["default_decoding"])]
    else:
        h = h[h["decoding"] == ser.decoding]
    tfree = flag(h["temperature_free"])
    h = h[tfree | np.isclose(h["temperature"].astype(float), ser.temp(t))]
    for v in ser.variants:
        g = h[h["variant"] == v]
        if len(g):
            return g, v
    return h.iloc[0:0], None


def _curve(g: pd.DataFrame) -> pd.DataFrame:
    """Per NFE: value, CI (one seed: the evaluator's; several: mean +- sd), seeds."""
    out = []
    for nfe, x in g.groupby("nfe"):
        v = x["value"].astype(float)
        if len(x) == 1:
            lo, hi = x["ci_low"].iloc[0], x["ci_high"].iloc[0]
        else:
            sd = float(v.std(ddof=1))
            lo, hi = v.mean() - sd, v.mean() + sd
        out.append(
            {
                "nfe": float(nfe),
                "value": float(v.mean()),
                "ci_low": lo,
                "ci_high": hi,
                "seeds": len(x),
            }
        )
    return pd.DataFrame(out)


def marks(label: str) -> pd.DataFrame:
    """The paper's text-only numbers for ``label`` (``results/paper/marks.csv``)."""
    p = PAPER_DIR / "marks.csv"
    if not p.is_file():
        return pd.DataFrame(columns=["label", "panel", "series", "value", "source"])
    m = pd.read_csv(p, keep_default_na=False)
    return m[m["label"] == label]


def curve_needs(a: Artifact, df: pd.DataFrame) -> tuple[list[str], list[str]]:
    s, _ = task_rows(df, a.task)
    have, miss = [], []
    for p in a.panels:
        for ser in p.series:
            g, v = series_rows(s, ser, p.temperature)
            what = f"{p.title}: {ser.need(p.temperature)}"
            if v is not None and v != ser.variants[0]:  # drawn from a fallback variant
                what += f" (drawn from {ser.method}/{v})"
            (have if v is not None else miss).append(what)
    return list(dict.fromkeys(have)), list(dict.fromkeys(miss))


def no_store(a: Artifact, df: pd.DataFrame) -> tuple[list[str], list[str]]:
    return [], []


# --------------------------------------------------------------------------- curve figures


def render_curves(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    """Accuracy (%) vs NFE (log2), one panel per :class:`Panel`, 95 % CI error bars, the paper's
    text numbers as dashed marks; ``<label>.csv`` lists what was drawn and what is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s, name = task_rows(df, a.task)
    mk = marks(a.label)
    n = len(a.panels)
    # one color per series label across the panels (a series keeps its color left and right)
    labels = list(dict.fromkeys(ser.label for p in a.panels for ser in p.series))
    color = {lab: f"C{i % 10}" for i, lab in enumerate(labels)}
    fig, axes = plt.subplots(1, n, figsize=(5.0 * n, 3.8), squeeze=False, sharey=True)
    data, missing = [], []
    for ax, p in zip(axes[0], a.panels):
        ticks = set()
        for ser in p.series:
            g, v = series_rows(s, ser, p.temperature)
            if v is None:
                missing.append(f"{p.title}: {ser.need(p.temperature)}")
                data.append({"panel": p.title, "series": ser.label, "kind": "missing"})
                continue
            c = _curve(g)
            label = ser.label + ("" if v == ser.variants[0] else f" [{ser.method}/{v}]")
            yerr = (
                np.array(
                    [
                        c["value"] - c["ci_low"].astype(float),
                        c["ci_high"].astype(float) - c["value"],
                    ]
                )
                * 100
            )
            ax.errorbar(
                c["nfe"],
                100 * c["value"],
                yerr=np.nan_to_num(yerr),
                marker="o",
                ms=4,
                capsize=2,
                lw=1.3,
                label=label,
                color=color[ser.label],
            )
            ticks |= set(c["nfe"])
            for _, r in c.iterrows():
                data.append(
                    {"panel": p.title, "series": label, "kind": "ours", "variant": v, **r.to_dict()}
                )
        here = [x in ("main", p.title) or p.title.startswith(f"{x}:") for x in mk["panel"]]
        for _, m in mk[np.asarray(here, dtype=bool)].iterrows():
            ax.axhline(100 * float(m["value"]), ls="--", lw=0.9, color="0.4")
            ax.annotate(
                f"paper: {m['series']} {100 * float(m['value']):.0f}%",
                (0.02, 100 * float(m["value"])),
                xycoords=("axes fraction", "data"),
                fontsize=7,
                color="0.3",
                va="bottom",
            )
            data.append(
                {
                    "panel": p.title,
                    "series": f"paper: {m['series']}",
                    "kind": "paper",
                    "value": float(m["value"]),
                    "source": m["source"],
                }
            )
        if ticks:
            log2_nfe_axis(ax, sorted(ticks))
        title = "" if p.title == "main" else p.title  # "main": the figure's only panel
        if "T =" not in title and all(ser.temperature is None for ser in p.series):
            title = f"{title} (T = {p.temperature:g})" if title else f"T = {p.temperature:g}"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("NFE")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    axes[0][0].set_ylabel("GSM8K accuracy (%)" if a.task == "gsm8k" else "accuracy (%)")
    fig.suptitle(f"{a.title}: {name}", fontsize=10)
    if missing:
        fig.text(
            0.01,
            -0.02,
            "missing cells (not in the store): " + "; ".join(missing),
            fontsize=6,
            wrap=True,
            va="top",
            color="firebrick",
        )
    fig.tight_layout()
    stem = out / a.label
    atomic.write_with(stem.with_suffix(".csv"), lambda t: pd.DataFrame(data).to_csv(t, index=False))
    return [stem.with_suffix(".csv"), *save_figure(fig, stem)]


# --------------------------------------------------------------------------- tables


def _paper_table_needs(table: str) -> Callable:
    def needs(a: Artifact, df: pd.DataFrame) -> tuple[list[str], list[str]]:
        p = paper_numbers(a.task)
        s, _ = task_rows(df, a.task)
        best = headline_cells(_headline(s)) if len(s) else s
        have, miss = [], []
        if p is None:
            return have, miss
        for (m, v, d), _g in p[p["table"] == table].groupby(
            ["method", "variant", "decoding"], sort=False
        ):
            what = f"{m}/{v}" + (f" ({d})" if d else "")
            (have if len(best) and len(ours_for(best, m, v, d)) else miss).append(what)
        return have, miss

    return needs


def _ours_text(best: pd.DataFrame, m: str, v: str, d: str, sub: str | None) -> str:
    from bench.report.common import cell_text

    if not len(best):
        return ""
    o = ours_for(best, m, v, d)
    if sub is not None:
        o = o[o["subset"] == sub]
    return cell_text(o) if len(o) else ""


def _write_table(
    a: Artifact, out: Path, table: pd.DataFrame, head: str, notes: list[str], missing: list[str]
) -> list[Path]:
    text = [f"# {a.label}: {a.title}", "", head, "", md_table(table), ""]
    text += [f"- {n}" for n in notes]
    if missing:
        text += ["", "Missing cells (not in the store): " + "; ".join(missing)]
    stem = out / a.label
    atomic.write_with(stem.with_suffix(".csv"), lambda t: table.to_csv(t, index=False))
    return [
        atomic.write_text(stem.with_suffix(".md"), "\n".join(text) + "\n"),
        stem.with_suffix(".csv"),
    ]


def render_main_table(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    """The paper's main table of ``a.task`` (``results/paper/<task>.csv``, table ``main``),
    ours beside each row at the largest NFE and T closest to 1."""
    p = paper_numbers(a.task)
    p = p[p["table"] == "main"]
    s, name = task_rows(df, a.task)
    best = headline_cells(_headline(s)) if len(s) else s
    paper_subs = list(dict.fromkeys(p["subset"]))
    our_subs = sorted(best["subset"].dropna().unique()) if len(best) else []
    table = []
    for (m, v, d), g in p.groupby(["method", "variant", "decoding"], sort=False):
        row = {"model": g["label"].iloc[0]}
        for sub in paper_subs:
            ours_sub = sub if sub in our_subs or len(our_subs) != 1 else our_subs[0]
            row[f"{sub} (ours)"] = _ours_text(best, m, v, d, ours_sub)
            row[f"{sub} (paper)"] = pct(float(g.loc[g["subset"] == sub, "value"].iloc[0]))
        table.append(row)
    _, missing = a.needs(a, df)
    head = (
        f"Ours: {name}{_where(best)}, headline metric at the largest NFE of the grid and T "
        "closest to 1 (%, 95 % CI or mean +- sd over seeds). Paper: its reported numbers "
        f"({protocol(a.task)}); compare them only where the protocols match."
    )
    return _write_table(a, out, pd.DataFrame(table), head, [], missing)


def _where(best: pd.DataFrame) -> str:
    """What our numbers come from: sweep(s), task protocol, NFE and T of the headline cells (a
    CPU quickstart's 4x4 Sudoku must not read as the paper's 9x9)."""
    if not len(best):
        return ""

    def vals(col, fmt=str):
        v = best[col].dropna() if col in best else []
        return ", ".join(dict.fromkeys(fmt(x) for x in v if str(x) != ""))

    parts = [f"sweep {vals('sweep')}"] if vals("sweep") else []
    if vals("task_protocol"):
        parts.append(vals("task_protocol"))
    length = flag(best["nfe_is_length"])
    nfe = ", ".join(str(int(x)) for x in sorted(set(best.loc[~length, "nfe"].dropna())))
    ar = ", ".join(str(int(x)) for x in sorted(set(best.loc[length, "nfe"].dropna())))
    temp = vals("temperature", lambda x: f"{float(x):g}")
    parts.append(
        ", ".join(x for x in (f"NFE {nfe}" if nfe else "", f"NFE = length {ar}" if ar else "") if x)
        + f", T = {temp}"
    )
    return " (" + "; ".join(parts) + ")"


def render_renorm_table(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    """Paper table "Effect of embedding renormalization": schedule rows, without | with renorm."""
    p = paper_numbers(a.task)
    p = p[p["table"] == "renorm"]
    s, name = task_rows(df, a.task)
    best = headline_cells(_headline(s)) if len(s) else s
    subs = list(dict.fromkeys(p["subset"]))
    keys = {
        g["label"].iloc[0]: k for k, g in p.groupby(["method", "variant", "decoding"], sort=False)
    }
    table = []
    for label in keys:
        if label.endswith(", renorm"):
            continue
        row = {"schedule": label}
        for side, lab in (("without", label), ("with", f"{label}, renorm")):
            if lab not in keys:
                continue
            km, kv, kd = keys[lab]
            for sub in subs:
                pv = p[(p["variant"] == kv) & (p["subset"] == sub)]["value"]
                row[f"{side} {sub} (ours)"] = _ours_text(best, km, kv, kd, sub)
                row[f"{side} {sub} (paper)"] = pct(float(pv.iloc[0])) if len(pv) else ""
        table.append(row)
    _, missing = a.needs(a, df)
    head = f"Ours: {name} (exact match %, largest NFE, T = 1). Paper: tab:sfm_renorm."
    return _write_table(a, out, pd.DataFrame(table), head, [], missing)


def _alpha_trunc_needs(a: Artifact, df: pd.DataFrame) -> tuple[list[str], list[str]]:
    s, _ = task_rows(df, a.task)
    best = headline_cells(_headline(s)) if len(s) else s
    have, miss = [], []
    for _, m in marks(a.label).iterrows():
        what = f"sflm/{m['variant']} (alpha_trunc {m['series']})"
        ok = len(best) and len(ours_for(best, "sflm", m["variant"], m["decoding"]))
        (have if ok else miss).append(what)
    return have, miss


def render_alpha_trunc(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    """Paper table "Effect of the truncation hyperparameter alpha_trunc" (GSM8K)."""
    s, name = task_rows(df, a.task)
    best = headline_cells(_headline(s)) if len(s) else s
    main = paper_numbers("gsm8k")
    table = []
    for _, m in marks(a.label).iterrows():
        row = {
            "alpha_trunc (paper, inverted)": m["series"],
            "clean-weight cap": f"{1 - float(m['series']):.3f}",
            "variant": f"sflm/{m['variant']}",
            "ours": _ours_text(best, "sflm", m["variant"], m["decoding"], None),
            "paper (ablation)": f"{100 * float(m['value']):.2f}",
        }
        mt = (
            main[
                (main["table"] == "main")
                & (main["variant"] == m["variant"])
                & (main["method"] == "sflm")
            ]
            if main is not None
            else []
        )
        row["paper (main table)"] = pct(float(mt["value"].iloc[0])) if len(mt) else ""
        table.append(row)
    notes = [
        "The paper's alpha_trunc is the inverted convention: the schedule keeps clean weights "
        "<= 1 - alpha_trunc (0.879 = 1 - alpha*(0.1), 0.869 = 1 - alpha*(0.01) for |V| ~ 50k, "
        "d = 768); variants trunc / trunc-d0.01 compute alpha*(delta) for the run's own |V|.",
        'The paper disagrees with itself at 0.879: the main table\'s "+ alpha*(0.1)" row says '
        "7.7 % (equal to the 0.9 run's 7.73 rounded), this ablation table says 7.43 %. Both "
        "are shown; ours is one number per variant.",
    ]
    _, missing = a.needs(a, df)
    head = (
        f"Ours: {name}, linear schedule, standard DiT, exact velocity, largest NFE, T = 1 "
        "(%). Paper: tab:sfm_tinygsm_all_schedules (250k steps)."
    )
    return _write_table(a, out, pd.DataFrame(table), head, notes, missing)


def _tokenlen_render(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    """Histograms of tokenised lengths ([BOS] question separator program [EOS]) under GPT-2 and
    SmolLM-135M (:func:`bench.data.stats.run`: offline on ``--tokenlen-n`` generated stand-in
    problems, labelled as such), medians beside the paper's TinyGSM 204 / 180."""
    try:
        from bench.data.stats import run as length_stats
    except ImportError as e:
        raise RuntimeError(f"bench.data.stats unavailable ({e})") from e
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    st = length_stats(standin=getattr(args, "tokenlen_n", None) or 2000)
    mk = marks(a.label)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), squeeze=False)
    data = []
    for i, (ax, (tok, panel)) in enumerate(
        zip(axes[0], (("gpt2", "GPT-2"), ("smollm", "SmolLM-135M")))
    ):
        t = st["tokenizers"][tok]
        h = t["histogram"]
        ax.bar(
            h["edges"][:-1],
            h["counts"],
            width=h["bin_width"],
            align="edge",
            color=f"C{i}",
            alpha=0.8,
        )
        ax.axvline(t["median"], color="black", lw=1.2, label=f"median (ours) {t['median']:.0f}")
        pm = mk[mk["panel"] == panel]
        for _, r in pm.iterrows():
            ax.axvline(
                float(r["value"]),
                color="0.4",
                ls="--",
                label=f"median (paper, TinyGSM) {float(r['value']):.0f}",
            )
            data.append(
                {
                    "panel": panel,
                    "series": f"paper: {r['series']}",
                    "kind": "paper",
                    "value": float(r["value"]),
                }
            )
        ax.set_title(panel)
        ax.set_xlabel("tokens ([BOS] question separator program [EOS])")
        ax.legend(fontsize=7)
        data.append(
            {
                "panel": panel,
                "series": "median",
                "kind": "ours",
                "value": float(t["median"]),
                "n": t.get("n"),
            }
        )
    axes[0][0].set_ylabel("examples")
    fig.suptitle(f"Tokenised lengths: {st['data']}", fontsize=8)
    fig.tight_layout()
    stem = out / a.label
    atomic.write_with(stem.with_suffix(".csv"), lambda p: pd.DataFrame(data).to_csv(p, index=False))
    return [stem.with_suffix(".csv"), *save_figure(fig, stem)]


def _owt_render(nfes: tuple[int, ...] | None) -> Callable:
    def render(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from bench.report import frontier as fr

        filled = rows(df, kind=None)
        tasks = sorted(filled.loc[filled["task_kind"] == fr.KIND, "task"].dropna().unique())
        task = "owt" if "owt" in tasks else (tasks[0] if tasks else None)
        c = fr.frontier_cells(task, df) if task else pd.DataFrame()
        if not len(c):
            raise LookupError("no frontier rows in the store")
        have = fr._panels(c)
        want = list(nfes) if nfes else have
        colors = {k: f"C{i % 10}" for i, k in enumerate(sorted(c["curve"].unique()))}
        cols = min(2, len(want))
        nrows = math.ceil(len(want) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(5.0 * cols, 3.8 * nrows), squeeze=False)
        window = fr.Window()
        for ax, nfe in zip(axes.flat, want):
            if nfe in have:
                fr._draw(ax, c, nfe, window, colors)
            else:
                ax.set_title(f"NFE = {nfe}: missing cells")
        axes[0][0].set_ylabel("Gen. PPL")
        fig.suptitle(f"{a.title}: {task}", fontsize=10)
        fig.tight_layout()
        stem = out / a.label
        drawn = c[c["nfe"].isin(want) | c["is_data"] | c["length_bound"]]
        atomic.write_with(stem.with_suffix(".csv"), lambda t: drawn.to_csv(t, index=False))
        return [stem.with_suffix(".csv"), *save_figure(fig, stem)]

    return render


def _frontier_needs(nfes: tuple[int, ...] | None) -> Callable:
    def needs(a: Artifact, df: pd.DataFrame) -> tuple[list[str], list[str]]:
        filled = rows(df, kind=None)
        fr_rows = filled[filled["task_kind"] == "frontier"]
        got = set(pd.to_numeric(fr_rows["nfe"], errors="coerce").dropna().astype(int))
        want = nfes or (32, 64, 128, 256, 512, 1024)
        return ([f"NFE {n}" for n in want if n in got], [f"NFE {n}" for n in want if n not in got])

    return needs


def _not_data(a: Artifact, df: pd.DataFrame) -> tuple[list[str], list[str]]:
    return [], ["(a diagram, not data: not reproduced)"]


def _diagram(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    return []


# --------------------------------------------------------------------------- the paper's items

_S = "S-FLM (S-arch)"
SARCH = ("sarch",)
DIT = ("trunc-adaptive",)  # the paper's S-FLM recipe on the standard DiT
# smoke sweeps train no S-arch: the S-arch series fall back to the DiT recipe (labelled so)
SARCH_OR_DIT = ("sarch", "trunc-adaptive")


def _decodings(t: float, ks=(1, 10)) -> tuple[Series, ...]:
    return (
        Series(f"{_S} exact", "sflm", SARCH_OR_DIT, "exact"),
        Series(f"{_S} stochastic", "sflm", SARCH_OR_DIT, "stochastic"),
        *(Series(f"{_S} top-{k}", "sflm", SARCH_OR_DIT, f"top{k}") for k in ks),
    )


_BASELINES = (Series("MDLM", "mdlm"), Series("Duo", "duo"))


def _curves(label, title, *panels, sweep=GSM8K_SWEEP) -> Artifact:
    return Artifact(label, "figure", title, sweep, render_curves, curve_needs, panels, "gsm8k")


ARTIFACTS: list[Artifact] = [
    _curves(
        "fig-tinygsm-T1p0",
        "Accuracy on GSM8K at T = 1",
        Panel("left: S-FLM decodings", 1.0, _decodings(1.0)),
        Panel(
            "right: vs MDLM, Duo",
            1.0,
            (
                Series(f"{_S} exact", "sflm", SARCH_OR_DIT, "exact"),
                Series(f"{_S} top-1", "sflm", SARCH_OR_DIT, "top1"),
                *_BASELINES,
            ),
        ),
    ),
    Artifact("fig-S-FLM-fig1", "figure", "S-FLM overview (diagram)", "none", _diagram, _not_data),
    _curves(
        "fig-tinygsm-T0p1",
        "Accuracy on GSM8K with T = 0.1",
        Panel("left: S-FLM decodings", 0.1, _decodings(0.1)),
        Panel(
            "right: S-arch vs DiT vs baselines",
            0.1,
            (
                Series(f"{_S} exact", "sflm", SARCH, "exact"),
                Series("S-FLM (DiT) exact", "sflm", DIT, "exact"),
                *_BASELINES,
            ),
        ),
    ),
    Artifact(
        "tab-sudoku",
        "table",
        "Exact match accuracy (%) on Sudoku",
        SUDOKU_SWEEP,
        render_main_table,
        _paper_table_needs("main"),
        task="sudoku",
    ),
    Artifact(
        "tab-tinygsm_main",
        "table",
        "Accuracy (%) on GSM8K after 250k steps",
        GSM8K_SWEEP,
        render_main_table,
        _paper_table_needs("main"),
        task="gsm8k",
    ),
    Artifact(
        "fig-owt-pareto-main",
        "figure",
        "Gen. PPL / entropy frontier, NFE 32 and 1024",
        "sweeps/owt_frontier.yaml (CPU: sweeps/owt_smoke.yaml)",
        _owt_render((32, 1024)),
        _frontier_needs((32, 1024)),
    ),
    Artifact(
        "fig-tokenlen-smollm-gpt2",
        "figure",
        "TinyGSM tokenised lengths, GPT-2 vs SmolLM",
        "none (tokenizers; python -m bench.data tinygsm --stats)",
        _tokenlen_render,
        no_store,
        meta={"explicit_only": True},
    ),
    Artifact(
        "tab-sfm_renorm",
        "table",
        "Effect of embedding renormalization on S-FLM (Sudoku)",
        SUDOKU_SWEEP,
        render_renorm_table,
        _paper_table_needs("renorm"),
        task="sudoku",
    ),
    Artifact(
        "tab-sfm_tinygsm_all_schedules",
        "table",
        "Effect of alpha_trunc on S-FLM GSM8K accuracy",
        GSM8K_SWEEP,
        render_alpha_trunc,
        _alpha_trunc_needs,
        task="gsm8k",
    ),
    _curves(
        "fig-appendix-tinygsm-arch-baselines-T1p0",
        "GSM8K accuracy vs NFE at T = 1",
        Panel(
            "main",
            1.0,
            (
                Series(f"{_S} exact", "sflm", SARCH, "exact"),
                Series("S-FLM (DiT) exact", "sflm", DIT, "exact"),
                *_BASELINES,
            ),
        ),
    ),
    _curves(
        "fig-appendix-tinygsm-arch-x-temp",
        "S-arch (Norm.) vs DiT (Std.), exact, T = 1 / 0.1",
        Panel(
            "main",
            1.0,
            (
                Series("Norm. T = 1", "sflm", SARCH, "exact", 1.0),
                Series("Std. T = 1", "sflm", DIT, "exact", 1.0),
                Series("Norm. T = 0.1", "sflm", SARCH, "exact", 0.1),
                Series("Std. T = 0.1", "sflm", DIT, "exact", 0.1),
            ),
        ),
    ),
    _curves(
        "fig-appendix-tinygsm-velocity-topk-norm-T1p0",
        "S-FLM (S-arch) top-k sweep at T = 1",
        Panel(
            "main",
            1.0,
            (
                Series(f"{_S} exact", "sflm", SARCH_OR_DIT, "exact"),
                *(Series(f"top-{k}", "sflm", SARCH_OR_DIT, f"top{k}") for k in TOPK_GRID),
            ),
        ),
    ),
    _curves(
        "fig-appendix-tinygsm-velocity-topk-T0p1-vs-T1p0",
        "S-FLM (S-arch): exact / stochastic / top-1 / top-10",
        Panel("T = 1", 1.0, _decodings(1.0)),
        Panel("T = 0.1", 0.1, _decodings(0.1)),
    ),
    Artifact(
        "fig-appendix-owt-pareto-all",
        "figure",
        "Gen. PPL / entropy frontier, every NFE",
        "sweeps/owt_frontier.yaml (CPU: sweeps/owt_smoke.yaml)",
        _owt_render(None),
        _frontier_needs(None),
    ),
]


# --------------------------------------------------------------------------- command


def status(a: Artifact, df: pd.DataFrame) -> tuple[str, list[str], list[str]]:
    have, miss = a.needs(a, df)
    if not have and not miss:
        return "no store needed", have, miss
    if not have:
        return "missing", have, miss
    return ("complete" if not miss else "partial"), have, miss


def list_text(df: pd.DataFrame) -> str:
    lines = []
    for a in registry().values():
        st, have, miss = status(a, df)
        lines.append(f"{a.label:48s} {a.kind:6s} {st:16s} sweep: {a.sweep}")
        for h in have:
            lines.append(f"    have: {h}")
        for m in miss:
            lines.append(f"    need: {m}")
    return "\n".join(lines)


def run(df: pd.DataFrame, out: Path, labels: list[str] | None, args=None) -> tuple[list, list]:
    """Render ``labels`` (None: every artifact the store has cells for, and the store-free
    tables) into ``out``; returns (written files, [(label, reason)] skipped)."""
    reg = registry()
    unknown = [x for x in labels or [] if x not in reg]
    if unknown:
        raise KeyError(f"unknown label(s) {unknown} (python -m bench.report --list)")
    out.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for label in labels or list(reg):
        a = reg[label]
        st, have, miss = status(a, df)
        if labels is None and (st == "missing" or a.meta.get("explicit_only")):
            skipped.append((label, st if st == "missing" else "only with --figure"))
            continue
        try:
            written += a.render(a, df, out, args)
        except (LookupError, RuntimeError, ImportError, OSError) as e:
            skipped.append((label, str(e)))
    return written, skipped
