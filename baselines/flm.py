"""FLM: flow over one-hot vectors with Gaussian noise and a CE-trained denoiser.

Lee et al. 2026, "One-step language modeling via continuous denoising"; reference code
david3684/flm @ d89a02f `algo.py::FLMBase/FLM`, `utils.py::compute_alpha_exact/build_luts`,
and its port in the S-FLM harness (FrankCCCCC/s-flm @ 18d586f) `algo.py::FLMBase/FLM`,
`flm_utils.py`, `models/flm_dit.py`, `samplers.py::FLMEulerSampler / flm_euler_step`.

- State: z in R^{L x V}, dense over the vocabulary. Interpolant (clean at gamma = 1):
  z_gamma = (1 - gamma) eps + gamma onehot(x_0), eps ~ N(0, I_V) (`FLMBase.corrupt_continuous`).
  Clean positions (prompt / givens) hold onehot(x_0) at every gamma.
- Time: the model time s in [0, 1] (s = 0 noise, s = 1 clean; FLM's own convention) is the
  "discrete alpha" alpha(gamma) = V/(V-1) (P_gamma - 1/V) with
  P_gamma = P[argmax z_gamma = x_0] = E_{z ~ N(0,1)}[Phi(z + gamma/(1-gamma))^(V-1)],
  computed by Gauss-Hermite quadrature on a gamma grid and inverted for the actual V
  (:class:`AlphaGammaTable`); training draws s uniformly and sets gamma = a2g(s).
- Loss: cross-entropy of the clean token, no time weighting (`FLM.loss`).
- Network: the shared DiT fed z @ E (E = the DiT's ``embed.weight``; no softmax,
  `FLMEmbeddingLayer`) and the time input s itself (not -log alpha).
- Options of the reference, off by default: output-logit soft-cap c tanh(logits / c)
  (S-FLM ``algo.cap_value``, 30 in its "flm_caps" runs; ``cap_order`` says whether the sampling
  temperature divides before the cap, as the reference, or after it) and attention-logit soft-cap
  (upstream FLM hard-codes 50 through flash-attn ``softcap``; S-FLM ``model.softcap``),
  implemented here by a manual attention path on the shared blocks (:class:`SoftcapBlock`).

Sampler (`FLM.generate_samples`; the object in :mod:`baselines.flm_samplers`): z_0 ~ N(0, I_V);
grid s_k = linspace(0, 1, nfe + 1), gamma_k = a2g(s_k); for k < nfe - 1 one Euler step in gamma,
z <- z + (gamma_{k+1} - gamma_k) (x_hat - z) / (1 - gamma_k + 1e-5), x_hat = p_theta(. | z, s_k);
the last call (k = nfe - 1) only decodes: argmax p_theta. So ``nfe`` calls = nfe - 1 Euler moves
+ one decoding call, as in both reference repos.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from baselines.flm_samplers import DECODINGS
from bench.backbones.dit import Block, apply_rotary, build_dit
from bench.config import BackboneConfig, ConfigError
from bench.method import LOSS_CE, Batch, LossOutput, Method, token_mean
from bench.numerics import gaussian_argmax_probability, interp
from bench.options import Options, option
from bench.reference_format import ReferenceFamily, ReferenceFormat


@dataclass
class FLMOptions(Options):
    output_cap: float = option(
        0.0,
        ge=0.0,
        help="output-logit soft-cap c: logits <- c tanh(logits / c) "
        "(0 = off; S-FLM 'flm_caps' uses 30)",
    )
    attn_softcap: float = option(
        0.0, ge=0.0, help="attention-logit soft-cap (0 = off; upstream FLM uses 50)"
    )
    cap_order: str = option(
        "cap_then_temperature",
        choices=("cap_then_temperature", "temperature_then_cap"),
        omit_default=True,
        help="sampling with output_cap > 0 and T != 1: c tanh(l / c) / T (this harness's "
        "original order) or c tanh((l / T) / c) (the reference: s-flm TrainerBase.forward "
        "divides by T before FLMBase._process_model_output caps; the released 'flm_caps' file)",
    )
    lut_points: int = option(
        10_000, gt=1, help="gamma grid points of the alpha <-> gamma table (reference: 1e4)"
    )
    gh_nodes: int = option(100, gt=1, help="Gauss-Hermite nodes for P_gamma (reference: 100)")
    velocity_eps: float = option(
        1e-5, ge=0.0, help="the + eps in the velocity denominator 1 - gamma + eps (reference 1e-5)"
    )


# --------------------------------------------------------------------------- alpha <-> gamma


def p_correct(gamma: np.ndarray, vocab_size: int, gh_nodes: int = 100) -> np.ndarray:
    """P_gamma = P[argmax ((1-gamma) eps + gamma e_x) = x] for eps ~ N(0, I_V), by Gauss-Hermite:
    the true coordinate wins iff every other eps_j < eps_x + m, m = gamma / (1 - gamma), so
    P = E_z[Phi(z + m)^(V-1)] (FLM `utils.py::compute_alpha_exact`, sigma floor 1e-12)."""
    gamma = np.asarray(gamma, dtype=np.float64)
    return gaussian_argmax_probability(gamma / np.maximum(1.0 - gamma, 1e-12), vocab_size, gh_nodes)


def alpha_of_gamma(gamma: np.ndarray, vocab_size: int, gh_nodes: int = 100) -> np.ndarray:
    """alpha(gamma) = V/(V-1) (P_gamma - 1/V): 0 at gamma = 0 (P = 1/V), 1 at gamma = 1."""
    V = vocab_size
    return V / (V - 1.0) * (p_correct(gamma, V, gh_nodes) - 1.0 / V)


@functools.lru_cache(maxsize=16)
def _table(vocab_size: int, n_points: int, gh_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(gamma, alpha) on a uniform gamma grid, strictly increasing in both columns."""
    gamma = np.linspace(0.0, 1.0, n_points)
    alpha = np.clip(alpha_of_gamma(gamma, vocab_size, gh_nodes), 0.0, 1.0)
    alpha[0], alpha[-1] = (
        0.0,
        1.0,
    )  # exact endpoints (quadrature error ~1e-16 at V small, ~1e-4 at 5e4)
    alpha = np.maximum.accumulate(alpha)
    # strict monotonicity for the inverse (the reference adds 1e-10 (gamma - 1) for the same reason)
    alpha = (1 - 1e-10) * alpha + 1e-10 * gamma
    return gamma, alpha


