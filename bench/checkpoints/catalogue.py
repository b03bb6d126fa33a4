"""The S-FLM paper's released checkpoints (Hugging Face ``jdeschena/s-flm``): what each file is,
so that a sweep naming one plans offline (``--dry-run``) before the 2.5 GB file is fetched.

Facts from the reference harness's training and sample scripts (FrankCCCCC/s-flm @ 18d586f,
``scripts/{train,sample}/{tinygsm,owt}/``) and the FLM repository (david3684/flm); the
importer checks them against the file itself when it reads it (a file that disagrees is an
error), so nothing here overrides what a file says. docs/checkpoints.md is the reader's table.
"""

from __future__ import annotations

from bench.checkpoints.mapping import Spec
from bench.checkpoints.source import RELEASE_REPO

# the released "small" model: 12 blocks, width 768, 12 heads, conditioning 128, dropout 0.1
_SMALL = {"size": "small", "n_blocks": 12, "d_model": 768, "n_heads": 12, "cond_dim": 128,
          "dropout": 0.1}  # fmt: skip
_EPS = 1e-3
_TINYGSM_V, _OWT_V = 49_153, 50_257  # SmolLM + [PAD]; GPT-2
_CANDI = {"pure_gaussian": False, "mixed_coeff": 0.5, "min_percentile": 0.01,
          "max_percentile": 0.25, "sigma_min": 0.01, "sigma_max": 2.0, "eps": _EPS}  # fmt: skip
_SFM = {"eps": _EPS, "schedule": "linear", "input_scale": "unit", "renorm": False}
_ADAPTIVE = {"alpha_max": 0.121, "adaptive": False}


def _spec(family, method, options, vocab, seq_len, choices=None, notes=()) -> Spec:
    return Spec(family, method, dict(options), dict(choices or {}), dict(_SMALL), vocab, seq_len,
                list(notes))  # fmt: skip


#: path inside the repository -> (task, Spec)
RELEASED: dict[str, tuple[str, Spec]] = {
    "tinygsm/ar.ckpt": ("gsm8k", _spec("ar", "ar", {}, _TINYGSM_V, 512)),
    "tinygsm/mdlm.ckpt": (
        "gsm8k",
        _spec("mdlm", "mdlm", {"time_conditioning": False, "eps": _EPS}, _TINYGSM_V, 512),
    ),
    "tinygsm/duo.ckpt": (
        "gsm8k",
        _spec("duo", "duo", {"time_conditioning": True, "eps": _EPS}, _TINYGSM_V, 512),
    ),
    "tinygsm/candi/lr3e-4.ckpt": ("gsm8k", _spec("candi", "candi", _CANDI, _TINYGSM_V, 512)),
    "tinygsm/candi/lr1e-3.ckpt": ("gsm8k", _spec("candi", "candi", _CANDI, _TINYGSM_V, 512)),
    "tinygsm/flm/default.ckpt": (
        "gsm8k",
        _spec("flm", "flm", {"output_cap": 0.0, "attn_softcap": 0.0}, _TINYGSM_V, 512),
    ),
    "tinygsm/flm/caps.ckpt": (
        "gsm8k",
        _spec(
            "flm",
            "flm",
            {"output_cap": 30.0, "attn_softcap": 50.0, "cap_order": "temperature_then_cap"},
            _TINYGSM_V,
            512,
        ),
    ),
    "tinygsm/sfm/sphere_dit_truncated_fixed_no_renorm.ckpt": (
        "gsm8k",
        _spec(
            "sfm_dit",
            "sflm",
            {
                "backbone": "dit",
                **_SFM,
                "alpha_trunc_inverted": 0.869,
                "time_convention": "inverted",
            },
            _TINYGSM_V,
            512,
        ),
    ),  # fmt: skip
    "tinygsm/sfm/sphere_dit_truncated_adaptive_no_renorm.ckpt": (
        "gsm8k",
        _spec(
            "sfm_dit",
            "sflm",
            {"backbone": "dit", **_SFM, **_ADAPTIVE},
            _TINYGSM_V,
            512,
            {"adaptive": [False, True]},
        ),
    ),  # fmt: skip
    "tinygsm/sfm/sphere_arch_truncated_adaptive_no_renorm.ckpt": (
        "gsm8k",
        _spec(
            "sfm_arch",
            "sflm",
            {"backbone": "sarch", **_SFM, **_ADAPTIVE},
            _TINYGSM_V,
            512,
            {"adaptive": [False, True]},
        ),
    ),  # fmt: skip
    "owt/ar.ckpt": ("owt", _spec("ar", "ar", {}, _OWT_V, 1024)),
    "owt/mdlm.ckpt": (
        "owt",
        _spec("mdlm", "mdlm", {"time_conditioning": False, "eps": _EPS}, _OWT_V, 1024),
    ),
    # Duo / FLM / S-FLM on OWT: 50,258 classes ([PAD] = 50257 is a class)
    "owt/duo.ckpt": (
        "owt",
        _spec("duo", "duo", {"time_conditioning": True, "eps": _EPS}, _OWT_V + 1, 1024),
    ),
    "owt/flm.ckpt": (
        "owt",
        _spec(
            "flm",
            "flm",
            {"output_cap": 0.0, "attn_softcap": 0.0},
            _OWT_V + 1,
            1024,
            {"attn_softcap": [0.0, 50.0]},
        ),
    ),  # fmt: skip
    # the reference's README says S-arch, its train and sample scripts the sphere-DiT: the file's
    # keys decide when it is read; planning offline assumes the scripts
    "owt/sfm.ckpt": (
        "owt",
        _spec(
            "sfm_dit",
            "sflm",
            {"backbone": "dit", **_SFM, **_ADAPTIVE},
            _OWT_V + 1,
            1024,
            {"adaptive": [False, True]},
        ),
    ),  # fmt: skip
}


