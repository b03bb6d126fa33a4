"""S-FLM's paper artifacts for ``python -m bench.report --paper / --figure LABEL``: report items
of the ``sflm`` entry point of group ``sflm_bench.report`` (:mod:`sflm.report`).

- ``tab-alpha-crit-grid``: alpha*(delta) (paper eq. alpha-crit) on the paper's grid (3 |V| x 5 d
  x 2 delta) beside the paper's 30 printed values (``results/paper/alpha_crit_grid.csv``) and the
  Monte-Carlo probability that the target is the nearest neighbour there
  (:func:`sflm.alpha_star.check_alpha_star`); needs no store.
- ``tab-noise-schedules``: the table's definitions (linear, cos^2) and a figure of alpha(t) for
  both, untruncated and truncated at alpha*(0.1) for Sudoku (|V| = 12, d = 512) and GSM8K
  (|V| = 49,153, d = 768), plus, for every trained adaptive S-FLM run under ``<results>/runs``,
  the schedule it learned (read from its ``weights.pt``) beside its base schedule.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench import atomic
from bench.report.document import Doc, Table
from bench.report.figures import save_figure
from bench.report.items import Artifact, cli_flag
from bench.report.paper.numbers import PAPER_DIR

#: (task, |V|, d) of the schedules figure's truncations: Sudoku's 12 tokens with the tiny DiT,
#: GSM8K's SmolLM-135M vocabulary + [PAD] with the small DiT
TRUNCATIONS = (("Sudoku", 12, 512), ("GSM8K", 49_153, 768))


def alpha_crit_table(n_trials: int = 100_000) -> pd.DataFrame:
    from sflm.alpha_star import PAPER_GRID, alpha_star, check_alpha_star

    paper = pd.read_csv(PAPER_DIR / "alpha_crit_grid.csv")
    out = []
    for v in PAPER_GRID["vocab_size"]:
        for d in PAPER_GRID["dim"]:
            for delta in PAPER_GRID["delta"]:
                a = alpha_star(v, d, delta)
                p = paper[
                    (paper["vocab_size"] == v)
                    & (paper["dim"] == d)
                    & np.isclose(paper["delta"], delta)
                ]["alpha"]
                row = {
                    "vocab": v,
                    "d": d,
                    "delta": delta,
                    "alpha* (ours)": round(a, 4),
                    "alpha* (paper)": float(p.iloc[0]) if len(p) else float("nan"),
                }
                if n_trials:
                    c = check_alpha_star(v, d, delta, n_trials=n_trials)
                    row["P[target nearest]"] = round(c.p_nearest, 4)
                    row["stderr"] = round(c.stderr, 4)
                    row[">= 1 - delta"] = "yes" if c.holds else "no"
                out.append(row)
    return pd.DataFrame(out)


def render_alpha_crit(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    n = getattr(args, "mc_trials", None)
    n = 100_000 if n is None else int(n)
    t = alpha_crit_table(n)
    agree = (t["alpha* (ours)"] - t["alpha* (paper)"]).abs() <= 0.0005 + 1e-9
    text = [
        f"# {a.label}: {a.title}",
        "",
        "alpha*(delta) = (2/pi) arcsin(sqrt(2 log(2(|V|-1)/delta) / d)) (paper eq. alpha-crit), "
        "computed here, beside the 30 values the paper prints (table tab:alpha-crit-grid). "
        f"{int(agree.sum())} / {len(t)} agree to the paper's 3 decimals."
        + (
            f" `P[target nearest]`: Monte-Carlo probability that the target is the nearest "
            f"neighbour of SLERP(z_0, e_k, alpha*) under the random codebook model ({n:,} "
            "trials a row, `sflm.alpha_star.check_alpha_star`, exact Beta-law reduction), "
            "+- stderr; `no` marks rows where the approximation undershoots 1 - delta."
            if n
            else ""
        ),
        "",
        Table(
            t,
            paper={"alpha* (paper)"},
            keys={"vocab", "d", "delta"} & set(t.columns),
            computed=f"sflm.schedule.alpha_star on the paper's grid; Monte Carlo: {n:,} trials a "
            "row (sflm.alpha_star.check_alpha_star), no store cell",
        ),
        "",
    ]
    stem = out / a.label
    atomic.write_with(stem.with_suffix(".csv"), lambda p: t.to_csv(p, index=False))
    return [Doc(text).write(stem.with_suffix(".md")), stem.with_suffix(".csv")]


def adaptive_runs(results_dir: Path) -> list[dict]:
    """Every S-FLM run under ``results_dir/runs`` whose ``weights.pt`` holds a fitted adaptive
    schedule: its learned alpha on the refit grid and its base schedule (code time t: 0 clean)."""
    import torch

    from sflm.schedule import make_base_schedule

    found = []
    for cell in sorted(Path(results_dir, "runs").glob("*/cell.json")):
        meta = json.loads(cell.read_text())
        opts = meta.get("options") or {}
        w = cell.parent / "weights.pt"
        if meta.get("method") != "sflm" or not opts.get("adaptive") or not w.is_file():
            continue
        state = torch.load(w, map_location="cpu", weights_only=False).get("method_state", {})
        ex = next(
            (
                v
                for k, v in state.items()
                if k.endswith("_extra_state")
                and isinstance(v, dict)
                and v.get("alpha_vals") is not None
            ),
            None,
        )
        if ex is None:
            continue
        vals = torch.as_tensor(ex["alpha_vals"]).double().numpy()
        grid = np.linspace(0.0, 1.0, len(vals))
        # the refit maps t~ over [0, 1], so its values span the base: base(0) = its clean cap
        base = make_base_schedule(
            opts.get("schedule", "linear"), float(opts.get("eps", 1e-3)), None, float(vals.max())
        )
        found.append(
            {
                "run": cell.parent.name,
                "variant": meta.get("variant", ""),
                "task": (meta.get("task") or {}).get("name", ""),
                "seed": (meta.get("train") or {}).get("seed"),
                "t": grid,
                "adaptive": vals,
                "refits": int(ex.get("refit_count", 0)),
                "base": base.alpha(torch.as_tensor(grid)).numpy(),
            }
        )
    return found


#: the base schedules the figure draws, with their line styles
SCHEDULE_STYLES = {"linear": "-", "cos2": "--"}


def _analytic_panel(ax) -> list[dict]:
    """linear / cos^2 and their truncations at alpha*(0.1) of :data:`TRUNCATIONS`; the rows
    of the figure's CSV."""
    import torch

    from sflm.alpha_star import alpha_star
    from sflm.schedule import make_base_schedule

    t = np.linspace(0, 1, 201)
    tt = torch.as_tensor(t)
    data = []
    for name, style in SCHEDULE_STYLES.items():
        curves = [(f"{name}", make_base_schedule(name, 1e-3, None, 1.0))]
        for task, v, d in TRUNCATIONS:
            cap = alpha_star(v, d, 0.1)
            curves.append(
                (
                    f"{name}, trunc alpha*(0.1) = {cap:.3f} ({task})",
                    make_base_schedule(name, 1e-3, None, cap),
                )
            )
        for i, (label, s) in enumerate(curves):
            y = s.alpha(tt).numpy()
            # plotted in the paper's convention (tab:noise-schedules): s = 1 - t, alpha_0 = 0
            ax.plot(1 - t, y, ls=style, color=f"C{i}", label=label)
            data += [
                {"panel": "analytic", "series": label, "s": 1 - x, "alpha": yy}
                for x, yy in zip(t[::20], y[::20])
            ]
    ax.set_xlabel("s (paper time: 0 noise, 1 data)")
    ax.set_ylabel("alpha (clean weight)")
    ax.set_title("linear / cos^2, truncated at alpha*(0.1)", fontsize=9)
    ax.legend(fontsize=6)
    return data


