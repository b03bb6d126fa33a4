"""``python -m bench.report [--results-dir DIR] [--out DIR]``: tables and figures from the store.

The report reads the results table (:func:`bench.results.read`) and, besides it, exactly two
things: the training logs its train rows name (``train_log``, for the training curves) and the
failed-run records :func:`bench.results.failed_runs` lists (for the page's header). What it needs
to know about a task or a method (headline metric, subset order, whether NFE is a length, the
training recipe that makes a model, ...) is in the rows' report columns
(:data:`bench.results.REPORT_COLUMNS`); it imports no method, no registry, no trainer.

Writes to ``<results>/report`` (or ``--out``):

- ``results.csv``: every row of the store (the bench.results columns + extensions);
- ``<task>.md``: per task, the headline metric (Sudoku: exact match) as method x subset
  (difficulty) at the largest NFE of the grid and temperature 1 (the paper's Table
  "Exact match accuracy on Sudoku" protocol: one NFE, T = 1), with the paper's reported
  numbers beside ours where ``results/paper/<task>.csv`` has them, the secondary metrics
  (cell accuracy, valid grids), one table per ablation table of the paper (e.g. S-FLM schedule x
  renorm) with our value beside each of its rows, and every cell of the grid;
- ``training.md``: train throughput and final loss of every model;
- ``training_cost.md`` / ``.csv``: steps/s, duration and device-hours per (task, model) beside
  the paper's table "Training cost" (:mod:`bench.report.training_cost`; also ``--figure
  tab-training-cost``);
- ``<task>_training_curves.png`` / ``.pdf``: training loss and validation loss against step per
  model, from the run logs the train rows name (:mod:`~bench.report.curves`);
- ``<task>_<metric>_vs_nfe.png`` / ``.pdf``: the headline metric against NFE per method
  (one panel per subset), and ``..._vs_temperature`` when the grid has several temperatures;
- seconds, where the sample rows carry their measured cost (:mod:`~bench.report.cost`): the
  headline tables' ``s / sample`` (a program task's also ``s / item incl. scoring``) with the
  device they were measured on, ``<task>_<metric>_vs_seconds`` (the headline metric against
  sampling seconds per sample, points labelled by NFE), the frontier's
  ``<task>_gen_ppl_vs_seconds`` (:mod:`~bench.report.frontier.seconds`) and the training cost's
  s/step, tokens/s and peak memory;
- speed, where the sample rows carry batch-1 seconds (``latency_s``; :mod:`~bench.report.speed`):
  ``<task>_speed.md`` (every setting's cost, AUP over tokens per call and per forward-equivalent
  with paired intervals, speed-ups over AR at matched accuracy) and ``<task>_speed_pareto`` /
  ``<task>_speed_aup``;
- tasks of kind ``program`` (GSM8K, its stand-in): a section of ``<task>.md`` with accuracy and its
  95 % bootstrap CI per model at every NFE and temperature, and ``<task>_accuracy_ci_vs_nfe.png`` /
  ``.pdf``: accuracy vs NFE with CI error bars, one panel per temperature (the paper's figures);
- sections of method packages (entry-point group ``sflm_bench.report``): ``alpha_star.md`` (when
  the store has S-FLM rows, ``sflm/report.py``): alpha*(delta) on the paper's grid beside the
  Monte-Carlo probability that the target is the nearest neighbour there;
- ``--paper`` / ``--figure LABEL`` / ``--list``: the paper's tables and figures by label under
  ``<out>/paper`` (:mod:`~bench.report.paper.command`, catalogue
  :mod:`~bench.report.paper.catalogue`).

Everything above is a report item (:mod:`~bench.report.items`: ``Section``, ``TaskSection``,
``Artifact``, each with its own flags), collected by :mod:`~bench.report.renderers` from the
modules that define them and from installed packages.

Modules: :mod:`~bench.report.cli` (the command; run again on unchanged inputs it writes
nothing: :mod:`~bench.report.unchanged`), :mod:`~bench.report.items` (the protocol),
:mod:`~bench.report.renderers` (the registry), :mod:`~bench.report.tables` (generic per-task
Markdown, training table), :mod:`~bench.report.figures` (generic figures, ``save_figure``),
:mod:`~bench.report.program` (the ``program`` kind), :mod:`~bench.report.cost` (seconds per
sample in the headline tables, ``vs_seconds`` figures), :mod:`~bench.report.frontier.section` (the
``frontier`` kind), :mod:`~bench.report.training_cost`, :mod:`~bench.report.curves` (store-wide
sections), :mod:`~bench.report.paper.numbers` (the paper's numbers),
:mod:`~bench.report.paper.curves`, :mod:`~bench.report.paper.tables`,
:mod:`~bench.report.frontier.paper` (paper figures and tables by label),
:mod:`~bench.report.common` (formatting and row selection).
"""

from bench.report.cli import main
from bench.report.common import headline_cells
from bench.report.figures import figures, save_figure
from bench.report.program import program_task_figure, program_task_markdown
from bench.report.tables import task_markdown, training_markdown
from bench.results import read

__all__ = [
    "figures",
    "headline_cells",
    "main",
    "program_task_figure",
    "program_task_markdown",
    "read",
    "save_figure",
    "task_markdown",
    "training_markdown",
]
