"""The S-arch: an nGPT-style normalised transformer for S-FLM (paper sec. 3.3 and appendix
"Hyperspherical Backbone Architecture"; reference ``models/sphere_arch.py::SphereArch``, nGPT
``model.py::Block``).

With Norm(u) = u / max(|u|, 1e-6) and base scale b = 1/sqrt(d), each block does
- normalised attention: Q, K, V = h W_Q, h W_K, h W_V (no bias); RoPE on Q, K;
  Q' = s~_qk Norm(Q), K' = s~_qk Norm(K) per head with s~_qk = s_qk (1 / b) (s_qk init b);
  O = softmax(sqrt(d_k) Q' K'^T) V; h_A = O W_O;
- h <- Norm(Norm(h) + g_A (Norm(h_A) - Norm(h)));
- normalised MLP: h_M = GELU_tanh(sqrt(d) s_fc (h W_fc + b_fc)) W_out + b_out (s_fc init 1);
- h <- Norm(Norm(h) + g_M (Norm(h_M) - Norm(h)));
with time-conditional gates g_X = |gamma_X (0.05 / b) + delta_X(t)| (gamma_X init b) and
(delta_A, delta_M) = W_delta tau(t), tau(t) = SiLU(TimestepEmbedder(sigma)), W_delta a zero-init
per-block Linear. No LayerNorm, no adaLN. Head: logits = s~_z (h W_lm^T), W_lm rows unit-norm,
s~_z = s_z (1 / b) (s_z init b). Matrices are drawn N(0, b^2) (W_O, W_out: N(0, b^2 / (2 N)))
and every matrix is unit-norm along the d_model axis at init; :meth:`SArch.renormalize_weights`
re-projects them and S-FLM calls it after every optimiser step (the reference makes this
mandatory for the S-arch). The input embedding table ``embed`` (init N(0, 1/d), the "ngpt"
init) is only re-projected when the method's ``renorm`` option asks for it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.backbones.dit import DiTSize, TimestepEmbedder, apply_rotary, rotary_cos_sin

NORM_EPS = 1e-6


def justnorm(x: Tensor, eps: float = NORM_EPS) -> Tensor:
    """Norm(u) = u / max(|u|, eps) along the last axis (nGPT ``justnorm``)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


