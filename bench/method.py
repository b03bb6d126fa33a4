"""The method interface every family (AR, MDLM, Duo, CANDI, FLM, S-FLM) implements.

A method is one module with one class, registered by name in :mod:`bench.registry`. It owns
the noising process, the objective and the sampler; it never owns the optimiser, EMA,
checkpoints or data (those belong to :mod:`bench.train`, shared by all methods).

Conventions (docs/commands.md "Equal-NFE accounting"; docs/adding-a-method.md):
- ``nfe`` is the number of backbone calls a sampler makes, counted the same way for every
  method. Samplers call the network only through :meth:`Method.call` so the count is
  observable (tests assert it).
- Time ``t`` in [0, 1] with t = 0 clean and t = 1 pure noise (the MDLM/Duo code convention);
  ``alpha_t`` is the signal level.
- A :class:`Batch` carries ids, ``clean_mask`` (positions that are never noised: prompts,
  Sudoku givens) and ``loss_mask`` (positions that count in the token-mean loss).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from bench.backbones.dit import resolve_size
from bench.config import BackboneConfig, SampleConfig, TrainConfig
from bench.options import Options, option
from bench.reference_format import ReferenceFormat


@dataclass
class Batch:
    """A training batch.

    Attributes:
        x: (B, L) token ids.
        clean_mask: (B, L) bool, True where the position is never noised (prompt / givens).
        loss_mask: (B, L) bool, True where the position counts in the loss.
    """

    x: Tensor
    clean_mask: Tensor
    loss_mask: Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.x.to(device), self.clean_mask.to(device), self.loss_mask.to(device))

    def __len__(self) -> int:
        return self.x.shape[0]


@dataclass
class LossOutput:
    """What :meth:`Method.loss` returns.

    Attributes:
        loss: scalar, token-mean over ``loss_mask`` positions of the batch.
        per_sample: (B,) mean loss of each sequence over its counted positions (detached);
            used by the adaptive schedule and for logging.
    """

    loss: Tensor
    per_sample: Tensor


def token_mean(per_token: Tensor, loss_mask: Tensor) -> LossOutput:
    """Reduce a (B, L) per-token loss to the token-mean over counted positions
    (reference harness `TrainerBase._loss`: sum over valid tokens / number of valid tokens)."""
    m = loss_mask.to(per_token.dtype)
    total = (per_token * m).sum()
    loss = total / m.sum().clamp_min(1.0)
    per_sample = (per_token * m).sum(-1) / m.sum(-1).clamp_min(1.0)
    return LossOutput(loss, per_sample.detach())


def antithetic_times(
    n: int,
    *,
    eps: float = 1e-3,
    antithetic: bool = True,
    generator: torch.Generator | None = None,
    device: Any = "cpu",
) -> Tensor:
    """(n,) times in [eps, 1]: one uniform draw inside each of the n strata, u_i = (U_i + i) / n
    with independent U_i (reference ``_sample_t``, s-sahoo/duo ``trainer_base.py`` / MDLM
    ``diffusion.py``), then t = (1 - eps) u + eps. Departure: under DDP each rank stratifies its
    own batch over [0, 1]; the reference stratifies the global batch and gives each rank a chunk."""
    if antithetic:
        u = (torch.rand(n, generator=generator, device=device) + torch.arange(n, device=device)) / n
    else:
        u = torch.rand(n, generator=generator, device=device)
    return (1 - eps) * u + eps


def bound_times(
    n: int, *, eps: float = 1e-3, generator: torch.Generator, device: Any = "cpu"
) -> Tensor:
    """(n,) float64 times in [eps, 1] for one Monte-Carlo draw of a likelihood bound over a batch
    of n sequences: the reference evaluation's antithetic draws, u_i = (U_i + i) / n and
    t = (1 - eps) u + eps with sampling_eps = 1e-3 (kuleshov-group/mdlm ``diffusion.py::_sample_t``,
    s-sahoo/duo and FrankCCCCC/s-flm ``trainer_base.py::Diffusion._sample_t``, run by their
    validation loop), with the strata dealt to the sequences by a random permutation drawn each
    call. Departure: the reference gives sequence i stratum i every time, so a sequence's
    estimate only ever sees 1/n of the time range. What holds here: the batch's n times, as a
    set, have the reference's distribution (one uniform time in each stratum); each sequence's
    time is U[eps, 1], so its draws average to its own bound and the batch total is unbiased for
    the sum of the sequences' bounds whatever the rows' order. The batch total has the
    reference's distribution only when the rows come in uniformly random order (a shuffled
    loader); for rows in a fixed order the reference's total averages row i over stratum i only,
    so the two totals differ in distribution and the reference's mean need not be the sum of
    the sequences' bounds. Like the reference
    the estimate leaves out t < eps: it estimates (1 - eps)^-1 times the integral over [eps, 1]
    (MDLM: the whole to O(eps); Duo, log-singular at t = 0: 0.1-0.3 % below, docs/methods/duo.md).
    Drawn on ``generator``'s device (float64), then moved to ``device``."""
    g = generator.device
    u = torch.rand(n, generator=generator, device=g, dtype=torch.float64)
    stratum = torch.randperm(n, generator=generator, device=g).to(torch.float64)
    return ((1 - eps) * (u + stratum) / n + eps).to(device)


