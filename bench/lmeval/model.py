"""``sflm-bench``: an lm-evaluation-harness model serving any model this harness can load
(:func:`bench.commands.generate.load_model`: a run folder, a converted model folder, a
reference-format file or ``hf://...``; docs/likelihood.md, "lm-evaluation-harness").

model_args (``--model_args key=value,...``):

- ``src`` (required): SRC as ``python -m bench.eval`` takes it; ``task``: the harness task whose
  text it reads (required for a checkpoint; a run folder knows its own); ``results_dir``: where a
  sweep or ``bench.eval`` imported a checkpoint (read only); ``set``: a checkpoint's task options
  as ``--set`` takes them, items separated by ``;`` (``set=task.options.n_digits=4``);
- likelihood: ``draws``, the Monte-Carlo draws of the method's bound per request (default 8 for
  a bound, 1 for an exact NLL); ``seed``; ``greedy`` (``one_pass``, the default, ``decode`` or
  ``off``) and ``greedy_steps`` (``decode`` only; default one step per continuation token): the
  rule of ``is_greedy`` (below);
- generation: ``nfe`` (default: the positions to generate; AR makes one call per position
  whatever it says), ``temperature`` (default 1), ``decoding`` (default: the method's),
  ``max_gen_toks`` (default: the positions left after the prompt), ``float64`` (default true);
- ``batch_size`` and ``device`` come from lm-eval's ``--batch_size`` / ``--device`` (a CUDA
  device on a machine without one falls back to the CPU with a warning; no batch size or an
  ``auto`` one means 16 sequences per call of the bound, each call drawing ``draws`` times).

Requests:

- ``loglikelihood(context, continuation)``: the continuation's log-likelihood given the context,
  ``-mean over draws of method.nll_bound``: exact for AR (``bound_kind`` "exact"), a lower bound
  on it (minus the NELBO) for a bound method. Text is read by the task
  (:meth:`bench.data.base.Task.encode_text`: token ids separated by spaces for ``sort``, the
  task's tokenizer for the text tasks, GPT-2 for OWT); trailing white space of the context moves
  to the continuation (as lm-eval's HF model does); an empty context is the task's BOS (else EOS)
  token where its tokenizer has one. The ids are cut from the left to the model's positions
  (the continuation must fit, with one context token for AR: nothing predicts position 0). A
  task with a layout of its own (its own ``text_canvas``: the program tasks' ``[BOS] question
  separator``) puts the continuation where ``generate_until`` would write it (the context cut on
  words to fit); one whose layout has no room for the continuation's ids in a row (Sudoku: the
  solution half around the givens) refuses the request in one line. The canvas is always the
  model's full length (the diffusion models were trained at one length on a bidirectional
  backbone): positions after the continuation hold the task's pad id (its tokenizer's PAD when
  inside the vocabulary, else EOS, else 0) and, like the context, are clean (conditioned on)
  and out of the loss (``Method.bound_positions``). The draws of one batch share the bound's
  stratified times, so a value depends on ``seed``, the batch size and the request's place in
  the list (same command, same numbers).
  ``is_greedy`` (lm-eval's ``acc`` of loglikelihood tasks) by the ``greedy`` rule: AR, whether
  every continuation token is the argmax given the tokens before it (either rule: a greedy
  left-to-right decode agrees exactly then). MDLM and Duo: the continuation is noised in full on
  the same canvas (MDLM: all [MASK]; Duo: uniform ids drawn from the request batch's greedy
  stream, :meth:`SFLMBenchLM.generator` ``stream=1``), then denoised greedily (argmax of
  p_theta(x_0 | x_t)), True iff that equals the continuation token for token. ``one_pass``: one
  forward at t = 1, the argmax at every position (s-sahoo/duo's adapter). ``decode``:
  ``greedy_steps`` forwards (default: one per continuation token, as LLaDA's adapter), each
  revealing the most confident still-noised positions (p_theta of their argmax; ties to the
  left) with their argmax, the count split evenly over the steps, the network's time on
  linspace(1, 1e-5, steps + 1) (MDLM's ``confidence`` decoding's grid). ``off``: False for
  every request (warned when built: lm-eval's ``acc`` then measures nothing). A method with a
  bound and neither denoiser (a plug-in's) gets ``off`` with that warning, or refuses an
  explicit rule in one line. :meth:`SFLMBenchLM.get_model_info` records the rule and its steps
  (docs/likelihood.md, "is_greedy").
- ``loglikelihood_rolling(text)``: the sum of lm-eval's rolling windows
  (``lm_eval.utils.get_rolling_token_windows`` + ``make_disjoint_window``, context length 1, the
  model's length), each scored as a ``loglikelihood`` request (no ``is_greedy`` check); the
  first window's context is the task's BOS/EOS token, none for a task without one (AR then
  refuses: it cannot predict a first token).
- ``generate_until(context, gen_kwargs)``: the method's sampler at ``nfe`` on
  ``task.text_canvas(context, "", length)``, ``length`` = ``max_gen_toks`` (from gen_kwargs, else
  the model_args, else what the model's positions leave), cut at the first ``until`` string.
  The adapter's ``temperature`` and ``decoding`` are used; gen_kwargs' sampling keys
  (``temperature``, ``do_sample``, ``top_p``...) are ignored (logged once): a diffusion sampler
  has no one greedy path, and the harness compares methods at its own settings. A context
  longer than the model's positions loses its first words until one position is left.

A method without a likelihood bound (``bound_kind`` "") refuses both likelihood requests with
one line, :class:`NoLikelihoodBound` (a :class:`~bench.config.ConfigError` and a
``NotImplementedError``): ``sflm-bench: <method> has no likelihood bound; use generate_until
tasks``. Bad model_args and text the task cannot read are a :class:`ConfigError` (one line).
"""

