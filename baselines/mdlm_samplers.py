"""MDLM's decodings (docs/methods/mdlm.md lists each with its source, cost and options): one
:class:`bench.decoding.Decoding` object per name in :data:`DECODINGS`, which :class:`MDLM
<baselines.mdlm.MDLM>` looks its decoding up in. Each ``run(m, backbone, x, block, nfe, ...)``
decodes the masked positions of ``block`` with ``nfe`` backbone calls (made through ``m``, the
method); all make exactly ``nfe`` calls except ``cached`` (at most ``nfe``), and none adds a
noise-removal call: every last step reveals what is left. A blocked decoding makes its calls
through :func:`baselines.mdlm_cache.block_calls` (full calls, or partial ones under a block KV
cache, ``block_cache``), and reads the logits of the block's positions only. A row's call is
counted (``Method.count_row_calls``) while the row has positions in ``block`` (a row stopped at
its EOS has none: ``MDLM.sample_canvas``); the call-skipping orders count it while its part of
the block holds a mask (alone they would stop there).

- :class:`Ancestral` (``ancestral``, ``greedy``, ``cached``) over t_k = linspace(1, 1e-5,
  nfe + 1): each masked token is revealed with probability (alpha_s - alpha_t) / (1 - alpha_t)
  and drawn from p_theta, only where revealed (float64 inverse CDF, :func:`draw_tokens`);
  revealed tokens are frozen. The last step has
  alpha_s = 1: ``ancestral`` samples every remaining mask, ``greedy`` takes the argmax.
  ``cached``: MDLM's cache (kuleshov-group/mdlm ``diffusion.py::_sample``, ``ddpm_cache``): after
  a step that changed no token of the batch the next step reuses p_theta instead of calling the
  network (not when time-conditioned). Same samples as ``ancestral``.
- :class:`ConfidenceOrder` (``confidence`` / ``margin`` / ``entropy``): LLaDA's low-confidence
  remasking (ML-GSAI/LLaDA ``generate.py``): every step draws all masked positions, then keeps the
  k most confident, k the even split of the masked count over the steps
  (``get_num_transfer_tokens``); the score: p(drawn token) (LLaDA), top-1 minus top-2
  probability or the negative entropy (Dream ``generation_utils.py::sample_tokens``,
  ``topk_margin`` / ``entropy``). ``threshold`` / ``factor``: Fast-dLLM's parallel decoding
  (every position over tau; dllm's factor rule) with that split as the floor, a block stopping
  when it has no mask left (at most ``nfe`` calls).
- :class:`ReMDM` (``remdm-cap`` / ``remdm-rescale`` / ``remdm-conf``) and :class:`ReMDMLoop`
  (``remdm-loop``): ReMDM remasking (Wang et al. 2025; kuleshov-group/remdm
  ``diffusion.py::_ddpm_caching_update``): a decoded token is remasked with probability sigma_t,
  a masked one follows the ReMDM posterior. They take no blocks (``Decoding.blocks`` False).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from baselines.mdlm_cache import block_calls
from bench.decoding import Decoding
from bench.method import categorical_draw

#: the sampling options every categorical draw reads (bench.method.filter_logits)
FILTERS = ("top_k", "top_p")
#: how a blocked decoding stops at the EOS (sample.eos_stop; MDLM.sample_canvas)
BLOCK_EOS = (
    "with `block_length` > 0: after the block that holds the EOS, the later blocks not decoded "
    "but filled with it; without blocks: no, one block is the whole canvas"
)


@dataclass(frozen=True, kw_only=True)
class Ancestral(Decoding):
    """``nfe`` ancestral steps over the masked positions of ``block`` (the others stay as they
    are) on t_k = linspace(1, 1e-5, nfe + 1), the last step to alpha_s = 1. ``greedy_tail``: the
    last step takes the argmax; ``cache``: MDLM's cache of p_theta."""

    greedy_tail: bool = False
    cache: bool = False
    eos_stop: bool = True
    eos_note: str = BLOCK_EOS
    #: decodes block by block under ``block_length``
    blocks: ClassVar[bool] = True

    @property
    def block_cacheable(self) -> bool:
        """Takes a block KV cache (``block_cache``), except MDLM's cache of p_theta (``cached``)."""
        return not self.cache

    def run(self, m, backbone, x, block, nfe, temperature, float64, generator) -> Tensor:
        n, dev = x.shape[0], x.device
        ts = torch.linspace(1.0, 1e-5, nfe + 1, device=dev, dtype=torch.float64)
        cached = None
        calls = block_calls(m, backbone, block)  # full calls, or partial under a block cache
        for k in range(nfe):
            last = k == nfe - 1
            alpha_t = m.alpha(ts[k]).expand(n)
            alpha_s = torch.ones_like(alpha_t) if last else m.alpha(ts[k + 1]).expand(n)
            raw = cached
            if raw is None:
                # every step calls for a row with positions in the block, revealed or not, as
                # alone (it does not stop early); a row stopped at its EOS has none
                raw = calls(k, x, m.sigma(alpha_t.float()), block.any(-1))
            is_mask = (x == m.mask_id) & block
            # absorbing posterior q(z_s | z_t = m, x): reveal w.p. (alpha_s - alpha_t) /
            # (1 - alpha_t), independently of the token, which is then drawn from p_theta; so
            # the positions are chosen first and the draw is made only where one is revealed
            # (the first-hitting order of Zheng et al. 2024: the same law)
            p_reveal = ((alpha_s - alpha_t) / (1 - alpha_t))[:, None]
            u = torch.rand(x.shape, generator=generator, device=dev, dtype=torch.float64)
            reveal = is_mask & (u < p_reveal)
            greedy = last and self.greedy_tail
            x = x.clone()
            x[reveal] = draw_tokens(m, raw, reveal, temperature, float64, generator, greedy)
            # MDLM's cache (kuleshov-group/mdlm diffusion.py::_sample, ddpm_cache): p_theta is
            # reused while no token of the batch changed, unless the network sees t
            keep = self.cache and not m.opts.time_conditioning
            cached = raw if keep and not bool(reveal.any()) else None
        return x


