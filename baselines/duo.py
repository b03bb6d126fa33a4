"""Duo: uniform-state discrete diffusion as the S-FLM paper ran it ("duo_base").

Sahoo et al. 2025, "The Diffusion Duality"; reference code s-sahoo/duo `algo.py::DUO_BASE`,
`trainer_base.py::UniformState`, and the S-FLM harness (FrankCCCCC/s-flm @ 18d586f)
`algo.py::DUO_BASE`, `samplers.py::uniform_posterior_probs / sample_uniform_posterior`.

- Vocabulary V = the task vocabulary (no mask token, no extra input/output class).
- Forward (UDLM): q(x_t | x_0) = alpha_t onehot(x_0) + (1 - alpha_t) / V; implemented as
  "with probability 1 - alpha_t replace the token by a uniform draw (which may equal x_0)"
  (`UniformState.q_xt`). Clean positions (prompt / givens) are never noised.
- Log-linear schedule alpha_t = 1 - (1 - eps) t, alpha'_t = -(1 - eps), eps = 1e-3.
- Time-conditioned: the network receives sigma = -log alpha_t; "mean" parameterisation
  (plain log-softmax over V).
- Loss: the closed-form continuous-time UDLM NELBO (:mod:`baselines.duo_loss`: :func:`udlm_nelbo`,
  `DUO_BASE.nll_per_token`), optionally ``low_var`` (drops term1, as the reference's
  ``loss_type=low_var``); computed by the blockwise fused NELBO unless ``nelbo: reference``.

Likelihood (``nll_bound``, ``bound_kind`` upper bound): that NELBO without the curriculum
(the reference's evaluation path), summed over the counted positions, one Monte-Carlo draw of
(t, x_t) per sequence and row, the reference evaluation's antithetic t on [1e-3, 1], float64.

Sampler (the decodings, their posteriors and schedules: :mod:`baselines.duo_samplers`, table
``DECODINGS``): ancestral over t_k = linspace(1, 1e-5, nfe + 1), exactly ``nfe`` backbone calls,
prior = uniform random tokens. Each step draws x_s from the uniform-state posterior
q(x_s | x_t, x_hat = p_theta) at every non-prompt position (no freezing: a position can
change at every step), without materialising the posterior: one uniform threshold per
position chooses "uniform token" / "keep x_t" / "draw from p_theta"
(:func:`sample_uniform_posterior`).
The last step uses alpha_s = 1; decoding ``ancestral`` samples it, ``greedy`` ("greedy tail",
Duo paper sec. 4.2) takes argmax p_theta at that same step, so both spend exactly ``nfe``
calls (the Duo repo adds one extra noise-removal forward, NFE = nfe + 1).

Psi-samplers (Deschenaux, Gulcehre, Sahoo 2026, "The Diffusion Duality, Chapter II: Psi-Samplers";
s-sahoo/duo `trainer_base.py::_psi_update`, `_get_sampling_time_profile`, `_get_kappas`):
decodings ``psi`` / ``psi-greedy`` draw each step from kappa q(x_s | x_t, x_hat) + (1 - kappa)
[alpha_s q(x_0 | x_t, x_hat) + (1 - alpha_s) / V] (predictor posterior + re-noised prediction)
on the reference's time profile with its kappa schedule (options ``psi_*`` = ``sampling.psi``;
at their defaults psi draws exactly what ``ancestral`` draws), as one threshold draw with the
kappa-mixed masses (:func:`sample_psi_posterior`); the reference's last step and its
noise-removal call are merged into the last call (alpha_s = 1), so exactly ``nfe`` calls;
``psi-greedy`` takes the argmax there (``sampling.noise_removal=greedy``).

Variant (off by default, ``curriculum_end > 0``): the Duo paper's Gaussian-curriculum
training (duo `algo.py::DUO.nll`): a Gaussian latent of the one-hot, the network fed the
tempered softmax of that latent, the NELBO evaluated at x_t = argmax of the latent with the
"diffusion-duality" alpha_t = T(gamma) from a table computed for the vocabulary
in use (:func:`baselines.duo_curriculum.duality_table`), not the tokenizer-specific pickle of the
Duo repo. The gamma range defaults to the one whose alpha span equals that of Duo's [-3.5, -1.75]
on GPT-2 (:func:`baselines.duo_curriculum.curriculum_gamma_range`); explicit gamma_min /
gamma_max reproduce the Duo config. The curriculum is :mod:`baselines.duo_curriculum`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from baselines.duo_curriculum import curriculum_loss, gamma_range
from baselines.duo_loss import (  # noqa: F401 (udlm_nelbo*: the objective's public names)
    NELBO,
    udlm_nelbo,
    udlm_nelbo_fused,
    udlm_nelbo_reference,
)
from baselines.duo_reference import DuoReference
from baselines.duo_samplers import (  # noqa: F401 (the posteriors' and schedules' public names)
    DECODINGS,
    PSI_OPTIONS,
    psi_kappas,
    psi_mode,
    psi_posterior_probs,
    psi_profile,
    psi_step,
    psi_times,
    sample_psi_posterior,
    sample_uniform_posterior,
    uniform_posterior_probs,
)
from bench.backbones.dit import build_dit
from bench.config import BackboneConfig, ConfigError
from bench.method import (
    BOUND_BLOCK_BYTES,
    BOUND_ELBO,
    CATEGORICAL_SAMPLING,
    LOSS_NELBO,
    Batch,
    CategoricalSampling,
    LossOutput,
    Method,
    bound_times,
    token_mean,
)
from bench.numerics import log_linear_alpha, log_linear_dalpha, sigma_of_alpha
from bench.options import option

#: loss_type -> whether the NELBO drops its first term (the reference's ``loss_type=low_var``)
LOW_VAR = {"elbo": False, "low_var": True}
#: loss_type -> what the loss is (bench.method.Method.loss_kind), the curriculum aside
LOSS_KINDS = {
    "elbo": LOSS_NELBO,
    "low_var": "NELBO without its first term (low_var): not a likelihood bound (nats/token)",
}


@dataclass
class DuoOptions(CategoricalSampling):
    eps: float = option(1e-3, gt=0.0, lt=1.0, help="log-linear schedule floor: alpha_1 = eps")
    loss_type: str = option(
        "elbo",
        choices=tuple(LOW_VAR),
        help="elbo = closed-form UDLM NELBO; low_var = NELBO without term1 (reference low_var)",
    )
    time_conditioning: bool = option(
        True, help="feed sigma = -log alpha_t to the network (duo_base: True)"
    )
    nelbo: str = option(
        "fused",
        choices=tuple(NELBO),
        omit_default=True,
        help="how the NELBO is computed (the same formula): fused = blockwise over rows, one "
        "pass of softmax + log per block, no (B, L, V) tensor kept for the backward; reference "
        "= the elementwise chain of DUO_BASE.nll_per_token on log_softmax (the test oracle; "
        "equal up to float rounding; ~1.9x the fused step time at |V| ~ 50k on CPU)",
    )
    # -- Duo-paper Gaussian curriculum (variant; curriculum_end = 0 is duo_base as the S-FLM
    # paper ran it)
    curriculum_end: int = option(
        0,
        ge=0,
        help="train step at which the Gaussian curriculum ends and the plain "
        "NELBO takes over (0 = no curriculum = duo_base; Duo config: 200000)",
    )
    curriculum_start: int = option(
        0, ge=0, help="step at which tau starts its log-linear decay (Duo config: 100000)"
    )
    gamma_min: float | None = option(
        None,
        help="curriculum: Gaussian log-noise-ratio gamma at t = 0 (Duo OWT: "
        "-3.5); None = solve T(gamma_min) = curriculum_alpha_max for this vocabulary",
    )
    gamma_max: float | None = option(
        None,
        help="curriculum: gamma at t = 1 (Duo OWT: -1.75); None = solve "
        "T(gamma_max) = curriculum_alpha_min",
    )
    curriculum_alpha_max: float = option(
        0.928, gt=0.0, lt=1.0, help="alpha at gamma_min when derived (= T(-3.5) for GPT-2)"
    )
    curriculum_alpha_min: float = option(
        0.038, gt=0.0, lt=1.0, help="alpha at gamma_max when derived (= T(-1.75) for GPT-2)"
    )
    tau_start: float = option(
        1e-1, gt=0.0, help="curriculum: softmax temperature until curriculum_start (Duo: 10^-1)"
    )
    tau_end: float = option(
        1e-2, gt=0.0, help="curriculum: softmax temperature reached at curriculum_end (Duo: 10^-2)"
    )
    # -- Psi-samplers (decodings psi / psi-greedy; s-sahoo/duo configs/config.yaml sampling.psi,
    # its defaults: psi then equals the ancestral sampler draw for draw)
    psi_time_profile: str = option(
        "linear",
        omit_default=True,
        help="psi: time grid, sampling.psi.time_profile: linear = linspace(1, 1e-5, nfe + 1); "
        "linear-constant-linear-<c> = linear from 1 to t = c over the high fraction of the points, "
        "constant at c over the middle fraction, linear from c to 1e-5 (the ReMDM loop); "
        "...-<c>-inv: c is an alpha, t = 1 - c (duo LogLinear.get_t_for_alpha)",
    )
    psi_high_mode: str = option(
        "pure-posterior",
        omit_default=True,
        help="psi: kappa mode over the first psi_high_frac of the time points: pure-posterior "
        "(kappa 1), pure-pc (kappa 0), constant-<kappa>, constant-remdm-<eta>, max-capped-<eta>, "
        "max-rescale-<eta> (kappa = clip(1 - sigma / (1 - alpha_s), 0, 1), ReMDM's sigma)",
    )
    psi_middle_mode: str = option(
        "pure-posterior",
        omit_default=True,
        help="psi: kappa mode over the next psi_middle_frac of the time points (as psi_high_mode)",
    )
    psi_low_mode: str = option(
        "pure-posterior",
        omit_default=True,
        help="psi: kappa mode over the remaining time points (as psi_high_mode)",
    )
    psi_high_frac: float = option(
        0.2,
        ge=0.0,
        le=1.0,
        omit_default=True,
        help="psi: fraction of the nfe + 1 time points in psi_high_mode (and, for a "
        "linear-constant-linear profile, on its first linear piece); sampling.psi.high_frac",
    )
    psi_middle_frac: float = option(
        0.6,
        ge=0.0,
        le=1.0,
        omit_default=True,
        help="psi: fraction of the time points in psi_middle_mode (the constant piece of a "
        "linear-constant-linear profile); sampling.psi.middle_frac",
    )

    def validate(self):
        if (self.gamma_min is None) != (self.gamma_max is None):
            raise ConfigError(
                "gamma_min: set both gamma_min and gamma_max, or neither "
                "(derived from the vocabulary)"
            )
        if self.gamma_min is not None and not self.gamma_min < self.gamma_max:
            raise ConfigError(
                f"gamma_min: must be < gamma_max ({self.gamma_min} >= {self.gamma_max})"
            )
        if not self.curriculum_alpha_min < self.curriculum_alpha_max:
            raise ConfigError(
                f"curriculum_alpha_min: must be < curriculum_alpha_max "
                f"({self.curriculum_alpha_min} >= {self.curriculum_alpha_max})"
            )
        if self.curriculum_end and self.curriculum_start > self.curriculum_end:
            raise ConfigError(
                "curriculum_start: must be <= curriculum_end "
                f"({self.curriculum_start} > {self.curriculum_end})"
            )
        for key in ("psi_high_mode", "psi_middle_mode", "psi_low_mode"):
            try:
                psi_mode(getattr(self, key))
            except ValueError as e:
                raise ConfigError(f"{key}: {e}") from None
        try:
            psi_profile(self.psi_time_profile)
        except ValueError as e:
            raise ConfigError(f"psi_time_profile: {e}") from None
        if self.psi_high_frac + self.psi_middle_frac > 1.0:
            raise ConfigError(
                f"psi_middle_frac: psi_high_frac + psi_middle_frac must be <= 1 "
                f"({self.psi_high_frac} + {self.psi_middle_frac})"
            )


# --------------------------------------------------------------------------- the method


class Duo(Method):
    name = "duo"
    Options = DuoOptions
    #: name -> sampler object (baselines.duo_samplers; docs and ``--list`` are drawn from it)
    DECODINGS = DECODINGS
    decodings = tuple(DECODINGS)
    #: the draws' filters (top-p / top-k) and the Psi-samplers' schedule: they reuse the model
    sampling_options = CATEGORICAL_SAMPLING + PSI_OPTIONS
    conformance_variants = [{}, {"curriculum_end": 1000}]
    loss_kind = LOSS_NELBO
    #: the UDLM NELBO without the curriculum, by Monte Carlo over t (:meth:`nll_bound`)
    bound_kind = BOUND_ELBO
    #: reference checkpoint format (bench.reference_format; docs/checkpoints.md)
    reference = DuoReference()

    @classmethod
    def loss_kind_for(cls, options) -> str:
        """The UDLM NELBO; ``low_var`` drops a term (no bound); with the curriculum the training
        batches' loss is its Gaussian-curriculum estimate until ``curriculum_end`` (held-out
        examples: the NELBO at every step)."""
        if not LOW_VAR[options.loss_type] and options.curriculum_end:
            return (
                f"{LOSS_NELBO}; on training batches the Gaussian-curriculum estimate until step "
                f"{options.curriculum_end}"
            )
        return LOSS_KINDS[options.loss_type]

    def __init__(self, options, vocab_size: int, seq_len: int):
        super().__init__(options, vocab_size, seq_len)
        if vocab_size < 2:
            raise ConfigError(f"duo: vocab_size must be >= 2, got {vocab_size}")
        # Curriculum clock (= the trainer's global step; record_losses runs once per step). A
        # persistent buffer so that it travels in checkpoints: a resumed run must not restart
        # the curriculum (duo `DUO.nll` reads Lightning's restored global_step).
        self.register_buffer("curriculum_step", torch.zeros((), dtype=torch.long))

    def build_backbone(self, cfg: BackboneConfig):
        return build_dit(cfg, self.vocab_size, self.vocab_size)

    # -- schedule -----------------------------------------------------------------
    def alpha(self, t: Tensor) -> Tensor:
        """Log-linear alpha_t = 1 - (1 - eps) t (`noise_schedules.py::LogLinear`)."""
        return log_linear_alpha(t, self.opts.eps)

    def sigma(self, alpha_t: Tensor) -> Tensor:
        """Network time input sigma = -log alpha_t (`Diffusion._sigma_from_alphat`)."""
        return sigma_of_alpha(alpha_t, self.opts.time_conditioning)

    def q_xt(self, x0: Tensor, alpha_t: Tensor, clean_mask: Tensor) -> Tensor:
        """Uniform-state forward: replace by a uniform token with prob. 1 - alpha_t."""
        move = torch.rand(x0.shape, device=x0.device) < (1 - alpha_t)[:, None]
        unif = torch.randint(0, self.vocab_size, x0.shape, device=x0.device)
        return torch.where(move & ~clean_mask, unif, x0)

    # -- training -----------------------------------------------------------------
    def loss(self, backbone, batch: Batch, t: Tensor | None) -> LossOutput:
        if (
            self.opts.curriculum_end
            and self.train_step < self.opts.curriculum_end
            and backbone.training
        ):
            return curriculum_loss(self, backbone, batch, t)
        alpha_t = self.alpha(t)  # (B,)
        dalpha_t = torch.full_like(alpha_t, log_linear_dalpha(self.opts.eps))
        x_t = self.q_xt(batch.x, alpha_t, batch.clean_mask)
        logits = backbone(x_t, self.sigma(alpha_t)).float()
        per_token = self.nelbo(
            logits,
            x_t,
            batch.x,
            alpha_t[:, None],
            dalpha_t[:, None],
            low_var=LOW_VAR[self.opts.loss_type],
        )
        return token_mean(per_token * ~batch.clean_mask, batch.loss_mask)

    def nelbo(self, logits, x_t, x0, alpha_t, dalpha_t, low_var: bool = False) -> Tensor:
        """(B, L) NELBO integrand (Duo eq. 9) from the logits, by the ``nelbo`` option's
        implementation (:data:`baselines.duo_loss.NELBO`)."""
        fn = NELBO[self.opts.nelbo]
        return fn(logits, x_t, x0, alpha_t, dalpha_t, self.vocab_size, low_var=low_var)

    def record_losses(self, t: Tensor, per_sample: Tensor, step: int) -> None:
        self.curriculum_step.fill_(step + 1)

    @property
    def train_step(self) -> int:
        return int(self.curriculum_step)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "curriculum_step"
        if key not in state_dict:  # weights written before the clock was a buffer: keep 0
            state_dict = {**state_dict, key: self.curriculum_step.clone()}
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def gamma_range(self) -> tuple[float, float]:
        """The curriculum's (gamma_min, gamma_max) for this vocabulary
        (:func:`baselines.duo_curriculum.gamma_range`)."""
        return gamma_range(self.opts, self.vocab_size)

    def validate_plan(self, *, backbone, train, sample) -> None:
        """The backbone (the base class) and, with the curriculum on, its gamma range (derived
        from the alpha span when the first training step needs it)."""
        super().validate_plan(backbone=backbone, train=train, sample=sample)
        if self.opts.curriculum_end:
            self.gamma_range()
        for nfe in sample.nfe:  # a linear-constant-linear grid whose fractions round past nfe + 1
            try:
                self.psi_schedule(nfe)
            except ValueError as e:
                raise ConfigError(f"options.psi_middle_frac: {e}") from None

    # -- likelihood ---------------------------------------------------------------
    @torch.no_grad()
    def nll_bound(self, backbone, batch: Batch, *, n_draws: int, generator) -> Tensor:
        """The continuous-time UDLM NELBO (Duo eq. 9) of each sequence's counted positions
        (:meth:`bound_positions`; every other position stays clean), one Monte-Carlo draw per
        row: per draw one t per sequence (:func:`bench.method.bound_times`: the reference's
        antithetic draws on [1e-3, 1]), x_t replaces each counted position by a uniform id with
        probability 1 - alpha_t, and the row is the NELBO integrand (:meth:`nelbo`, the
        training loss's, never ``low_var``) summed over the counted positions, from the logits
        in float64. No curriculum whatever the options: the reference evaluates the true NELBO
        (duo ``algo.py::DUO.nll``: ``use_true_nll = ... or not train_mode``). As in the
        reference the prior term (alpha_1 = eps > 0) is not added and t is drawn on [1e-3, 1].
        Random draws, in order, per row: ``bound_times`` (B uniforms, a permutation), a (B, L)
        ``randint`` for the uniform ids, then a (B, L) float64 uniform for which positions move
        (the order of s-flm's ``UniformState.q_xt``), all on ``generator``'s device."""
        x0 = batch.x
        B, L = x0.shape
        dev, gdev = x0.device, generator.device
        counted = self.bound_positions(batch)
        dalpha = log_linear_dalpha(self.opts.eps)
        rows = max(1, BOUND_BLOCK_BYTES // (8 * L * self.vocab_size))  # float64 logits per block
        out = torch.empty(n_draws, B, dtype=torch.float64, device=dev)
        for k in range(n_draws):
            # antithetic t: duo trainer_base.py:465-482 _sample_t (sampling_eps 1e-3)
            t = bound_times(B, generator=generator, device=dev)
            alpha_t = self.alpha(t)  # float64
            # uniform forward q(x_t | x_0) = alpha_t x_0 + (1 - alpha_t) / V: duo
            # trainer_base.py:975-990, s-flm trainer_base.py:636-660 UniformState.q_xt (s-flm:
            # only the valid tokens move)
            unif = torch.randint(0, self.vocab_size, x0.shape, generator=generator, device=gdev)
            u = torch.rand(x0.shape, generator=generator, device=gdev, dtype=torch.float64)
            move = (u.to(dev) < (1 - alpha_t)[:, None]) & counted
            x_t = torch.where(move, unif.to(dev), x0)
            logits = backbone(x_t, self.sigma(alpha_t).float())
            for i in range(0, B, rows):
                j = min(B, i + rows)
                # Duo eq. 9 integrand: duo algo.py:337-372 / s-flm algo.py:166-206
                # DUO_BASE.nll_per_token (baselines/duo_loss.py), in float64
                per_token = self.nelbo(
                    logits[i:j].double(),
                    x_t[i:j],
                    x0[i:j],
                    alpha_t[i:j, None],
                    torch.full_like(alpha_t[i:j, None], dalpha),
                )
                out[k, i:j] = torch.where(counted[i:j], per_token, 0.0).sum(-1)
        return out

    # -- sampling -----------------------------------------------------------------
    def psi_schedule(self, nfe: int, device=None) -> tuple[Tensor, list[float]]:
        """(times, kappas) of the Psi-samplers at ``nfe`` calls: the reference's nfe + 1 times
        (:func:`psi_times`, eps 1e-5 as its ``generate_samples``) and their kappas
        (:func:`psi_kappas`) under this model's log-linear alpha. The step k < nfe - 1 goes from
        times[k] to times[k + 1] with kappas[k]; the last step goes from times[nfe - 1] to
        alpha_s = 1 (the reference's step to times[nfe] and its noise-removal call, merged)."""
        o = self.opts
        times = psi_times(
            o.psi_time_profile, nfe, o.psi_high_frac, o.psi_middle_frac, device=device
        )
        modes = (o.psi_high_mode, o.psi_middle_mode, o.psi_low_mode)
        kappas = psi_kappas(times, self.alpha, modes, o.psi_high_frac, o.psi_middle_frac)
        return times, kappas.tolist()

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
        if nfe < 1:
            raise ValueError(f"duo: nfe must be >= 1, got {nfe}")
        n, L = prompt.shape
        dev = prompt.device
        prior = torch.randint(0, self.vocab_size, (n, L), generator=generator, device=dev)
        x = torch.where(prompt_mask, prompt, prior)
        ts, kappas = dec.schedule(self, nfe, dev)  # linear, or the Psi profile and kappas
        for k in range(nfe):
            last = k == nfe - 1
            alpha_t = self.alpha(ts[k]).expand(n)
            alpha_s = torch.ones_like(alpha_t) if last else self.alpha(ts[k + 1]).expand(n)
            raw = self.call(backbone, x, self.sigma(alpha_t).float())
            if last and dec.greedy_tail:
                x_new = raw.argmax(-1)  # duo generate_samples: noise_removal == 'greedy'
            else:
                # duo trainer_base.py::_psi_update (kappa 1: the ancestral posterior, Duo eq. 5).
                # The last step (alpha_s = 1) is the noise removal: q_xs = q_x0 = the PC part
                # there, the mix is q_x0 whatever kappa; it takes kappa = 1 (the reference's
                # ancestral noise removal)
                kappa = 1.0 if last else kappas[k]
                x_new = psi_step(self, raw, x, ~prompt_mask, alpha_s[:, None], alpha_t[:, None],
                                 kappa, temperature, generator, float64)  # fmt: skip
            x = torch.where(prompt_mask, prompt, x_new)
        return x
