"""FLM's decoding (docs/methods/flm.md): the Euler sampler as an object in :data:`DECODINGS`, which
:class:`FLM <baselines.flm.FLM>` looks its decoding up in; the formulas and their sources:
baselines/flm.py's docstring, ``Sampler``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bench.decoding import Decoding


@dataclass(frozen=True, kw_only=True)
class Euler(Decoding):
    """`FLM.generate_samples`: z_0 ~ N(0, I_V), s_k = linspace(0, 1, nfe + 1), gamma_k = a2g(s_k);
    nfe - 1 Euler moves in gamma, then a call that only decodes (argmax)."""

    def run(self, m, backbone, prompt, prompt_mask, nfe, temperature, float64, generator):
        if nfe < 1:
            raise ValueError(f"flm: nfe must be >= 1, got {nfe}")
        n, L = prompt.shape
        dev = prompt.device
        dtype = torch.float64 if float64 else torch.float32
        clean = F.one_hot(prompt[prompt_mask], m.vocab_size).to(dtype)  # (P, V): prompt rows only
        z = torch.randn((n, L, m.vocab_size), generator=generator, device=dev, dtype=dtype)
        z[prompt_mask] = clean
        s = torch.linspace(0.0, 1.0, nfe + 1, device=dev, dtype=torch.float64)
        gamma = m.table.a2g(s)
        for k in range(nfe):
            logits = m._logits(backbone, z, s[k].expand(n), count=True, temperature=temperature)
            if k == nfe - 1:  # the last call only decodes
                x = logits.argmax(-1)
                break
            x_hat = torch.softmax(logits.to(dtype), dim=-1)
            z = m.euler_step(
                z, x_hat, gamma[k].expand(n), gamma[k + 1].expand(n), m.opts.velocity_eps
            )
            z[prompt_mask] = clean  # prompt positions stay at their one-hot vertex
        return torch.where(prompt_mask, prompt, x)


#: FLM's decodings (one)
DECODINGS: dict[str, Decoding] = {
    "euler": Euler(
        summary="nfe - 1 Euler moves in gamma, z <- z + (gamma_{k+1} - gamma_k) (x_hat - z) / "
        "(1 - gamma_k + velocity_eps), x_hat = softmax(logits / T); the last call decodes: argmax",
        reference="FLM (Lee et al. 2026); david3684/flm `algo.py::FLM.generate_samples`, s-flm "
        "`samplers.py::FLMEulerSampler` / `flm_euler_step`",
        calls_note="nfe - 1 Euler moves, then one decoding call",
        cost="the softmax over (B, L, V) and the in-place Euler move of the (B, L, V) state",
        options=("velocity_eps", "output_cap", "cap_order"),
    ),
}