def token_logits(m, raw: Tensor, where: Tensor, temperature: float) -> Tensor:
    """(R, V+1) float32 logits of p_theta at the R positions ``where`` (n, L) bool: the raw
    output over T (reference `TrainerBase.forward`, before SUBS), the [MASK] class at -inf (SUBS
    zero masking; the carry-over rows are never asked for)."""
    rows = raw[where].float()
    rows = rows / temperature if temperature != 1.0 else rows.clone()
    rows[:, m.mask_id] = -torch.inf
    return rows


def draw_tokens(m, raw, where, temperature, float64, generator, greedy=False) -> Tensor:
    """(R,) tokens drawn from p_theta (after top-k / top-p) at the positions ``where``, one
    inverse-CDF uniform each (:func:`bench.method.categorical_draw`; float64 cumulative sums
    unless ``float64`` is off); ``greedy``: the argmax."""
    rows = token_logits(m, raw, where, temperature)
    if greedy:
        return rows.argmax(-1)
    # top-k / top-p on p_theta (duo trainer_base.py:594-597, there without renormalising; here
    # the draw is from p_theta renormalised over the kept classes)
    return categorical_draw(m.filtered(rows), generator, float64)


def p_theta_score(m, raw, where, rows, frows, draw, temperature) -> Tensor:
    """LLaDA's low_confidence: p_theta(draw) at T = 1 without filters (generate.py:
    ``p = F.softmax(logits)``, ``x0_p = p[x0]``), in float64 as Fast-dLLM's
    ``get_transfer_index`` (``F.softmax(logits.to(torch.float64))``), so that a confidence on a
    threshold falls on the side the reference puts it."""
    r1 = rows if temperature == 1.0 else token_logits(m, raw, where, 1.0)
    return torch.softmax(r1.double(), -1).gather(-1, draw[:, None]).squeeze(-1)


def margin_score(m, raw, where, rows, frows, draw, temperature) -> Tensor:
    """Dream ``generation_utils.py::sample_tokens`` ``margin_confidence`` on the draw's
    distribution (temperature, then top-k / top-p): top-1 minus top-2 probability (Dream:
    ``sorted_probs[:, 0] - sorted_probs[:, 1]``), as exp(l_1 - lse) - exp(l_2 - lse)."""
    top = frows.topk(min(2, frows.shape[-1]), dim=-1).values.double()
    lse = frows.logsumexp(-1, keepdim=True).double()
    p = (top - lse).exp()
    return p[:, 0] - p[:, 1]


