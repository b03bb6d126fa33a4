"""A backbone's shape for the cost model (:class:`Net`: parameters, FLOPs per position, the
output layer's share of them) and :func:`net_of`, a backbone section's :class:`Net`
(:mod:`bench.cost.model` predicts with them)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.config import BackboneConfig


@dataclass(frozen=True)
class Net:
    """A backbone's shape: the DiT (``arch="dit"``, causal for AR) or the S-arch."""

    n_blocks: int
    d_model: int
    n_heads: int
    cond_dim: int
    vocab_in: int
    vocab_out: int
    arch: str = "dit"
    causal: bool = False

    def params(self) -> int:
        """Parameters, counted as :mod:`bench.backbones.dit` / :mod:`sflm.sarch` build them."""
        d, c, n = self.d_model, self.cond_dim, self.n_blocks
        time = 0 if self.causal else 256 * c + c + c * c + c
        if self.arch == "sarch":
            # q, k, v, o; c_fc (+ bias); mlp_out (+ bias); s_fc; s_qk and the two gammas; delta
            block = 4 * d * d + (4 * d * d + 4 * d) + (4 * d * d + d) + 4 * d + 3 * d
            block += 2 * c * d + 2 * d
            return self.vocab_in * d + time + n * block + self.vocab_out * d + self.vocab_out
        block = 2 * d + 4 * d * d + (4 * d * d + 4 * d) + (4 * d * d + d)
        if not self.causal:
            block += 6 * c * d + 6 * d
        final = d + (0 if self.causal else 2 * c * d + 2 * d) + d * self.vocab_out + self.vocab_out
        return self.vocab_in * d + time + n * block + final

    def token_flops(self, context: float) -> float:
        """FLOPs of one position of a forward: the matrices (blocks and output layer), then
        attention over ``context`` keys."""
        d = self.d_model
        matrices = 12 * self.n_blocks * d * d + d * self.vocab_out
        return 2.0 * matrices + 4.0 * self.n_blocks * d * context

    def head_share(self, context: float) -> float:
        """The output layer's part of a forward's FLOPs (what a sampler's extra work over |V|
        is measured against)."""
        return 2.0 * self.d_model * self.vocab_out / self.token_flops(context)


def net_of(backbone: dict | BackboneConfig, vocab: int, *, arch: str = "dit",
           causal: bool = False) -> Net:  # fmt: skip
    """The :class:`Net` of a backbone section (a preset name and its overrides) at ``vocab``."""
    from bench.backbones.dit import resolve_size

    cfg = backbone if isinstance(backbone, BackboneConfig) else BackboneConfig(**backbone)
    s = resolve_size(cfg)
    return Net(s.n_blocks, s.d_model, s.n_heads, s.cond_dim, vocab, vocab, arch, causal)
