"""``python -m bench.sweep SWEEP.yaml [--set KEY=VALUE ...] [--executor local|slurm|debug] \
[--status] [--dry-run] [--cancel] [--rehearse [--memory-gb GB]]``

Plans a sweep into content-addressed cells (:mod:`bench.plan`) and runs what is not yet in the
results store (:mod:`bench.cells`) on the chosen executor (:mod:`bench.executors`):

- a **train cell** = task x backbone x train recipe x method (+ options) x training subsets;
  its run folder ``<results>/runs/<method>-<variant>-<hash>`` holds resumable checkpoints and
  the final EMA weights;
- a **sample cell** = train cell x evaluation subset (Sudoku difficulty) x nfe x temperature x
  decoding (+ sample size / seed); it samples the validation problems at batch granularity
  (resumable), scores them and writes one store row per metric.

Cells already in the store are skipped, so re-running a finished sweep does nothing.
Bad input (missing file, malformed YAML, unknown key / method, out-of-range values) exits 2
with one line naming the problem, before anything is written. ``--status`` / ``--dry-run``
print :mod:`bench.status`'s table / plan and submit nothing. ``--rehearse`` runs every distinct
model at its real size with random weights through one step of each kind of work, here, and
prints time and peak memory extrapolated to the sweep's batches (:mod:`bench.rehearse`).

``--set KEY=VALUE`` (repeatable; :func:`bench.config.apply_overrides`) changes the file's
values without editing it: ``--set sample.nfe=[8,16] --set methods[2].options.top_k=1``. They
are checked and hashed as if written in the file, so every command of a sweep (run, --status,
--dry-run, --cancel) needs the same ``--set`` items to see the same cells.

Interrupts: Ctrl-C (SIGINT) or SIGTERM on the driver prints one line saying which jobs keep
running and how to re-attach or stop them, and exits 130 / 143 without a traceback. Local
jobs run in their own session and SLURM jobs on the cluster, so they keep running; a re-run
of the same command attaches to them (it never starts a cell twice: :mod:`bench.locks`).
With ``--stop-on-interrupt`` the driver stops the jobs it started instead (SIGTERM; training
saves its checkpoint) and says so. ``--cancel`` stops a sweep's running jobs, whichever
executor started them (local processes of this host: SIGTERM; SLURM jobs: scancel).
"""

from __future__ import annotations

import argparse
import gc
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.config import load_sweep
from bench.usage import UsageError, add_results_dir, add_sets, usage_exit