def neg_entropy_score(m, raw, where, rows, frows, draw, temperature) -> Tensor:
    """Dream ``sample_tokens`` ``neg_entropy`` on the draw's distribution: sum p log(p + 1e-10),
    in the logits' float32 (Dream: the model's dtype)."""
    probs = torch.softmax(frows, -1)
    return (probs * torch.log(probs + 1e-10)).sum(-1).double()  # Dream neg_entropy, eps 1e-10


def no_extra(conf: Tensor, opts) -> Tensor:
    """The plain confidence orders reveal the schedule's count only."""
    return torch.zeros(conf.shape[0], dtype=torch.long, device=conf.device)


def over_threshold(conf: Tensor, opts) -> Tensor:
    """Fast-dLLM's threshold rule (NVlabs/Fast-dLLM llada/generate.py::get_transfer_index with
    ``threshold``; ZHZisZZ/dllm fastdllm/llada/sampler.py ``_get_transfer_index`` threshold
    mode): every masked position with confidence >= tau, at least one (the most confident)."""
    count = (conf >= opts.tau).sum(-1)
    return torch.where(torch.isfinite(conf).any(-1), count.clamp_min(1), 0)


def factor_count(conf: Tensor, opts) -> Tensor:
    """ZHZisZZ/dllm's factor rule (fastdllm/llada/sampler.py ``_get_transfer_index``, dynamic
    mode): confidences sorted descending, rank r (1-based) accepted when c_(r) >= 1 - f/(r + 1),
    rank 1 always; the count accepted (a prefix: c falls and the bound rises with r)."""
    vals = conf.sort(dim=-1, descending=True).values
    r = torch.arange(1, conf.shape[-1] + 1, device=conf.device, dtype=torch.float64)
    bound = 1.0 - opts.factor / (r + 1.0)
    bound[0] = -1.0
    return (vals >= bound).sum(-1)


@dataclass(frozen=True, kw_only=True)
class ConfidenceOrder(Decoding):
    """``nfe`` steps of confidence-ordered unmasking over the masked positions of ``block``
    (ML-GSAI/LLaDA generate.py::generate, ``remasking='low_confidence'``): each step draws every
    masked position of the block from p_theta at the temperature (LLaDA's ``add_gumbel_noise``;
    here one float64 inverse-CDF uniform per position, the same law; the others' draws are never
    kept, so they are not made) and reveals the k with the highest ``score`` (float64), k the
    block's masked count split evenly over the steps. ``extra(conf, opts)``: a parallel rule's
    count (threshold, factor); a step reveals max(it, k), so the block ends within its calls,
    and a block with no mask left makes no more calls (``call_skipping``). The network's time
    input (used only when time-conditioned) follows t_k = linspace(1, 1e-5, nfe + 1), the
    expected masked fraction of the even split."""

    #: (m, raw, where, rows, frows, draw, temperature) -> (R,) float64 confidence of the R
    #: positions ``where``; ``rows``: their logits at T, ``frows``: filtered (higher: first)
    score: Callable[..., Tensor]
    extra: Callable[[Tensor, object], Tensor] = no_extra
    eos_stop: bool = True
    eos_note: str = BLOCK_EOS
    blocks: ClassVar[bool] = True
    block_cacheable: ClassVar[bool] = True

    def run(self, m, backbone, x, block, nfe, temperature, float64, generator) -> Tensor:
        n, L = x.shape
        dev = x.device
        # LLaDA generate.py::get_num_transfer_tokens: base = masked // steps per step, the first
        # (masked % steps) steps one more
        masked = ((x == m.mask_id) & block).sum(-1)
        base, extra = masked // nfe, masked % nfe
        ts = torch.linspace(1.0, 1e-5, nfe + 1, device=dev, dtype=torch.float64)
        calls = block_calls(m, backbone, block)  # full calls, or partial under a block cache
        for k in range(nfe):
            where = (x == m.mask_id) & block
            live = where.any(-1)
            if self.call_skipping and not bool(live.any()):
                break  # Fast-dLLM: the block is done, the next one starts
            alpha_t = m.alpha(ts[k]).expand(n)
            # a call-skipping order stops a row's block with no mask left (alone: no more
            # calls); a fixed-call one calls on for it (LLaDA's steps), as it would alone
            raw = calls(
                k, x, m.sigma(alpha_t.float()), live if self.call_skipping else block.any(-1)
            )
            rows = token_logits(m, raw, where, temperature)
            frows = m.filtered(rows)
            draw = categorical_draw(frows, generator, float64)
            # LLaDA: confidence -inf off the masked positions of the current block
            conf = torch.full((n, L), -torch.inf, device=dev, dtype=torch.float64)
            conf[where] = self.score(m, raw, where, rows, frows, draw, temperature)
            tokens = torch.zeros_like(x)
            tokens[where] = draw
            x = torch.where(where & self.chosen(conf, base + (k < extra), m.opts), tokens, x)
        return x

    def chosen(self, conf: Tensor, floor: Tensor, opts) -> Tensor:
        """(n, L) bool: the n most confident positions of each row, n = max(``floor``, the
        rule's count); ``conf`` -inf off the candidates. LLaDA: topk(confidence[j],
        k=num_transfer_tokens[j, i]) per row; ties: the lower position first."""
        n_reveal = torch.maximum(floor, self.extra(conf, opts))
        order = conf.argsort(dim=-1, descending=True, stable=True)
        places = torch.arange(conf.shape[-1], device=conf.device).expand_as(order)
        rank = torch.empty_like(order).scatter_(-1, order, places)
        return rank < n_reveal[:, None]


