"""The results store's row schema: every column a row may carry (:data:`COLUMNS`, the
results table of docs/report.md then its extensions, flat, never nested), what each added column
means, the rule a cell's rows must follow (:func:`check_rows`), and the report columns every row
carries about its task and method (:func:`task_columns`, :func:`sample_columns`). The rows
themselves are built beside it, in :mod:`bench.results.rows`."""

from __future__ import annotations

#: the results-table columns (docs/report.md), then extensions (flat, never nested).
COLUMNS = [
    "cell_id",
    "sweep",
    "task",
    "method",
    "variant",
    "backbone",
    "train_steps",
    "nfe",
    "temperature",
    "decoding",
    "seed",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "git_sha",
    "config_hash",
    "created_at",
    # extensions
    "subset",
    "kind",
    "train_cell",
    "wall_s",
    # what the report reads about the row's task and method (REPORT_COLUMNS)
    "task_kind",
    "task_title",
    "stand_in_for",
    "subset_rank",
    "metric_rank",
    "nfe_is_length",
    "temperature_free",
    "default_decoding",
    "task_protocol",
    "train_log",
    # train rows: where the run trained ("cuda:<GPU name>" / "cpu") and on how many processes
    "device",
    "devices",
    # every row of an imported model: ``<source>@<sha256[:12]>`` of its checkpoint
    "checkpoint",
    # uncertainty: how ci_low / ci_high were computed; per-item 0/1 outcomes and their items
    "ci_method",
    "item_outcomes",
    "items_key",
    # sample rows of a k-draw cell: its draws per item and the outcomes of draws 1..k-1
    "n_per_item",
    "draw_outcomes",
    # sample rows of a cell that stops a row at the task's EOS (sample.eos_stop)
    "eos_stop",
    # the model's training recipe: its train cell's identity without the seed (canonical JSON)
    "recipe",
    # train rows: what the logged loss / val_loss is (the method's loss_kind: NLL, NELBO, ...)
    "loss_kind",
    # sample rows: the cell's per-item records (bench.records) and the sha256 of their text
    "records",
    "records_sha256",
    # sample rows: the first K items only (bench.eval --limit K); empty for every item asked
    "item_limit",
    # sample rows: seconds spent sampling (loading the items included; batches resumed from
    # disk cost nothing) and scoring (the evaluator and the records), parts of wall_s
    "sample_s",
    "score_s",
    # likelihood rows: what the value is (Method.bound_kind: exact, an upper bound, "" none)
    "bound_kind",
    # re-scored rows (bench.rescore): the scorer settings that differ from the sampled cell's
    # (canonical JSON of task.options overrides) and the cell whose saved samples they score
    "scorer",
    "rescored_from",
    # what a cell cost (bench.measure: SAMPLE_ / TRAIN_ / LIKELIHOOD_COST_COLUMNS)
    "network_s",
    "network_calls",
    "calls_mean",
    "calls_max",
    "forward_equivalents",
    "fe_mean",
    "tokens_mean",
    "tokens_per_call",
    "tokens_per_fe",
    "latency_s",
    "latency_items",
    "tokens_per_s",
    "seconds_per_sample",
    "peak_mem_mb",
    "eval_s",
    "s_per_step",
    # the machine a cell ran on (bench.measure.environment)
    "device_name",
    "torch_version",
    "cuda_version",
    "threads",
    # sample rows: the entry's sampling-only options that differ from their defaults (canonical
    # JSON; "" for none): with the decoding, the sampler (bench.report.samplers)
    "sampling",
    # sample and likelihood rows a ``bench.eval`` of a sweep's model computed: the evaluation
    # (its flags, e.g. "bench.eval --nfe 40 --limit 32"); empty for a sweep's own cells
    "evaluation",
    # the two seeds by name: the model's training seed (``seed``, the results-table column, is
    # it too) and a sample or likelihood cell's sampling seed (``sample.seed`` / likelihood.seed)
    "train_seed",
    "sample_seed",
]
#: Columns added after the first stores were written: :meth:`Store.read` lists one only when a
#: row has it, so an older store reads (and exports to results.csv) exactly as before.
#:
#: - ``task_kind``: the task's report kind (``generic``; ``program`` adds the bootstrap-CI table
#:   and figure), ``task_title``: its display name, ``stand_in_for``: the benchmark a CPU
#:   stand-in replaces ("" otherwise); every row;
#: - ``subset_rank``: the subset's position in the task's ``subset_order`` (empty: unranked, after
#:   the ranked ones by name), ``metric_rank``: 0 for the task's headline metric, k for its k-th
#:   secondary metric, empty otherwise; sample rows;
#: - ``nfe_is_length`` (NFE is the generated length, AR), ``temperature_free`` (the decoding
#:   ignores the temperature; the planner samples it at T = 1 only), ``default_decoding`` (the
#:   decoding is the method's default, what the paper ran when it names none); sample rows;
#: - ``task_protocol``: the task options that decide which items and which grader a number comes
#:   from (Sudoku ``generator=fast|reference``; GSM8K ``grader=...; separator=...``); every row;
#: - ``train_log``: the run's training log (``runs/<run>/logs/metrics.csv``, relative to the
#:   results folder; :mod:`bench.report.curves` draws it), empty when none was written; train rows.
#: - ``device`` / ``devices``: where the run trained (``cuda:<GPU name>`` or ``cpu``) and its
#:   process count (devices x nodes), for :mod:`bench.report.training_cost`; train rows.
#: - ``checkpoint``: the file an imported model came from (``bench.checkpoints``: source name and
#:   the first 12 hex digits of its sha256); empty for models trained here; every row.
#: - ``ci_method``: how ``ci_low`` / ``ci_high`` were computed (e.g. "Wilson score interval",
#:   "percentile bootstrap over problems, B = 1000"); sample rows with a CI.
#: - ``item_outcomes``: the per-item 0/1 outcomes whose mean ``value`` is, one character per
#:   item in the task's item order (``bench.evaluate.paired.encode_outcomes``), and
#:   ``items_key``: 16 hex digits identifying those items (two rows pair item by item only when
#:   their keys are equal); sample rows of metrics that are means of 0/1 outcomes.
#: - ``eos_stop``: True on the rows of a cell sampled with ``sample.eos_stop`` (a row stops at
#:   the task's EOS where its decoding can: ``Method.stops_at_eos`` and ``eos_stopping``, e.g.
#:   MDLM's only with ``block_length``; elsewhere the cell fills the canvas); absent when off.
#:   Its ``nfe`` is the budget (``Method.nfe_for``), ``network_calls`` the calls made.
#: - ``n_per_item`` / ``draw_outcomes``: a cell of k > 1 draws per item (``sample.n_per_item``):
#:   k, and the outcomes of draws 1..k-1 (each as ``item_outcomes``, comma-separated;
#:   ``item_outcomes`` is draw 0's) of its headline row, whose value is pass@1, the mean over
#:   the draws (:mod:`bench.evaluate.draws`); absent at one draw.
#: - ``recipe``: the model's training recipe, canonical JSON of its train cell's identity without
#:   the training seed (task, backbone, train settings, method options; the file for an import):
#:   the report's model is (recipe, variant, decoding), so two recipes of one method are two
#:   models and seeds pool within one recipe only (:mod:`bench.report.models`); every model row.
#: - ``loss_kind``: what the run's logged ``loss`` / ``val_loss`` is, in the method's words
#:   (:meth:`bench.method.Method.loss_kind_for` its options: exact NLL, NELBO, or an objective
#:   that bounds nothing); :mod:`bench.report.curves` draws a row of panels per value; train rows.
#: - ``records`` / ``records_sha256``: the cell's per-item records file, relative to the results
#:   folder (``records/<cell_id>.jsonl.gz``, :mod:`bench.records`), and the sha256 of its
#:   uncompressed text, which this row's checksum covers; sample rows.
#: - ``item_limit``: K when the cell scored only the first K items of the task's order
#:   (``python -m bench.eval --limit K``): its items key differs from a full run's, so it never
#:   pairs with one; empty otherwise; sample rows.
#: - ``sample_s`` / ``score_s``: the seconds a sample cell spent sampling and scoring (the task's
#:   evaluator and the per-item records); ``wall_s`` is this process's whole work on the cell.
#:   ``sample_s`` sums the seconds of every batch (the prompts to the device, the sampler, the
#:   ids back), a batch resumed from an earlier run's file with the seconds that file records
#:   (empty when a file older than these columns does not); loading the items is not in it (in
#:   rows written before the cost columns below it was, and resumed batches counted nothing).
#:   A re-scored row's ``score_s`` is its own scoring. Sample rows.
#: - ``bound_kind``: a likelihood row's kind of number (``kind = "likelihood"``,
#:   :mod:`bench.likelihood`): ``exact`` (AR), ``upper bound (NELBO)``, or "" for a model whose
#:   method has no bound (its row has no value; the table prints "no bound").
#: - ``scorer``: the scorer settings a re-scored row used where they differ from the sampled
#:   cell's (canonical JSON of ``task.options`` keys, ``python -m bench.rescore``), and
#:   ``rescored_from``: the cell whose saved samples it scored; empty on rows scored as sampled.
#: - what a cell cost (:mod:`bench.measure`), empty where it cannot be known (a batch
#:   resumed from a file that does not record it):
#:
#:   - sample rows: ``network_s`` (of ``sample_s``, the seconds inside the backbone calls the
#:     sampler counts as NFE; CUDA events on a GPU), ``network_calls`` (those calls, all
#:     batches), ``calls_mean`` / ``calls_max`` (the calls per item, over the items: the
#:     budget ``nfe`` for a fixed-call decoding; a threshold decoding's rows need fewer, and
#:     each item's are its record's ``calls``), ``forward_equivalents`` (``sample_s /
#:     network_s``: the sampler's own work per call in bare forwards, 1.0 for none),
#:     ``fe_mean`` (forward-equivalents per sample: each item's full calls plus its partial
#:     calls, block-only or KV-cached, priced at their measured seconds over a full call's, times
#:     the sampler's work per call: :func:`bench.measure.item_forward_equivalents`),
#:     ``tokens_mean`` (generated tokens per sample: the positions the prompt mask does not give,
#:     up to and with the first EOS where the task has one), ``tokens_per_call`` (tokens over
#:     calls, summed over the items: d3LLM's tokens per forward), ``tokens_per_fe`` (tokens over
#:     forward-equivalents), ``latency_s`` / ``latency_items`` (seconds per sample at batch 1,
#:     the mean over the first ``sample.latency_items`` items sampled again one at a time; empty
#:     when not asked), ``tokens_per_s`` (those generated tokens, summed over the items, per
#:     sampling second: the throughput at the cell's batch),
#:     ``seconds_per_sample`` (``sample_s`` / items), ``peak_mem_mb`` (the peak while sampling:
#:     CUDA max allocated, or the CPU process's resident peak, reset when a process begins the
#:     cell; across a resume the most any batch's process saw);
#:   - likelihood rows: ``eval_s`` (the seconds evaluating the bound over every block; loading the
#:     model and corpus not included), ``network_s`` / ``network_calls`` (of them, inside the
#:     backbone's calls), ``tokens_per_s`` (scored positions per ``eval_s``), ``peak_mem_mb``;
#:   - train rows: ``s_per_step``, ``tokens_per_s`` (batch size x sequence length x steps per
#:     second: the global batch over every device) and ``peak_mem_mb`` (rank 0's, since training
#:     started), of the process that finished the run (a resumed run's last);
#:   - the machine: ``device_name`` (``cpu: <CPU model>`` or ``cuda: <GPU name>``),
#:     ``torch_version``, ``cuda_version`` (empty on a CPU build), ``threads`` (torch intra-op
#:     threads); sample, likelihood and train rows, and an imported model's (where it was
#:     converted).
#: - ``evaluation``: the ``python -m bench.eval`` call (its flags) that computed a sample or
#:   likelihood cell of a sweep's model, a protocol of its own (other items, NFE, draws, ...);
#:   empty for the cells a sweep computed. The report keeps such cells out of the sweep's tables
#:   and reports each evaluation apart (:mod:`bench.report.evaluations`).
#: - ``train_seed`` / ``sample_seed``: the two seeds by name. ``seed`` (the results table's
#:   column since the first store) is the training seed, ``train_seed`` the same number;
#:   ``sample_seed`` is the sampling seed of a sample or likelihood cell (the per-item records'
#:   ``sample_seed``). Every model row / sample and likelihood rows.
REPORT_COLUMNS = COLUMNS[COLUMNS.index("task_kind") :]

