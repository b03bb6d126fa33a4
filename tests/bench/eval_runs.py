"""A tiny trained sweep for the ``bench.eval`` / ``bench.generate`` tests: sort-4 (8 positions,
vocabulary 10), an MDLM and an AR cpu-mini model trained 20 steps by ``python -m bench.sweep``
(debug executor, in this process). Trained once per test session into a pristine results folder;
each test works on its own copy (:func:`copy_runs`), so no test sees another's rows."""

from __future__ import annotations

import shutil
from pathlib import Path

SWEEP = """
name: tiny
results_dir: {rd}
task: {{name: sort, n_train: 256, options: {{n_digits: 4}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 20, batch_size: 16, warmup_steps: 5, ema: 0.5, val_every: 0}}
sample: {{nfe: [2], temperature: [1.0], n_samples: 16, batch_size: 16}}
executor: {{kind: debug}}
methods:
  - {{method: mdlm}}
  - {{method: ar}}
"""

#: a sweep with the same models that plans what ``bench.eval RUN --nfe 2 4 --limit 8`` plans
#: (``sample.n_samples`` = the limit; the sweep name is not part of any id)
SAME_AS_EVAL = (
    SWEEP.replace("nfe: [2]", "nfe: [2, 4]")
    .replace("n_samples: 16", "n_samples: 8")
    .replace("name: tiny", "name: other")
)

_PRISTINE: dict[str, Path] = {}


def pristine_results(tmp_path_factory) -> Path:
    """The trained results folder (trained on first use; never written to afterwards)."""
    if "rd" not in _PRISTINE:
        from bench import sweep

        base = tmp_path_factory.mktemp("eval-runs")
        rd = base / "results"
        path = base / "tiny.yaml"
        path.write_text(SWEEP.format(rd=rd))
        assert sweep.main([str(path), "--no-progress"]) == 0
        _PRISTINE["rd"] = rd
    return _PRISTINE["rd"]


def copy_runs(tmp_path_factory, dest: Path) -> dict[str, Path]:
    """A copy of the trained results folder at ``dest``; returns {method: its run folder}."""
    shutil.copytree(pristine_results(tmp_path_factory), dest)
    runs = {p.name.split("-")[0]: p for p in (dest / "runs").iterdir() if p.is_dir()}
    assert set(runs) == {"mdlm", "ar"}, runs
    return runs


def snapshot(folder: Path) -> dict[Path, int]:
    """Every file under ``folder`` with its mtime (empty when the folder does not exist)."""
    if not folder.exists():
        return {}
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
