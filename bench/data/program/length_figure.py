"""The paper's token-length figure (``fig-tokenlen-smollm-gpt2``) drawn from the statistics of
:func:`bench.data.program.length_stats.run`: one histogram per tokenizer (GPT-2, SmolLM-135M) of
the tokenised lengths (``[BOS] question separator program [EOS]``), our median, and the paper's
TinyGSM medians as dashed lines. The report's artifact (:mod:`bench.report.paper.catalogue`)
computes the statistics and writes the files; this module only draws.

Bins come from the data, edges at half tokens so that each bar holds whole lengths
(:func:`length_bins`): one bar per length when the lengths span fewer than 64 tokens, else
numpy's ``auto`` width (the larger of Sturges' and Freedman-Diaconis' choices) rounded up to a
whole number of tokens; statistics with only a fixed histogram are drawn as they are. The x axis
covers the data; a paper median far outside it (the CPU stand-in's lengths are a third of
TinyGSM's) is listed in the legend as off the axis, instead of squeezing the histogram into a
corner.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: (key in the statistics' ``tokenizers``, panel title = ``panel`` of the paper's marks)
PANELS = (("gpt2", "GPT-2"), ("smollm", "SmolLM-135M"))
#: a paper median is drawn on the axis when it lies within the data's range widened by this
#: fraction of the range on each side
MARK_REACH = 0.5
#: lengths spanning fewer tokens than this get one bar per length (:func:`length_bins`)
ONE_TOKEN_SPAN = 64


def length_bins(values, counts) -> np.ndarray:
    """Bin edges for integer lengths ``values`` seen ``counts`` times, at ``k - 0.5``: one token
    per bin when the lengths span fewer than :data:`ONE_TOKEN_SPAN` tokens (every length its own
    bar: templated data has few distinct lengths, which wider bins would merge), else numpy's
    ``auto`` width rounded up to a whole number of tokens."""
    data = np.repeat(np.asarray(values, dtype=np.int64), np.asarray(counts, dtype=np.int64))
    if data.size == 0:
        raise ValueError("no lengths")
    lo, hi = int(data.min()), int(data.max())
    width = 1
    if hi - lo >= ONE_TOKEN_SPAN:
        auto = np.histogram_bin_edges(data, bins="auto")
        width = max(1, int(np.ceil(auto[1] - auto[0])))
    return np.arange(lo, hi + width + 1, width) - 0.5


def _histogram(t: dict) -> tuple[np.ndarray, np.ndarray]:
    """(edges, counts) of one tokenizer's lengths: bins from the data when the statistics list
    every length, else their fixed histogram."""
    lc = t.get("length_counts")
    if lc and len(lc.get("values", ())):
        edges = length_bins(lc["values"], lc["counts"])
        data = np.repeat(np.asarray(lc["values"]), np.asarray(lc["counts"]))
        counts, _ = np.histogram(data, bins=edges)
        return edges, counts
    h = t["histogram"]
    return np.asarray(h["edges"], dtype=float), np.asarray(h["counts"])


def token_length_figure(stats: dict, marks: pd.DataFrame):
    """(figure, rows): the histograms of ``stats`` with the paper's medians of ``marks`` (rows
    with ``panel``, ``series``, ``value``); rows list every median drawn, ours and the paper's,
    and each panel's bin width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), squeeze=False)
    data = []
    for i, (ax, (tok, panel)) in enumerate(zip(axes[0], PANELS)):
        t = stats["tokenizers"][tok]
        edges, counts = _histogram(t)
        width = float(edges[1] - edges[0]) if len(edges) > 1 else 1.0
        ax.stairs(counts, edges, fill=True, color=f"C{i}", alpha=0.8)
        ax.axvline(t["median"], color="black", lw=1.2, label=f"median (ours) {t['median']:.0f}")
        nz = np.nonzero(counts)[0]
        lo, hi = (edges[nz[0]], edges[nz[-1] + 1]) if len(nz) else (edges[0], edges[-1])
        reach = (lo - MARK_REACH * (hi - lo), hi + MARK_REACH * (hi - lo))
        left, right = lo, hi
        off = []
        for _, r in marks[marks["panel"] == panel].iterrows():
            v = float(r["value"])
            label = f"median (paper, TinyGSM) {v:.0f}"
            if reach[0] <= v <= reach[1]:
                ax.axvline(v, color="0.4", ls="--", label=label)
                left, right = min(left, v), max(right, v)
            else:
                off.append((v, label))
            data.append(
                {"panel": panel, "series": f"paper: {r['series']}", "kind": "paper", "value": v}
            )
        pad = 0.04 * (right - left or 1.0)
        ax.set_xlim(left - pad, right + pad)
        for v, label in off:  # in the legend, with the side it lies beyond
            side = "right" if v > right else "left"
            ax.plot([], [], color="0.4", ls="--", label=f"{label} (off the axis, {side})")
        ax.set_title(panel)
        bins = f"bins of {width:g} token{'s' if width != 1 else ''}"
        ax.set_xlabel(f"tokens ([BOS] question separator program [EOS]); {bins}")
        ax.set_ylim(0, 1.35 * max(int(counts.max()), 1))  # room for the legend above the bars
        ax.legend(fontsize=7, loc="upper right")
        data.append(
            {
                "panel": panel,
                "series": "median",
                "kind": "ours",
                "value": float(t["median"]),
                "n": t.get("n"),
                "bin_width": width,
            }
        )
    axes[0][0].set_ylabel("examples")
    fig.suptitle(f"Tokenised lengths: {stats['data']}", fontsize=8)
    fig.tight_layout()
    return fig, data