class SArchBlock(nn.Module):
    ALPHA_INIT = 0.05  # gamma_init (nGPT attn/mlp alpha init value)

    def __init__(self, d: int, n_heads: int, cond_dim: int, dropout: float, mlp_ratio: int = 4):
        super().__init__()
        if d % n_heads:
            raise ValueError(f"S-arch: d_model={d} is not divisible by n_heads={n_heads}")
        self.d, self.n_heads, self.d_k, self.dropout = d, n_heads, d // n_heads, dropout
        self.b = 1.0 / math.sqrt(d)
        self.query = nn.Linear(d, d, bias=False)
        self.key = nn.Linear(d, d, bias=False)
        self.value = nn.Linear(d, d, bias=False)
        self.att_out = nn.Linear(d, d, bias=False)
        self.c_fc = nn.Linear(d, mlp_ratio * d, bias=True)
        self.mlp_out = nn.Linear(mlp_ratio * d, d, bias=True)
        self.s_fc = nn.Parameter(torch.ones(mlp_ratio * d))  # init 1, scale 1
        self.s_qk = nn.Parameter(self.b * torch.ones(d))  # init value 1, scale b
        self.gamma_attn = nn.Parameter(self.b * torch.ones(d))  # init value 0.05, scale b
        self.gamma_mlp = nn.Parameter(self.b * torch.ones(d))
        self.delta = nn.Linear(cond_dim, 2 * d)  # time-conditional gate offsets, zero-init
        nn.init.zeros_(self.delta.weight)
        nn.init.zeros_(self.delta.bias)

    def _gate(self, gamma: Tensor, delta: Tensor) -> Tensor:
        return (gamma * (self.ALPHA_INIT / self.b) + delta).abs()[:, None, :]  # (B, 1, d)

    def forward(self, h: Tensor, t_emb: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        B, L, d = h.shape
        H, dk = self.n_heads, self.d_k
        q = self.query(h).view(B, L, H, dk).transpose(1, 2)
        k = self.key(h).view(B, L, H, dk).transpose(1, 2)
        v = self.value(h).view(B, L, H, dk).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        sqk = (self.s_qk * (1.0 / self.b)).view(1, H, 1, dk)
        q, k = sqk * justnorm(q), sqk * justnorm(k)
        y = F.scaled_dot_product_attention(q, k, v, scale=math.sqrt(dk))
        h_att = F.dropout(
            self.att_out(y.transpose(1, 2).reshape(B, L, d)), self.dropout, self.training
        )
        delta_a, delta_m = self.delta(t_emb).chunk(2, dim=-1)
        a_norm = justnorm(h)
        h = justnorm(a_norm + self._gate(self.gamma_attn, delta_a) * (justnorm(h_att) - a_norm))
        s_fc = self.s_fc * math.sqrt(d)
        h_mlp = self.mlp_out(F.gelu(s_fc * self.c_fc(h), approximate="tanh"))
        h_mlp = F.dropout(h_mlp, self.dropout, self.training)
        a_norm = justnorm(h)
        return justnorm(a_norm + self._gate(self.gamma_mlp, delta_m) * (justnorm(h_mlp) - a_norm))


class SArch(nn.Module):
    """The S-arch backbone. ``forward(x, sigma)``: x (B, L, d) unit-norm latents (or (B, L) ids,
    looked up in the normalised table); sigma (B,) time input -log(alpha). Returns (B, L, V)
    logits."""

    #: scale the head's rows by s~_z instead of the (B, L, V) logits (fewer (B, L, V) passes in
    #: training; equal up to float rounding; docs/measurements/perf_cpu.md measures the gain). On
    #: by default: the quickstart's S-arch cells moved by at most 0.7 points, inside every seed
    #: spread (docs/measurements/quickstart_sarch_fold.md); False gives the logit-side scale
    fold_logit_scale = True

    def __init__(self, vocab_size: int, size: DiTSize):
        super().__init__()
        d = size.d_model
        self.size, self.d_model, self.n_heads = size, d, size.n_heads
        self.b = 1.0 / math.sqrt(d)
        self.embed = nn.Embedding(vocab_size, d)
        nn.init.normal_(self.embed.weight, std=self.b)  # "ngpt" init
        self.time = TimestepEmbedder(size.cond_dim)
        self.blocks = nn.ModuleList(
            SArchBlock(d, size.n_heads, size.cond_dim, size.dropout) for _ in range(size.n_blocks)
        )
        self.lm_head = nn.Linear(d, vocab_size, bias=False)
        self.s_z = nn.Parameter(self.b * torch.ones(vocab_size))  # init value 1, scale b
        self._init_matrices()
        self.renormalize_weights()

    def _init_matrices(self) -> None:
        std, out_std = self.b, self.b / math.sqrt(2 * len(self.blocks))  # GPT-2 residual init
        for blk in self.blocks:
            for lin in (blk.query, blk.key, blk.value, blk.c_fc):
                nn.init.normal_(lin.weight, std=std)
            for lin in (blk.att_out, blk.mlp_out):
                nn.init.normal_(lin.weight, std=out_std)
            nn.init.zeros_(blk.c_fc.bias)
            nn.init.zeros_(blk.mlp_out.bias)
        nn.init.normal_(self.lm_head.weight, std=std)

    def sphere_matrices(self, embeddings: bool = False) -> tuple[list[Tensor], list[Tensor]]:
        """The matrices kept unit-norm along the d_model axis: (row-normalised, i.e. weight[out, d]:
        W_Q, W_K, W_V, W_fc, W_lm and, with ``embeddings``, the input table; column-normalised,
        i.e. weight[d, in]: W_O, W_out)."""
        rows = [self.embed.weight] if embeddings else []
        rows.append(self.lm_head.weight)
        cols = []
        for blk in self.blocks:
            rows += [blk.query.weight, blk.key.weight, blk.value.weight, blk.c_fc.weight]
            cols += [blk.att_out.weight, blk.mlp_out.weight]
        return rows, cols

    @torch.no_grad()
    def renormalize_weights(self, embeddings: bool = False) -> None:
        """Unit-norm every matrix along the d_model axis (nGPT ``normalize_matrices``): rows of
        W_Q, W_K, W_V, W_fc, W_lm (weight[out, d]) and columns of W_O, W_out (weight[d, in]).
        ``embeddings=True`` also re-projects the input table
        (reference ``normalize_input_embed``). One in-place foreach division by the norms (no
        normalised copies); bitwise equal to ``w.copy_(justnorm(w))`` per matrix (same norms,
        same division; tests/sflm/test_sflm_method.py)."""
        rows, cols = self.sphere_matrices(embeddings)
        norms = [w.norm(dim=-1, keepdim=True).clamp_min_(NORM_EPS) for w in rows]
        norms += [w.norm(dim=0, keepdim=True).clamp_min_(NORM_EPS) for w in cols]
        torch._foreach_div_(rows + cols, norms)

    def forward(self, x: Tensor, sigma: Tensor | None = None) -> Tensor:
        h = justnorm(self.embed(x)) if not x.dtype.is_floating_point else x
        B, L, _ = h.shape
        if sigma is None:
            sigma = torch.zeros(B, device=h.device)
        t_emb = F.silu(self.time(sigma.reshape(B)))
        cos, sin = rotary_cos_sin(L, self.d_model // self.n_heads, h.device)
        for blk in self.blocks:
            h = blk(h, t_emb, cos, sin)
        scale = self.s_z * (1.0 / self.b)
        if self.fold_logit_scale:
            # (h W^T) diag(s) = h (diag(s) W)^T: the scale on the (V, d) matrix instead of the
            # (B, L, V) logits (nGPT ``model.py::GPT.forward`` scales the logits; equal up to
            # float rounding)
            return F.linear(h, self.lm_head.weight * scale[:, None])
        return self.lm_head(h) * scale
