"""Training curves: the run's loggers, its ``metrics.csv``, and the validation loss.

Every run logs its loss every ``train.log_every`` steps and (``train.val_every``) a validation
loss on fixed held-out examples (:class:`Validation`), through Lightning's loggers: a CSV file
``<run_dir>/logs/metrics.csv`` (:data:`LOG_DIR` / :data:`LOG_FILE`, :func:`log_path`; continued,
not restarted, when the run resumes: :class:`ContinuingCSVLogger`, :func:`trim_log`; written by
rank 0 only), plus TensorBoard or W&B (``train.logger``, :func:`make_loggers`). The report draws
them (:mod:`bench.report.curves`). Validation does not change training (forked RNG, no grad,
eval mode): a run with and one without it end with the same weights, so these options are not
part of a train cell's identity.
"""

from __future__ import annotations

import csv
import os
import random
import sys
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from bench import atomic
from bench.config import ConfigError, TrainConfig, logger_missing_package
from bench.data.base import TaskData
from bench.method import Batch, antithetic_times

#: the run folder's log folder and the CSV log in it (what bench.report.curves reads)
LOG_DIR, LOG_FILE = "logs", "metrics.csv"


def log_path(run_dir: str | Path) -> Path:
    """``<run_dir>/logs/metrics.csv``: one row per logged step (``step``, ``loss`` and/or
    ``val_loss``, ``epoch``)."""
    return Path(run_dir) / LOG_DIR / LOG_FILE


