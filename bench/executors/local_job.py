"""``python -m bench.executors.local_job FOLDER``: one job of the local executor.

Runs :func:`bench.cells.run_train_then_samples` on what ``FOLDER/job.pkl`` holds (train cell,
sample cells, threads) and writes ``FOLDER/result.json`` (``ok``; else ``error``: one line, and
``busy`` when another process owns the model, ``stopped`` when SIGTERM stopped training).
Exit status 0 when ok, 1 otherwise.
"""

from __future__ import annotations

import pickle
import sys
import traceback
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    folder = Path((sys.argv[1:] if argv is None else argv)[0])
    tc, cells, threads = pickle.loads((folder / "job.pkl").read_bytes())

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from bench.atomic import write_json_atomic
    from bench.cells import run_train_then_samples
    from bench.locks import CellBusy

    try:
        result = {"ok": True, "samples": run_train_then_samples(tc, cells, threads, progress=False)}
    except CellBusy as e:
        result = {"ok": False, "busy": True, "error": str(e)}
    except SIGTERMException:
        result = {
            "ok": False,
            "stopped": True,
            "error": "stopped by SIGTERM; training saved ckpt/last.ckpt, a re-run resumes there",
        }
    except BaseException as e:  # noqa: BLE001 - the job reports every failure as one line
        traceback.print_exc()
        lines = str(e).strip().splitlines()
        result = {
            "ok": False,
            "error": f"{type(e).__name__}: {lines[-1]}" if lines else type(e).__name__,
        }
    write_json_atomic(result, folder / "result.json")
    if not result["ok"]:
        print(f"sflm: {tc.label()}: {result['error']}", file=sys.stderr, flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