def _adaptive_panel(ax, runs: list[dict]) -> list[dict]:
    """The learned schedule of each adaptive run (:func:`adaptive_runs`) beside its base; the
    rows of the figure's CSV."""
    data = []
    based = set()  # runs of one (task, variant) share their base: one legend entry
    for i, r in enumerate(runs):
        name = f"{r.get('task', '')} {r['variant']}".strip()
        seed = f" seed {r['seed']}" if r.get("seed") is not None else ""
        lab = f"{name}{seed} ({r['refits']} refits)"
        ax.plot(1 - r["t"], r["adaptive"], color=f"C{i}", label=f"learned: {lab}")
        blab = "_nolegend_" if name in based else f"base: {name}"
        based.add(name)
        ax.plot(1 - r["t"], r["base"], color=f"C{i}", ls=":", label=blab)
        idx = np.linspace(0, len(r["t"]) - 1, 11).astype(int)
        for kind in ("adaptive", "base"):
            data += [
                {
                    "panel": "adaptive",
                    "series": f"{kind}: {r['run']}",
                    "s": 1 - r["t"][j],
                    "alpha": r[kind][j],
                }
                for j in idx
            ]
    ax.set_xlabel("s (paper time)")
    ax.set_title("adaptive schedule learned by trained S-FLM runs", fontsize=9)
    ax.legend(fontsize=6)
    return data


def render_schedules(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = adaptive_runs(Path(getattr(args, "results_dir", "results") or "results"))
    n = 2 if runs else 1
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 3.8), squeeze=False)
    data = _analytic_panel(axes[0][0])
    if runs:
        data += _adaptive_panel(axes[0][1], runs)
    fig.tight_layout()
    stem = out / a.label
    table = pd.DataFrame(
        [
            {"schedule": "Linear", "alpha_s (paper time)": "s"},
            {"schedule": "Cosine^2", "alpha_s (paper time)": "sin^2(pi s / 2)"},
        ]
    )
    text = [
        f"# {a.label}: {a.title}",
        "",
        Table(table, keys={"schedule"}, computed="the schedules' definitions (sflm.schedule)"),
        "",
        "Truncated at alpha*: the clean weight is rescaled onto [eps, alpha*] "
        "(`sflm.schedule.TruncatedSchedule`); code time t = 1 - s. Figure: "
        f"`{a.label}.pdf`"
        + (
            "; adaptive runs: " + ", ".join(r["run"] for r in runs)
            if runs
            else "; no trained adaptive S-FLM run in the store."
        ),
        "",
    ]
    atomic.write_with(stem.with_suffix(".csv"), lambda p: pd.DataFrame(data).to_csv(p, index=False))
    return [
        Doc(text).write(stem.with_suffix(".md")),
        stem.with_suffix(".csv"),
        *save_figure(fig, stem),
    ]


ITEMS = [
    Artifact(
        name="tab-alpha-crit-grid",
        kind="table",
        title="alpha*(delta) for |V|, d, delta",
        sweep="none",
        render=render_alpha_crit,
        flags=(
            cli_flag(
                "--mc-trials",
                type=int,
                default=None,
                help="tab-alpha-crit-grid: Monte-Carlo trials a row (default 100000; 0: none)",
            ),
        ),
    ),
    Artifact(
        name="tab-noise-schedules",
        kind="table",
        title="Analytical noise schedules (+ learned adaptive)",
        sweep="none (adaptive panel: any sweep with an adaptive S-FLM)",
        render=render_schedules,
    ),
]
