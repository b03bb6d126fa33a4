"""The report's speed section: per task whose sample rows carry seconds per sample at batch 1
(``latency_s``: the sweep asked for the speed protocol with ``sample.latency_items``), a page
named after the task with a ``_speed`` suffix and two figures (:mod:`bench.report.speed.draw`);
a store without ``latency_s`` gets none of them, so the quickstart's report is unchanged.

The page (:mod:`bench.report.speed.tables` computes it, :mod:`bench.report.speed.cells` reads the
rows):

- every setting of every model (:mod:`~bench.report.speed.cells`: its cells at the temperature
  closest to 1, every NFE and sampling option), the headline metric with its interval, calls,
  forward-equivalents and tokens per call / per forward-equivalent, seconds per sample at
  batch 1 and batched, the device;
- AUP, d3LLM's accuracy under parallelism (:mod:`bench.evaluate.aup`), over tokens per call and
  over tokens per forward-equivalent, per model with its paired 95 % interval and its difference
  to the best model's;
- the speed-up of every setting over AR with its KV cache on the same subset, items and device,
  with the paired interval of its accuracy minus AR's, which settings lose no accuracy within it
  (matched accuracy), and per model the fastest of those by each measure.

Registered once, in :data:`bench.report.renderers.BUILTIN` (:data:`ITEMS`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.evaluate.aup import ALPHA, OFFSET
from bench.report.common import metric_with_rank, rows
from bench.report.cost import seconds_text
from bench.report.document import Doc
from bench.report.items import Section
from bench.report.speed.cells import AR, has_latency, settings, speed_rows
from bench.report.speed.draw import speed_figures
from bench.report.speed.tables import (
    aup_groups,
    aup_table,
    matched_table,
    setting_name,
    settings_table,
    speedup_table,
    speedups,
)
from bench.report.speed.twins import twins, twins_table

AUP_TEXT = (
    "AUP (d3LLM, Hao AI Lab: 'AUP: when Accuracy Meets Parallelism in Diffusion Language "
    "Models'): a model's settings ordered by parallelism rho, y_1 the accuracy (%) of the least "
    f"parallel one, the settings with y < y_1 - {OFFSET:g} left out, then AUP = rho_1 y_1 + 1/2 "
    "sum_i (rho_i - rho_(i-1)) (y_i W(y_i) + y_(i-1) W(y_(i-1))) with W(y) = "
    f"min(exp(-{ALPHA:g} (1 - y / y_max)), 1), y_max the highest accuracy of any model here "
    "(equal parallelisms: the more accurate first). Over TPF, rho is d3LLM's tokens per forward "
    "(every backbone call counts as one); over tokens / FE, rho is tokens per forward-equivalent: "
    "a partial call (a KV-cached AR step, a block-only call under a cache) priced at its measured "
    "share of a full forward, so a cheap call is not a whole forward and a costly sampler step is "
    "more than one. Intervals: a paired percentile bootstrap over items, B = 1000 (one resample "
    "of the items shared by every model and setting; y_max recomputed per resample; a setting's "
    "TPF under a resample is its resampled tokens over its resampled calls, from the records; "
    "where a setting has no per-item records its TPF is held at the cell's value, as the "
    "last column says). Training seeds are pooled (per-item outcomes averaged), not resampled. "
    "The cut at y_1 - 5 makes AUP jump when a setting crosses it: an interval can be wide where "
    "one sits near it."
)
MATCHED_TEXT = (
    "Speed-up = AR's cost / the setting's cost, in forward-equivalents per sample, seconds per "
    "sample at batch 1 and seconds per sample at the cell's batch, against AR (method `ar`, its "
    "KV cache on) on the same subset, items (so the same length) and device. Matched accuracy: "
    "a setting loses no accuracy within its interval when the paired 95 % interval of its "
    "accuracy minus AR's (items shared, seeds per model) reaches 0 or above. That is no loss "
    "*shown*, not equivalence: with few items the interval is wide and a real loss can hide in it."
)


TWINS_TEXT = (
    "Which speed-up is free: a block KV cache against the same decoding and options without it, "
    "a parallel decoding (`threshold`, `factor`) against LLaDA's `confidence` order at the same "
    "NFE and blocks, on the same model, subset, items and device. FE / twin's: forward-"
    "equivalents per sample over the twin's (below 1: cheaper); speed-ups: the twin's seconds "
    "over the setting's. No accuracy loss shown: the paired 95 % interval of the accuracy "
    "difference reaches 0 or above."
)


def _ar_lines(refs: pd.DataFrame) -> list[str]:
    out = []
    for _, r in refs.iterrows():
        ci = "" if r["low"] is None or pd.isna(r["low"]) else (
            f" [{100 * r['low']:.1f}, {100 * r['high']:.1f}]")  # fmt: skip
        out.append(
            f"- {r['subset']}, {r['device']}: AR reference `{r['model']}` ({setting_name(r)}), "
            f"accuracy {100 * r['value']:.1f}{ci} %, {seconds_text(r['fe']) or '?'} FE / sample, "
            f"{seconds_text(r['latency']) or '?'} s / sample at batch 1, "
            f"{seconds_text(r['batched']) or '?'} s / sample batched"
        )
    return out


def speed_doc(task: str, st: pd.DataFrame, groups, sp: pd.DataFrame, refs, metric: str) -> Doc:
    """The speed page of ``task`` from its settings, AUP groups and speed-ups."""
    doc = Doc(
        [
            f"# {task}: speed ({metric.replace('_', ' ')} against cost; AUP; speed-up over AR)",
            "",
            "Per model, its settings on each subset at the temperature closest to 1 (every NFE "
            "and sampling option there), training seeds pooled. FE: forward-equivalents (each "
            "call priced at its measured seconds over a full forward's, times the sampler's own "
            "work per call); TPF: generated tokens per backbone call (d3LLM's tokens per forward); "
            "batch 1: the first `sample.latency_items` items sampled again one at a time; "
            f"batched: the cell's sampling seconds over its items. Figures: `{task}_speed_pareto` "
            f"(each model's Pareto front against FE and seconds), `{task}_speed_aup` (the curves "
            "AUP integrates).",
            "",
            "## Every setting",
            "",
            settings_table(st),
            "",
            "## AUP: accuracy under parallelism",
            "",
            AUP_TEXT,
            "",
        ]
    )
    if groups:
        doc += [aup_table(groups), ""]
        doc += [f"y_max: {g.subset} {g.aup.y_max:.1f} %." for g in groups]
    else:
        doc += ["No setting with per-item outcomes: no AUP."]
    tw = twins(st)
    if len(tw):
        doc += ["", "## Each speed-up against the same model without it", "", TWINS_TEXT, ""]
        doc += [twins_table(tw, setting_name)]
    doc += ["", "## Speed-up over AR (KV cache) at matched accuracy", "", MATCHED_TEXT, ""]
    if not len(refs):
        doc += [f"No AR cell (method `{AR}`) with seconds on this task: no speed-up table."]
        return doc
    doc += [*_ar_lines(refs), ""]
    if not len(sp):
        doc += ["No other setting scored on AR's items and device."]
        return doc
    doc += [speedup_table(sp), "", "### Per model: the fastest settings with no loss shown", ""]
    doc += [matched_table(sp), ""]
    return doc


def _render(sec: Section, df: pd.DataFrame, out: Path, args) -> list[Path]:
    written: list[Path] = []
    results_dir = Path(getattr(args, "results_dir", "results"))
    for task in getattr(args, "fraction_tasks", ()):
        if not has_latency(task, df):
            continue
        s = speed_rows(task, df)
        st = settings(s)
        if not len(st):
            continue
        metric = metric_with_rank(rows(df, task), 0)
        groups = aup_groups(st, results_dir)
        sp, refs = speedups(st)
        doc = speed_doc(task, st, groups, sp, refs, metric)
        written.append(doc.write(out / f"{task}_speed.md"))
        written += speed_figures(task, st, metric, out)
    return written


ITEMS = [Section(name="speed", render=_render)]
