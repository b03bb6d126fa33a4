"""``python -m bench.sweep SWEEP.yaml [--executor local|slurm|debug] [--status] [--dry-run]``

Plans a sweep into content-addressed cells and runs what is not yet in the results store:

- a **train cell** = task x backbone x train recipe x method (+ options) x training subsets;
  its run folder ``<results>/runs/<method>-<variant>-<hash>`` holds resumable checkpoints and
  the final EMA weights;
- a **sample cell** = train cell x evaluation subset (Sudoku difficulty) x nfe x temperature x
  decoding (+ sample size / seed); it samples the validation problems at batch granularity
  (resumable), scores them and writes one store row per metric.

Cells already in the store are skipped, so re-running a finished sweep does nothing.
Bad input (missing file, malformed YAML, unknown key / method, out-of-range values) exits 2
with one line naming the problem, before anything is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.config import (
    ConfigError,
    MethodEntry,
    SweepConfig,
    TrainConfig,
    build,
    canonical,
    config_hash,
    load_sweep,
)

# fields that do not change what a cell computes (paths, threads, checkpoint cadence)
_NON_SEMANTIC_TRAIN = ("threads", "checkpoint_every")


@dataclass
class TrainCell:
    id: str
    sweep: str
    results_dir: str
    task: dict
    backbone: dict
    train: dict
    method: str
    variant: str
    options: dict
    groups: list[str]

    @property
    def run_dir(self) -> Path:
        return Path(self.results_dir) / "runs" / f"{self.method}-{self.variant}-{self.id}"

    @property
    def weights(self) -> Path:
        return self.run_dir / "weights.pt"

    def label(self) -> str:
        seed = f" seed {self.train['seed']}" if self.train.get("seed") else ""
        return f"{self.method}/{self.variant} [{'+'.join(self.groups)}]{seed}"


@dataclass
class SampleCell:
    id: str
    train: TrainCell
    subset: str
    nfe: int
    temperature: float
    decoding: str
    n_samples: int
    batch_size: int
    float64: bool
    seed: int

    def label(self) -> str:
        seed = f" seed {self.train.train['seed']}" if self.train.train.get("seed") else ""
        return (f"{self.train.method}/{self.train.variant}{seed} {self.subset} nfe={self.nfe} "
                f"T={self.temperature:g} {self.decoding}")


@dataclass
class Plan:
    cfg: SweepConfig
    train_cells: list[TrainCell] = field(default_factory=list)
    sample_cells: list[SampleCell] = field(default_factory=list)

    def samples_of(self, tc: TrainCell) -> list[SampleCell]:
        return [s for s in self.sample_cells if s.train.id == tc.id]


# --------------------------------------------------------------------------- planning


def _variant(entry: MethodEntry) -> str:
    return entry.variant or "base"


def plan(cfg: SweepConfig, source: str = "sweep") -> Plan:
    """Expand a validated sweep into cells (pure: touches no files)."""
    from bench import registry

    out = Plan(cfg)
    try:
        task = registry.make_task(cfg.task)  # cheap: tasks load data lazily
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    task_sem = {k: v for k, v in canonical(cfg.task).items() if k not in ("data_dir", "difficulties", "train_mix")}
    subsets = list(task.groups())  # Sudoku: the difficulties; GSM8K: the test split
    groups_list = [subsets] if cfg.task.train_mix else [[g] for g in subsets]
    for i, entry in enumerate(cfg.methods):
        cls = registry.METHODS[entry.method]
        opts_obj = build(cls.Options, entry.options, where=f"{source}: methods[{i}].options")
        opts = canonical(opts_obj)
        # an instance knows its variant's decodings and NFE rules (e.g. CANDI pure Gaussian)
        cls = cls(opts_obj, task.vocab_size, task.seq_len)
        train0 = build(TrainConfig, {**dataclasses.asdict(cfg.train), **entry.train}, where=f"{source}: methods[{i}].train")
        decodings = entry.decoding if entry.decoding is not None else cfg.sample.decoding
        resolved = []
        for d in decodings:
            d = cls.decodings[0] if d == "default" else d
            if d in cls.decodings:
                resolved.append(d)
            elif entry.decoding is not None:
                raise ConfigError(f"{source}: methods[{i}].decoding: {entry.method} has no decoding {d!r} "
                                  f"(known: {', '.join(cls.decodings)})")
        if not resolved:
            resolved = [cls.decodings[0]]
        resolved = list(dict.fromkeys(resolved))
        seeds = list(dict.fromkeys(cfg.seeds)) or [train0.seed]
        for seed, groups in ((sd, g) for sd in seeds for g in groups_list):
            train = dataclasses.replace(train0, seed=seed)  # train.seed 0 and seeds [0] give the same cell
            train_sem = {k: v for k, v in canonical(train).items() if k not in _NON_SEMANTIC_TRAIN}
            ident = {"task": task_sem, "groups": groups, "backbone": canonical(cfg.backbone), "train": train_sem,
                     "method": entry.method, "options": opts}
            tc = TrainCell(config_hash(ident), cfg.name, cfg.results_dir, canonical(cfg.task), canonical(cfg.backbone),
                           canonical(train), entry.method, _variant(entry), opts, groups)
            out.train_cells.append(tc)
            for subset in groups:
                for dec in resolved:
                    nfes = [0] if cls.nfe_is_length else cfg.sample.nfe
                    temps = [1.0] if dec in cls.temperature_free else cfg.sample.temperature
                    for nfe in nfes:
                        for temp in temps:
                            s = cfg.sample
                            sid = config_hash({"train": tc.id, "subset": subset, "nfe": nfe, "temperature": temp,
                                               "decoding": dec, "n": s.n_samples, "float64": s.float64, "seed": s.seed})
                            out.sample_cells.append(SampleCell(sid, tc, subset, nfe, temp, dec, s.n_samples,
                                                               s.batch_size, s.float64, s.seed))
    return out


# --------------------------------------------------------------------------- cell work


def _device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _task(tc: TrainCell):
    from bench import registry
    from bench.config import TaskConfig

    return registry.make_task(build(TaskConfig, tc.task, where="task"))


def _method_backbone(tc: TrainCell, task):
    from bench import registry
    from bench.config import BackboneConfig

    method = registry.make_method(tc.method, tc.options, task)
    backbone = method.build_backbone(build(BackboneConfig, tc.backbone, where="backbone"))
    return method, backbone


def _base_row(tc: TrainCell) -> dict:
    return {"sweep": tc.sweep, "task": tc.task["name"], "method": tc.method, "variant": tc.variant,
            "backbone": tc.backbone["size"], "seed": tc.train["seed"], "config_hash": tc.id, "train_cell": tc.id}


def run_train(tc: TrainCell, threads: int = 0, progress: bool = True) -> str:
    """Train one cell unless its weights exist; record train rows. Returns the weights path."""
    import torch

    from bench.results import Store
    from bench.train import fit, write_json_atomic

    if threads:
        torch.set_num_threads(threads)
    store = Store(tc.results_dir)
    if tc.weights.is_file() and store.has(tc.id):
        return str(tc.weights)
    tc.run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(dataclasses.asdict(tc), tc.run_dir / "cell.json")
    task = _task(tc)
    torch.manual_seed(int(tc.train["seed"]))  # the initial weights are a function of the cell, not of the process
    method, backbone = _method_backbone(tc, task)
    train_cfg = build(TrainConfig, tc.train, where="train")
    if threads:
        train_cfg.threads = threads
    data = task.train_data(tc.groups)
    n_params = sum(p.numel() for p in backbone.parameters())
    res = fit(method, backbone, data, train_cfg, tc.run_dir, progress=progress, extra={"cell": tc.id})
    base = {**_base_row(tc), "kind": "train", "train_steps": res.steps, "subset": "+".join(tc.groups),
            "wall_s": res.seconds}
    rows = [
        {**base, "metric": "train_steps_per_s", "value": res.steps_per_s, "n": res.steps},
        {**base, "metric": "train_final_loss", "value": res.final_loss, "n": res.steps},
        {**base, "metric": "n_params", "value": float(n_params), "n": 1},
    ]
    if res.is_global_zero:  # DDP: every rank trains, rank 0 records
        store.write_cell(tc.id, rows)
    return str(res.weights)


def run_samples(cells: list[SampleCell], threads: int = 0, progress: bool = True) -> int:
    """Sample + evaluate cells of ONE train cell (skipping those in the store). Returns #done."""
    import torch
    from tqdm import tqdm

    from bench.results import Store
    from bench.train import atomic_torch_save, load_weights

    if not cells:
        return 0
    if threads:
        torch.set_num_threads(threads)
    tc = cells[0].train
    store = Store(tc.results_dir)
    todo = [c for c in cells if not store.has(c.id)]
    if not todo:
        return 0
    if not tc.weights.is_file():
        raise FileNotFoundError(f"{tc.weights}: train cell {tc.label()} has no weights (did training fail?)")
    dev = _device()
    task = _task(tc)
    method, backbone = _method_backbone(tc, task)
    meta = load_weights(method, backbone, tc.weights)
    backbone.to(dev).eval()
    method.to(dev)
    for c in todo:
        t0 = time.perf_counter()
        data = task.eval_data(c.subset, c.n_samples)
        part_dir = tc.run_dir / "samples" / c.id
        part_dir.mkdir(parents=True, exist_ok=True)
        outs, nfe_used = [], None
        starts = list(range(0, len(data), c.batch_size))
        for bi in tqdm(starts, desc=c.label(), disable=not progress, leave=False):
            path = part_dir / f"batch_{bi // c.batch_size:05d}.pt"
            if path.is_file():  # resume at batch granularity
                saved = torch.load(path, weights_only=False)
                outs.append(saved["ids"])
                nfe_used = saved["nfe"]
                continue
            sl = slice(bi, bi + c.batch_size)
            prompt, pmask = data.x[sl].to(dev), data.clean_mask[sl].to(dev)
            gen = torch.Generator(device=dev).manual_seed(c.seed * 1_000_003 + bi)
            method.nfe_counter = 0
            ids = method.sample(backbone, prompt, pmask, nfe=c.nfe, temperature=c.temperature,
                                decoding=c.decoding, float64=c.float64, generator=gen).cpu()
            nfe_used = method.nfe_counter
            atomic_torch_save({"ids": ids, "nfe": nfe_used}, path)
            outs.append(ids)
        samples = torch.cat(outs)
        atomic_torch_save({"ids": samples, "cell": dataclasses.asdict(c)}, tc.run_dir / "samples" / f"{c.id}.pt")
        metrics = task.evaluate(samples, data, c.subset)
        wall = time.perf_counter() - t0
        base = {**_base_row(tc), "kind": "sample", "train_steps": meta["steps"], "nfe": nfe_used,
                "temperature": c.temperature, "decoding": c.decoding, "subset": c.subset, "wall_s": wall}
        rows = [{**base, "metric": m.metric, "value": m.value, "n": m.n, "ci_low": m.ci_low, "ci_high": m.ci_high}
                for m in metrics]
        store.write_cell(c.id, rows)
    return len(todo)


