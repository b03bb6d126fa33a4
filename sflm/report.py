"""S-FLM's report items: the section ``alpha_star.md`` (when the store has S-FLM rows) and its
paper tables (:mod:`sflm.paper_artifacts`, :mod:`sflm.paper_tables`).

:data:`ITEMS` reaches ``python -m bench.report`` the way an outside package's items do: through
the entry point ``sflm`` of group ``sflm_bench.report`` in ``pyproject.toml``
(:mod:`bench.plugins`). ``alpha_star.md``: alpha*(delta) (paper eq. alpha-crit) on the paper's
grid of |V|, d, delta beside the Monte-Carlo probability that the target is the nearest
neighbour there (:mod:`sflm.alpha_star`; numpy and scipy, no torch). Imports nothing heavier
than pandas until a store with S-FLM rows is rendered.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.document import Doc, Table
from bench.report.items import Section, cli_flag
from sflm import paper_artifacts, paper_tables


def alpha_star_markdown(model_alpha: bool = False, n_trials: int = 100_000) -> Doc:
    """alpha*(delta) (paper eq. alpha-crit) on the paper's grid of |V|, d, delta beside the
    Monte-Carlo probability that the target is the nearest neighbour at that alpha."""
    from sflm.alpha_star import alpha_star_table

    rows = alpha_star_table(n_trials=n_trials, model_alpha=model_alpha)
    t = pd.DataFrame(
        [
            {
                "vocab": f"{r['vocab_size']:,}",
                "d": r["dim"],
                "delta": r["delta"],
                "alpha*(delta)": f"{r['alpha']:.4f}",
                **({"alpha exact (model)": f"{r['alpha_model']:.4f}"} if model_alpha else {}),
                "P[target nearest]": f"{r['p_nearest']:.4f} +- {r['stderr']:.4f}",
                "1 - delta": f"{1 - r['delta']:.2f}",
                ">= 1 - delta": "yes" if r["holds"] else "no",
            }
            for r in rows
        ]
    )
    return Doc(
        [
            "# alpha*(delta) vs Monte Carlo",
            "",
            "alpha*(delta) = (2/pi) arcsin(sqrt(2 log(2(|V|-1)/delta) / d)) (paper eq. "
            "alpha-crit) is the clean weight above which, for a random codebook of |V| unit "
            "vectors in d dimensions, the target embedding is the nearest neighbour of "
            "SLERP(z_0, e_x, alpha) with probability >= 1 - delta. `P[target nearest]` is a "
            f"Monte-Carlo estimate at alpha*(delta) ({n_trials:,} trials per row, the exact "
            "Beta-law reduction of the codebook; `sflm.alpha_star.check_alpha_star`), +- one "
            "standard error. `no` marks rows where the paper's approximation (pi/2 starting "
            "angle, union bound) undershoots; `python -m bench.report --alpha-model` adds the "
            "alpha that solves the condition exactly (`sflm.alpha_star.alpha_star_model`).",
            "",
            Table(
                t,
                keys={"vocab", "d", "delta"},
                computed=f"sflm.alpha_star on the paper's |V| x d x delta grid, {n_trials:,} "
                "Monte-Carlo trials a row; written because the store has S-FLM rows",
            ),
            "",
        ]
    )


def _render(sec: Section, df: pd.DataFrame, out: Path, args) -> list[Path]:
    if not (df["method"] == "sflm").any():
        return []
    text = alpha_star_markdown(model_alpha=getattr(args, "alpha_model", False))
    return [text.write(out / "alpha_star.md")]


ITEMS = [
    Section(
        name="alpha_star",
        render=_render,
        flags=(
            cli_flag(
                "--alpha-model",
                action="store_true",
                help=(
                    "alpha_star.md: also solve the nearest-neighbour condition exactly (~3 s a row)"
                ),
            ),
        ),
    ),
    *paper_artifacts.ITEMS,
    *paper_tables.ITEMS,
]