def capped_sigma(eta: float, ratio: float) -> float:
    """ReMDM max-capped schedule: sigma = min(eta_cap, (1 - alpha_s) / alpha_t)."""
    return min(eta, ratio)


def rescaled_sigma(eta: float, ratio: float) -> float:
    """ReMDM rescaled schedule: sigma = eta_rescale * sigma_max."""
    return eta * min(1.0, ratio)


def max_sigma(eta: float, ratio: float) -> float:
    """sigma_max = min(1, (1 - alpha_s) / alpha_t) (remdm-conf scales it per position)."""
    return min(1.0, ratio)


@dataclass(frozen=True, kw_only=True)
class ReMDM(Decoding):
    """ReMDM sampling (Wang et al. 2025; kuleshov-group/remdm diffusion.py::_sample with
    ``_ddpm_caching_update``) on t_k = linspace(1, 1e-5, nfe + 1), one call per step, on the
    whole canvas. ``sigma(eta, (1 - alpha_s) / alpha_t)``: the schedule; ``eta``: its value when
    ``remdm_eta`` is unset (the reference script's); ``by_confidence``: remdm-conf's per-position
    weights."""

    sigma: Callable[[float, float], float] | None = None
    eta: float = 0.0
    by_confidence: bool = False
    eos_note: str = "one block, the whole canvas, and a decoded token may be remasked"
    blocks: ClassVar[bool] = False
    block_cacheable: ClassVar[bool] = False

    def eta_of(self, opts) -> float:
        return self.eta if opts.remdm_eta is None else opts.remdm_eta

    def check(self, opts) -> None:
        """Reject, before the first call, options this schedule cannot run."""

    def step(self, m, t: float, s: float, last: bool) -> tuple:
        """(alpha_t, alpha_s, sigma) of one step from t to s (floats; kuleshov-group/remdm
        diffusion.py::_ddpm_caching_update). ``remdm-conf``: sigma is sigma_max, scaled per
        position by the confidence weights (:meth:`run`). The last step goes to alpha_s = 1,
        where (1 - alpha_s) / alpha_t = 0 gives sigma = 0, so every token ends revealed with no
        noise-removal call."""
        a_t = float(m.alpha(torch.tensor(t, dtype=torch.float64)))
        a_s = 1.0 if last else float(m.alpha(torch.tensor(s, dtype=torch.float64)))
        ratio = (1 - a_s) / a_t  # alpha_t >= eps > 0 on this schedule (reference: else eta)
        return a_t, a_s, self.sigma(self.eta_of(m.opts), ratio)

    def run(self, m, backbone, x, generated, nfe, temperature, float64, generator) -> Tensor:
        """Each position draws z_s from the ReMDM posterior q_sigma over the V tokens and [MASK]:
        a decoded token is kept w.p. 1 - sigma and remasked w.p. sigma, a masked one becomes
        token v w.p. p_theta(v) (alpha_s - (1 - sigma) alpha_t) / (1 - alpha_t) and stays masked
        otherwise. Prompt positions are never remasked (the reference has no prompts)."""
        n, L = x.shape
        dev = x.device
        self.check(m.opts)
        ts = torch.linspace(1.0, 1e-5, nfe + 1, device=dev, dtype=torch.float64)
        # remdm-conf's state: diffusion.py::_sample confident_score, -inf = none (masked)
        conf = torch.full((n, L), -torch.inf, device=dev, dtype=torch.float64)
        for k in range(nfe):
            last = k == nfe - 1
            a_t, a_s, sigma = self.step(m, float(ts[k]), float(ts[k + 1]), last)
            alpha_in = m.alpha(ts[k]).expand(n).float()  # the network's t: the grid's
            raw = m.call(backbone, x, m.sigma(alpha_in))
            is_mask = x == m.mask_id
            if self.by_confidence:
                # eta_conf = softmax(confident_score) over the row; 0 on masked positions
                weight = torch.nan_to_num(torch.softmax(conf, -1), nan=0.0)
                sig = torch.where(is_mask, 0.0, weight) * sigma
            else:
                sig = torch.full((n, L), sigma, device=dev, dtype=torch.float64)
            sig = torch.where(generated, sig, 0.0)  # the prompt stays
            # q_xs (decoded): p_x0 (1 - sigma), [MASK] sigma (p_x0 one-hot on the token: kept);
            # q_xs_2 (masked): p_x0 (alpha_s - (1 - sigma) alpha_t) / (1 - alpha_t), [MASK]
            # (1 - alpha_s - sigma alpha_t) / (1 - alpha_t). p_x0 sums to 1, so [MASK] or not is
            # drawn first, by one uniform against the two weights, and a token of p_x0 only
            # where a masked position is revealed (the same law)
            w_tok = torch.where(is_mask, (a_s - (1 - sig) * a_t) / (1 - a_t), 1 - sig)
            w_mask = torch.where(is_mask, (1 - a_s - sig * a_t) / (1 - a_t), sig)
            w_tok, w_mask = w_tok.clamp_min(0.0), w_mask.clamp_min(0.0)
            u = torch.rand(x.shape, generator=generator, device=dev, dtype=torch.float64)
            to_mask = u < w_mask / (w_tok + w_mask)
            reveal = is_mask & ~to_mask
            rows = m.filtered(token_logits(m, raw, reveal, temperature))
            draw = categorical_draw(rows, generator, float64)
            xs = torch.where(to_mask, m.mask_id, x)
            xs[reveal] = draw
            if self.by_confidence:
                # conf of a newly decoded token = -p_x0(token); a remasked one gets -inf
                drawn = torch.softmax(rows.double(), -1).gather(-1, draw[:, None]).squeeze(-1)
                conf = conf.clone()
                conf[reveal] = -drawn
                conf = torch.where(~is_mask & to_mask, -torch.inf, conf)
            x = xs
        return x


