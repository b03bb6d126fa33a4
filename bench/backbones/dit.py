"""The shared SEDD/MDLM diffusion transformer ("DiT") and its causal variant for AR.

Layout follows the reference `models/dit.py::DIT` (`DDiTBlock`, `TimestepEmbedder`,
`DDiTFinalLayer`) of SEDD / MDLM / Duo / S-FLM (kuleshov-group/mdlm, s-sahoo/duo,
FrankCCCCC/s-flm @ 18d586f):

- token embedding table ``embed`` (V_in, d); methods may bypass the lookup and pass a
  (B, L, d) float input instead (S-FLM latents, FLM / CANDI ``z @ E``);
- sinusoidal time features of ``sigma`` (256 dims) -> MLP -> SiLU = conditioning c;
- pre-LN blocks with adaLN-Zero modulation (shift / scale / gate for attention and MLP,
  the modulation Linear zero-initialised so every block starts as the identity);
- rotary position embeddings on q and k, bidirectional ``scaled_dot_product_attention``;
- dropout only on the attention-output and MLP residual branches, never on the attention
  weights (reference kernels run with dropout 0: s-flm `DDiTBlock._attn`, mdlm/duo flash_attn
  ``dropout_p=0.``);
- final LayerNorm + adaLN + Linear(d, V_out) with zero-initialised weight and bias
  (logits start at 0 = uniform).

The causal variant (``causal=True``) has no adaLN and no time input (AR, `algo.adaLN=False`).

Caches (``forward(..., cache=...)``): the causal DiT takes one dict per block (AR's KV cache: a
prefill, then one position per call); the bidirectional one takes a block cache
(:class:`bench.backbones.block_cache.BlockCache`: a full call that records every block's keys
and values, then partial calls that compute only a set of active positions, Fast-dLLM's prefix
and dual caches). Both go through :meth:`Block.attention`; the block cache's own rules live in
its module.

Departures (numerics only): the reference wraps blocks and final layer in a bf16 autocast
inside the module and rotates q/k in the activation dtype; here precision is the trainer's
(bf16-mixed on GPU) and rotary / LayerNorm compute in fp32 and cast back (same maths, less
rounding).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.config import BackboneConfig, ConfigError


@dataclass(frozen=True)
class DiTSize:
    n_blocks: int
    d_model: int
    n_heads: int
    cond_dim: int = 128
    dropout: float = 0.1


#: Named sizes. ``tiny`` is the paper's Sudoku model, ``small`` its TinyGSM / OWT model;
#: the ``cpu-*`` sizes are for tests and the CPU quickstart.
SIZES: dict[str, DiTSize] = {
    "tiny": DiTSize(8, 512, 8, 128, 0.1),
    "small": DiTSize(12, 768, 12, 128, 0.1),
    "cpu-mini": DiTSize(2, 64, 4, 64, 0.0),
    "cpu-small": DiTSize(3, 128, 4, 64, 0.0),
}


def resolve_size(cfg: BackboneConfig) -> DiTSize:
    """Preset named by ``cfg.size`` with any explicit field of ``cfg`` overriding it."""
    if cfg.size not in SIZES:
        raise ConfigError(f"backbone.size: unknown size {cfg.size!r} (known: {', '.join(SIZES)})")
    base = SIZES[cfg.size]
    size = DiTSize(
        n_blocks=cfg.n_blocks or base.n_blocks,
        d_model=cfg.d_model or base.d_model,
        n_heads=cfg.n_heads or base.n_heads,
        cond_dim=cfg.cond_dim or base.cond_dim,
        dropout=base.dropout if cfg.dropout is None else cfg.dropout,
    )
    if size.d_model % size.n_heads or (size.d_model // size.n_heads) % 2:
        raise ConfigError(
            f"backbone: d_model={size.d_model} must split into {size.n_heads} heads of even size"
        )
    return size


class TimestepEmbedder(nn.Module):
    """sigma (B,) -> (B, cond_dim): cos/sin features (max period 1e4) -> Linear -> SiLU
    -> Linear."""

    def __init__(self, cond_dim: int, n_freq: int = 256):
        super().__init__()
        self.n_freq = n_freq
        self.mlp = nn.Sequential(
            nn.Linear(n_freq, cond_dim), nn.SiLU(), nn.Linear(cond_dim, cond_dim)
        )

    def forward(self, sigma: Tensor) -> Tensor:
        half = self.n_freq // 2
        freqs = torch.exp(
            -math.log(1e4) * torch.arange(half, device=sigma.device, dtype=torch.float32) / half
        )
        args = sigma.float()[:, None] * freqs[None]
        return self.mlp(torch.cat([torch.cos(args), torch.sin(args)], dim=-1))


def rotary_cos_sin(seq_len: int, head_dim: int, device, base: float = 1e4) -> tuple[Tensor, Tensor]:
    """(L, head_dim/2) cos and sin tables for rotary embeddings (base 1e4)."""
    inv = 1.0 / base ** (
        torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    )
    ang = torch.arange(seq_len, device=device, dtype=torch.float32)[:, None] * inv[None]
    return ang.cos(), ang.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate (..., L, Dh) by position (e.g. (B, H, L, Dh), or q and k stacked), rotate-half
    convention (GPT-NeoX / flash-attn non-interleaved). ``cos`` / ``sin``: (L, Dh/2), one row per
    position, or (B, L, Dh/2), each row's own positions (a block cache's partial call)."""
    x1, x2 = x.float().chunk(2, dim=-1)
    c, s = (cos[None, None], sin[None, None]) if cos.dim() == 2 else (cos[:, None], sin[:, None])
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


