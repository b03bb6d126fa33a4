"""The ``is_greedy`` check of the lm-eval adapter (:mod:`bench.lmeval.model`'s docstring,
docs/likelihood.md "is_greedy"): which check a method has (AR's argmax chain, an absorbing- or a
uniform-state denoiser), the rule the requests use, and the greedy denoising of a batch's
continuations. :class:`GreedyCheck` is mixed into :class:`bench.lmeval.model.SFLMBenchLM`, whose
``method``, ``backbone``, ``bound_kind``, ``exact``, ``left_to_right``, ``greedy``,
``greedy_steps`` and ``greedy_family`` it reads.
"""

from __future__ import annotations

import torch

from bench.config import ConfigError
from bench.lmeval.args import NAME, log

#: the network's time at the last step of ``greedy=decode`` (MDLM's confidence decoding's grid)
GREEDY_T_END = 1e-5


class GreedyCheck:
    """The ``is_greedy`` check of an lm-eval model over one method (module docstring)."""

    def _greedy_family(self) -> str | None:
        """Which ``is_greedy`` check the method has: "left_to_right" (an exact left-to-right
        method: AR), "masked" (an absorbing-state denoiser: MDLM), "uniform" (a uniform-state one:
        Duo), None (none here: no bound, or a plug-in's method)."""
        from baselines.duo import Duo
        from baselines.mdlm import MDLM

        if not self.bound_kind:
            return None
        if self.exact and self.left_to_right:
            return "left_to_right"
        if isinstance(self.method, MDLM):
            return "masked"
        if isinstance(self.method, Duo):
            return "uniform"
        return None

    def _greedy_rule(self, rule: str, explicit: bool) -> str:
        """The rule the requests use: ``rule``; "left_to_right" for AR (both rules are its
        argmax chain); "off" for a method without a bound (it refuses likelihoods anyway). A
        bound without a check here refuses an explicit rule, and is "off" by default, warned."""
        if not self.bound_kind:
            return "off"
        family = self.greedy_family
        if family is None and rule != "off":
            if explicit:
                raise ConfigError(
                    f"{NAME}: model_args greedy: {self.method_name} has no greedy check here "
                    "(it needs an absorbing- or uniform-state denoiser, as MDLM and Duo); use "
                    "greedy=off"
                )
            rule = "off"
        if rule == "off":
            log.warning(
                "%s: greedy=off for %s: is_greedy is False for every request, so lm-eval's acc "
                "of loglikelihood tasks reads 0 and measures nothing", NAME, self.method_name
            )  # fmt: skip
            return rule
        return "left_to_right" if family == "left_to_right" else rule

    def _greedy_steps_info(self) -> int | str | None:
        """The network calls of one ``is_greedy`` check (per batch of requests)."""
        if self.greedy == "off":
            return None
        if self.greedy == "decode":
            return self.greedy_steps or "one per continuation token"
        return 1  # one_pass; AR's argmax chain is one teacher-forced call

    def _noised(self, x0: torch.Tensor, cont: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """The canvas at t = 1 on the continuation ``cont``, clean elsewhere: MDLM's [MASK]
        (its prior), Duo's uniform ids (its sampler's prior)."""
        if self.greedy_family == "masked":
            return x0.masked_fill(cont, self.method.mask_id)
        shape, V = x0.shape, self.method.vocab_size
        unif = torch.randint(0, V, shape, generator=gen, device=gen.device).to(x0.device)
        return torch.where(cont, unif, x0)

    def _denoiser(self, x: torch.Tensor, alpha_t: torch.Tensor) -> torch.Tensor:
        """log p_theta(x_0 | x_t) (B, L, classes) as each method's sampler computes it: MDLM's
        SUBS log-probs ([MASK] class -inf), Duo's log-softmax at sigma = -log alpha_t."""
        m = self.method
        if self.greedy_family == "masked":
            return m.log_probs(self.backbone, x, alpha_t.float())
        return torch.log_softmax(self.backbone(x, m.sigma(alpha_t).float()).float(), -1)

    @torch.no_grad()
    def _greedy_denoise(self, batch, gen: torch.Generator) -> torch.Tensor:
        """(B,) bool: whether the greedy denoising of each row's continuation (its
        ``loss_mask`` positions, noised in full: :meth:`_noised`) gives it back token for token,
        by the ``greedy`` rule (module docstring)."""
        x0, cont = batch.x, batch.loss_mask & ~batch.clean_mask
        B, L = x0.shape
        n = cont.sum(-1)
        if self.greedy == "one_pass":
            steps = torch.ones_like(n)
        else:
            steps = n if self.greedy_steps is None else n.clamp(max=self.greedy_steps)
        steps = steps.clamp(min=1)
        # LLaDA generate.py::get_num_transfer_tokens: n // steps per step, the first n % steps
        # steps one more
        base, extra = n // steps, n % steps
        x, todo = self._noised(x0, cont, gen), cont.clone()
        places = torch.arange(L, device=x0.device).expand(B, L)
        for k in range(int(steps.max())):
            # t_k = linspace(1, 1e-5, steps + 1)[k] per row: the grid of MDLM's confidence
            # orders (baselines/mdlm_samplers.py); one pass is t = 1, where the samplers start
            # (the noised continuation is their prior)
            frac = (k / steps.double()).clamp(max=1.0)
            alpha_t = self.method.alpha(1.0 - (1.0 - GREEDY_T_END) * frac)
            conf, pred = self._denoiser(x, alpha_t).max(-1)
            # one_pass: s-sahoo/duo discrete_diffusion_harness.py::_suffix_greedy_prediction_mdlm
            # (_duo_base), all positions at once; decode: ML-GSAI/LLaDA
            # eval_llada.py::suffix_greedy_prediction, the most confident first (p of the argmax)
            conf = torch.where(todo, conf.double(), -torch.inf)
            order = conf.argsort(dim=-1, descending=True, stable=True)
            rank = torch.empty_like(order).scatter_(-1, order, places)
            n_reveal = torch.where(k < steps, base + (k < extra).long(), 0)
            reveal = todo & (rank < n_reveal[:, None])
            x = torch.where(reveal, pred, x)
            todo &= ~reveal
        return ((x == x0) | ~cont).all(-1).cpu()