@dataclass(frozen=True, kw_only=True)
class ReMDMLoop(ReMDM):
    """remdm-loop (kuleshov-group/remdm ``_ddpm_caching_update``, scripts/remdm-loop.sh): MDLM
    until t_on, ReMDM at alpha_on with sigma = eta until t_off, MDLM after."""

    def check(self, opts) -> None:
        eta, a = self.eta_of(opts), opts.remdm_alpha_on
        if 1 - a - a * eta < 0:
            # the loop phase's q_xs_2 [MASK] probability (1 - a - a eta) / (1 - a) must be >= 0
            raise ValueError(
                f"options.remdm_eta: {eta} with remdm_alpha_on = {a} makes remdm-loop's [MASK] "
                f"probability (1 - a - a eta) / (1 - a) negative: need eta <= (1 - a) / a = "
                f"{(1 - a) / a:.4g}"
            )

    def step(self, m, t: float, s: float, last: bool) -> tuple:
        """The loop's phases; its last step is forced to alpha_s = 1, sigma = 0 from the phase's
        alpha_t (the phases do not reach alpha = 1 on the grid)."""
        o = m.opts
        eta = self.eta_of(o)
        a_on, t_on, t_off = o.remdm_alpha_on, o.remdm_t_on, o.remdm_t_off
        if t > t_on:  # remdm-loop, t > t_on: MDLM with alpha = (1 - t) alpha_on / (1 - t_on)
            a_t, a_s, sigma = (1 - t) * a_on / (1 - t_on), (1 - s) * a_on / (1 - t_on), 0.0
            # a coarse grid's step past t_on can give alpha_s > 1: the reference's [MASK]
            # weight is then negative and never drawn, i.e. alpha_s = 1
            a_s = min(a_s, 1.0)
        elif t <= t_off:  # t <= t_off: MDLM with alpha = 1 - t (1 - alpha_on) / t_off
            a_t, a_s, sigma = 1 - t * (1 - a_on) / t_off, 1 - s * (1 - a_on) / t_off, 0.0
        else:  # the loop: ReMDM at alpha_t = alpha_s = alpha_on, sigma = eta
            a_t, a_s, sigma = a_on, a_on, eta
        return (a_t, 1.0, 0.0) if last else (a_t, a_s, sigma)


