"""S-FLM's decodings (docs/methods/sflm.md): one :class:`SphereDecoding` per name in
:data:`DECODINGS`, naming the velocity :func:`sflm.sampler.sample_sphere_flow` steps with (a key of
``sflm.sampler.VELOCITIES``) and its k; :func:`sflm.sampler.parse_decoding` reads a name through
this table (``top<k>``, any k >= 1, parses to ``topk`` with that k).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.decoding import Decoding


@dataclass(frozen=True, kw_only=True)
class SphereDecoding(Decoding):
    """An S-FLM decoding: geodesic Euler steps with the velocity ``velocity`` (a key of
    ``sflm.sampler.VELOCITIES``; ``k``: top-k's k, None: the options' ``top_k``), the last call
    decoding by ``final_decode``."""

    velocity: str
    k: int | None = 0


_STEP = "nfe - 1 geodesic Euler moves, then one decoding call"

#: S-FLM's decodings, the first the default; ``top<k>`` (any k) parses to ``topk`` with that k
DECODINGS: dict[str, SphereDecoding] = {
    "exact": SphereDecoding(
        velocity="exact",
        summary="v = sum_v p_v log_z(e_hat_v), p = softmax(logits / T); z <- exp_z(s_n v), "
        "s_n = (alpha_{n+1} - alpha_n) / (1 - alpha_n)",
        reference="paper eq. flm-marginal-vf and eq. step-size (Alg. Sampling); reference "
        "`samplers.py::SFMSampler` exact velocity",
        calls_note=_STEP,
        cost="two (N x d x V) products against the table, the softmax over V (float64 by default)",
        options=("velocity_dtype", "final_decode"),
    ),
    "stochastic": SphereDecoding(
        velocity="stochastic",
        summary="v = log_z(e_hat_x), x ~ softmax(logits / T) (one float64 inverse-CDF draw); "
        "the same step",
        reference="paper Alg. Stochastic sampling; reference `SFMSampler` stochastic velocity",
        calls_note=_STEP,
        cost="exp(l - max) over V, a float64 cumulative sum, one uniform, one log map",
        options=("final_decode",),
    ),
    "top1": SphereDecoding(
        velocity="topk",
        k=1,
        temperature_free=True,
        summary="v = log_z(e_hat_argmax) (top-k velocity, k = 1); T-free with the argmax final "
        "decode",
        reference="paper par. Top-k velocity; reference `SFMSampler._select_topk`",
        calls_note=_STEP,
        cost="an argmax over V and one log map",
        options=("final_decode",),
    ),
    "topk": SphereDecoding(
        velocity="topk",
        k=None,
        summary="the exact velocity over the k largest logits, renormalised by a softmax over "
        "them (k = `top_k`; `top<k>` names any k; k >= 10 ~ exact)",
        reference="paper appendix top-k velocity; reference `SFMSampler._select_topk`",
        calls_note=_STEP,
        cost="a top-k over V and, by `topk_path`: k d <= 4 V a gather of (N, k, d); else the "
        "exact velocity on a scattered (N, V) distribution",
        options=("top_k", "final_decode"),
    ),
}