#: bytes of one float64 block in :func:`gold_log_probs` (and the bounds' other float64 passes)
BOUND_BLOCK_BYTES = 1 << 28


def gold_log_probs(logits: Tensor, target: Tensor, block_bytes: int = BOUND_BLOCK_BYTES) -> Tensor:
    """log softmax(logits)[target] in float64, shape ``target.shape``: the log-softmax runs in
    float64 a block of rows at a time (at most ``block_bytes`` each), so no float64 copy of the
    whole (..., V) logits is made."""
    V = logits.shape[-1]
    flat, tgt = logits.reshape(-1, V), target.reshape(-1)
    out = torch.empty(flat.shape[0], dtype=torch.float64, device=logits.device)
    rows = max(1, block_bytes // (8 * V))
    for i in range(0, flat.shape[0], rows):
        blk = flat[i : i + rows].double()
        gold = blk.gather(-1, tgt[i : i + rows, None]).squeeze(-1)
        out[i : i + rows] = gold - torch.logsumexp(blk, -1)
    return out.view(target.shape)


#: :attr:`Method.loss_kind` values several methods share (per token, in nats)
LOSS_NLL = "NLL, exact (nats/token)"
LOSS_NELBO = "NELBO: an upper bound on the NLL (nats/token)"
#: :attr:`Method.bound_kind` values
BOUND_EXACT = "exact"
BOUND_ELBO = "upper bound (NELBO)"
LOSS_CE = "cross-entropy of the clean tokens, unweighted: not a likelihood bound (nats/token)"


class Method(nn.Module):
    """Base class. Subclasses set ``name``, ``Options``, ``decodings`` and implement
    :meth:`build_backbone`, :meth:`loss` and :meth:`sample`.

    The class holds what every method must say. What only a tool reads is a capability that
    tool owns and a method declares as its own attribute when it has it (docs/adding-a-method.md,
    "Capabilities the tools read"): the rehearsal's :class:`bench.rehearse.Rehearsable`
    (``memory_neutral_options``, ``decoding_family``, ``min_nfe``), the benchmarks'
    :mod:`bench.perf.capabilities` (``exact_velocity``, ``kv_cache``), the conformance suite's
    ``conformance_variants`` and ``learnability_options`` (tests/bench/test_conformance.py).

    A Method is an ``nn.Module`` so that state it owns (e.g. the adaptive noise schedule)
    travels in checkpoints; it holds no trainable parameters of its own by convention:
    everything trainable lives in the backbone so that EMA covers it.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = Options
    #: decoding variants; the first is the default ("default" in a sweep maps to it)
    decodings: ClassVar[tuple[str, ...]] = ("default",)
    #: name -> :class:`bench.decoding.Decoding` (summary, reference, options, calls) of each
    #: decoding, when the method keeps such a table: ``--list`` and docs/methods/ are drawn from it
    DECODINGS: ClassVar[dict] = {}
    #: True when the method draws a diffusion time per sample (trainer does antithetic draws)
    uses_time: ClassVar[bool] = True
    #: True when nfe is fixed by the number of generated tokens (AR)
    nfe_is_length: ClassVar[bool] = False
    #: decodings for which temperature has no effect (grid collapses to T = 1)
    temperature_free: ClassVar[tuple[str, ...]] = ()
    #: decodings whose sampler may skip backbone calls (a cache: MDLM's ``cached``): they make
    #: at most :meth:`nfe_for` calls instead of exactly; their rows record the planned budget as
    #: ``nfe`` and the calls made in ``network_calls`` (bench.cells)
    call_skipping: ClassVar[tuple[str, ...]] = ()
    #: decodings whose sampler can stop a row at the task's EOS (``sample.eos_stop``; read off
    #: the table, ``Decoding.eos_stop``): a row stops counting calls at it, the batch stops
    #: when every row is done, and they too make at most :meth:`nfe_for` calls; whether an
    #: instance does under its options: :meth:`eos_stopping`
    stops_at_eos: ClassVar[tuple[str, ...]] = ()
    #: ``Options`` fields that only change how a trained model samples (e.g. S-FLM's top_k):
    #: they stay out of the train cell's identity, so variants differing only in them share
    #: one trained model (bench.plan)
    sampling_options: ClassVar[tuple[str, ...]] = ()
    #: how this method's models map from and to the reference checkpoint format (the S-FLM paper's
    #: harness, whose files the paper released): a :class:`bench.reference_format.ReferenceFormat`
    #: (the families whose files hold this method's models, the options a file implies, the
    #: config and buffers an exported file carries, whether the reference's [PAD] is one of its
    #: classes), or None: no reference file is this method's, and ``python -m bench.checkpoints``
    #: converts and exports none (docs/adding-a-method.md, "Importable released files")
    reference: ClassVar[ReferenceFormat | None] = None
    #: what :meth:`loss` is, in words: the trainer logs it as ``loss`` (training batches) and
    #: ``val_loss`` (held-out examples), the train rows record it (``loss_kind``,
    #: :func:`bench.results.rows.train_rows`) and the training-curves figure draws one row of
    #: panels per value, titled with it. Say whether it bounds the NLL (:data:`LOSS_NLL`,
    #: :data:`LOSS_NELBO`, :data:`LOSS_CE`, or your own words); options that change it:
    #: :meth:`loss_kind_for`
    loss_kind: ClassVar[str] = "training loss (kind not declared: Method.loss_kind)"

    #: what :meth:`nll_bound` gives: :data:`BOUND_EXACT` (the NLL itself, AR's chain rule),
    #: :data:`BOUND_ELBO` (an upper bound on the NLL, estimated by Monte Carlo over its time
    #: integral), or "" (no bound: the likelihood tables print "no bound" for the method)
    bound_kind: ClassVar[str] = ""

    @classmethod
    def loss_kind_for(cls, options: Options) -> str:
        """:attr:`loss_kind` under ``options`` (override where an option changes the objective,
        e.g. MDLM's ``loss_type``); read without building the method."""
        return cls.loss_kind

    def __init__(self, options: Options | None, vocab_size: int, seq_len: int):
        super().__init__()
        self.opts = options if options is not None else self.Options()
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.nfe_counter = 0
        #: (n, 2) long: each row's [full, partial] backbone calls in the sample under way, for a
        #: sampler that counts per row (:meth:`begin_rows`, :meth:`count_row_calls`: a row whose
        #: block or sequence is done stops counting while the batch calls on for the others);
        #: None when it does not (every row then needed every call of the batch)
        self.row_calls: Tensor | None = None
        #: the id a sampler may stop a row at (``sample.eos_stop``: the sample kind sets it for
        #: the cell to the task's EOS); None: fill the canvas
        self.eos_id: int | None = None

    # -- construction --------------------------------------------------------------
    def build_backbone(self, cfg: BackboneConfig) -> nn.Module:
        raise NotImplementedError

    def validate_plan(
        self, *, backbone: BackboneConfig, train: TrainConfig, sample: SampleConfig
    ) -> None:
        """Reject, while the sweep is planned (:mod:`bench.plan`, once per method entry), what
        this method's jobs would reject later and its constructor has not checked: the rules of
        :meth:`build_backbone`, the trainer hooks and :meth:`sample`. Raise
        :class:`~bench.config.ConfigError` whose message starts with the key
        (``backbone.size: ...``, ``options.<name>: ...``, ``train.<name>: ...``); the planner
        adds the file and the entry (``sweeps/x.yaml: methods[2]: ...``) and ``python -m
        bench.sweep`` exits 2 before anything is written. ``backbone``: the section the model is
        built from (an imported checkpoint's own); ``train``: the entry's recipe (its overrides
        applied); ``sample``: the sweep's grid with ``decoding`` this entry's decodings, resolved
        (:meth:`resolve_decoding`). Prefer calling the code the job runs to restating
        its rule; build no weights and load no data. The base class resolves the backbone as
        :func:`bench.backbones.dit.build_dit` does (unknown size, heads that do not divide
        d_model); a method with its own backbone config rules overrides it."""
        resolve_size(backbone)

    # -- training ------------------------------------------------------------------
    def loss(self, backbone: nn.Module, batch: Batch, t: Tensor | None) -> LossOutput:
        """Noising + objective. ``t``: (B,) times from the trainer (None if not uses_time)."""
        raise NotImplementedError

    def on_after_optimizer_step(self, backbone: nn.Module) -> None:
        """Hook after each optimiser step (e.g. re-projection onto the sphere)."""

    def record_losses(self, t: Tensor, per_sample: Tensor, step: int) -> None:
        """Hook receiving (t, per-sample loss) pairs each step (adaptive schedules)."""

    # -- likelihood ----------------------------------------------------------------
    def bound_positions(self, batch: Batch) -> Tensor:
        """(B, L) bool: the positions :meth:`nll_bound` sums over, ``loss_mask`` and not
        ``clean_mask``; every other position is conditioned on (kept clean). Divide by its
        per-sequence sum for nats per token. AR also leaves out position 0, which nothing
        predicts (no BOS before it; the reference's ``valid_tokens[:, 1:]``)."""
        return batch.loss_mask & ~batch.clean_mask

    @torch.no_grad()
    def nll_bound(
        self, backbone: nn.Module, batch: Batch, *, n_draws: int, generator: torch.Generator
    ) -> Tensor:
        """The negative log-likelihood of each sequence's ``loss_mask`` positions given its
        ``clean_mask`` positions, or an upper bound on it (:attr:`bound_kind`), in nats summed
        over those positions (:meth:`bound_positions`; a position in neither mask is conditioned
        on as well, and AR's position 0 is): a (n_draws, B) float64 tensor, one row per
        Monte-Carlo draw of the bound's randomness (an exact method returns one row). Deterministic
        given ``generator``; accumulated in float64. A method without a bound leaves this
        unimplemented and :attr:`bound_kind` empty."""
        raise NotImplementedError(f"{self.name}: no likelihood bound (Method.bound_kind is empty)")

    # -- sampling ------------------------------------------------------------------
    def call(self, backbone: nn.Module, *args: Any, partial: bool = False, **kwargs: Any) -> Any:
        """Every backbone call a sampler makes goes through here (it is the NFE count).
        ``partial``: the call computes part of the canvas only (a block-only call under a block
        cache, a KV-cached AR step): the cost columns price it at its measured seconds over a
        full call's (:class:`bench.measure.CallTimer`), never as one forward."""
        self.nfe_counter += 1
        timer = getattr(self, "call_timer", None)  # bench.measure.CallTimer, when measuring
        if timer is None:
            return backbone(*args, **kwargs)
        token = timer.start(partial)
        try:
            return backbone(*args, **kwargs)
        finally:
            timer.stop(token)

    @torch.no_grad()
    def sample(
        self,
        backbone: nn.Module,
        prompt: Tensor,
        prompt_mask: Tensor,
        *,
        nfe: int,
        temperature: float = 1.0,
        decoding: str = "default",
        float64: bool = True,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Generate (n, L) ids. ``prompt``: (n, L) ids whose ``prompt_mask`` positions are
        kept as given (conditional generation); other positions are generated."""
        raise NotImplementedError

    def nfe_for(self, nfe: int, prompt_mask: Tensor) -> int:
        """Backbone calls :meth:`sample` will make for this request (AR: generated length)."""
        return nfe

    def begin_rows(self, n: int) -> None:
        """Start counting each of ``n`` rows' calls (:attr:`row_calls`): a sampler whose rows may
        need fewer calls than the batch makes calls this before its first call."""
        self.row_calls = torch.zeros(n, 2, dtype=torch.long)

    def count_row_calls(self, live: Tensor, partial: bool = False) -> None:
        """One call (``partial``: of part of the canvas) for the rows ``live`` (n,) bool of the
        sample under way (nothing when :meth:`begin_rows` was not called)."""
        if self.row_calls is not None:
            self.row_calls[:, int(partial)] += live.to(self.row_calls.device)

    def eos_stopping(self, decoding: str) -> bool:
        """True when :meth:`sample` with ``decoding`` stops a row at :attr:`eos_id` (when set):
        the decoding is in :attr:`stops_at_eos` and this instance's options allow it (MDLM:
        ``block_length`` > 0). False: the canvas is filled whatever ``sample.eos_stop`` says."""
        return self.resolve_decoding(decoding) in self.stops_at_eos

    def full_forward(self, backbone: nn.Module, x: Tensor) -> Tensor:
        """One full call of the backbone on the canvas ``x`` (n, L), uncounted: what the cost
        columns time as the unit of a forward-equivalent when a batch made no full call (a
        KV-cached AR decoding). The bidirectional DiT at time input 0; AR: the causal pass."""
        return backbone(x, torch.zeros(x.shape[0], device=x.device))

    @property
    def filtering(self) -> bool:
        """True when this method's draws are filtered (:class:`CategoricalSampling` options with
        ``top_k`` > 0 or ``top_p`` < 1): a sampler that renormalises only then asks here."""
        o = self.opts
        return isinstance(o, CategoricalSampling) and (o.top_k > 0 or o.top_p < 1.0)

    def filtered(self, logits: Tensor) -> Tensor:
        """``logits`` through :func:`filter_logits` with this method's ``top_k`` / ``top_p``
        (:class:`CategoricalSampling`; unchanged when :attr:`filtering` is off)."""
        if not self.filtering:
            return logits
        return filter_logits(logits, self.opts.top_k, self.opts.top_p)

    def resolve_decoding(self, decoding: str) -> str:
        """The decoding a sweep's name stands for ("default": the method's first). Raises
        ValueError for a name this method does not sample with; the planner (bench.plan) and
        :meth:`sample` both ask here, so a sweep accepts exactly what the sampler does."""
        if decoding == "default":
            return self.decodings[0]
        if decoding not in self.decodings:
            raise ValueError(
                f"{self.name}: unknown decoding {decoding!r} (known: {list(self.decodings)})"
            )
        return decoding

    def describe(self) -> dict:
        return {"method": self.name, **dataclasses.asdict(self.opts)}


@dataclass
class CategoricalSampling(Options):
    """Sampling-only options of a method that draws tokens from p_theta (AR, MDLM, Duo, CANDI's
    discrete draws): the filters of :func:`filter_logits`. Mix into a method's ``Options`` and
    name both in its ``sampling_options`` (a filter reuses the trained model); off by default
    and left out of the cell hashes when off (``omit_default``), so stores stay valid."""

    top_p: float = option(
        1.0,
        gt=0.0,
        le=1.0,
        omit_default=True,
        help="nucleus: draw among the most likely classes holding probability >= top_p (the "
        "class that crosses it included; Duo's sampling.p_nucleus, BD3-LM runs use 0.9); 1 = off",
    )
    top_k: int = option(
        0,
        ge=0,
        omit_default=True,
        help="draw among the k most likely classes (ties at the k-th kept); 0 = off",
    )


#: the option names of :class:`CategoricalSampling`, for a method's ``sampling_options``
CATEGORICAL_SAMPLING = ("top_p", "top_k")


def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Top-k, then nucleus (top-p) filtering over the last axis: the classes left out get -inf
    (a new tensor; ``logits`` is not changed), so a Gumbel-max or softmax draws from p_theta
    renormalised over the classes kept. top-k keeps every class whose logit is >= the k-th
    largest; top-p keeps, in order of probability, the classes before the cumulative mass first
    exceeds p and that one too (at least one class). The definitions of s-sahoo/duo
    ``utils.py::top_k_top_p_filtering`` (from jdeschena/sdtt; HF's top-k / top-p warpers).
    top_k = 0 and top_p = 1 return ``logits`` itself."""
    V = logits.shape[-1]
    out = logits
    if 0 < top_k < V:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        ordered, idx = torch.sort(out, dim=-1, descending=True)
        past = torch.softmax(ordered, dim=-1).cumsum(-1) > top_p
        past[..., 1:] = past[..., :-1].clone()  # keep the class that crosses p
        past[..., 0] = False
        out = out.masked_fill(torch.zeros_like(past).scatter(-1, idx, past), float("-inf"))
    return out


