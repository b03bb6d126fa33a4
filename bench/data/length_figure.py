"""The paper's token-length figure (``fig-tokenlen-smollm-gpt2``) drawn from the statistics of
:func:`bench.data.stats.run`: one histogram per tokenizer (GPT-2, SmolLM-135M) of the tokenised
lengths (``[BOS] question separator program [EOS]``), our median, and the paper's TinyGSM medians
as dashed lines. The report's artifact (:mod:`bench.report.artifacts`) computes the statistics
and writes the files; this module only draws."""

from __future__ import annotations

import pandas as pd

#: (key in the statistics' ``tokenizers``, panel title = ``panel`` of the paper's marks)
PANELS = (("gpt2", "GPT-2"), ("smollm", "SmolLM-135M"))


def token_length_figure(stats: dict, marks: pd.DataFrame):
    """(figure, rows): the histograms of ``stats`` with the paper's medians of ``marks`` (rows
    with ``panel``, ``series``, ``value``); rows list every median drawn, ours and the paper's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), squeeze=False)
    data = []
    for i, (ax, (tok, panel)) in enumerate(zip(axes[0], PANELS)):
        t = stats["tokenizers"][tok]
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
        pm = marks[marks["panel"] == panel]
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
    fig.suptitle(f"Tokenised lengths: {stats['data']}", fontsize=8)
    fig.tight_layout()
    return fig, data