_ANCESTRAL_COST = (
    "a (B, L) uniform; at the R positions it reveals, the float32 exponentials of p_theta and "
    "a float64 cumulative sum over (R, V+1), one uniform each (R over a run: the generated length)"
)
_REMDM_COST = (
    "O(B L) for the q_sigma weights and a (B, L) uniform; at the R positions it reveals, the "
    "draw over (R, V+1) as `ancestral`'s"
)
_BLOCKED = (*FILTERS, "block_length", "block_cache", "cache_refresh")

#: MDLM's decodings, the first the default (kuleshov-group/remdm ``sampling.sampler`` names the
#: ReMDM ones; their eta: scripts/remdm-cap.sh, remdm-rescale.sh, remdm-loop.sh)
DECODINGS: dict[str, Decoding] = {
    "ancestral": Ancestral(
        summary="each masked position revealed w.p. (alpha_s - alpha_t)/(1 - alpha_t), its token "
        "drawn from p_theta; t_k = linspace(1, 1e-5, nfe + 1), last step alpha_s = 1",
        reference="MDLM (Sahoo et al. 2024), the absorbing posterior q(z_s | z_t, x); s-flm "
        "`samplers.py::AncestralSampler`",
        cost=_ANCESTRAL_COST,
        options=_BLOCKED,
    ),
    "greedy": Ancestral(
        greedy_tail=True,
        summary="`ancestral`, the last step takes the argmax",
        reference="as `ancestral`",
        cost="as `ancestral`, argmax at the last step",
        options=_BLOCKED,
    ),
    "cached": Ancestral(
        cache=True,
        call_skipping=True,
        calls_note="a step after one that changed no token reuses p_theta",
        summary="`ancestral`; after a step that changed no token of the batch, the next step "
        "reuses p_theta instead of calling the network (never when `time_conditioning`)",
        reference="MDLM's cached sampler (`ddpm_cache`); kuleshov-group/mdlm "
        "`diffusion.py::_sample` (`torch.allclose(x_next, x)`) and `_ddpm_caching_update`",
        cost="as `ancestral`, minus the skipped calls",
        options=(*FILTERS, "block_length", "time_conditioning"),
    ),
    "confidence": ConfidenceOrder(
        score=p_theta_score,
        summary="draws every masked position (Gumbel-max at T), reveals the k with the highest "
        "p_theta(draw) at T = 1, unfiltered",
        reference="LLaDA (Nie et al. 2025); ML-GSAI/LLaDA `generate.py::generate` "
        "(`remasking='low_confidence'`, `add_gumbel_noise`, `get_num_transfer_tokens`)",
        cost="at the M masked positions of the block: the draw over (M, V+1), a logsumexp (and "
        "logits at T = 1 when T != 1), a (B, L) sort",
        options=_BLOCKED,
    ),
    "threshold": ConfidenceOrder(
        score=p_theta_score,
        extra=over_threshold,
        call_skipping=True,
        calls_note="a block stops when it has no mask left",
        summary="as `confidence`; a step reveals every masked position of the block with "
        "p_theta(draw) >= `tau`, at least one, and at least `confidence`'s count (the budget)",
        reference="Fast-dLLM (Wu et al. 2025) parallel decoding; NVlabs/Fast-dLLM "
        "`llada/generate.py::get_transfer_index` (`threshold`), ZHZisZZ/dllm "
        "`pipelines/fastdllm/llada/sampler.py::_get_transfer_index`",
        cost="as `confidence`, a (B, L) count over tau",
        options=(*_BLOCKED, "tau"),
    ),
    "factor": ConfidenceOrder(
        score=p_theta_score,
        extra=factor_count,
        call_skipping=True,
        calls_note="a block stops when it has no mask left",
        summary="as `threshold`; the n most confident revealed, n the most ranks r with "
        "c_(r) >= 1 - `factor`/(r + 1) (rank 1 always)",
        reference="Fast-dLLM's factor rule; ZHZisZZ/dllm "
        "`pipelines/fastdllm/llada/sampler.py::_get_transfer_index` (`factor`)",
        cost="as `confidence`, a (B, L) sort",
        options=(*_BLOCKED, "factor"),
    ),
    "margin": ConfidenceOrder(
        score=margin_score,
        summary="as `confidence`, confidence = top-1 minus top-2 probability",
        reference="Dream (Ye et al. 2025); `generation_utils.py::sample_tokens` "
        "(`margin_confidence`, alg `topk_margin`)",
        cost="as `confidence`, a top-2 and a logsumexp over (M, V+1)",
        options=_BLOCKED,
    ),
    "entropy": ConfidenceOrder(
        score=neg_entropy_score,
        summary="as `confidence`, confidence = sum p log(p + 1e-10) (negative entropy)",
        reference="Dream; `sample_tokens` (`neg_entropy`, alg `entropy`)",
        cost="as `confidence`, a float32 softmax, log and sum over (M, V+1)",
        options=_BLOCKED,
    ),
    "remdm-cap": ReMDM(
        sigma=capped_sigma,
        eta=0.008,
        summary="ReMDM posterior with sigma_t = min(eta, (1 - alpha_s)/alpha_t)",
        reference="ReMDM (Wang et al. 2025), max-capped schedule; kuleshov-group/remdm "
        "`diffusion.py::_ddpm_caching_update`, `scripts/remdm-cap.sh` (eta 0.008)",
        cost=_REMDM_COST,
        options=("remdm_eta", *FILTERS),
    ),
    "remdm-rescale": ReMDM(
        sigma=rescaled_sigma,
        eta=0.015,
        summary="sigma_t = eta sigma_max, sigma_max = min(1, (1 - alpha_s)/alpha_t)",
        reference="ReMDM rescaled schedule; `remdm-rescale`, `scripts/remdm-rescale.sh` "
        "(eta 0.015)",
        cost="as `remdm-cap`",
        options=("remdm_eta", *FILTERS),
    ),
    "remdm-conf": ReMDM(
        sigma=max_sigma,
        by_confidence=True,
        summary="sigma_t^l = softmax_l(-psi^l) sigma_max, psi^l = p_theta of token l when it was "
        "last decoded (masked: weight 0)",
        reference="ReMDM confidence-based schedule; `remdm-conf` (`confident_score`), "
        "`scripts/remdm-conf.sh`",
        cost="as `remdm-cap`, a (B, L) softmax and gather",
        options=FILTERS,
    ),
    "remdm-loop": ReMDMLoop(
        eta=0.02,
        summary="t > t_on: MDLM with alpha = (1 - t) alpha_on/(1 - t_on); t_off < t <= t_on: "
        "ReMDM at alpha = alpha_on, sigma = eta; t <= t_off: MDLM with alpha = 1 - t "
        "(1 - alpha_on)/t_off",
        reference="ReMDM loop; `remdm-loop`, `scripts/remdm-loop.sh` (eta 0.02, t_on 0.55, "
        "t_off 0.05, alpha_on 0.9)",
        cost="as `remdm-cap`",
        options=("remdm_eta", "remdm_t_on", "remdm_t_off", "remdm_alpha_on", *FILTERS),
    ),
}