class AlphaGammaTable:
    """alpha(gamma) tabulated for one vocabulary size and its exact piecewise-linear inverse.

    The reference (`build_luts`) fits scipy CubicSplines to the same 1e4-point table and
    evaluates them on the CPU; here both directions are the same piecewise-linear function
    on-device (monotone by construction, so a2g(g2a(g)) = g up to rounding), which differs
    from the spline by < 1e-6 at V = 5e4 and avoids a host sync per call.
    """

    def __init__(self, vocab_size: int, n_points: int = 10_000, gh_nodes: int = 100):
        if vocab_size < 2:
            raise ConfigError(f"flm: vocab_size must be >= 2, got {vocab_size}")
        self._args = (vocab_size, n_points, gh_nodes)
        self._dev: dict = {}

    @property
    def _np(self) -> tuple[np.ndarray, np.ndarray]:
        """(gamma, alpha), tabulated on first use: planning a sweep builds every method and never
        uses it (built eagerly, its quadrature would add to every planning, a re-run that computes
        nothing included; docs/measurements/quickstart.md)."""
        return _table(*self._args)

    def _on(self, device) -> tuple[Tensor, Tensor]:
        key = str(device)
        if key not in self._dev:
            self._dev[key] = tuple(
                torch.as_tensor(v, dtype=torch.float64, device=device) for v in self._np
            )
        return self._dev[key]

    def a2g(self, alpha: Tensor) -> Tensor:
        g, a = self._on(alpha.device)
        return interp(alpha.to(torch.float64), a, g)

    def g2a(self, gamma: Tensor) -> Tensor:
        g, a = self._on(gamma.device)
        return interp(gamma.to(torch.float64), g, a)


# --------------------------------------------------------------------------- attention soft-cap


