"""``python -m bench.report [--results-dir DIR] [--out DIR]``: tables and figures from the store.

Writes to ``<results>/report`` (or ``--out``):

- ``results.csv``: every row of the store (DESIGN.md columns + extensions);
- ``<task>.md``: per task, the headline metric (Sudoku: exact match) as method x subset
  (difficulty) at the largest NFE of the grid and temperature 1 (the paper's Table
  "Exact match accuracy on Sudoku" protocol: one NFE, T = 1), with the paper's reported
  numbers beside ours where ``results/paper/<task>.csv`` has them, the secondary metrics
  (cell accuracy, valid grids), one table per ablation table of the paper (e.g. S-FLM schedule x
  renorm) with our value beside each of its rows, and every cell of the grid;
- ``alpha_star.md`` (when the store has S-FLM rows): alpha*(delta) on the paper's grid of |V|, d,
  delta beside the Monte-Carlo probability that the target is the nearest neighbour there;
- ``training.md``: train throughput and final loss of every model;
- ``<task>_<metric>_vs_nfe.png`` / ``.pdf``: the headline metric against NFE per method
  (one panel per subset), and ``..._vs_temperature`` when the grid has several temperatures;
- program tasks (GSM8K, its stand-in): a section of ``<task>.md`` with accuracy and its 95 %
  bootstrap CI per model at every NFE and temperature, and ``<task>_accuracy_ci_vs_nfe.png`` /
  ``.pdf``: accuracy vs NFE with CI error bars, one panel per temperature (the paper's figures).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from bench import atomic
from bench.results import read

PAPER_DIR = Path(__file__).resolve().parent.parent / "results" / "paper"
#: headline + secondary metrics per task (first one present is the headline)
HEADLINE = ("exact_match", "accuracy")
SECONDARY = ("cell_accuracy", "blank_accuracy", "valid_grid")
#: the protocol behind each task's paper numbers (results/paper/<task>.csv), for the report text
PAPER_PROTOCOL = {
    "sudoku": "9x9, one model per difficulty, tiny DiT, 20k steps, 180 sampling steps, T = 1",
    "gsm8k": "trained on TinyGSM, small DiT / S-arch, 250k steps, GSM8K test, 1024 sampling steps "
             "(AR: 512), T = 1",
}
SUBSET_ORDER = {"easy": 0, "medium": 1, "hard": 2}


def save_figure(fig, stem: Path) -> list[Path]:
    """Write ``fig`` as ``stem.png`` and ``stem.pdf`` (atomically) and close it."""
    import matplotlib.pyplot as plt

    paths = []
    for ext in ("png", "pdf"):
        p = stem.with_name(f"{stem.name}.{ext}")
        atomic.write_with(p, lambda t, ext=ext: fig.savefig(t, format=ext, dpi=150, bbox_inches="tight"))
        paths.append(p)
    plt.close(fig)
    return paths


def _model_label(r) -> str:
    label = r["method"] if r["variant"] in ("base", "", None) else f"{r['method']}/{r['variant']}"
    return f"{label} ({r['decoding']})" if r.get("decoding") else label


def _subsets(df: pd.DataFrame) -> list[str]:
    return sorted(df["subset"].dropna().unique(), key=lambda s: (SUBSET_ORDER.get(s, 99), s))


def _pct(v) -> str:
    return "" if pd.isna(v) else f"{100 * v:.1f}"


def _md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join("" if pd.isna(v) else str(v) for v in r.values) + " |")
    return "\n".join(lines)


def headline_cells(s: pd.DataFrame) -> pd.DataFrame:
    """Per (method, variant, decoding, subset): the rows at the largest NFE and the
    temperature closest to 1."""
    s = s.copy()
    s["_tdist"] = (s["temperature"].astype(float) - 1.0).abs()
    keys = ["method", "variant", "decoding", "subset", "metric"]
    best = s.sort_values(["nfe", "_tdist"], ascending=[False, True]).groupby(keys, dropna=False).head(1)
    # every training seed's row at that (NFE, T)
    return s.merge(best[keys + ["nfe", "temperature"]], on=keys + ["nfe", "temperature"]).drop(columns="_tdist")


def _cell_text(g: pd.DataFrame) -> str:
    """One table entry: the value with its CI for one seed; mean +- sd over seeds otherwise."""
    if len(g) == 1:
        v = g.iloc[0]
        return _pct(v["value"]) + (f" [{_pct(v['ci_low'])}, {_pct(v['ci_high'])}]" if pd.notna(v["ci_low"]) else "")
    vals = 100 * g["value"].astype(float)
    return f"{vals.mean():.1f} +- {vals.std(ddof=1):.1f} ({len(g)} seeds)"


def paper_numbers(task: str) -> pd.DataFrame | None:
    path = PAPER_DIR / f"{task}.csv"
    if not path.is_file():
        return None
    return pd.read_csv(path, keep_default_na=False)


def _paper_lookup(paper: pd.DataFrame | None, r, subset: str, metric: str):
    if paper is None:
        return None
    p = paper[(paper["table"] == "main") & (paper["method"] == r["method"]) & (paper["variant"] == r["variant"])
              & (paper["subset"] == subset) & (paper["metric"] == metric)]
    exact = p[p["decoding"] == r["decoding"]]
    p = exact if len(exact) else p[p["decoding"] == ""]
    return float(p["value"].iloc[0]) if len(p) else None


def _ours_for(best: pd.DataFrame, method: str, variant: str, decoding: str) -> pd.DataFrame:
    """Our headline rows for one paper row: same method and variant; the paper's decoding when it
    names one, else the method's default decoding (what the paper ran)."""
    from bench.registry import METHODS

    g = best[(best["method"] == method) & (best["variant"] == variant)]
    if decoding:
        return g[g["decoding"] == decoding]
    default = METHODS[method].decodings[0] if method in METHODS else None
    d = g[g["decoding"] == default]
    if len(d) or not len(g):
        return d
    return g[g["decoding"] == g["decoding"].min()]  # no default-decoding rows: one decoding, stably


