"""Duo's checkpoint formats, as :class:`bench.reference_format.ReferenceFormat` declares them: the
reference harness's files (s-flm) and the authors' Hugging Face repositories (s-sahoo/duo,
s-sahoo/duo-distilled); docs/checkpoints.md."""

from __future__ import annotations

from bench.reference_format import HubFormat, ReferenceFamily, ReferenceFormat


class DuoReference(ReferenceFormat):
    """Duo files (s-flm ``algo.DUO_BASE`` on the ``DIT``): no mask class; the reference's [PAD]
    is a class of the model and of its uniform prior (OWT: 50,258 classes for GPT-2's 50,257
    ids); ``time_conditioning`` and ``noise.eps`` from the config."""

    families = (
        ReferenceFamily(
            "duo",
            model_type="dit",
            algo="duo_base",
            algo_names=("duo", "duo_base", "udlm"),
            requires=("backbone.vocab_embed.embedding", "backbone.sigma_map.mlp.0.weight"),
        ),
    )
    pad_is_class = True
    #: s-sahoo/duo and s-sahoo/duo-distilled (DUOConfig: model_type "duo"; the HF DIT's keys
    #: under ``backbone.``; no time_conditioning field: duo configs/algo/duo_base.yaml says
    #: True, and the harness samples both with algo=duo_base; ``causal: true`` would be an AR
    #: model; ``var_min`` is a training setting)
    hub_formats = (
        HubFormat(
            "duo",
            family="duo",
            classes=(("AutoConfig", "DUOConfig"), ("AutoModelForMaskedLM", "DUO")),
            fixed=(("causal", False),),
            ignored=("var_min",),
            algo=(("name", "duo_base"), ("time_conditioning", True)),
        ),
    )

    def options_from(self, ref, family):
        tc = bool(ref.num("algo.time_conditioning", True))
        return {"time_conditioning": tc, "eps": float(ref.num("noise.eps", 1e-3))}, {}, []

    def export_config(self, family, method) -> dict:
        o = method.opts
        return {
            "algo": {
                "diffusion_type": "uniform",
                "time_conditioning": o.time_conditioning,
                "loss_type": o.loss_type,
            },
            "noise": {"eps": o.eps},
        }