from __future__ import annotations

# lm-eval's own models first: get_model imports them only into an empty registry, so registering
# ours first would hide them
import lm_eval.models  # noqa: F401
import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from bench.config import ConfigError
from bench.lmeval import args
from bench.lmeval.args import NAME, log
from bench.lmeval.greedy import GreedyCheck


class NoLikelihoodBound(ConfigError, NotImplementedError):
    """A likelihood request to a method whose ``bound_kind`` is empty."""


@register_model(NAME)
class SFLMBenchLM(GreedyCheck, LM):
    """lm-eval's ``LM`` over one model of this harness (module docstring); its ``is_greedy``
    check is :class:`bench.lmeval.greedy.GreedyCheck`'s."""

    def __init__(
        self,
        src: str | None = None,
        task: str | None = None,
        nfe: int | None = None,
        temperature: float = 1.0,
        decoding: str = "default",
        draws: int | None = None,
        seed: int = 0,
        batch_size: int | str | None = None,
        device: str | None = None,
        max_gen_toks: int | None = None,
        results_dir: str | None = None,
        float64: bool = True,
        greedy: str | None = None,
        greedy_steps: int | None = None,
        **extra,
    ) -> None:
        super().__init__()
        from bench.commands.generate import load_model
        from bench.method import BOUND_EXACT

        items = extra.pop("set", None)  # the model_args key ``set`` (as --set)
        unknown = sorted(set(extra) - args.IGNORED)
        if unknown:
            raise ConfigError(
                f"{NAME}: unknown model_args key {unknown[0]!r} (known: src, task, nfe, "
                "temperature, decoding, draws, seed, greedy, greedy_steps, max_gen_toks, "
                "results_dir, float64, set)"
            )
        if not src:
            raise ConfigError(f"{NAME}: model_args src=... is required (a run folder, a model "
                              "folder, a reference-format file or hf://...)")  # fmt: skip
        self.nfe = args.positive_int("nfe", nfe)
        self.draws_arg = args.positive_int("draws", draws)
        self.max_gen_toks = args.positive_int("max_gen_toks", max_gen_toks)
        rule, self.greedy_steps = args.greedy_args(greedy, greedy_steps)
        try:
            self.temperature = float(temperature)
        except (TypeError, ValueError):
            raise ConfigError(f"{NAME}: temperature: a number, got {temperature!r}") from None
        if not self.temperature > 0:
            raise ConfigError(f"{NAME}: temperature: must be > 0, got {temperature!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"{NAME}: seed: an integer, got {seed!r}")
        self.seed = seed
        self.batch_size = args.batch_size(batch_size)
        self.float64 = bool(float64)
        sets = items.split(";") if isinstance(items, str) else list(items or [])
        sets = [i.strip() for i in sets if str(i).strip()]
        loaded = load_model(
            str(src), task=task, sets=sets, results_dir=results_dir, device=args.device(device)
        )
        self.task, self.method, self.backbone = loaded.task, loaded.method, loaded.backbone
        self._device = loaded.device
        self.positions = int(loaded.positions)
        self.method_name = loaded.cell.method
        self.src = str(src)
        try:
            self.decoding = self.method.resolve_decoding(str(decoding))
        except ValueError as e:
            raise ConfigError(f"{NAME}: decoding: {e}") from None
        cls = type(self.method)
        self.bound_kind = cls.bound_kind
        self.exact = self.bound_kind == BOUND_EXACT
        #: the first position is always given (AR): nothing predicts it
        self.left_to_right = bool(cls.nfe_is_length)
        self.draws = self.draws_arg or (1 if self.exact else 8)
        self._warned_gen_kwargs = False
        self.greedy_family = self._greedy_family()
        self.greedy = self._greedy_rule(rule, explicit=greedy is not None)

    # -- lm-eval's bookkeeping -----------------------------------------------------------
    @property
    def tokenizer_name(self) -> str:
        return f"{NAME}:{self.task.name}"

    def get_model_info(self) -> dict:
        return {
            "model_source": self.src,
            "sflm_method": self.method_name,
            "sflm_task": self.task.name,
            "sflm_bound_kind": self.bound_kind or "none",
            "sflm_draws": self.draws,
            "sflm_nfe": self.nfe,
            "sflm_decoding": self.decoding,
            "sflm_temperature": self.temperature,
            "sflm_greedy": self.greedy,
            "sflm_greedy_steps": self._greedy_steps_info(),
        }

    def generator(self, k: int, stream: int = 0) -> torch.Generator:
        """The random stream of the batch of likelihood requests that starts at request ``k``
        (of generation request ``k``): ``seed * 1000003 + k``, on the model's device; ``stream``
        1 is that batch's ``is_greedy`` check (Duo's noised continuation), ``2**40`` further on,
        so that the check leaves the bound's draws as they are."""
        seed = self.seed * 1_000_003 + k + (stream << 40)
        return torch.Generator(device=self._device).manual_seed(seed)

    # -- text ---------------------------------------------------------------------------
    def _tokenizer(self):
        return getattr(self.task, "tokenizer", None)

    def _prefix_id(self) -> int | None:
        """The task's BOS (else EOS) id: the context of an empty context."""
        tok = self._tokenizer()
        for name in ("bos_token_id", "eos_token_id"):
            i = getattr(tok, name, None) if tok is not None else None
            if i is not None and 0 <= int(i) < self.method.vocab_size:
                return int(i)
        return None

    def _pad_id(self) -> int:
        """Fills the canvas after the continuation (clean, out of the loss)."""
        tok = self._tokenizer()
        for name in ("pad_token_id", "eos_token_id"):
            i = getattr(tok, name, None) if tok is not None else None
            if i is not None and 0 <= int(i) < self.method.vocab_size:
                return int(i)
        return 0

    def _encode(self, text: str) -> list[int]:
        if not text:
            return []
        try:
            return [int(i) for i in self.task.encode_text(text)]
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(f"{NAME}: {e}") from None

    def _require_bound(self, what: str) -> None:
        if not self.bound_kind:
            raise NoLikelihoodBound(
                f"{NAME}: {self.method_name} has no likelihood bound; use generate_until tasks "
                f"(asked for {what})"
            )

    # -- likelihood -----------------------------------------------------------------------
    def _request(self, context: str, continuation: str) -> tuple[list[int], int, int] | None:
        """A loglikelihood request's canvas before padding: (ids, first and end position of the
        continuation); None for an empty continuation."""
        from bench.data.base import Task

        n = len(context) - len(context.rstrip())
        if n:  # the context's trailing white space belongs to the continuation (lm-eval's HF)
            context, continuation = context[:-n], context[-n:] + continuation
        cont = self._encode(continuation)
        if not cont:
            return None
        if type(self.task).text_canvas is Task.text_canvas:  # the text as it is: ids in a row
            ctx = self._encode(context)
            if not ctx:
                p = self._prefix_id()
                ctx = [p] if p is not None else []
            return self._canvas(ctx, cont)
        # the task's own layout (program tasks: [BOS] question separator): the continuation
        # where generate_until would write it
        canvas = self._fit_canvas(context, len(cont))
        free = (~canvas.clean_mask[0]).nonzero().flatten().tolist()
        if len(free) < len(cont) and self._honours_length(context):  # cut the context further
            canvas = self._fit_canvas(context, len(cont), need=len(cont))
            free = (~canvas.clean_mask[0]).nonzero().flatten().tolist()
        lo = free[0] if free else int(canvas.x.shape[1])
        if free != list(range(lo, lo + len(cont))):
            raise ConfigError(
                f"{NAME}: task {self.task.name} lays its text out its own way: its canvas for "
                f"this context has {len(free)} positions to fill, not the continuation's "
                f"{len(cont)} ids in a row (it serves generate_until requests)"
            )
        ids = canvas.x[0].tolist()
        ids[lo : lo + len(cont)] = cont
        return ids, lo, lo + len(cont)

    def _honours_length(self, context: str) -> bool:
        """Whether the task's canvas has as many positions to fill as asked (Sudoku's has its
        layout's, whatever the length)."""
        try:
            free = [(~self.task.text_canvas(context, "", n).clean_mask).sum() for n in (1, 2)]
        except ValueError:
            return False
        return [int(f) for f in free] == [1, 2]

    def _canvas(self, ctx: list[int], cont: list[int]) -> tuple[list[int], int, int]:
        """Context and continuation ids in a row, cut from the left to the model's length."""
        P, need = self.positions, int(self.left_to_right)
        if len(cont) > P - need:
            raise ConfigError(
                f"{NAME}: a continuation of {len(cont)} tokens does not fit the model's {P} "
                f"positions" + (" (with one token of context before it)" if need else "")
            )
        ids = (ctx + cont)[-P:]
        n_ctx = len(ids) - len(cont)
        if n_ctx < need:
            raise ConfigError(
                f"{NAME}: {self.method_name} predicts no first token: it needs context before "
                f"the continuation, and task {self.task.name} has no BOS/EOS token to put there"
            )
        return ids, n_ctx, len(ids)

    @torch.no_grad()
    def _score(self, items: list[tuple[list[int], int, int] | None], greedy: bool) -> list[tuple]:
        """(log-likelihood, is_greedy) of each canvas (ids, continuation's [lo, hi)); an empty
        continuation (None) is (0, True)."""
        from bench.method import Batch

        out: list[tuple] = [(0.0, True)] * len(items)
        todo = [(i, *it) for i, it in enumerate(items) if it is not None]
        P, pad, dev = self.positions, self._pad_id(), self._device
        for b in range(0, len(todo), self.batch_size):
            chunk = todo[b : b + self.batch_size]
            x = torch.full((len(chunk), P), pad, dtype=torch.long)
            loss = torch.zeros((len(chunk), P), dtype=torch.bool)
            for r, (_, ids, lo, hi) in enumerate(chunk):
                x[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
                loss[r, lo:hi] = True
            batch = Batch(x, ~loss, loss).to(dev)
            gen = self.generator(b)
            nll = self.method.nll_bound(self.backbone, batch, n_draws=self.draws, generator=gen)
            values = (-nll.to(torch.float64).mean(0)).tolist()
            flags = [False] * len(chunk)
            if greedy and self.greedy == "left_to_right":
                logits = self.backbone(batch.x[:, :-1])
                hit = logits.argmax(-1) == batch.x[:, 1:]
                flags = (hit | ~batch.loss_mask[:, 1:]).all(-1).tolist()
            elif greedy and self.greedy != "off":
                flags = self._greedy_denoise(batch, self.generator(b, stream=1)).tolist()
            for (i, *_), v, g in zip(chunk, values, flags):
                out[i] = (float(v), bool(g))
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        self._require_bound("loglikelihood")
        res = self._score([self._request(*r.args[:2]) for r in requests], greedy=True)
        for r, v in zip(requests, res):
            self.cache_hook.add_partial("loglikelihood", r.args, v)
        return res

    def _windows(self, text: str) -> list[tuple[list[int], list[int]]]:
        """lm-eval's rolling windows of ``text``'s ids: (context ids, continuation ids)."""
        tokens = self._encode(text)
        prefix = self._prefix_id()
        if prefix is None and self.left_to_right and tokens:
            raise ConfigError(
                f"{NAME}: {self.method_name} cannot score a text's first token without a "
                f"BOS/EOS before it, and task {self.task.name} has none (loglikelihood_rolling)"
            )
        sentinel = -1 if prefix is None else prefix
        out = []
        for w in get_rolling_token_windows(tokens, sentinel, self.positions - 1, 1):
            ctx, cont = make_disjoint_window(w)
            out.append(([i for i in ctx if i != -1], list(cont)))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        self._require_bound("loglikelihood_rolling")
        res = []
        for r in requests:
            items = [self._canvas(ctx, cont) for ctx, cont in self._windows(r.args[0])]
            v = float(sum(ll for ll, _ in self._score(items, greedy=False)))
            res.append(v)
            self.cache_hook.add_partial("loglikelihood_rolling", r.args, v)
        return res

    # -- generation -----------------------------------------------------------------------
    def _fit_canvas(self, context: str, want: int | None, need: int = 1):
        """The task's canvas for ``context`` with at most ``want`` positions to generate (all
        the model's positions left when None); leading words dropped until ``need`` are left."""
        t, P = self.task, self.positions
        words = context.split(" ")
        for k in range(len(words)):
            prompt = " ".join(words[k:])
            try:
                probe = t.text_canvas(prompt, "", 1)
            except ValueError as e:
                raise ConfigError(f"{NAME}: {e}") from None
            used = int(probe.x.shape[1]) - 1
            if P - used >= need:
                return t.text_canvas(prompt, "", min(want or P, P - used))
        raise ConfigError(
            f"{NAME}: the context leaves fewer than {need} of the model's {P} positions"
        )

    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        res = []
        t, dev = self.task, self._device
        for k, r in enumerate(requests):
            context, gen_kwargs = r.args[0], dict(r.args[1] or {})
            until = gen_kwargs.pop("until", None) or []
            if isinstance(until, str):
                until = [until]
            want = gen_kwargs.pop("max_gen_toks", None) or self.max_gen_toks
            if gen_kwargs and not self._warned_gen_kwargs:
                log.info("%s: gen_kwargs %s ignored: the sampler runs at decoding %s, T %g",
                         NAME, sorted(gen_kwargs), self.decoding, self.temperature)  # fmt: skip
                self._warned_gen_kwargs = True
            canvas = self._fit_canvas(context, want)
            if self.left_to_right and not bool(canvas.clean_mask[0, 0]):
                raise ConfigError(f"{NAME}: {self.method_name} needs a non-empty context")
            start, L = t.prompt_length(canvas, 0), int(canvas.x.shape[1])
            free = int((~canvas.clean_mask).sum())
            gen = self.generator(k)
            ids = self.method.sample(
                self.backbone,
                canvas.x.to(dev),
                canvas.clean_mask.to(dev),
                nfe=self.nfe or free,
                temperature=self.temperature,
                decoding=self.decoding,
                float64=self.float64,
                generator=gen,
            ).cpu()
            text = t.decode_text(ids[0, start:L].tolist())
            cuts = [text.find(s) for s in until if s and s in text]
            if cuts:
                text = text[: min(cuts)]
            res.append(text)
            self.cache_hook.add_partial("generate_until", r.args, text)
        return res
