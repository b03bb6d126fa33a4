"""``agreement``: float32 vs float64 exact-velocity sampling on trained models.

Each sweep sample cell of every ``--runs`` folder is re-run in both dtypes with the sweep's seeds
(:func:`bench.kinds.sample.batch_seed`), and the fraction of final tokens that agree is reported;
``matches_store`` compares the run in the dtype the sweep sampled in (``store_dtype``: float64,
or float32 where the method defaults to it at this |V|) with the ids the sweep stored. The runs must
be of a method whose class sets ``exact_velocity`` (S-FLM; :mod:`bench.perf.capabilities`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch

from bench import registry
from bench.config import ConfigError
from bench.perf import capabilities, common

HELP = "float32 vs float64 sampling of trained exact-velocity runs (--runs)"


def add_arguments(group) -> None:
    group.add_argument("--runs", nargs="+", default=[], help="agreement: trained S-FLM run folders")
    group.add_argument("--agree-decoding", default="exact", help="agreement: decoding to compare")
    group.add_argument(
        "--agree-max-cells", type=int, default=0, help="agreement: first N cells per run (0: all)"
    )


def agreement_cells(run_dir: Path, decoding: str = "exact", max_cells: int = 0):
    """(train cell, [sample cells]) of a trained run folder: the sweep's own sample cells
    (``samples/<id>.pt``) with the given decoding, sorted by id; ``max_cells`` > 0 keeps the
    first ones. Raises ConfigError naming the folder when it holds no such model or cell."""
    from bench.plan import SampleCell, TrainCell

    path = Path(run_dir) / "cell.json"
    if not path.is_file() or not (Path(run_dir) / "weights.pt").is_file():
        raise ConfigError(f"--runs {run_dir}: no cell.json / weights.pt (not a trained run)")
    tc = TrainCell(**json.loads(path.read_text()))
    tc = dataclasses.replace(tc, results_dir=str(Path(run_dir).parent.parent))
    cls = registry.METHODS.get(tc.method)
    if not capabilities.exact_velocity(cls):
        raise ConfigError(
            f"--runs {run_dir}: method {tc.method!r} has no exact-velocity sampler to compare "
            "in float32 and float64"
        )
    cells = []
    for f in sorted((Path(run_dir) / "samples").glob("*.pt")):
        c = torch.load(f, map_location="cpu", weights_only=False)["cell"]
        if c["decoding"] == decoding:
            c.pop("train", None)
            cells.append(SampleCell(train=tc, **c))
    if not cells:
        raise ConfigError(f"--runs {run_dir}: no sampled cell with decoding {decoding!r}")
    return tc, cells[:max_cells] if max_cells > 0 else cells


def token_agreement(sample, prompt, pmask, seed: int) -> dict:
    """Sample the same batch in float64 and float32 from one seed (``sample(prompt, pmask,
    float64, generator)`` -> ids) and count the positions whose final tokens agree."""

    def draw(f64):
        g = torch.Generator(device=prompt.device).manual_seed(seed)
        return sample(prompt, pmask, f64, g)

    a, b = draw(True), draw(False)
    same = a == b
    return {
        "positions": same.numel(),
        "agree": int(same.sum()),
        "generated": int((~pmask).sum()),
        "generated_agree": int((same & ~pmask).sum()),
        "float64_ids": a,
        "float32_ids": b,
    }


def run(model_list, args, device) -> list[dict]:
    """One row per sample cell of every ``--runs`` folder, then a row ``all`` pooling them."""
    if not args.runs:
        raise ConfigError("agreement: give the trained S-FLM run folders with --runs")
    runs = [
        (run_dir, *agreement_cells(Path(run_dir), args.agree_decoding, args.agree_max_cells))
        for run_dir in args.runs
    ]  # every folder checked before the (slow) imports below
    from bench.cell_model import cell_task, method_backbone
    from bench.weights import load_weights

    rows = []
    for run_dir, tc, cells in runs:
        task = cell_task(tc)
        method, backbone = method_backbone(tc, task)
        load_weights(method, backbone, tc.weights)
        backbone.to(device).eval()
        method.to(device)
        samplers: dict = {}
        for c in cells:
            rows.append(_cell_row(run_dir, tc, c, task, method, backbone, samplers, device))
    if rows:
        rows.append(_pooled(rows))
    return rows


def _cell_row(run_dir, tc, c, task, method, backbone, samplers: dict, device) -> dict:
    """Sample cell ``c`` of run ``tc`` again in float64 and float32, batch by batch with the
    sweep's seeds: its agreement row (and whether the sweep's dtype reproduces its store)."""
    from bench.kinds.sample import batch_seed, cell_sampler, sample_batch

    sampler = cell_sampler(method, c, task, device, samplers)
    by_size = bool(getattr(sampler, "float32_by_size", lambda: False)())
    store_f64 = c.float64 and not by_size  # the dtype the sweep sampled in
    common.as_asked(sampler)  # a true float64 run beside the float32 one at every |V|
    data = task.eval_data(c.subset, c.n_samples)
    stored = torch.load(tc.run_dir / "samples" / f"{c.id}.pt", weights_only=False)["ids"]
    tot = {"positions": 0, "agree": 0, "generated": 0, "generated_agree": 0}
    same_dtype = []
    t0 = time.perf_counter()
    for bi in range(0, len(data), c.batch_size):
        sl = slice(bi, bi + c.batch_size)

        def sample(prompt, pmask, f64_, gen, c=c, sampler=sampler, bb=backbone):
            return sample_batch(sampler, bb, c, prompt, pmask, gen, float64=f64_)

        res = token_agreement(
            sample,
            data.x[sl].to(device),
            data.clean_mask[sl].to(device),
            batch_seed(c, bi),  # the sweep's per-batch seed
        )
        ids = res.pop("float64_ids"), res.pop("float32_ids")
        same_dtype.append(ids[0] if store_f64 else ids[1])
        for k in tot:
            tot[k] += res[k]
    row = {
        "bench": "agreement",
        "run": Path(run_dir).name,
        "task": tc.task["name"],
        "vocab": method.vocab_size,
        "cell": c.id,
        "subset": c.subset,
        "nfe": c.nfe,
        "temperature": c.temperature,
        "decoding": c.decoding,
        "samples": len(data),
        **tot,
        "agreement": tot["agree"] / tot["positions"],
        "generated_agreement": tot["generated_agree"] / max(1, tot["generated"]),
        "store_dtype": "float64" if store_f64 else "float32",
        "matches_store": bool(torch.equal(torch.cat(same_dtype), stored)),
        "wall_s": time.perf_counter() - t0,
    }
    common.progress(
        f"agreement {row['run']} {c.label()}: "
        f"{row['generated_agreement']:.5f} of generated positions"
    )
    return row


def _pooled(rows: list[dict]) -> dict:
    """The row ``all``: the cells' positions pooled."""
    pos = sum(r["generated"] for r in rows)
    return {
        "bench": "agreement",
        "run": "all",
        "cell": f"{len(rows)} cells",
        "positions": sum(r["positions"] for r in rows),
        "agree": sum(r["agree"] for r in rows),
        "generated": pos,
        "generated_agree": sum(r["generated_agree"] for r in rows),
        "agreement": sum(r["agree"] for r in rows) / sum(r["positions"] for r in rows),
        "generated_agreement": sum(r["generated_agree"] for r in rows) / max(1, pos),
        "matches_store": all(r["matches_store"] for r in rows),
    }
