"""The sample kind's predicted cost (:meth:`bench.kinds.sample.Sample.predict`), from the shapes.

- **Calls**: ``Method.nfe_for(nfe)`` backbone calls per batch (AR: the generated length) over
  ceil(items / batch) batches. Each call costs the bare backbone's forward of the positions it
  computes, times the model's forward-equivalents per call for its decoding and sampling dtype
  (:meth:`bench.cost.model.Costs.sample_factor`), plus the sampler's own seconds per call.
- **Positions a call computes** (:func:`schedule`): every position, attention over all L; a
  KV-cached AR call one position after a prefill of the given ones; under an MDLM block cache
  (the cell's option ``block_cache``: ``dual`` or ``prefix``) each block's refresh calls (its
  first, and with an int ``cache_refresh`` K every K-th after it) every position, the others
  the block's positions (``dual``) or the block and the suffix after it (``prefix``), attention
  still over all L keys (Fast-dLLM, llada/generate.py generate_with_dual_cache / _prefix_cache).
- **Variable calls**: a decoding that may make fewer calls than its budget
  (``Method.call_skipping``: MDLM's ``threshold``, ``factor``, ``cached``) and any cell with
  ``sample.eos_stop`` are predicted at the budget; the prediction says so (its ``caveats``).
- ``sample.latency_items`` K: K more samples at batch 1 (draw 0, not scored).
- k draws per item: k times the cell; then the scoring (a light scorer per item, the GSM8K
  sandbox's CPU seconds per program over the job's cores, the reference LM's tokens).
"""

from __future__ import annotations

import math

from bench.evaluate.draws import n_draws

#: (B, L, |V|) buffers a sampler holds at its peak beyond the float32 logits, in its sampling
#: dtype: S-FLM's exact velocity measured 4.16 (float64) and 2.78 (float32) buffers
#: (docs/measurements/gpu_h200_perf_velocity_b32*.json); the categorical samplers' Gumbel-max
#: (the logits cast, the uniforms, the noise) three
SAMPLER_BUFFERS = {"sflm": {"float64": 4.2, "float32": 2.8}, "*": {"float64": 3.0, "float32": 3.0}}
#: the block caches an MDLM cell may name (``block_cache``), besides ``none``
BLOCK_CACHES = ("dual", "prefix")


def _block_plan(G: int, block_length: int, calls: int) -> list[tuple[int, int, int]]:
    """(first generated position, positions, calls) of each block: the ``G`` generated positions
    in blocks of ``block_length`` (0: one block), the calls split as evenly as possible, the first
    ``calls % blocks`` blocks one more (as :meth:`baselines.mdlm.MDLM.blocks` splits them)."""
    bl = block_length if block_length > 0 else max(1, G)
    n = max(1, math.ceil(G / bl))
    base, extra = divmod(calls, n)
    return [(b * bl, min(bl, G - b * bl), base + (b < extra)) for b in range(n)]


