"""Every kind of store row, built beside the schema (:mod:`bench.results.schema`): the columns every
row of a model carries (:func:`model_columns`), then the rows of a trained model
(:func:`train_rows`), an imported one (:func:`import_rows`), a scored sample cell
(:func:`sample_rows`), a task's held-out reference point (:func:`reference_rows`) and a likelihood
cell (:func:`likelihood_rows`). The kinds' work (:mod:`bench.kinds`) computes the numbers and
writes what these functions return with :meth:`bench.results.Store.write_cell`; nothing here runs
a model or touches a file."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from bench import registry
from bench.config import canonical, config_hash
from bench.evaluate.paired import encode_outcomes
from bench.plan import _NON_SEMANTIC_TASK, _NON_SEMANTIC_TRAIN
from bench.results.schema import sample_columns, task_columns

# --------------------------------------------------------------------------- a model's columns


def model_columns(tc) -> dict:
    """The columns every row of train cell ``tc``'s model carries."""
    return {
        "sweep": tc.sweep,
        "task": tc.task["name"],
        "method": tc.method,
        "variant": tc.variant,
        "backbone": tc.backbone["size"],
        "seed": tc.train["seed"],
        "train_seed": tc.train["seed"],
        "config_hash": tc.id,
        "train_cell": tc.id,
        "recipe": recipe(tc),
        **_checkpoint_column(tc),
    }


def recipe(tc) -> str:
    """The model's training recipe: its train cell's identity without the training seed, as
    canonical JSON (the report's model key: rows of two recipes of one method are two models,
    seeds pool only within one). Trained on several subsets at once or one model per subset is
    part of it; which subset is not (the report's subset columns say it)."""
    task = {k: v for k, v in tc.task.items() if k not in _NON_SEMANTIC_TASK}
    out = {
        "task": task,
        "joint_subsets": len(tc.groups) > 1,
        "backbone": tc.backbone,
        "method": tc.method,
        "options": tc.options,
    }
    src = getattr(tc, "source", None)
    if src:  # an imported file: its bytes and the options it is run with are the recipe
        out["import"] = src.get("sha256") or src.get("checkpoint")
        out["vocab_size"] = getattr(tc, "vocab_size", None)
    else:
        skip = {*_NON_SEMANTIC_TRAIN, "seed"}
        out["train"] = {k: v for k, v in tc.train.items() if k not in skip}
    return json.dumps(out, sort_keys=True, separators=(",", ":"), default=str)


def _checkpoint_column(tc) -> dict:
    """``checkpoint``: where an imported model came from (absent for a trained one, so stores
    without imports read as before)."""
    src = getattr(tc, "source", None)
    if not src:
        return {}
    sha = src.get("sha256") or "unknown"
    return {"checkpoint": f"{src['checkpoint']}@{sha[:12]}"}


# --------------------------------------------------------------------------- models


def train_rows(tc, res, n_params: int, *, task) -> list[dict]:
    """The store rows of a finished train cell (``res``: :class:`bench.train.TrainResult`;
    ``task``: the instance, for the report columns it declares). ``train_log``: the run's CSV
    log (:func:`bench.train.log_path`) relative to the results folder, when it was written;
    ``loss_kind``: what that log's ``loss`` / ``val_loss`` is (the method's
    :meth:`~bench.method.Method.loss_kind_for` the cell's options). What the run cost
    (:data:`bench.measure.TRAIN_COST_COLUMNS`, on every row): ``s_per_step``,
    ``tokens_per_s`` (training tokens of the global batch per second) and ``peak_mem_mb`` of
    this process's steps (a resumed run's last process), and the machine it trained on."""
    from bench.measure import environment
    from bench.train.logs import log_path

    log = log_path(tc.run_dir)
    cls = registry.METHODS[tc.method]
    base = {
        **model_columns(tc),
        **task_columns(task),
        "kind": "train",
        "train_steps": res.steps,
        "subset": "+".join(tc.groups),
        "wall_s": res.seconds,
        "train_log": log.relative_to(tc.results_dir).as_posix() if log.is_file() else None,
        "device": getattr(res, "device", None),
        "devices": getattr(res, "devices", None),
        "loss_kind": cls.loss_kind_for(cls.Options(**tc.options)),
        "s_per_step": getattr(res, "s_per_step", None),
        "tokens_per_s": getattr(res, "tokens_per_s", None),
        "peak_mem_mb": getattr(res, "peak_mem_mb", None),
        **environment("cuda" if str(getattr(res, "device", "cpu")).startswith("cuda") else "cpu"),
    }
    return [
        {**base, "metric": "train_steps_per_s", "value": res.steps_per_s, "n": res.steps},
        {**base, "metric": "train_final_loss", "value": res.final_loss, "n": res.steps},
        {**base, "metric": "n_params", "value": float(n_params), "n": 1},
    ]


def import_rows(tc, task, meta: dict, wall_s: float) -> list[dict]:
    """An imported model's train rows (``meta``: what :func:`bench.checkpoints.write_model`
    wrote): its parameter count and the step it was trained to, and the machine that converted it
    (:func:`bench.measure.environment`; nothing was trained here, so no other cost column)."""
    from bench.measure import environment

    base = {
        **model_columns(tc),
        **task_columns(task),
        "kind": "train",
        "train_steps": meta["source"].get("global_step"),
        "subset": "+".join(tc.groups),
        "wall_s": wall_s,
        "device": None,
        "devices": None,
        **environment("cpu"),  # the conversion reads and writes files on the CPU
    }
    return [{**base, "metric": "n_params", "value": float(meta["parameters"]), "n": 1}]


# --------------------------------------------------------------------------- sample cells