class LayerNormNoBias(nn.Module):
    """LayerNorm with a weight and no bias, computed in fp32 (reference `LayerNorm`)."""

    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):
            y = F.layer_norm(x.float(), (x.shape[-1],))
        return (y * self.weight).to(x.dtype)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    return x * (1 + scale[:, None]) + shift[:, None]


class Block(nn.Module):
    """Pre-LN transformer block; adaLN-Zero modulated when ``cond_dim`` is given."""

    def __init__(self, d: int, n_heads: int, cond_dim: int | None, dropout: float, causal: bool):
        super().__init__()
        self.n_heads, self.causal, self.dropout = n_heads, causal, dropout
        self.norm1, self.norm2 = LayerNormNoBias(d), LayerNormNoBias(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        self.mlp = nn.Sequential(
            nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d)
        )
        self.adaLN = None
        if cond_dim is not None:
            self.adaLN = nn.Linear(cond_dim, 6 * d)
            nn.init.zeros_(self.adaLN.weight)
            nn.init.zeros_(self.adaLN.bias)

    def attention(self, h: Tensor, cos: Tensor, sin: Tensor, cache: dict | Any = None) -> Tensor:
        B, L, d = h.shape
        qkv = self.qkv(h).view(B, L, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        # q and k rotated in one call: the values of one call each (elementwise), half the
        # kernel launches (4 % of a CPU quickstart training step; docs/measurements/quickstart.md)
        q, k = apply_rotary(qkv[:2], cos, sin).unbind(0)
        v = qkv[2]
        causal = self.causal
        if cache is not None and not causal:  # block cache: the other positions' keys / values
            k, v = cache.keys_values(k, v)
        elif cache is not None:  # KV cache (causal decoding): keys / values of earlier positions
            if "k" in cache:
                if L != 1:
                    raise ValueError("KV cache: after the prefill, decode one position per call")
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
                causal = False  # one query at the last position sees every cached key
            cache["k"], cache["v"] = k, v
        # no dropout on the attention weights: the reference kernels run with dropout 0
        # (s-flm/duo `models/dit.py` flash_attn(..., 0.0) / SDPA default); dropout is residual only
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.attn_out(o.transpose(1, 2).reshape(B, L, d))

    def forward(
        self, x: Tensor, c: Tensor | None, cos: Tensor, sin: Tensor, cache: dict | Any = None
    ) -> Tensor:
        drop = lambda y: F.dropout(y, self.dropout, self.training)  # noqa: E731
        if self.adaLN is None:
            a = (
                self.attention(self.norm1(x), cos, sin)
                if cache is None
                else self.attention(self.norm1(x), cos, sin, cache=cache)
            )
            x = x + drop(a)
            return x + drop(self.mlp(self.norm2(x)))
        sh1, sc1, g1, sh2, sc2, g2 = self.adaLN(c).chunk(6, dim=-1)
        h = modulate(self.norm1(x), sh1, sc1)
        a = self.attention(h, cos, sin) if cache is None else self.attention(h, cos, sin, cache)
        x = x + g1[:, None] * drop(a)
        return x + g2[:, None] * drop(self.mlp(modulate(self.norm2(x), sh2, sc2)))


class DiT(nn.Module):
    """Shared backbone.

    Args:
        vocab_in: rows of the input embedding table.
        vocab_out: output classes (logits width).
        size: a :class:`DiTSize`.
        causal: causal attention without adaLN / time input (AR).
        input_dim: width of a float input passed instead of ids (default d_model); a
            Linear maps it to d_model when it differs.
        block_cls: the block class (or a factory with :class:`Block`'s arguments), e.g. FLM's
            soft-capped attention block; it must build the same parameters as :class:`Block`.

    ``forward(x, sigma)``: x is (B, L) ids or a (B, L, input_dim) float tensor; sigma (B,)
    is the time input (ignored when causal; zeros when None). Returns (B, L, vocab_out) logits.
    ``cache``: AR's per-block dicts (causal), or a block cache whose partial call takes and
    returns the active / read positions only (bidirectional; module docstring).
    """

    def __init__(
        self,
        vocab_in: int,
        vocab_out: int,
        size: DiTSize,
        causal: bool = False,
        input_dim: int | None = None,
        zero_init_head: bool = True,
        block_cls: Callable[..., Block] | None = None,
    ):
        super().__init__()
        d = size.d_model
        self.size, self.causal, self.d_model = size, causal, d
        self.embed = nn.Embedding(vocab_in, d)
        nn.init.kaiming_uniform_(self.embed.weight, a=math.sqrt(5))  # reference init
        self.in_proj = nn.Linear(input_dim, d) if input_dim and input_dim != d else None
        cond = None if causal else size.cond_dim
        self.time = None if causal else TimestepEmbedder(size.cond_dim)
        block_cls = block_cls or Block
        self.blocks = nn.ModuleList(
            block_cls(d, size.n_heads, cond, size.dropout, causal) for _ in range(size.n_blocks)
        )
        self.norm_f = LayerNormNoBias(d)
        self.adaLN_f = None
        if cond is not None:
            self.adaLN_f = nn.Linear(cond, 2 * d)
            nn.init.zeros_(self.adaLN_f.weight)
            nn.init.zeros_(self.adaLN_f.bias)
        self.head = nn.Linear(d, vocab_out)
        if zero_init_head:
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    def forward(
        self, x: Tensor, sigma: Tensor | None = None, cache: list[dict] | Any = None
    ) -> Tensor:
        h = self.embed(x) if x.dtype in (torch.long, torch.int32, torch.int64) else x
        if self.in_proj is not None and h.dtype.is_floating_point and x.dtype.is_floating_point:
            h = self.in_proj(h)
        B, L, _ = h.shape
        dh = self.d_model // self.size.n_heads
        # ``cache``, causal: one dict per block, filled by a prefill call, then one position per
        # call; rotary positions continue after the cached ones. Bidirectional: a block cache
        # (bench.backbones.block_cache), whose partial call gives the (B, L) rows' true positions
        if cache is not None and self.causal != isinstance(cache, list):
            raise ValueError(
                "KV cache: the causal DiT (AR) takes one dict per block, the bidirectional one a "
                "block cache (bench.backbones.block_cache.BlockCache)"
            )
        positions = None if self.causal or cache is None else cache.positions
        if positions is not None:  # a partial call: x holds the active positions only
            cos, sin = rotary_cos_sin(cache.length, dh, h.device)
            cos, sin = cos[positions], sin[positions]
        else:
            start = cache[0]["k"].shape[2] if self.causal and cache and cache[0] else 0
            cos, sin = rotary_cos_sin(start + L, dh, h.device)
            cos, sin = cos[start:], sin[start:]
        c = None
        if self.time is not None:
            if sigma is None:
                sigma = torch.zeros(B, device=h.device)
            c = F.silu(self.time(sigma.reshape(B)))
        for i, blk in enumerate(self.blocks):
            h = blk(h, c, cos, sin) if cache is None else blk(h, c, cos, sin, cache=cache[i])
        if positions is not None:
            h = cache.readout(h)  # the rows a sampler reads (prefix cache: the block's)
        h = self.norm_f(h)
        if self.adaLN_f is not None:
            shift, scale = self.adaLN_f(c).chunk(2, dim=-1)
            h = modulate(h, shift, scale)
        return self.head(h)


def build_dit(
    cfg: BackboneConfig,
    vocab_in: int,
    vocab_out: int,
    *,
    causal: bool = False,
    input_dim: int | None = None,
    block_cls: Callable[..., Block] | None = None,
) -> DiT:
    return DiT(
        vocab_in,
        vocab_out,
        resolve_size(cfg),
        causal=causal,
        input_dim=input_dim,
        block_cls=block_cls,
    )