def ablation_markdown(task: str, best: pd.DataFrame, headline: str, subsets: list[str],
                      paper: pd.DataFrame | None) -> list[str]:
    """One table per non-main table of ``results/paper/<task>.csv`` (e.g. the S-FLM renorm /
    schedule ablation): the paper's rows in its order, our value beside each where the sweep ran
    that (method, variant)."""
    if paper is None:
        return []
    out = []
    best = best[best["metric"] == headline]
    for name in [t for t in dict.fromkeys(paper["table"]) if t != "main"]:
        p = paper[(paper["table"] == name) & (paper["metric"] == headline)]
        rows, any_ours = [], False
        for (method, variant, decoding), g in p.groupby(["method", "variant", "decoding"], sort=False):
            ours = _ours_for(best, method, variant, decoding)
            row = {"paper row": g["label"].iloc[0], "model": f"{method}/{variant}" + (f" ({decoding})" if decoding else "")}
            for sub in subsets:
                o = ours[ours["subset"] == sub]
                any_ours |= bool(len(o))
                row[sub] = _cell_text(o) if len(o) else ""
                pv = g[g["subset"] == sub]
                row[f"{sub} (paper)"] = _pct(float(pv["value"].iloc[0])) if len(pv) else ""
            rows.append(row)
        if rows:
            note = "" if any_ours else " (this sweep ran none of these models)"
            out += ["", f"## Paper table `{name}`: {headline.replace('_', ' ')} (%){note}", "", _md_table(pd.DataFrame(rows))]
    return out


