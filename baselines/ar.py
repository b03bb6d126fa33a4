"""AR: the causal next-token baseline on the shared backbone (causal DiT, no adaLN).

Training: next-token cross-entropy, input x[:, :-1], target x[:, 1:], counted where
``loss_mask[:, 1:]`` (reference `algo.py::AR._process_model_input`).

Sampling: left to right, one backbone call per generated position (NFE = number of positions
after the first non-prompt position; the ``nfe`` argument is ignored). Prompt positions,
including clean positions inside the generated region (Sudoku givens), are teacher-forced.
``sample`` draws from softmax(logits / T) by the float64 inverse CDF (the law of Gumbel-max);
``greedy`` takes the argmax (temperature-free). KV cache (``kv_cache``, default on): the first
call reads the prefix and keeps every block's keys / values, each later call feeds one position;
the same calls (NFE) and tokens as re-reading the prefix (``kv_cache = False``) up to float
rounding of the logits.

Likelihood (``nll_bound``, ``bound_kind`` exact): the chain rule, -sum_i log p(x_i | x_<i)
over the counted positions (``loss_mask`` off ``clean_mask``, never position 0), each given the
gold ids before it, one forward pass, log-softmax in float64.

EOS stop (``sample.eos_stop``: :attr:`Method.eos_id` set), as the reference TinyGSM sampler's
``early_stopping`` (s-flm `samplers.py::ARSampler.step`, ``_early_stop_token``): a row is done
once it has generated the EOS (or has no generated position left); it stops counting calls
(:attr:`Method.row_calls`), the batch stops calling when every row is done, and every generated
position after a row's EOS is the EOS (the reference writes [PAD]; the evaluators cut at the
first EOS either way). The tokens up to each row's EOS are those of a run without it.

Departures: the output has V classes, not V + 1 with a -inf [MASK] logit as in the
reference (`algo.py::AR._process_model_output`): identical distribution, one row fewer. The EOS
stop is off by default (the canvas is filled; the GSM8K evaluator cuts at the first EOS, so
answers are the same either way). Rows with different prompt lengths are handled by teacher
forcing (the reference sampler refuses variable-length prefixes).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.backbones.dit import build_dit
from bench.config import BackboneConfig
from bench.decoding import Decoding, flagged
from bench.method import (
    BOUND_EXACT,
    CATEGORICAL_SAMPLING,
    LOSS_NLL,
    Batch,
    CategoricalSampling,
    LossOutput,
    Method,
    categorical_draw,
    fill_after_eos,
    gold_log_probs,
    token_mean,
)
from bench.reference_format import ReferenceFamily, ReferenceFormat


@dataclass
class AROptions(CategoricalSampling):
    pass


class ARReference(ReferenceFormat):
    """AR files (s-flm ``algo.AR`` on the causal ``DIT``, no adaLN and no time embedding): the
    input table and the head carry a mask row after the vocabulary, never fed, its logit forced
    to -1e6 (``AR._process_model_output``); ours has neither."""

    families = (
        ReferenceFamily(
            "ar",
            model_type="dit",
            algo="ar",
            algo_names=("ar",),
            requires=("backbone.vocab_embed.embedding",),
            excludes=("backbone.sigma_map.mlp.0.weight",),
            mask_rows=1,
            kept_mask_rows=(0, 0),
            vocab_in_hparams=True,
        ),
    )

    def export_config(self, family, method) -> dict:
        return {
            "algo": {
                "backbone": "dit",
                "parameterization": "ar",
                "time_conditioning": False,
                "causal_attention": True,
                "adaLN": False,
            },
            "sampler": {"predictor": "ar"},
        }


@dataclass(frozen=True, kw_only=True)
class NextToken(Decoding):
    """How a call's next-token logits become the token: ``greedy`` the argmax, else a draw from
    softmax(logits / T) after the top-k / top-p filters by the inverse CDF, one float64 uniform
    per row (:func:`bench.method.categorical_draw`: Gumbel-max's law with one random number per
    row instead of one per class, half its cost at |V| 50k on the CPU:
    docs/measurements/sampling_factors.md)."""

    greedy: bool = False

    def pick(self, m, logits, temperature, generator, float64):
        if self.greedy:
            return logits.argmax(-1)
        return categorical_draw(m.filtered(logits / temperature), generator, float64)


_CALLS = "one per generated position: nfe is the generated length"
_EOS = "at the EOS: a row's calls stop there, the batch's when every row is done"

#: AR's decodings, the first the default
DECODINGS: dict[str, Decoding] = {
    "sample": NextToken(
        summary="x_i ~ softmax(logits / T) (float64 inverse CDF), left to right, prompt "
        "positions teacher-forced",
        reference="s-flm `samplers.py::ARSampler` (`TrainerBase.forward` divides by T)",
        calls_note=_CALLS,
        eos_stop=True,
        eos_note=_EOS,
        cost="exponentials and a float64 cumulative sum over (B, V), one uniform per row (and "
        "the filters' sort when on)",
        options=("top_k", "top_p"),
    ),
    "greedy": NextToken(
        greedy=True,
        temperature_free=True,
        summary="x_i = argmax of the logits, left to right",
        reference="s-flm `samplers.py::ARSampler` (greedy)",
        calls_note=_CALLS,
        eos_stop=True,
        eos_note=_EOS,
        cost="an argmax over (B, V)",
    ),
}


class AR(Method):
    name = "ar"
    Options = AROptions
    #: name -> decoding object (docs and ``--list`` are drawn from it)
    DECODINGS = DECODINGS
    decodings = tuple(DECODINGS)
    uses_time = False
    nfe_is_length = True
    temperature_free = flagged(DECODINGS, "temperature_free")
    #: every decoding stops a row at the EOS under ``sample.eos_stop`` (:meth:`sample`)
    stops_at_eos = flagged(DECODINGS, "eos_stop")
    #: the draw's filters (top-p / top-k): a filter reuses the trained model
    sampling_options = CATEGORICAL_SAMPLING
    #: next-token cross-entropy: the exact NLL of the counted tokens
    loss_kind = LOSS_NLL
    #: the chain rule gives the NLL itself (:meth:`nll_bound`)
    bound_kind = BOUND_EXACT
    #: reuse keys / values between decoding calls (False: re-run the whole prefix every call); a
    #: capability the benchmarks read too (bench.perf.capabilities: arcache, calibrate)
    kv_cache = True
    #: reference checkpoint format (bench.reference_format; docs/checkpoints.md)
    reference = ARReference()

    def build_backbone(self, cfg: BackboneConfig):
        return build_dit(cfg, self.vocab_size, self.vocab_size, causal=True)

    def loss(self, backbone, batch: Batch, t=None) -> LossOutput:
        logits = backbone(batch.x[:, :-1]).float()
        logp = torch.log_softmax(logits, dim=-1)
        nll = -logp.gather(-1, batch.x[:, 1:, None]).squeeze(-1)
        return token_mean(nll, batch.loss_mask[:, 1:])

    # -- likelihood -----------------------------------------------------------------
    def bound_positions(self, batch: Batch):
        """``loss_mask`` off the clean positions, without position 0: nothing predicts it (no
        BOS before it), so it is conditioned on, as the reference's ``valid_tokens[:, 1:]``."""
        pos = super().bound_positions(batch).clone()
        pos[:, 0] = False
        return pos

    @torch.no_grad()
    def nll_bound(self, backbone, batch: Batch, *, n_draws: int, generator) -> torch.Tensor:
        """The exact NLL by the chain rule: -sum_i log p_theta(x_i | x_<i) over
        :meth:`bound_positions`, each counted token conditioned on the gold ids before it (clean
        or not; clean ones are the sampler's teacher-forced tokens, so this is the NLL of what
        :meth:`sample` draws when every non-clean position is counted). One row whatever
        ``n_draws``; ``generator`` is unused. The log-softmax runs in float64."""
        # chain rule p(x) = prod_l p(x^l | x^<l) (S-FLM paper sec. 2); reference s-flm @ 18d586f
        # algo.py:49-58 AR.nll (input x[:, :-1], target x[:, 1:]) + trainer_base.py:432 _loss
        logits = backbone(batch.x[:, :-1])
        logp = gold_log_probs(logits, batch.x[:, 1:])
        counted = self.bound_positions(batch)[:, 1:]
        return torch.where(counted, -logp, 0.0).sum(-1)[None]

    @staticmethod
    def generation_start(prompt_mask) -> int:
        """First position any row must generate (>= 1: position 0 is always given)."""
        free = (~prompt_mask).any(0).nonzero()
        return max(int(free[0]), 1) if len(free) else prompt_mask.shape[1]

    def nfe_for(self, nfe: int, prompt_mask) -> int:
        return prompt_mask.shape[1] - self.generation_start(prompt_mask)

    def full_forward(self, backbone, x):
        """The causal pass over the whole canvas: the unit a KV-cached call is priced against."""
        return backbone(x)

    @torch.no_grad()
    def sample(
        self,
        backbone,
        prompt,
        prompt_mask,
        *,
        nfe=0,
        temperature=1.0,
        decoding="default",
        float64=True,
        generator=None,
    ):
        dec = self.DECODINGS[self.resolve_decoding(decoding)]
        x = prompt.clone()
        x[~prompt_mask] = 0
        L = prompt.shape[1]
        start = self.generation_start(prompt_mask)
        # a backbone without per-block caches (a test stub, another network) re-reads the prefix
        use_cache = self.kv_cache and hasattr(backbone, "blocks")
        cache = [{} for _ in backbone.blocks] if use_cache else None
        eos, gen = self.eos_id, ~prompt_mask
        if eos is not None:  # sample.eos_stop: each row's calls, up to its EOS
            self.begin_rows(x.shape[0])
            last = torch.where(gen, torch.arange(L, device=x.device), -1).amax(-1)
            done = last < start  # a row with nothing to generate needs no call
        for i in range(start, L):
            if eos is not None and bool(done.all()):
                break  # s-flm ARSampler.step: done when every row has finished
            # every call reads less than the canvas (a prefix, or one position after the
            # prefill): partial calls, priced against one full causal pass (Method.call)
            if cache is None:
                logits = self.call(backbone, x[:, :i], partial=True)[:, -1].float()
            else:  # prefill once, then only position i - 1 (its keys / values are new)
                inp = x[:, :i] if i == start else x[:, i - 1 : i]
                logits = self.call(backbone, inp, cache=cache, partial=True)[:, -1].float()
            nxt = dec.pick(self, logits, temperature, generator, float64)
            x[:, i] = torch.where(prompt_mask[:, i], prompt[:, i], nxt)
            if eos is not None:
                self.count_row_calls(~done, partial=True)
                # s-flm _early_stop_token: a row whose generated token is the EOS is done
                done |= (gen[:, i] & (x[:, i] == eos)) | (last <= i)
        return x if eos is None else fill_after_eos(x, gen, eos)
