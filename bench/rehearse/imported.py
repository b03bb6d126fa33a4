"""The import path of an import cell (``checkpoint:``): a random model of the file's facts
exported in the reference format, imported as the sweep's import job does, loaded as a sampling
job does (:func:`export_import_load`)."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from pathlib import Path

import torch

from bench.cell_model import method_backbone
from bench.config import canonical
from bench.plan import TrainCell
from bench.rehearse.measuring import Phase
from bench.rehearse.models import Model


@contextlib.contextmanager
def _sha_memo(folder: Path):
    """The checkpoint importer remembers each file's sha256 in the data cache; the temp files'
    go to ``folder`` instead."""
    from bench.checkpoints import source

    before = source._sha_cache
    source._sha_cache = lambda: folder / "sha256.json"
    try:
        yield
    finally:
        source._sha_cache = before


def _export_random(tc: TrainCell, task, out: Path) -> None:
    """A random model with ``tc``'s facts, written to ``out`` in the reference format without our
    own record (:func:`bench.checkpoints.export.export_model`), as the released files are; for
    an authors' Hugging Face-format repository, a folder in that format
    (:func:`bench.checkpoints.hf.write_folder`)."""
    from bench.checkpoints import hf
    from bench.checkpoints.export import export_model

    torch.manual_seed(0)
    method, backbone = method_backbone(tc, task)
    if hf.is_hub_source(tc.source["checkpoint"]):  # an authors' Hugging Face-format repository
        hf.write_folder(backbone, hf.model_type_of(tc.method), out, model_length=task.seq_len)
        return
    facts = {
        "method": tc.method,
        "options": canonical(dataclasses.asdict(method.opts)),
        "backbone": tc.backbone,
        "vocab_size": getattr(tc, "vocab_size", None) or task.vocab_size,
        "seq_len": task.seq_len,
    }
    export_model(method, backbone, facts, out, ours=False)


def export_import_load(r, m: Model, out: list[Phase]):
    """Export a random model of the file's facts, import it as the sweep's import job does,
    load it as a sampling job does."""
    from bench.cells import run_train
    from bench.weights import load_weights

    tc, label, task = m.train, m.label(), r.task
    ckpt = r.tmp / f"{tc.method}-{tc.variant}.ckpt"
    ph = Phase(label, "export", tc.label(), note="a random file of the checkpoint's format")
    out.append(ph)
    r.run_phase(ph, lambda: _export_random(tc, task, ckpt), device="cpu")
    cell = dataclasses.replace(
        tc,
        results_dir=str(r.tmp / "results"),
        source={**tc.source, "checkpoint": str(ckpt), "sha256": None},
    )
    ph = Phase(label, "import", tc.label(), note="the import job (host memory)")
    out.append(ph)
    with _sha_memo(r.tmp):
        r.run_phase(ph, lambda: run_train(cell, progress=False), device="cpu")
    shutil.rmtree(ckpt) if ckpt.is_dir() else ckpt.unlink(missing_ok=True)
    ph = Phase(label, "load", tc.label(), note="weights.pt as a sampling job loads it")
    out.append(ph)

    def load():
        method, backbone = method_backbone(cell, task)
        load_weights(method, backbone, cell.weights)
        return method.to(r.device), backbone.to(r.device)

    method, backbone = r.run_phase(ph, load)
    shutil.rmtree(cell.run_dir, ignore_errors=True)
    return method, backbone