def gumbel_argmax(
    logits: Tensor, generator: torch.Generator | None, float64: bool = True
) -> Tensor:
    """Sample from Cat(softmax(logits)) over the last axis with the Gumbel-max trick, in
    float64 when asked (float32 Gumbel noise truncates tails; Zheng et al. 2024)."""
    dtype = torch.float64 if float64 else torch.float32
    logits = logits.to(dtype)
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=dtype)
    tiny = torch.finfo(dtype).tiny
    g = -torch.log((-torch.log(u.clamp_min(tiny))).clamp_min(tiny))  # Gumbel(0, 1)
    return (logits + g).argmax(-1)


def categorical_draw(
    logits: Tensor, generator: torch.Generator | None, float64: bool = True
) -> Tensor:
    """Sample from Cat(softmax(logits)) over the last axis by the inverse CDF: one uniform per
    row against the cumulative sum of exp(logits - max). The same law as :func:`gumbel_argmax`
    with one random number per row instead of one per class. ``float64``: the cumulative sum and
    the uniform in float64 (a class of probability down to ~1e-16 of its row can be drawn; the
    float32 Gumbel-max truncates below ~1e-8, Zheng et al. 2024), the exponentials in the
    logits' dtype (relative error 6e-8 in float32, no truncation). -inf logits are never drawn."""
    dtype = torch.float64 if float64 else torch.float32
    if logits.numel() == 0:
        return torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
    w = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    w = (w - w.amax(-1, keepdim=True)).exp_()
    cdf = w.cumsum(-1, dtype=dtype)
    total = cdf[..., -1:]
    u = torch.rand(total.shape, generator=generator, device=logits.device, dtype=dtype) * total
    # u < total, so some cdf entry exceeds it; a class of mass 0 has cdf equal to the one before
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)


def eos_reached(x: Tensor, generated: Tensor, eos: int) -> Tensor:
    """(n,) bool: the rows of ``x`` (n, L) with ``eos`` at one of their ``generated`` (n, L)
    positions (a row done under ``sample.eos_stop``)."""
    return ((x == eos) & generated).any(-1)


def fill_after_eos(x: Tensor, generated: Tensor, eos: int) -> Tensor:
    """``x`` with every ``generated`` position after a row's first generated ``eos`` set to
    ``eos`` (the rest, prompt positions included, unchanged): an EOS-stopped row's canvas (the
    reference TinyGSM AR sampler pads what follows, s-flm ``samplers.py::_early_stop_token``;
    the evaluators cut at the first EOS, ``Task.generated_tokens`` counts up to it)."""
    hit = ((x == eos) & generated).long()
    after = (hit.cumsum(-1) - hit) > 0
    return torch.where(after & generated, torch.full_like(x, eos), x)