#: the methods' own authors' Hugging Face-format repositories (bench.checkpoints.hf): the hub
#: config.json of kuleshov-group/mdlm-owt (50,258 rows = GPT-2 + mask, time_conditioning false);
#: s-sahoo/duo and duo-distilled: DUOConfig's defaults and the Duo harness's OWT setup (GPT-2 +
#: [PAD] = 50,258 classes, algo duo_base: time-conditioned), checked against the files when read
_HUB_NOTE = "planned from the catalogue: the file is not in the Hugging Face cache"
_DUO_HUB = (
    "owt",
    _spec("duo", "duo", {"time_conditioning": True, "eps": _EPS}, _OWT_V + 1, 1024,
          notes=[_HUB_NOTE]),
)  # fmt: skip
HUB: dict[str, tuple[str, Spec]] = {
    "kuleshov-group/mdlm-owt": (
        "owt",
        _spec(
            "mdlm",
            "mdlm",
            {"time_conditioning": False, "eps": _EPS},
            _OWT_V,
            1024,
            notes=[_HUB_NOTE],
        ),
    ),  # fmt: skip
    # Duo and its distilled few-step model: one architecture, one format
    "s-sahoo/duo": _DUO_HUB,
    "s-sahoo/duo-distilled": _DUO_HUB,
}


def released(src: str) -> tuple[str, Spec] | None:
    """The catalogue entry of ``hf://jdeschena/s-flm/<path>[@rev]`` or of one of the authors'
    repositories ``hf://<owner>/<repo>[@rev]`` (:data:`HUB`); None for other sources."""
    from bench.checkpoints import hf

    if hf.is_repo(src):
        return HUB.get(src[len("hf://") :].split("@", 1)[0].strip("/"))
    prefix = f"hf://{RELEASE_REPO}/"
    if not src.startswith(prefix):
        return None
    path = src[len(prefix) :].split("@", 1)[0]
    return RELEASED.get(path)