class SoftcapBlock(Block):
    """The shared DiT block with a manual attention path whose logits are soft-capped,
    c tanh(q k^T / sqrt(d_h) / c) (upstream FLM `DDiTBlock.custom_sdpa` / flash-attn ``softcap``).
    Same parameters as :class:`Block`; FLM builds its DiT with
    ``block_cls=functools.partial(SoftcapBlock, attn_softcap=c)`` when attn_softcap > 0."""

    def __init__(self, *args, attn_softcap: float, **kwargs):
        super().__init__(*args, **kwargs)
        if not attn_softcap > 0:
            raise ValueError(f"SoftcapBlock: attn_softcap must be > 0, got {attn_softcap}")
        self.attn_softcap = float(attn_softcap)

    def attention(self, h: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        B, L, d = h.shape
        q, k, v = self.qkv(h).view(B, L, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        c = self.attn_softcap
        s = c * torch.tanh(s / c)
        # no dropout on the attention weights, as the shared Block (reference softcap path:
        # flash_attn_qkvpacked_func(qkv, 0.0, ..., softcap=c), s-flm models/dit.py)
        p = torch.softmax(s.float(), dim=-1).to(v.dtype)
        return self.attn_out((p @ v).transpose(1, 2).reshape(B, L, d))


# --------------------------------------------------------------------------- the method


def _cap(raw: Tensor, c: float) -> Tensor:
    """The output soft-cap c tanh(l / c) (S-FLM ``algo.cap_value``); c = 0: off."""
    return c * torch.tanh(raw / c) if c > 0 else raw


def _temper(raw: Tensor, temperature: float) -> Tensor:
    return raw / temperature if temperature != 1.0 else raw


#: cap_order -> (raw logits, cap c, T) -> the logits p_theta uses (:meth:`FLM.process_logits`)
CAP_ORDERS = {
    "cap_then_temperature": lambda raw, c, t: _temper(_cap(raw, c), t),
    # s-flm trainer_base.py TrainerBase.forward divides by T, then algo.py
    # FLMBase._process_model_output caps
    "temperature_then_cap": lambda raw, c, t: _cap(_temper(raw, t), c),
}


class FLMReference(ReferenceFormat):
    """FLM files (s-flm ``algo.FLM`` on ``FLMDIT``, the DIT's keys; also the FLM repository's
    own files, david3684/flm, whose config schema says so when the algo name does not): no mask
    class, the reference's [PAD] is a class (OWT: 50,258); the output cap from ``algo.cap_value``,
    the attention softcap from ``model.softcap`` (the FLM repository hard-codes 50)."""

    families = (
        ReferenceFamily(
            "flm",
            model_type="flm-dit",
            algo="flm",
            algo_names=("flm",),
            requires=("backbone.vocab_embed.embedding", "backbone.sigma_map.mlp.0.weight"),
            schemas=("flm",),
        ),
    )
    pad_is_class = True

    def options_from(self, ref, family):
        cap = float(ref.num("algo.cap_value", 0.0) or 0.0)
        opts: dict = {"output_cap": cap}
        choices, notes = {}, []
        if cap > 0:  # reference TrainerBase.forward: logits / T, then the cap
            opts["cap_order"] = "temperature_then_cap"
        if ref.repo == "flm":
            # david3684/flm DDiTBlock hard-codes softcap 50; the s-flm sample script
            # (scripts/sample/owt/flm.sh, model=small-flm) runs the file with 0
            opts["attn_softcap"] = 0.0
            choices["attn_softcap"] = [0.0, 50.0]
            notes.append(
                "FLM repository file: trained with attention softcap 50; attn_softcap=0 (default) "
                "is how the S-FLM harness sampled it, 50 is the model as trained"
            )
        else:
            opts["attn_softcap"] = float(ref.num("model.softcap", 0.0) or 0.0)
        return opts, choices, notes

    def export_config(self, family, method) -> dict:
        o = method.opts
        return {
            "model": {"softcap": float(o.attn_softcap)},
            "algo": {
                "diffusion_type": "flow",
                "t_min": 0.0,
                "t_max": 1.0,
                "double_temb": False,
                "learnable_loss_weighting": False,
                "cap_value": float(o.output_cap) if o.output_cap else None,
            },
            "sampler": {"predictor": "flm_euler"},
        }


class FLM(Method):
    name = "flm"
    Options = FLMOptions
    #: name -> sampler object (docs and ``--list`` are drawn from it)
    DECODINGS = DECODINGS
    decodings = tuple(DECODINGS)
    conformance_variants = [{}, {"output_cap": 30.0, "attn_softcap": 50.0}]
    #: reference checkpoint format (bench.reference_format; docs/checkpoints.md)
    reference = FLMReference()
    #: the clean token's CE with no time weighting (``loss``)
    loss_kind = LOSS_CE
    #: none: neither the paper nor its code defines a likelihood for FLM (docs/methods/flm.md,
    #: "Likelihood"); nll_bound raises NotImplementedError
    bound_kind = ""

    def __init__(self, options, vocab_size: int, seq_len: int):
        super().__init__(options, vocab_size, seq_len)
        self.table = AlphaGammaTable(vocab_size, self.opts.lut_points, self.opts.gh_nodes)

    def build_backbone(self, cfg: BackboneConfig):
        c = self.opts.attn_softcap
        block_cls = functools.partial(SoftcapBlock, attn_softcap=c) if c > 0 else None
        return build_dit(cfg, self.vocab_size, self.vocab_size, block_cls=block_cls)

    # -- network ------------------------------------------------------------------
    def process_logits(self, raw: Tensor, temperature: float = 1.0) -> Tensor:
        """The network's raw logits -> the logits p_theta uses at ``temperature``: the output
        soft-cap c tanh(l / c) (``output_cap`` = c > 0) and the division by T, in the order
        ``cap_order`` names. ``cap_then_temperature``: c tanh(l / c) / T;
        ``temperature_then_cap``: c tanh((l / T) / c), as s-flm trainer_base.py
        ``TrainerBase.forward`` (divides by T) then algo.py ``FLMBase._process_model_output``
        (caps). The two agree at T = 1 or without a cap."""
        return CAP_ORDERS[self.opts.cap_order](raw, self.opts.output_cap, temperature)

    def _logits(
        self, backbone, z: Tensor, s: Tensor, count: bool = False, temperature: float = 1.0
    ) -> Tensor:
        """p_theta logits for state z (B, L, V) at FLM time s (B,): the DiT sees z @ E and s;
        output cap and temperature by :meth:`process_logits`."""
        emb = backbone.embed.weight
        with torch.autocast(device_type=z.device.type, enabled=False):
            h = z.to(torch.float32) @ emb.to(
                torch.float32
            )  # FLMEmbeddingLayer: einsum in fp32, no softmax
        return self._head(backbone, h, s, count, temperature)

    def _head(
        self, backbone, h: Tensor, s: Tensor, count: bool = False, temperature: float = 1.0
    ) -> Tensor:
        """The DiT on the embedded state h = z @ E (B, L, d) at FLM time s (B,), then
        :meth:`process_logits`."""
        h = h.to(backbone.embed.weight.dtype)
        s = s.to(torch.float32)
        logits = (self.call(backbone, h, s) if count else backbone(h, s)).float()
        return self.process_logits(logits, temperature)

    def noisy_input(self, backbone, x: Tensor, clean_mask: Tensor, gamma: Tensor) -> Tensor:
        """z_gamma @ E (B, L, d) for z_gamma = (1 - gamma) eps + gamma onehot(x), eps ~ N(0, I_V)
        (`FLMBase.corrupt_continuous`; clean positions: onehot(x)), without forming z: by
        linearity z_gamma @ E = (1 - gamma) (eps @ E) + gamma E[x], and onehot(x) @ E = E[x]. The
        same eps is drawn (one (B, L, V) standard normal, as ``randn_like(onehot)``); on CPU the
        (N x V x d) product and its gradient are taken over the noised rows only. Equal to
        ``one_hot``, mix, ``where`` and ``z @ E`` up to float rounding (values and gradients;
        tests/baselines/test_loss_fusion.py)."""
        emb = backbone.embed.weight
        B, L = x.shape
        with torch.autocast(device_type=x.device.type, enabled=False):  # fp32, as _logits
            E = emb.to(torch.float32)
            eps = torch.randn(B, L, self.vocab_size, device=x.device, dtype=torch.float32)
            ex = E[x]  # onehot(x) @ E
            g = gamma.to(torch.float32)[:, None].expand(B, L)
            if x.device.type == "cpu" and bool(clean_mask.any()):  # (no host sync on GPU)
                rows = (~clean_mask).flatten().nonzero().squeeze(1)  # the product on these
                g = g.flatten()[rows, None]
                e_rows = eps.view(B * L, -1).index_select(0, rows)
                mix = (1 - g) * (e_rows @ E) + g * ex.view(B * L, -1).index_select(0, rows)
                return ex.view(B * L, -1).index_copy(0, rows, mix).view(B, L, -1)
            mix = (1 - g[..., None]) * (eps @ E) + g[..., None] * ex
            return torch.where(clean_mask[..., None], ex, mix)

    # -- training -----------------------------------------------------------------
    def loss(self, backbone, batch: Batch, t: Tensor | None) -> LossOutput:
        # trainer's t is harness time (0 clean); FLM time s = 1 - t is uniform on [0, 1 - t_eps]
        s = 1.0 - t
        gamma = self.table.a2g(s).to(torch.float32)
        h = self.noisy_input(backbone, batch.x, batch.clean_mask, gamma)
        logits = self._head(backbone, h, s)  # no time weighting; fused log-softmax + gather:
        ce = F.cross_entropy(logits.flatten(0, 1), batch.x.flatten(), reduction="none").view_as(
            batch.x
        )
        return token_mean(ce * ~batch.clean_mask, batch.loss_mask)

    # -- sampling -----------------------------------------------------------------
    @staticmethod
    def euler_step(
        z: Tensor, x_hat: Tensor, gamma: Tensor, gamma_next: Tensor, eps: float = 1e-5
    ) -> Tensor:
        """z + (gamma_next - gamma) (x_hat - z) / (1 - gamma + eps), in place on z
        (`samplers.py::flm_euler_step`); gamma, gamma_next: (B,)."""
        c = ((gamma_next - gamma) / (1 - gamma + eps)).to(z.dtype)[:, None, None]
        return z.mul_(1 - c).addcmul_(x_hat, c)

    @torch.no_grad()
    def sample(
        self,
        backbone,
        prompt,
        prompt_mask,
        *,
        nfe,
        temperature=1.0,
        decoding="default",
        float64=True,
        generator=None,
    ):
        dec = self.DECODINGS[self.resolve_decoding(decoding)]
        return dec.run(self, backbone, prompt, prompt_mask, nfe, temperature, float64, generator)
