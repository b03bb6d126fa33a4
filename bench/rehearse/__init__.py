"""``python -m bench.sweep SWEEP.yaml --rehearse [--set KEY=VALUE ...] [--memory-gb G]
[--first-decoding]``: every distinct model of a sweep at its real size, with random weights,
through each kind of work its jobs do, on this machine, before any GPU-hour is spent.
``python -m bench.rehearse SWEEP.yaml [SWEEP.yaml ...]`` does several sweeps in one process
(:func:`rehearse_all`, :class:`Shared`).

For every distinct model of the plan (method + options + backbone + vocabulary; models that
differ only by training seed, training subset or sampling grid, or import files with the same
facts, are one) it runs, at batch 1 and at batch 2 (a *twin*, a model that differs from an
earlier one only in options its method declares memory-neutral,
``Rehearsable.memory_neutral_options`` such as S-FLM's schedule constants, runs batch 1 only and
takes the earlier model's growth from batch 1 to 2, :func:`twin_key`; for sampling and likelihood
also an imported model of the same architecture, or of a vocabulary a few classes apart, the growth
scaled up by the ratio when larger, :func:`architecture`):

- **build**: the method and its backbone at the sweep's size, random weights, on the device. An
  import cell (``checkpoint:``) instead writes a random model of the file's facts in the
  reference format (:func:`bench.checkpoints.export.export`, without our own record, as the
  released files are) into a temp folder, runs the import job on it (:func:`bench.cells.run_train`
  on a copy of the cell whose results folder is the temp folder) and loads the imported weights
  as a sampling job does: the load path is rehearsed too;
- **train** (cells that train): the method's loss (at the middles of the trainer's time strata,
  :func:`stratum_midpoints`) and its backward at batch 1 and at batch 2 on the task's layout,
  then one optimizer step as the trainer takes it (:mod:`bench.train.step`: gradient clipping,
  AdamW, the method's post-step hook, the EMA, the LR schedule), without Lightning; bf16 autocast
  on CUDA as ``precision: auto``.
  The step's own peak does not grow with the batch: it is a floor under the extrapolation
  (:meth:`Rehearsal.train`);
- **sample**: one sampling call per sampling setup of the model (decoding and sampling-only
  options: their memory differs, e.g. the S-arch's stochastic decoding against its exact one;
  of decodings that share code with memory growing in a size (``Rehearsable.decoding_family``
  such as S-FLM's top-k), the largest; ``--first-decoding``: the first setup only), through
  :func:`bench.kinds.sample.sample_batch`, at ``nfe = 2``: a middle step and the last, whose memory
  can differ (a method whose NFE is the generated length gets a prompt of all but the last 2
  positions: a prefill of L - 2 positions, then one cached call, which bounds its real peak from
  above), in the cell's dtype (``sample.float64``); the output's shape, id range and NFE count
  are checked;
- **likelihood** (a sweep with a ``likelihood`` section, a method with a bound): one call of the
  method's bound on blocks of the evaluated length;

and once per sweep **score**: the task's ``evaluate`` on one item (the first model's sample),
with its reference LM where the task has one (OWT's Gen. PPL: the configured model when it is on
this machine, else its architecture with random weights from a known configuration, said in the
output).

Each phase reports seconds and peak memory (:class:`bench.measure.PeakMemory`: CUDA max
allocated, or the process's resident peak on the CPU) at both batches, and the peak extrapolated
linearly to the sweep's batch: ``sample.batch_size`` (sampling), ``likelihood.batch_size``, and
``train.batch_size / (devices x num_nodes)``, the batch of one device under DDP (training). The
table ends with the cards each model fits (40 / 80 / 141 GB, or ``--memory-gb``).

Inputs: the task's evaluation items (``eval_data``: prompts, masks, lengths) when this machine
has them; otherwise ids drawn at random in the task's shape (said in the output), so a missing
data set is not a failure here. Training batches are always the evaluation layout with random ids
in the generated positions: the training corpus is not read (its shape is the same, and reading it
at paper scale means tokenising it). With the hub unreachable, only local copies are tried
(``HF_HUB_OFFLINE=1`` for the run).

A shape, dtype or memory failure (an exception in a phase, an unexpected output, a peak
extrapolated above ``--memory-gb``) stops the rehearsal with one line naming the cell and the
phase, exit 1 (2 for a configuration error). Nothing is written into the sweep's results folder:
everything the import path writes goes to a temp folder, removed at the end.

The modules: :mod:`~bench.rehearse.models` (the distinct models and their twins),
:mod:`~bench.rehearse.measuring` (a phase's seconds, peaks and extrapolation),
:mod:`~bench.rehearse.inputs` (the items), :mod:`~bench.rehearse.rehearsal` (one plan's run),
one module per phase of a model (:mod:`~bench.rehearse.imported`,
:mod:`~bench.rehearse.training`) and of the task (:mod:`~bench.rehearse.scoring`); what a kind of
cell tries is the kind's own (:meth:`bench.kind.CellKind.rehearse`: the sample kind's setups and
the likelihood's bound in :mod:`bench.kinds`), :mod:`~bench.rehearse.output` (the table) and
:mod:`~bench.rehearse.command` (the entry points).
"""

from bench.kinds.sample_rehearsal import setup_name
from bench.rehearse.capabilities import (
    Rehearsable,
    decoding_family,
    memory_neutral_options,
    min_nfe,
)
from bench.rehearse.command import main, rehearse, rehearse_all
from bench.rehearse.inputs import Inputs, task_inputs
from bench.rehearse.measuring import GB, Phase, Segments, measure
from bench.rehearse.models import Model, architecture, model_key, models_of, twin_key
from bench.rehearse.output import CARDS_GB, fits, model_summary, progress_line, table
from bench.rehearse.rehearsal import Rehearsal, RehearsalFailure, Shared
from bench.rehearse.scoring import GPT2_CONFIGS
from bench.rehearse.training import stratum_midpoints, train_batch

__all__ = [
    "CARDS_GB",
    "GB",
    "GPT2_CONFIGS",
    "Inputs",
    "Model",
    "Phase",
    "Rehearsable",
    "Rehearsal",
    "RehearsalFailure",
    "Segments",
    "Shared",
    "architecture",
    "decoding_family",
    "fits",
    "main",
    "measure",
    "memory_neutral_options",
    "min_nfe",
    "model_key",
    "model_summary",
    "models_of",
    "progress_line",
    "rehearse",
    "rehearse_all",
    "setup_name",
    "stratum_midpoints",
    "table",
    "task_inputs",
    "train_batch",
    "twin_key",
]
