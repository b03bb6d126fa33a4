"""The catalogue of the paper's tables and figures by label: ``python -m bench.report --paper |
--figure LABEL | --list``.

Every label is an :class:`~bench.report.items.Artifact` (a report item); a paper label ``fig:x`` is
``fig-x`` here and names the files: ``<out>/paper/<label>.pdf`` / ``.png`` for a figure (with
``<label>.csv``: every plotted point, reference mark and missing series), ``<label>.md`` / ``.csv``
for a table. A figure with missing cells is drawn with what exists and a note naming what is
missing. Numbers the paper gives only in its text (``results/paper/marks.csv``) are drawn as dashed
reference marks.

Each part lives with its owner: accuracy-vs-NFE curves in :mod:`bench.report.paper.curves` (a new
GSM8K-style figure is one :class:`~bench.report.paper.curves.CurveFigure` here with its panels),
main tables in :mod:`bench.report.paper.tables`, the OWT frontier figures in
:mod:`bench.report.frontier.paper`, the token-length figure in
:mod:`bench.data.program.length_figure`, the training-cost table in
:mod:`bench.report.training_cost`, S-FLM's tables in ``sflm/`` (its entry point). :data:`ITEMS` is
this catalogue's built-in labels; :data:`LABELS` the order in which ``--list`` and ``--paper`` go
through the paper's labels (items of other packages follow in the order they register). Everything
here is catalogue data: the method and task names in the series are the paper's.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench import atomic
from bench.report.figures import save_figure
from bench.report.frontier.paper import FrontierFigure
from bench.report.items import Artifact, cli_flag
from bench.report.paper.curves import CurveFigure, Panel, Series
from bench.report.paper.numbers import marks
from bench.report.paper.tables import paper_table_needs, render_main_table

#: the top-k grid of the appendix figure (the paper does not list its k; "k >= 10 plateau");
#: sweeps/gsm8k_nfe.yaml samples the S-arch model with exactly these decodings
TOPK_GRID = (1, 2, 5, 10, 50, 100)
GSM8K_SWEEP = "sweeps/gsm8k_nfe.yaml (CPU stand-in: sweeps/gsm8k_smoke.yaml)"
SUDOKU_SWEEP = "sweeps/sudoku.yaml (CPU: sweeps/quickstart.yaml)"
OWT_SWEEP = "sweeps/owt_frontier.yaml (CPU: sweeps/owt_smoke.yaml)"

#: the paper's labels in the order --list and --paper go through them
LABELS = (
    "fig-tinygsm-T1p0",
    "fig-S-FLM-fig1",
    "fig-tinygsm-T0p1",
    "tab-sudoku",
    "tab-tinygsm_main",
    "fig-owt-pareto-main",
    "fig-tokenlen-smollm-gpt2",
    "tab-sfm_renorm",
    "tab-sfm_tinygsm_all_schedules",
    "fig-appendix-tinygsm-arch-baselines-T1p0",
    "fig-appendix-tinygsm-arch-x-temp",
    "fig-appendix-tinygsm-velocity-topk-norm-T1p0",
    "fig-appendix-tinygsm-velocity-topk-T0p1-vs-T1p0",
    "fig-appendix-owt-pareto-all",
    "tab-alpha-crit-grid",
    "tab-noise-schedules",
    "tab-training-cost",
)


def _token_lengths(a: Artifact, df: pd.DataFrame, out: Path, args=None) -> list[Path]:
    """Histograms of tokenised lengths ([BOS] question separator program [EOS]) under GPT-2 and
    SmolLM-135M (:func:`bench.data.program.length_stats.run`: offline on ``--tokenlen-n``
    generated stand-in problems, labelled as such), medians beside the paper's TinyGSM 204 / 180."""
    try:
        from bench.data.program.length_figure import token_length_figure
        from bench.data.program.length_stats import run as length_stats
    except ImportError as e:
        raise RuntimeError(f"bench.data.program.length_stats unavailable ({e})") from e
    st = length_stats(standin=getattr(args, "tokenlen_n", None) or 2000)
    fig, data = token_length_figure(st, marks(a.label))
    stem = out / a.label
    atomic.write_with(stem.with_suffix(".csv"), lambda p: pd.DataFrame(data).to_csv(p, index=False))
    return [stem.with_suffix(".csv"), *save_figure(fig, stem)]


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


def _curves(label, title, *panels) -> CurveFigure:
    return CurveFigure(
        name=label,
        title=title,
        sweep=GSM8K_SWEEP,
        panels=panels,
        task="gsm8k",
        ylabel="GSM8K accuracy (%)",
    )


ITEMS: list[Artifact] = [
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
    Artifact(
        name="fig-S-FLM-fig1",
        kind="figure",
        title="S-FLM overview (diagram)",
        sweep="none",
        render=_diagram,
        needs=_not_data,
    ),
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
        name="tab-sudoku",
        kind="table",
        title="Exact match accuracy (%) on Sudoku",
        sweep=SUDOKU_SWEEP,
        render=render_main_table,
        needs=paper_table_needs("main"),
        task="sudoku",
    ),
    Artifact(
        name="tab-tinygsm_main",
        kind="table",
        title="Accuracy (%) on GSM8K after 250k steps",
        sweep=GSM8K_SWEEP,
        render=render_main_table,
        needs=paper_table_needs("main"),
        task="gsm8k",
    ),
    FrontierFigure(
        name="fig-owt-pareto-main",
        title="Gen. PPL / entropy frontier, NFE 32 and 1024",
        sweep=OWT_SWEEP,
        nfes=(32, 1024),
        task="owt",
    ),
    Artifact(
        name="fig-tokenlen-smollm-gpt2",
        kind="figure",
        title="TinyGSM tokenised lengths, GPT-2 vs SmolLM",
        sweep="none (tokenizers; python -m bench.data tinygsm --stats)",
        render=_token_lengths,
        explicit_only=True,
        flags=(
            cli_flag(
                "--tokenlen-n",
                type=int,
                default=None,
                help="fig-tokenlen-smollm-gpt2: examples tokenised (default 2000)",
            ),
        ),
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
    FrontierFigure(
        name="fig-appendix-owt-pareto-all",
        title="Gen. PPL / entropy frontier, every NFE",
        sweep=OWT_SWEEP,
        task="owt",
    ),
]