def items_key(data) -> str:
    """16 hex digits naming the evaluated items (their token ids and masks): rows with equal keys
    scored the same items in the same order, so their outcomes pair item by item."""
    h = hashlib.sha256()
    for t in (data.x, data.clean_mask):
        a = t.detach().cpu().contiguous()
        h.update(f"{tuple(a.shape)}|{a.dtype}|".encode())
        h.update(a.numpy().tobytes())
    return h.hexdigest()[:16]


def _uncertainty(m, key: str | None) -> dict:
    """The ``ci_method`` / ``item_outcomes`` / ``items_key`` columns of one MetricValue."""
    out = {}
    if getattr(m, "ci_method", None) and m.ci_low is not None:
        out["ci_method"] = m.ci_method
    if getattr(m, "outcomes", None) is not None and key:
        y = np.asarray(m.outcomes)
        if y.ndim == 2:  # k draws (bench.evaluate.draws): draw 0's, then the others'
            out["item_outcomes"] = encode_outcomes(y[0])
            out["draw_outcomes"] = ",".join(encode_outcomes(r) for r in y[1:])
        else:
            out["item_outcomes"] = encode_outcomes(m.outcomes)
        out["items_key"] = key
    return out


def sample_rows(
    c,
    metrics: list,
    *,
    method,
    task,
    train_steps: int,
    nfe: int | None,
    wall_s: float,
    items: str | None = None,
) -> list[dict]:
    """The store rows of a scored sample cell ``c``: one per metric (``metrics``: MetricValues).
    ``method`` / ``task`` are the instances that produced them (for columns they declare);
    ``items``: the :func:`items_key` of the evaluated items."""
    base = {
        **model_columns(c.train),
        # entries may share the model (bench.plan); a cell pickled before variants: the model's
        "variant": getattr(c, "variant", "") or c.train.variant,
        "kind": "sample",
        "train_steps": train_steps,
        "nfe": nfe,
        "temperature": c.temperature,
        "decoding": c.decoding,
        "sampling": (
            json.dumps(canonical(c.sampling), sort_keys=True)
            if getattr(c, "sampling", None)
            else ""
        ),
        "subset": c.subset,
        "wall_s": wall_s,
        "evaluation": getattr(c, "evaluation", "") or None,  # a cell pickled before the field
        "sample_seed": getattr(c, "seed", None),
        **({"n_per_item": c.n_per_item} if getattr(c, "n_per_item", 1) > 1 else {}),
        **({"eos_stop": True} if getattr(c, "eos_stop", False) else {}),
    }
    return [
        {
            **base,
            **m.columns(),
            **_uncertainty(m, items),
            **sample_columns(task, method, c.decoding, c.subset, m.metric),
        }
        for m in metrics
    ]


def limit_column(c) -> dict:
    """``item_limit`` of a cell that scores only the first K items (``bench.eval --limit``)."""
    k = getattr(c, "limit", None)
    return {"item_limit": k} if k else {}


def reference_id(c) -> str:
    """The store cell of the held-out reference point sample cell ``c``'s subset has: one per
    (task config, subset, n)."""
    return config_hash({"reference": c.train.task, "subset": c.subset, "n": c.n_samples})


def reference_rows(task, c, metrics: list, wall_s: float) -> list[dict]:
    """The rows of a task's held-out reference point (``task.data_reference(n)``: OWT scores
    held-out text like samples) for sample cell ``c``'s subset: ``method = "data"`` and
    ``kind = "reference"`` (not a model's sample cell: the generic tables skip it;
    bench/report/frontier/section.py draws it)."""
    ranked = (task.headline_metric, *task.secondary_metrics)
    base = {
        "sweep": c.train.sweep,
        "task": c.train.task["name"],
        "method": "data",
        "variant": "held-out",
        "backbone": "",
        "config_hash": reference_id(c),
        "kind": "reference",
        "subset": c.subset,
        "decoding": "data",
        "wall_s": wall_s,
        **task_columns(task),
        "nfe_is_length": False,
        "temperature_free": True,
        "default_decoding": True,
        "subset_rank": task.subset_order.index(c.subset) if c.subset in task.subset_order else None,
    }
    return [
        {
            **base,
            **m.columns(),
            "metric_rank": ranked.index(m.metric) if m.metric in ranked else None,
        }
        for m in metrics
    ]


# --------------------------------------------------------------------------- likelihood cells


def likelihood_rows(
    tc,
    task,
    metrics,
    *,
    variant: str,
    bound_kind: str,
    steps,
    n_sequences: int,
    seed: int,
    dataset: str,
    wall_s: float,
    cost: dict | None = None,
    evaluation: str = "",
) -> list[dict]:
    """The store rows of one likelihood cell (:mod:`bench.likelihood.cells`), one per metric
    (``metrics``: MetricValues): the model's columns (as sample rows), ``kind = "likelihood"``,
    ``subset`` = the dataset spec, ``nfe`` None, ``decoding`` "", ``bound_kind``, ``item_limit``
    = the sequences asked for (empty: all), ``sample_seed`` = the draws' seed; ``cost``: its cost
    columns, on every row."""
    base = {
        **model_columns(tc),
        **task_columns(task),
        "variant": variant or tc.variant,
        "kind": "likelihood",
        "train_steps": steps,
        "nfe": None,
        "temperature": None,
        "decoding": "",
        "subset": dataset,
        "wall_s": wall_s,
        "bound_kind": bound_kind,
        "item_limit": n_sequences or None,
        "evaluation": evaluation or None,
        "sample_seed": seed,
        **(cost or {}),
    }
    return [
        {
            **base,
            **m.columns(),
            "ci_method": m.ci_method,
        }
        for m in metrics
    ]