_SCALARS = (str, int, float, bool, type(None))


class BadStoreFile(ValueError):
    """A store file that fails validation; the message is the reason (one line)."""


def check_rows(rows, cell_id: str, *, newer_ok: bool = False) -> list[str]:
    """The row schema: a list of flat dicts with known columns, this cell's id, a metric name,
    a numeric (or empty) value, each metric once. Raises :class:`BadStoreFile`. With
    ``newer_ok`` (a checksummed file: its rows are what a writer wrote) columns this code does
    not know are allowed, as a newer version's, and returned (sorted); they are not checked."""
    if not isinstance(rows, list):
        raise BadStoreFile(f"wrong schema: rows is a {type(rows).__name__}, not a list")
    metrics, known, newer = [], set(COLUMNS), set()
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise BadStoreFile(f"wrong schema: row {i} is a {type(r).__name__}, not an object")
        unknown = set(r) - known
        if unknown and not newer_ok:
            raise BadStoreFile(f"wrong schema: row {i} has unknown columns {sorted(unknown)}")
        newer |= unknown
        nested = sorted(k for k, v in r.items() if k in known and not isinstance(v, _SCALARS))
        if nested:
            raise BadStoreFile(f"wrong schema: row {i} has non-scalar values in {nested}")
        if r.get("cell_id") != cell_id:
            raise BadStoreFile(
                f"wrong schema: row {i} has cell_id {r.get('cell_id')!r}, not {cell_id!r}"
            )
        if not isinstance(r.get("metric"), str) or not r["metric"]:
            raise BadStoreFile(f"wrong schema: row {i} has no metric name")
        v = r.get("value")
        if isinstance(v, bool) or not isinstance(v, (int, float, type(None))):
            raise BadStoreFile(
                f"wrong schema: row {i} ({r['metric']}) has a non-numeric value {v!r}"
            )
        metrics.append(r["metric"])
    if len(set(metrics)) != len(metrics):
        raise BadStoreFile(f"wrong schema: duplicate metrics {metrics}")
    return sorted(newer)


def task_columns(task) -> dict:
    """The :data:`REPORT_COLUMNS` every row of ``task`` carries (a :class:`bench.data.base.Task`;
    a task class, as synthetic stores pass, has no options and so no protocol)."""
    return {
        "task_kind": task.report_kind,
        "task_title": task.title or task.name,
        "stand_in_for": task.stand_in_for,
        "task_protocol": "" if isinstance(task, type) else task.protocol(),
    }


def sample_columns(task, method, decoding: str, subset: str, metric: str) -> dict:
    """The :data:`REPORT_COLUMNS` of one sample row: ``method`` is the instance that sampled (its
    decodings and temperature-free set can depend on its options, e.g. CANDI pure Gaussian)."""
    metrics = (task.headline_metric, *task.secondary_metrics)
    return {
        **task_columns(task),
        "subset_rank": task.subset_order.index(subset) if subset in task.subset_order else None,
        "metric_rank": metrics.index(metric) if metric in metrics else None,
        "nfe_is_length": bool(method.nfe_is_length),
        "temperature_free": decoding in tuple(method.temperature_free),
        "default_decoding": decoding == method.decodings[0],
    }