def task_markdown(task: str, df: pd.DataFrame) -> tuple[str, str | None]:
    s = df[(df["task"] == task) & (df["kind"] == "sample")]
    metrics = set(s["metric"])
    headline = next((m for m in HEADLINE if m in metrics), None)
    if headline is None:
        return f"# {task}\n\nNo headline metric ({', '.join(HEADLINE)}) in the store.\n", None
    subsets = _subsets(s)
    paper = paper_numbers(task)
    best = headline_cells(s)
    out = [f"# {task}: {headline.replace('_', ' ')} (%)", "",
           "One row per model and decoding, at the largest NFE of the grid and the temperature closest "
           "to 1 (values in %, 95 % CI in brackets where the evaluator gives one). `paper` columns are "
           f"the S-FLM paper's reported numbers ({PAPER_PROTOCOL.get(task, 'see results/paper')}); ours come "
           "from whatever this sweep ran, so compare them only when the protocol matches.", ""]
    table = []
    h = best[best["metric"] == headline]
    for (method, variant, decoding), g in h.groupby(["method", "variant", "decoding"], dropna=False):
        r = {"method": method, "variant": variant, "decoding": decoding}
        row = {"model": _model_label(r), "nfe": ", ".join(str(int(v)) for v in sorted(g["nfe"].dropna().unique())),
               "T": ", ".join(f"{v:g}" for v in sorted(g["temperature"].dropna().unique())),
               "train steps": int(g["train_steps"].max())}
        for sub in subsets:
            gs = g[g["subset"] == sub]
            row[sub] = _cell_text(gs) if len(gs) else ""
            pv = _paper_lookup(paper, r, sub, headline)
            if paper is not None:
                row[f"{sub} (paper)"] = "" if pv is None else _pct(pv)
        table.append(row)
    out.append(_md_table(pd.DataFrame(table)))
    out += ablation_markdown(task, best, headline, subsets, paper)
    for metric in SECONDARY:
        m = best[best["metric"] == metric]
        if not len(m):
            continue
        m = m.assign(model=[_model_label(r) for _, r in m.iterrows()])
        piv = m.pivot_table(index="model", columns="subset", values="value", aggfunc="mean")
        piv = piv[[c for c in subsets if c in piv.columns]].map(_pct).reset_index()
        out += ["", f"## {metric.replace('_', ' ')} (%)", "", _md_table(piv)]
    full = s[s["metric"] == headline].assign(model=lambda d: [_model_label(r) for _, r in d.iterrows()],
                                              nfe=lambda d: d["nfe"].astype(int))
    piv = full.pivot_table(index=["model", "nfe", "temperature"], columns="subset", values="value", aggfunc="mean")
    piv = piv[[c for c in subsets if c in piv.columns]].map(_pct).reset_index()
    seeds = " (mean over training seeds)" if s["seed"].nunique() > 1 else ""
    out += ["", f"## Every cell of the grid: {headline.replace('_', ' ')} (%){seeds}", "", _md_table(piv), ""]
    return "\n".join(out), headline


def alpha_star_markdown(model_alpha: bool = False, n_trials: int = 100_000) -> str:
    """alpha*(delta) (paper eq. alpha-crit) on the paper's grid of |V|, d, delta beside the
    Monte-Carlo probability that the target is the nearest neighbour at that alpha."""
    from sflm.schedule import alpha_star_table

    rows = alpha_star_table(n_trials=n_trials, model_alpha=model_alpha)
    t = pd.DataFrame([{
        "vocab": f"{r['vocab_size']:,}", "d": r["dim"], "delta": r["delta"], "alpha*(delta)": f"{r['alpha']:.4f}",
        **({"alpha exact (model)": f"{r['alpha_model']:.4f}"} if model_alpha else {}),
        "P[target nearest]": f"{r['p_nearest']:.4f} +- {r['stderr']:.4f}", "1 - delta": f"{1 - r['delta']:.2f}",
        ">= 1 - delta": "yes" if r["holds"] else "no"} for r in rows])
    return "\n".join([
        "# alpha*(delta) vs Monte Carlo", "",
        "alpha*(delta) = (2/pi) arcsin(sqrt(2 log(2(|V|-1)/delta) / d)) (paper eq. alpha-crit) is the clean "
        "weight above which, for a random codebook of |V| unit vectors in d dimensions, the target "
        "embedding is the nearest neighbour of SLERP(z_0, e_x, alpha) with probability >= 1 - delta. "
        f"`P[target nearest]` is a Monte-Carlo estimate at alpha*(delta) ({n_trials:,} trials per row, the "
        "exact Beta-law reduction of the codebook; `sflm.schedule.check_alpha_star`), +- one standard "
        "error. `no` marks rows where the paper's approximation (pi/2 starting angle, union bound) "
        "undershoots; `python -m bench.report --alpha-model` adds the alpha that solves the condition "
        "exactly (`sflm.schedule.alpha_star_model`).", "", _md_table(t), ""])