def run_train_then_samples(tc: TrainCell, cells: list[SampleCell], threads: int = 0, progress: bool = True) -> int:
    """One local job: train (if needed), then sample every cell of this model."""
    run_train(tc, threads, progress)
    return run_samples(cells, threads, progress)


# --------------------------------------------------------------------------- driver


def _status_of(p: Plan) -> list[tuple[str, str, str]]:
    """(kind, label, done|running|pending|failed) per cell: the store says what is done; the
    sweep's SLURM state file (if any) and squeue/sacct say what runs, waits or failed."""
    from bench import slurm

    try:
        rows = slurm.statuses(p)
    except RuntimeError:  # squeue / sacct unreachable: what the store says
        rows = slurm.statuses(p, jobs={})
    return [(s.kind, s.label, s.state) for s in rows]


def _log_dir(cfg: SweepConfig) -> Path:
    return Path(cfg.executor.log_dir or Path(cfg.results_dir) / "logs")


def execute_local(p: Plan, kind: str, progress: bool = True) -> list[str]:
    """Run the plan with submitit's LocalExecutor (or DebugExecutor, in-process).
    One job per train cell (train, then its samples); at most ``max_parallel`` at once."""
    import submitit
    from tqdm import tqdm

    from bench.results import Store

    cfg = p.cfg
    store = Store(cfg.results_dir)
    jobs_todo = []
    for tc in p.train_cells:
        cells = [s for s in p.samples_of(tc) if not store.has(s.id)]
        if cells or not (store.has(tc.id) and tc.weights.is_file()):
            jobs_todo.append((tc, cells))
    if not jobs_todo:
        return []
    parallel = 1 if kind == "debug" else max(1, min(cfg.executor.max_parallel, len(jobs_todo)))
    threads = max(1, (os.cpu_count() or 1) // parallel) if kind != "debug" else 0
    if kind == "debug":
        ex = submitit.DebugExecutor(folder=str(_log_dir(cfg) / "%j"))
    else:
        ex = submitit.LocalExecutor(folder=str(_log_dir(cfg) / "%j"))
        ex.update_parameters(timeout_min=cfg.executor.time_min)
    failures: list[str] = []
    running: list = []
    queue = list(jobs_todo)
    bar = tqdm(total=len(jobs_todo), desc=f"sweep {cfg.name}", unit="model", disable=not progress)
    while queue or running:
        while queue and len(running) < parallel:
            tc, cells = queue.pop(0)
            job = ex.submit(run_train_then_samples, tc, cells, threads, kind == "debug")
            running.append((job, tc))
            if kind == "debug":
                break
        time.sleep(0.2 if kind != "debug" else 0)
        still = []
        for job, tc in running:
            if kind != "debug" and not job.done():
                still.append((job, tc))
                continue
            try:
                job.result()
            except Exception as e:  # a failed job must not stop the sweep
                last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                failures.append(f"{tc.label()}: {last} (log: {getattr(job, 'paths', None) and job.paths.stderr})")
            bar.update(1)
        running = still
    bar.close()
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.split("\n")[0])
    ap.add_argument("sweep", help="sweep YAML file")
    ap.add_argument("--executor", choices=("local", "slurm", "debug"), help="override executor.kind")
    ap.add_argument("--status", action="store_true", help="print the state of every cell and exit")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, submit nothing")
    ap.add_argument("--results-dir", help="override results_dir")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--no-wait", action="store_true", help="slurm: submit and exit (default: watch until done)")
    args = ap.parse_args(argv)
    try:
        cfg = load_sweep(args.sweep)
        if args.executor:
            cfg.executor.kind = args.executor
        if args.results_dir:
            cfg.results_dir = args.results_dir
        p = plan(cfg, args.sweep)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.status or args.dry_run:
        from bench import slurm

        try:
            print(slurm.dry_run(p) if args.dry_run else slurm.status_table(p))
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except RuntimeError as e:  # squeue / sacct unreachable
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    t0 = time.perf_counter()
    kind = cfg.executor.kind
    if kind == "slurm":
        from bench import slurm

        try:
            failures = slurm.execute(p, progress=not args.no_progress, wait=not args.no_wait)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    else:
        failures = execute_local(p, kind, progress=not args.no_progress)
    for f in failures:
        print(f"failed: {f}", file=sys.stderr)
    done = sum(s == "done" for _, _, s in _status_of(p))
    print(f"sweep {cfg.name}: {done}/{len(p.train_cells) + len(p.sample_cells)} cells done "
          f"in {time.perf_counter() - t0:.1f}s; store: {Path(cfg.results_dir) / 'store'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