# The rest is imported where it is used: ``--help`` and ``--list`` need none of it, ``--status``
# and ``--dry-run`` need the plan and the status model but no executor (``bench.executors.local``
# imports the trainer, Lightning; ``bench.executors.slurm`` submitit).


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.split("\n")[0])
    ap.add_argument("sweep", nargs="?", help="sweep YAML file")
    add_sets(
        ap,
        "override a value of the file, as if written in it (repeatable; VALUE is YAML), "
        "e.g. --set sample.nfe=[8,16] --set methods[2].options.top_k=1",
    )
    ap.add_argument(
        "--list",
        action="store_true",
        help="list the registered methods, tasks and report plug-ins (with packages) and exit",
    )
    ap.add_argument(
        "--executor", choices=("local", "slurm", "debug"), help="override executor.kind"
    )
    ap.add_argument("--status", action="store_true", help="print the state of every cell and exit")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, submit nothing")
    add_results_dir(ap, "override results_dir")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument(
        "--no-wait", action="store_true", help="slurm: submit and exit (default: watch until done)"
    )
    ap.add_argument(
        "--cancel",
        action="store_true",
        help="stop the sweep's running jobs (any executor) and exit",
    )
    ap.add_argument(
        "--stop-on-interrupt",
        action="store_true",
        help="on Ctrl-C / SIGTERM stop the jobs this driver started (default: they keep running)",
    )
    ap.add_argument(
        "--rehearse",
        action="store_true",
        help="build every distinct model at its real size with random weights, run one training "
        "step, one sampling call and the scorer at batch 1 and 2 here, print time and peak "
        "memory extrapolated to the sweep's batches; writes nothing into the results folder",
    )
    ap.add_argument(
        "--memory-gb",
        type=float,
        metavar="GB",
        help="--rehearse: stop (exit 1) when a peak extrapolated to the sweep's batch is above "
        "this device memory (default: compare with 40 / 80 / 141 GB cards, stop on none)",
    )
    ap.add_argument(
        "--first-decoding",
        action="store_true",
        help="--rehearse: sample only each model's first decoding (default: every decoding, "
        "whose memory can differ)",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if (args.memory_gb is not None or args.first_decoding) and not args.rehearse:
        ap.error("--memory-gb and --first-decoding need --rehearse")
    if args.list:
        from bench import registry

        try:
            print(registry.listing())
        except UsageError as e:  # a plug-in that fails to import, a name clash
            return usage_exit(e)
        return 0
    if not args.sweep:
        ap.error("the sweep file is required (or --list)")
    from bench import status
    from bench.plan import plan

    try:
        cfg = load_sweep(args.sweep, args.sets)
        from bench.cost.table import check_device

        check_device(cfg, args.sweep)
        if args.executor:
            cfg.executor.kind = args.executor
        if args.results_dir:
            cfg.results_dir = args.results_dir
        # a dry run / status / rehearsal may plan a released checkpoint offline (catalogue, no
        # sha256; a rehearsal imports a random file of its format instead)
        p = plan(cfg, args.sweep, offline_ok=args.dry_run or args.status or args.rehearse)
    except UsageError as e:  # ConfigError included
        return usage_exit(e)
    if args.rehearse:
        from bench.rehearse import rehearse

        return rehearse(p, args.sweep, memory_gb=args.memory_gb, first_decoding=args.first_decoding)
    if args.status or args.dry_run:
        try:
            print(status.dry_run(p) if args.dry_run else status.status_table(p))
        except UsageError as e:
            return usage_exit(e)
        except RuntimeError as e:  # squeue / sacct unreachable
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    if args.cancel:
        return cancel(p)
    return _run(p, cfg, args)


def _run(p, cfg, args) -> int:
    """Run plan ``p`` of sweep ``cfg`` with its executor; the exit status."""
    t0 = time.perf_counter()
    from bench.results import Store

    # cells a bench.eval computed first become this sweep's own (reported with it)
    Store(cfg.results_dir).adopt(c.id for c in p.sample_cells)
    kind = cfg.executor.kind
    started: list = []  # local jobs this driver starts
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        if kind == "slurm":
            from bench.executors import slurm

            try:
                from bench.cost.forecast import Forecast

                failures = slurm.execute(
                    p, progress=not args.no_progress, wait=not args.no_wait, forecast=Forecast()
                )
            except UsageError as e:  # incl. no SLURM here: nothing submitted, nothing written
                via = "--executor slurm" if args.executor else "executor.kind: slurm"
                return usage_exit(f"{args.sweep}: {via}: {e}")
        else:
            from bench.executors import local

            failures = local.execute(p, kind, progress=not args.no_progress, started=started)
        for f in failures:
            print(f"failed: {f}", file=sys.stderr)
        from bench.executors.cell_status import count_done

        done = count_done(p)
    except (KeyboardInterrupt, Terminated, SystemExit) as e:
        if type(e) is SystemExit:
            raise  # a plain exit, not Lightning's SIGTERMException (debug executor, in-process)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # one line, even if Ctrl-C is pressed again
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signum = signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM
        print(
            _interrupted(p, kind, started, args.stop_on_interrupt, signum),
            file=sys.stderr,
            flush=True,
        )
        return 128 + signum
    finally:
        if signal.getsignal(signal.SIGTERM) is _raise_terminated:
            signal.signal(signal.SIGTERM, previous)
    print(
        f"sweep {cfg.name}: {done}/{len(p.train_cells) + len(p.sample_cells)} cells done "
        f"in {time.perf_counter() - t0:.1f}s; store: {Path(cfg.results_dir) / 'store'}"
    )
    return 1 if failures else 0


class Terminated(BaseException):
    """SIGTERM reached the driver (raised by its handler, as KeyboardInterrupt is for SIGINT)."""


def _raise_terminated(signum, frame):
    raise Terminated()


def _interrupted(p, kind: str, started: list, stop: bool, signum: int) -> str:
    """The one line an interrupted driver prints (with ``stop``: after stopping its jobs)."""
    from bench.executors import local, slurm_cluster

    name = f"sweep {p.cfg.name}: interrupted ({signal.Signals(signum).name})"
    if kind == "debug":
        return (
            f"{name}; the debug executor ran the job in this process, so it stopped "
            "(checkpoints are kept); re-run the same command to resume"
        )
    if kind == "slurm":
        jobs = _live_slurm_jobs(p)
        if stop and jobs:
            slurm_cluster.scancel(jobs)
            return (
                f"{name}; cancelled SLURM job(s) {', '.join(jobs)}; "
                "re-run the same command to resume"
            )
        if jobs is None:
            return (
                f"{name}; submitted SLURM jobs keep running: re-run the same command to keep "
                "watching, --status to see them, --cancel to stop them"
            )
        return (
            f"{name}; {len(jobs)} SLURM job(s) keep running or queued "
            f"({', '.join(jobs) or '-'}): re-run the same command to keep watching, "
            "--status to see them, --cancel to stop them"
        )
    mine = {j.pid for j in started}
    live = [(tc, o) for tc, o in local.live_jobs(p) if not stop or o.get("pid") in mine]
    if stop:
        outcome = local.stop(live)
        for job in started:  # reap them: they are this process's children
            if job.proc is not None:
                try:
                    job.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        stopped = [str(o.get("pid")) for _, o, what in outcome if what in ("stopped", "gone")]
        left = [str(o.get("pid")) for _, o, what in outcome if what == "still running"]
        return (
            f"{name}; stopped the {len(stopped)} local job(s) it started "
            f"(pids {', '.join(stopped) or '-'}"
            f"{'; still stopping: ' + ', '.join(left) if left else ''}); "
            "training saved its checkpoint, re-run the same command to resume"
        )
    if not live:
        return f"{name}; no job is running; re-run the same command to resume"
    pids = ", ".join(str(o.get("pid")) for _, o in live)
    return (
        f"{name}; {len(live)} local job(s) keep running (pids {pids}): re-run the same command to "
        "re-attach, --status to see them, --cancel to stop them"
    )


def _live_slurm_jobs(p) -> list[str] | None:
    """The sweep's queued or running SLURM jobs (None when SLURM cannot be asked)."""
    from bench.executors.cell_status import statuses

    try:
        sts = statuses(p)
    except RuntimeError:
        return None
    return sorted({s.job for s in sts if s.job and s.state in ("running", "pending")})


def cancel(p) -> int:
    """``--cancel``: stop every running job of the sweep, one line each; exit 1 if one could
    not be stopped (another host's process, or it did not stop within a minute)."""
    from bench import locks
    from bench.executors import local, slurm_cluster
    from bench.executors.state import load_state

    name = f"sweep {p.cfg.name}"
    n = bad = 0
    jobs = (_live_slurm_jobs(p) or []) if load_state(p.cfg)["jobs"] else []
    if jobs:
        slurm_cluster.scancel(jobs)
        n += len(jobs)
        print(f"{name}: cancelled SLURM job(s) {', '.join(jobs)}")
    for tc, owner, what in local.stop(local.live_jobs(p)):
        if what == "slurm":
            continue  # a SLURM job's lock: scancel above stops it (when it is this sweep's)
        ok = what in ("stopped", "gone")
        n += ok
        bad += not ok
        print(f"{name}: {tc.label()}: {what} ({locks.describe(owner)})")
    print(f"{name}: stopped {n} job(s)" if n or bad else f"{name}: nothing is running")
    return 1 if bad else 0


def main_and_exit(argv: list[str] | None = None) -> None:
    """``python -m bench.sweep``: :func:`main`, then exit with its status."""
    code = main(argv)
    # The process ends here: exempt what is alive now (modules: torch's, when loaded) from the
    # garbage collector, whose passes over them at interpreter exit are a part of a short
    # command's wall time (docs/measurements/startup.md).
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    main_and_exit()
