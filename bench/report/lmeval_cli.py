"""``python -m bench.results export --lm-eval DIR``: its flags and its run, and the W&B logging of
the exported files through lm-eval's own logger (:mod:`bench.report.lmeval_export` writes them)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bench import records
from bench.report.common import prepared, selected
from bench.report.lmeval_export import ExportError, export


def in_memory(line: dict) -> dict:
    """A sample line as lm-eval holds it before writing (``arguments`` a list of argument tuples):
    what its W&B logger's ``log_eval_samples`` reads."""
    args = [list(a.values()) for a in line["arguments"].values()]
    return {**line, "arguments": args}


def log_wandb(out_dir, init_args: dict) -> int:
    """Log every exported run under ``out_dir`` to W&B through lm-eval's own logger
    (``lm_eval.loggers.WandbLogger``: results table, results artifact, per-task sample tables), one
    W&B run per results file; the number of runs logged."""
    import wandb
    from lm_eval.loggers import WandbLogger

    n = 0
    for f in sorted(Path(out_dir).glob("*/results_*.json")):
        res = json.loads(f.read_text(encoding="utf-8"))
        date = f.stem[len("results_") :]
        samples = {}
        for task in res["results"]:
            sf = f.parent / f"samples_{task}_{date}.jsonl"
            if sf.is_file():
                text = sf.read_text(encoding="utf-8").splitlines()
                samples[task] = [in_memory(json.loads(x)) for x in text]
        if wandb.run is not None:  # one W&B run per results file, never appended to another
            wandb.run.finish()
        logger = WandbLogger(init_args={"name": res["model_name"], **init_args})
        try:
            logger.post_init(res)
            logger.log_eval_result()
            if samples:
                logger.post_init({**res, "results": {t: res["results"][t] for t in samples}})
                # the sample lines score the headline metric only: the tables list what they hold
                logger.task_configs = {
                    t: {
                        **res["configs"][t],
                        "metric_list": [{"metric": m} for m in v[0]["metrics"]],
                    }
                    for t, v in samples.items()
                }
                logger.log_eval_samples(samples)
        finally:
            logger.run.finish()
        n += 1
    return n


def add_arguments(ap) -> None:
    """The export's flags on a command's parser (``bench.results export``)."""
    from bench.usage import add_filters, add_results_dir

    ap.add_argument(
        "--lm-eval",
        metavar="DIR",
        required=True,
        help="write lm-eval result files here (a new or empty folder)",
    )
    add_results_dir(ap, "results folder holding store/ (default: results)", default="results")
    add_filters(
        ap,
        task="only this task's cells",
        model="only this model (label, method or method/variant)",
        nfe="only cells at this NFE",
        temperature="only cells at this temperature",
        subset="only this evaluation subset",
    )
    ap.add_argument(
        "--wandb",
        metavar="PROJECT",
        help="also log the same tables to W&B through lm-eval's W&B logger (WANDB_MODE applies)",
    )


def select(df: pd.DataFrame, args) -> pd.DataFrame:
    """The rows of the cells the flags select (train rows kept: they give the parameter counts)."""
    s = prepared(df)
    keep = selected(
        s,
        task=args.task,
        model=args.model,
        nfe=args.nfe,
        temperature=args.temperature,
        subset=args.subset,
    )
    return s[keep | s["kind"].isin(["train", "import"])]


def run(args) -> int:
    """``export --lm-eval DIR``: 0, or 2 with one line on a bad folder or an empty selection."""
    from bench.results import Store
    from bench.usage import usage_exit

    store = Store(args.results_dir)
    if not store.dir.is_dir():
        return usage_exit(f"{store.dir}: no results store")
    try:
        files = export(args.results_dir, select(store.read(), args), args.lm_eval)
    except (ExportError, records.RecordsError) as e:
        return usage_exit(e)
    runs = sum(f.name.startswith("results_") for f in files)
    print(f"{args.lm_eval}: {runs} lm-eval runs, {len(files) - runs} samples files")
    if args.wandb:
        print(f"W&B: {log_wandb(args.lm_eval, {'project': args.wandb})} runs logged")
    return 0