def log_interval(cfg: TrainConfig) -> int:
    """Steps between logged training losses; ``log_every`` null = min(50, steps // 20), at least
    1 (a short run still draws a curve)."""
    if cfg.log_every is None:
        return max(1, min(50, cfg.steps // 20))
    return cfg.log_every


def val_interval(cfg: TrainConfig) -> int:
    """Steps between validation passes (0: none); ``val_every`` null = steps // 20, at least 1."""
    if cfg.val_every is None:
        return max(1, cfg.steps // 20)
    return cfg.val_every


def heldout_for(task, groups: list[str], cfg: TrainConfig) -> TaskData | None:
    """The validation examples of a run (``task.heldout_data``, :class:`bench.data.base.Task`):
    ``val_batches`` x ``batch_size`` of them; None when validation is off or the task has none.
    Validation is a side channel: data that fails to load is a one-line warning, not a failed
    run."""
    if not val_interval(cfg) or cfg.logger == "none":
        return None
    try:
        return task.heldout_data(list(groups), cfg.val_batches * cfg.batch_size)
    except Exception as e:  # noqa: BLE001 - any loading error turns validation off the same way
        print(
            f"sflm: warning: {task.name}: no held-out data for the validation loss "
            f"({type(e).__name__}: {e}); training without it",
            file=sys.stderr,
            flush=True,
        )
        return None


class _ContinuingCSVWriter(ExperimentWriter):
    """Lightning's CSV writer, continuing an existing ``metrics.csv``: Lightning's own deletes the
    file when the log folder already has files (``_check_log_dir_exists`` in
    lightning/fabric/loggers/csv_logs.py), which would lose the first part of a resumed run."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir=log_dir)
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = list(next(csv.reader(f), []))

    def _check_log_dir_exists(self) -> None:  # keep the file (see the class docstring)
        pass


class ContinuingCSVLogger(CSVLogger):
    """A :class:`CSVLogger` that appends to the run's log across resumes (rank 0 writes)."""

    @property
    @rank_zero_experiment
    def experiment(self) -> _ContinuingCSVWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuingCSVWriter(log_dir=self.log_dir)
        return self._experiment


def trim_log(path: Path, step: int) -> None:
    """Drop the rows of ``path`` that a run resumed from its step-``step`` checkpoint logs again,
    atomically (nothing to do without the file). A row's ``step`` is the number of updates of the
    weights it was computed with: ``val_loss`` at step k is logged after update k, the training
    ``loss`` at step k is that of update k + 1 (Lightning's step index), so the resumed run
    starts with the loss at ``step`` and the validation at ``step`` + 1."""
    if not path.is_file():
        return
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames or [], list(reader)

    def kept(r) -> bool:
        s = r.get("step") or ""
        if not s.isdigit():
            return False
        return int(s) < step or (int(s) == step and not r.get("loss"))

    keep = [r for r in rows if kept(r)]
    if len(keep) == len(rows):
        return

    def write(tmp):
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(keep)

    atomic.write_with(path, write)


def make_loggers(cfg: TrainConfig, run_dir: Path) -> list:
    """The Lightning loggers ``cfg.logger`` asks for: the CSV log (:func:`log_path`) unless
    "none", and TensorBoard (``<run_dir>/logs/tensorboard``) or W&B (run id = the run folder's
    name, resumed; project from $WANDB_PROJECT, default "sflm-bench") beside it. Their packages are
    imported here only: a missing one is a :class:`ConfigError` naming ``train.logger``."""
    if cfg.logger == "none":
        return []
    missing = logger_missing_package(cfg.logger)
    if missing:
        raise ConfigError(
            f"train.logger: {cfg.logger!r} needs the {missing} package (pip install {missing})"
        )
    out = [
        ContinuingCSVLogger(
            run_dir, name=LOG_DIR, version="", flush_logs_every_n_steps=log_interval(cfg)
        )
    ]
    if cfg.logger == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        out.append(TensorBoardLogger(run_dir, name=LOG_DIR, version="tensorboard"))
    elif cfg.logger == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        (run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
        out.append(
            WandbLogger(
                name=run_dir.name,
                id=run_dir.name,
                save_dir=str(run_dir / LOG_DIR),
                project=os.environ.get("WANDB_PROJECT", "sflm-bench"),
                resume="allow",
            )
        )
    return out


class Validation(Callback):
    """``val_loss``: the method's training objective on fixed held-out examples, with the EMA
    weights (those sampling uses), logged every ``every`` steps and at the last step.

    What the number is, per method, is the method's
    :meth:`~bench.method.Method.loss_kind_for` its options (each method's ``loss``, token mean
    over the loss mask, in nats): AR: the exact NLL; MDLM and Duo: their NELBO, an upper bound on
    the NLL (``loss_type: low_var``: not a bound), estimated with one draw of times and noise;
    FLM, S-FLM and CANDI pure Gaussian: an unweighted cross-entropy of the clean tokens; CANDI
    hybrid: a cross-entropy weighted as MDLM's NELBO with Gaussian-noised inputs; none of these
    last is a likelihood bound. The draws come from a fixed seed, the same at every pass, so
    successive values differ by the weights only.

    It must not change training: it runs under ``torch.random.fork_rng`` (CPU and every CUDA
    device) with the numpy and python RNG states restored, without gradients, with the modules in
    eval mode and then back in their own mode; it reads the weights and the method's state and
    writes neither, and the data stream is a function of (seed, step) only. Under DDP every rank
    evaluates its slice of each batch and the mean is reduced over ranks (the noise draws then
    depend on the number of ranks: compare validation losses across runs of one layout).
    """

    def __init__(self, data: TaskData, every: int, batches: int, batch_size: int, seed: int):
        self.data, self.every, self.seed = data, every, seed
        n = min(len(data), batches * batch_size)
        self.slices = [slice(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step % self.every and step != trainer.max_steps:
            return
        value = self.evaluate(trainer, pl_module)
        for lg in trainer.loggers:
            lg.log_metrics({"val_loss": value}, step=step)

    @torch.no_grad()
    def evaluate(self, trainer, pl_module) -> float:  # a bench.train.loop.TrainModule
        method, net, cfg = pl_module.method, pl_module.forward_backbone(), pl_module.cfg
        dev = pl_module.device
        rank, world = trainer.global_rank, trainer.world_size
        modes = [(m, m.training) for m in pl_module.modules()]
        np_state, py_state = np.random.get_state(), random.getstate()
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        total = torch.zeros(2, device=dev)  # (sum of batch losses, batches)
        try:
            with torch.random.fork_rng(devices=cuda):
                torch.manual_seed(self.seed)
                pl_module.eval()
                with trainer.precision_plugin.forward_context():
                    for sl in self.slices:
                        idx = torch.arange(sl.start, sl.stop)[rank::world]
                        if not len(idx):
                            continue
                        d = self.data
                        b = Batch(d.x[idx], d.clean_mask[idx], d.loss_mask[idx]).to(dev)
                        t = None
                        if method.uses_time:
                            t = antithetic_times(len(b), antithetic=cfg.antithetic, device=dev)
                        loss = method.loss(net, b, t).loss.detach().float()
                        total += torch.stack([loss, torch.ones((), device=dev)])
        finally:
            for m, was in modes:
                m.train(was)
            np.random.set_state(np_state)
            random.setstate(py_state)
        if world > 1:
            total = trainer.strategy.reduce(total, reduce_op="sum")
        return float(total[0] / total[1]) if float(total[1]) else float("nan")