def _refresh_every(value) -> int:
    """The option ``cache_refresh`` as a period: an int K (or its digits) refreshes the cache
    every K calls of a block; anything else (0, none, a word) at each block's first call only."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return max(0, int(value))
    return 0


def _refreshes(calls: int, every: int) -> int:
    """Full (refresh) calls among a block's ``calls``: its first, and every ``every``-th after it
    (``every`` <= 0: the first only)."""
    if calls <= 0:
        return 0
    return 1 + ((calls - 1) // every if every > 0 else 0)


def block_cache(c) -> str:
    """The block cache cell ``c`` samples with (its option ``block_cache``): ``dual``,
    ``prefix``, or ``none``."""
    mode = str(c.options.get("block_cache", "none") or "none")
    return mode if mode in BLOCK_CACHES else "none"


def schedule(c, cost, calls: int, cached: bool, given: int) -> tuple[list, str]:
    """The calls of one batch as ``[(count, positions, context), ...]`` (the positions each call
    computes, the keys its attention reads) and, under a block cache, a note saying how they
    were split (module docstring)."""
    L = cost.L
    if cached:  # the prefill reads the given positions, each later call one position
        return [(1, given, given), (calls - 1, 1, (given + L) / 2)], ""
    mode = block_cache(c)
    if mode == "none":
        return [(calls, L, L)], ""
    opts = c.options
    every = _refresh_every(opts.get("cache_refresh", 0))
    G, out, full = L - given, [], 0
    for start, size, k in _block_plan(G, int(opts.get("block_length", 0) or 0), calls):
        r = _refreshes(k, every)
        full += r
        # dual: the block's positions; prefix: the block and the suffix after it
        part = size if mode == "dual" else G - start
        out += [(r, L, L), (k - r, part, L)]
    note = (f"block cache {mode}: {full} refresh call(s) per item as full calls, {calls - full} "
            f"block-only at their positions' share of a full call")  # fmt: skip
    return [t for t in out if t[0] > 0], note


def _batch_s(cost, sched: list, b: int) -> float:
    """Bare-forward seconds of one batch of ``b`` rows over ``sched``."""
    return sum(k * cost.forward_s(b, pos, ctx) for k, pos, ctx in sched)


def variable_calls(c, cost) -> str:
    """Why cell ``c`` may make fewer calls than its budget ('' when it makes exactly its
    budget): a call-skipping decoding (``Method.call_skipping``), ``sample.eos_stop``."""
    why = []
    dec = cost.method.resolve_decoding(c.decoding)
    if dec in getattr(cost.method, "call_skipping", ()):
        why.append(f"{dec} may make fewer calls")
    if getattr(c, "eos_stop", False):
        why.append("sample.eos_stop: a row may stop at its EOS")
    return "; ".join(why)


def predict(kind: str, c, cost):
    """Cell ``c``'s :class:`~bench.cost.model.CellPrediction` (module docstring)."""
    net, L = cost.net, cost.L
    n, B = c.n_samples, c.batch_size
    calls, cached, given = cost.calls(c.nfe)
    dtype = cost.dtype(c.float64)
    batches = math.ceil(n / B)
    sizes = [min(B, n - i * B) for i in range(batches)]
    sched, cache_note = schedule(c, cost, calls, cached, given)
    h = net.head_share((given + L) / 2 if cached else L)
    fe, call_s, key = cost.sample_factor(c.decoding, dtype, h)
    network = fe * sum(_batch_s(cost, sched, b) for b in sizes) + calls * batches * call_s
    item_flops = sum(k * pos * net.token_flops(x) for k, pos, x in sched)
    # forward-equivalents per item: each call at its share of a full one (a full causal pass for
    # AR: its unit, bench.measure.item_forward_equivalents), times the factor
    item_fe = fe * _batch_s(cost, sched, B) / cost.forward_s(B, L, L)
    k = n_draws(c)  # k draws: k times the cell
    parts = {"network": k * network, "score": k * _score_s(cost, n)}
    caveats, notes = [], [f"{dtype}; factor {fe:.2f} ({key})"]
    skips = variable_calls(c, cost)
    if skips:
        caveats.append(f"predicted at the call budget ({skips})")
        notes.append(f"at its budget of {calls} calls per item ({skips})")
    if cache_note:
        caveats.append(
            f"predicted with block cache {block_cache(c)}: refreshes full, the rest block-only"
        )
        notes.append(cache_note)
    lat = min(int(getattr(c, "latency_items", 0) or 0), n)
    if lat:  # K more samples at batch 1, draw 0, not scored
        parts["latency"] = lat * (fe * _batch_s(cost, sched, 1) + calls * call_s)
        notes.append(f"+ {lat} batch-1 latency sample(s)")
    peak = _sampler_peak(cost, B, dtype, cached, kv=cached or bool(cache_note))
    return cost.prediction(c.id, kind, sum(parts.values()), peak, parts,
                           calls=k * calls * batches + lat * calls,
                           flops=(k * n + lat) * item_flops, note="; ".join(notes),
                           item_calls=float(calls), item_fe=item_fe, variable_calls=skips,
                           caveats=caveats)  # fmt: skip


def _score_s(cost, n: int) -> float:
    """Seconds scoring ``n`` samples: a light scorer per item, the GSM8K sandbox's CPU seconds
    per program over the job's cores, the reference LM's tokens (``scorer_passes``: MAUVE's
    features of samples and references)."""
    sc = cost.scorers
    scorer = cost.profile.get("scorer", "light")
    score = sc["cell_s"] + n * sc["item_s"]
    if scorer == "sandbox":
        score += n * sc["sandbox_cpu_s"] / max(1, cost.cores)
    elif scorer == "genppl":
        score += cost.profile.get("scorer_passes", 1) * n * cost.L / sc["genppl_tokens_per_s"]
    return score


def _sampler_peak(cost, batch: int, dtype: str, cached: bool, kv: bool) -> int:
    """Peak bytes while sampling: parameters, activations, the logits and the sampler's own
    (B, L, |V|) buffers in its dtype (:data:`SAMPLER_BUFFERS`; ``cached``: of one position), a
    KV cache (``kv``: AR's, a block cache's)."""
    net, L = cost.net, cost.L
    positions = 1 if cached else L
    act = batch * positions * net.d_model * 16 * 4
    blv = batch * positions * net.vocab_out
    bufs = SAMPLER_BUFFERS.get(cost.tc.method, SAMPLER_BUFFERS["*"])[dtype]
    cache = batch * L * net.d_model * 2 * net.n_blocks * 4 if kv else 0
    return int(net.params() * 4 + act + blv * (4 + bufs * (8 if dtype == "float64" else 4)) + cache)