def training_markdown(df: pd.DataFrame) -> str:
    t = df[df["kind"] == "train"]
    if not len(t):
        return "# Training\n\nNo training rows.\n"
    idx = ["task", "method", "variant", "backbone", "subset", "seed"]
    t = t.assign(seed=t["seed"].fillna(0).astype(int))
    piv = t.pivot_table(index=idx, columns="metric", values="value", aggfunc="first").reset_index()
    steps = t.groupby(idx)["train_steps"].max().reset_index()
    piv = piv.merge(steps, on=idx)
    for c in ("train_steps_per_s", "train_final_loss"):
        if c in piv:
            piv[c] = piv[c].map(lambda v: f"{v:.3g}")
    if "n_params" in piv:
        piv["n_params"] = piv["n_params"].map(lambda v: f"{int(v):,}")
    return "# Training\n\n" + _md_table(piv) + "\n"


def figures(task: str, df: pd.DataFrame, metric: str, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import seaborn as sns

    s = df[(df["task"] == task) & (df["kind"] == "sample") & (df["metric"] == metric)].copy()
    if not len(s):
        return []
    s["model"] = [_model_label(r) for _, r in s.iterrows()]
    s["value_pct"] = 100 * s["value"].astype(float)
    s["nfe"] = s["nfe"].astype(float)
    subsets = _subsets(s)
    written = []
    sns.set_theme(style="whitegrid", context="paper", font_scale=1.1)
    # metric vs NFE at T closest to 1 (AR, whose NFE is the length, appears as a single marker)
    s["_tdist"] = (s["temperature"].astype(float) - 1).abs()
    at1 = s[s["_tdist"] == s.groupby("model")["_tdist"].transform("min")]
    g = sns.relplot(data=at1, x="nfe", y="value_pct", hue="model", col="subset", col_order=subsets, kind="line",
                    marker="o", markersize=7, height=3.2, aspect=1.1, facet_kws={"sharey": True})
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ticks = sorted(at1["nfe"].unique())
    for ax in g.axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    g.set(xlabel="NFE (backbone calls; AR: generated length)", ylabel=f"{metric.replace('_', ' ')} (%)")
    g.set_titles("{col_name}")
    g.figure.suptitle(f"{task}: {metric.replace('_', ' ')} vs NFE (T closest to 1)", y=1.03)
    written += save_figure(g.figure, out / f"{task}_{metric}_vs_nfe")
    if s["temperature"].nunique() > 1:
        top = s[s["nfe"] == s.groupby("model")["nfe"].transform("max")]
        g = sns.relplot(data=top, x="temperature", y="value_pct", hue="model", col="subset", col_order=subsets,
                        kind="line", marker="o", height=3.2, aspect=1.1)
        g.set(xlabel="temperature", ylabel=f"{metric.replace('_', ' ')} (%)")
        g.set_titles("{col_name}")
        g.figure.suptitle(f"{task}: {metric.replace('_', ' ')} vs temperature (largest NFE)", y=1.03)
        written += save_figure(g.figure, out / f"{task}_{metric}_vs_temperature")
    return written


# --------------------------------------------------------------------------- program tasks (GSM8K)
# GSM8K and its CPU stand-in (arith_standin) score executed programs: `accuracy` is the paper's
# bootstrap point estimate with its 95 % percentile CI (bench/evaluate/stats.py). The generic
# report above shows one NFE and T per model; the paper's GSM8K figures plot accuracy vs NFE
# with CI error bars at T = 1 and T = 0.1. This section adds that table and figure.

PROGRAM_TASKS = ("gsm8k", "arith_standin")


def _length_bound_and_tfree(method: str, decoding: str) -> tuple[bool, bool]:
    """(NFE is the generated length, decoding ignores the temperature), from the method class."""
    try:
        from bench import registry

        cls = registry.METHODS[method]
    except (ImportError, KeyError):
        return False, False
    return bool(cls.nfe_is_length), decoding in tuple(cls.temperature_free)


def _program_rows(task: str, df: pd.DataFrame) -> pd.DataFrame:
    s = df[(df["task"] == task) & (df["kind"] == "sample") & (df["metric"] == "accuracy")].copy()
    if not len(s):
        return s
    s["model"] = [_model_label(r) for _, r in s.iterrows()]
    if s["seed"].nunique() > 1:  # one row per training seed: each has its own bootstrap CI
        s["model"] = s["model"] + " seed " + s["seed"].fillna(0).astype(int).astype(str)
    flags = {(m, d): _length_bound_and_tfree(m, d) for m, d in set(zip(s["method"], s["decoding"]))}
    s["length_bound"] = [flags[(m, d)][0] for m, d in zip(s["method"], s["decoding"])]
    s["t_free"] = [flags[(m, d)][1] for m, d in zip(s["method"], s["decoding"])]
    s["nfe"] = s["nfe"].astype(int)
    s["temperature"] = s["temperature"].astype(float)
    return s


def _with_t_free(s: pd.DataFrame, temp: float) -> pd.DataFrame:
    """Rows at temperature ``temp``, plus temperature-free decodings (AR greedy, S-FLM top-1:
    the planner samples them once, at T = 1) for models with no row at ``temp``."""
    at = s[s["temperature"] == temp]
    extra = s[s["t_free"] & ~s["model"].isin(at["model"])]
    return pd.concat([at, extra])


def program_task_markdown(task: str, df: pd.DataFrame) -> str:
    """Accuracy [95 % CI] (%) per model at every NFE, one table per temperature."""
    s = _program_rows(task, df)
    if not len(s) or s["ci_low"].isna().all():
        return ""
    cell = lambda r: f"{_pct(r['value'])} [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]"  # noqa: E731
    n = int(s["n"].max())
    out = ["", "## Accuracy (%) with 95 % bootstrap CI at every NFE and temperature", "",
           f"Point estimate = mean of the bootstrap accuracies, interval = 2.5 / 97.5 percentiles "
           f"(paper appendix \"Bootstrap Confidence Intervals\"), over up to {n} problems. "
           "Autoregressive models make one call per generated token: their column is `length` "
           "(calls used in brackets). Temperature-free decodings (greedy, top-1) appear in every "
           "temperature's table."]
    if task != "gsm8k":
        out[-1] += f" Task `{task}` is the CPU stand-in, not GSM8K."
    grid = sorted(s.loc[~s["length_bound"], "nfe"].unique())
    for temp in sorted(s["temperature"].unique(), reverse=True):
        at = _with_t_free(s, temp)
        rows = []
        for model, g in at.groupby("model", sort=True):
            row = {"model": model}
            for nfe in grid:
                hit = g[(g["nfe"] == nfe) & ~g["length_bound"]]
                row[f"NFE {nfe}"] = cell(hit.iloc[0]) if len(hit) else ""
            lb = g[g["length_bound"]]
            if len(lb):
                row["length"] = f"{cell(lb.iloc[0])} ({int(lb.iloc[0]['nfe'])})"
            rows.append(row)
        table = pd.DataFrame(rows)
        if "length" not in table:
            table["length"] = ""
        out += ["", f"### T = {temp:g}", "", _md_table(table.fillna(""))]
    return "\n".join(out) + "\n"


def program_task_figure(task: str, df: pd.DataFrame, out: Path) -> list[Path]:
    """Accuracy vs NFE with 95 % CI error bars, one panel per temperature (paper figures
    "Accuracy on GSM8K" at T = 1 and T = 0.1); AR as a horizontal line with its CI band."""
    s = _program_rows(task, df)
    if not len(s) or s["ci_low"].isna().all():
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    sns.set_theme(style="whitegrid", context="paper", font_scale=1.1)
    models = sorted(s["model"].unique())
    colors = dict(zip(models, sns.color_palette("tab10" if len(models) <= 10 else "husl", len(models))))
    temps = sorted(s["temperature"].unique(), reverse=True)
    grid = sorted(s.loc[~s["length_bound"], "nfe"].unique())
    fig, axes = plt.subplots(1, len(temps), figsize=(4.6 * len(temps), 3.6), sharey=True, squeeze=False)
    for ax, temp in zip(axes[0], temps):
        at = _with_t_free(s, temp)
        for model, g in at.groupby("model", sort=True):
            g = g.sort_values("nfe")
            v, lo, hi = (100 * g[c].astype(float).to_numpy() for c in ("value", "ci_low", "ci_high"))
            if g["length_bound"].iloc[0]:
                ax.axhline(v[0], color=colors[model], ls="--", lw=1.2, label=f"{model}, NFE = length")
                ax.axhspan(lo[0], hi[0], color=colors[model], alpha=0.15, lw=0)
                continue
            yerr = [(v - lo).clip(min=0), (hi - v).clip(min=0)]
            ax.errorbar(g["nfe"], v, yerr=yerr, color=colors[model], marker="o", ms=4, capsize=3,
                        lw=1.3, label=model)
        if grid:
            ax.set_xscale("log", base=2)
            ax.set_xticks(grid)
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"T = {temp:g}")
        ax.set_xlabel("NFE (backbone calls)")
        ax.set_ylim(bottom=0)
    axes[0][0].set_ylabel("accuracy (%), 95 % bootstrap CI")
    handles, labels = {}, {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    labels = list(handles)
    fig.legend([handles[k] for k in labels], labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    name = "GSM8K" if task == "gsm8k" else f"{task} (CPU stand-in, not GSM8K)"
    fig.suptitle(f"{name}: accuracy vs NFE", y=1.02)
    fig.tight_layout()
    written = save_figure(fig, out / f"{task}_accuracy_ci_vs_nfe")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n")[0])
    ap.add_argument("--results-dir", default="results", help="results folder holding store/ (default: results)")
    ap.add_argument("--out", help="output folder (default: <results-dir>/report)")
    ap.add_argument("--alpha-model", action="store_true",
                    help="alpha_star.md: also solve the nearest-neighbour condition exactly (~3 s a row)")
    args = ap.parse_args(argv)
    store = Path(args.results_dir) / "store"
    if not store.is_dir():
        print(f"error: {store}: no results store (run python -m bench.sweep first)", file=sys.stderr)
        return 2
    out = Path(args.out or Path(args.results_dir) / "report")
    out.mkdir(parents=True, exist_ok=True)
    df = read(args.results_dir)
    atomic.write_with(out / "results.csv", lambda t: df.to_csv(t, index=False))
    written = [out / "results.csv"]
    atomic.write_text(out / "training.md", training_markdown(df))
    written.append(out / "training.md")
    if (df["method"] == "sflm").any():
        atomic.write_text(out / "alpha_star.md", alpha_star_markdown(model_alpha=args.alpha_model))
        written.append(out / "alpha_star.md")
    for task in sorted(df["task"].dropna().unique()):
        text, headline = task_markdown(task, df)
        if task in PROGRAM_TASKS:  # GSM8K section: CI table at every NFE / T
            text += program_task_markdown(task, df)
        atomic.write_text(out / f"{task}.md", text)
        written.append(out / f"{task}.md")
        if headline:
            written += figures(task, df, headline, out)
        if task in PROGRAM_TASKS:  # GSM8K section: accuracy vs NFE with CI error bars
            written += program_task_figure(task, df, out)
    print(f"{len(df)} rows -> {out}")
    for p in written:
        print(f"  {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
