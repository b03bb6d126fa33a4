"""What the benchmarks run and the cost prediction reads: the models of the paper's comparison and
the ``--scale`` presets (the catalogue lives with the prediction, :mod:`bench.cost.model`; the
benchmarks in :mod:`bench.perf` import it).

Catalogue data (labels, not dispatch): each model is a registered method with options
(:data:`MODELS`); :data:`VARIANTS` are opt-in rows of the same models, chosen with ``--models``
only: other options (:data:`OPTION_VARIANTS`, e.g. Duo's reference-chain NELBO beside its
default fused one) and speed paths switched on by an attribute (:data:`FAST_PATHS`);
:data:`REFERENCES` are the rows every other row's throughput is divided by (the ``vs_<label>``
columns, :func:`relative`). ``bare`` (the bare backbone) is every train table's first row.
"""

from __future__ import annotations

#: (label, method, options): the models of the paper's comparison
MODELS = [
    ("ar", "ar", {}),
    ("mdlm", "mdlm", {}),
    ("duo", "duo", {}),
    ("candi", "candi", {}),
    ("candi/pure-gaussian", "candi", {"pure_gaussian": True}),
    ("flm", "flm", {}),
    ("sflm", "sflm", {}),
    ("sflm/sarch", "sflm", {"backbone": "sarch"}),
]
#: the bare backbone's label (always measured by ``train``; accepted in ``--models``)
BARE = "bare"
#: opt-in rows of the same models with other options: (label, method, options)
OPTION_VARIANTS = [("duo/reference", "duo", {"nelbo": "reference"})]
#: the same models with a class-attribute path switched (equal up to float rounding); chosen with
#: ``--models`` only: label -> (method, options, object, attribute, value). ``sflm/sarch-unfolded``:
#: the S-arch's logit-side scale, the default before the folded one
FAST_PATHS = {
    "sflm/sarch-unfolded": ("sflm", {"backbone": "sarch"}, "backbone", "fold_logit_scale", False),
}
VARIANTS = OPTION_VARIANTS + [
    (label, name, opts) for label, (name, opts, _, _, _) in FAST_PATHS.items()
]
#: the labels whose rows the others are compared with (``vs_ar``, ``vs_mdlm`` columns)
REFERENCES = ("ar", "mdlm")


def fast_path(label: str, method, backbone) -> None:
    """Set the attribute of a :data:`FAST_PATHS` label (nothing for the others)."""
    if label in FAST_PATHS:
        _, _, which, attr, value = FAST_PATHS[label]
        setattr(method if which == "method" else backbone, attr, value)


def relative(rows: list[dict], key: str) -> None:
    """Add ``vs_<ref>`` = row[key] / the :data:`REFERENCES` row's, for each reference present."""
    by = {r["model"]: r[key] for r in rows}
    for r in rows:
        for ref in REFERENCES:
            if ref in by:
                r[f"vs_{ref}"] = r[key] / by[ref]


#: ``--scale`` presets: (DiT size, |V|, L, batch, fraction of each row given as prompt). The GPU
#: scales are the paper's (Sudoku: tiny DiT, batch 256; TinyGSM / OWT: small DiT, per-GPU batch
#: 64 / 32); the ``-cpu`` ones keep |V| and shrink the network, L and batch to fit 2 cores.
SCALES: dict[str, dict] = {
    "sudoku": {"size": "tiny", "vocab": 12, "seq_len": 180, "batch": 256, "prompt_frac": 0.5},
    "tinygsm": {"size": "small", "vocab": 49_153, "seq_len": 512, "batch": 64, "prompt_frac": 0.5},
    "owt": {"size": "small", "vocab": 50_258, "seq_len": 1024, "batch": 32, "prompt_frac": 0.0},
    "sudoku-cpu": {
        "size": "cpu-small",
        "vocab": 12,
        "seq_len": 180,
        "batch": 32,
        "prompt_frac": 0.5,
    },
    "tinygsm-cpu": {
        "size": "cpu-small",
        "vocab": 49_153,
        "seq_len": 256,
        "batch": 4,
        "prompt_frac": 0.5,
    },
    "owt-cpu": {
        "size": "cpu-small",
        "vocab": 50_258,
        "seq_len": 512,
        "batch": 2,
        "prompt_frac": 0.0,
    },
}
#: the shape without ``--scale``: 9x9 Sudoku on the cpu-small DiT
LEGACY = {"size": "cpu-small", "vocab": 12, "seq_len": 180, "batch": 32, "prompt_frac": 0.5}
