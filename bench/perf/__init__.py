"""Speed and memory benchmarks: ``python -m bench.perf [train|sample|velocity ...]``.

Targets and timings live here, not in tests. Each benchmark is one module, found by name in the
table :data:`bench.perf.suite.BENCHMARKS` (a new benchmark is a new module plus one line there);
each runs on CPU or GPU (``--device``; bf16 autocast on CUDA unless ``--precision 32``):

- ``train`` (:mod:`bench.perf.train`): optimizer steps/s of every paper model relative to the
  bare backbone, AR and MDLM;
- ``sample`` (:mod:`bench.perf.sample`): sequences/s of each model's default sampler at a fixed
  NFE;
- ``velocity`` (:mod:`bench.perf.velocity`): the S-FLM exact-velocity sampling step at a
  GPT-2-sized vocabulary vs one denoiser forward, time and peak extra memory;
- ``agreement`` (:mod:`bench.perf.agreement`): float32 vs float64 S-FLM sampling on trained
  runs (``--runs``), token by token;
- ``arcache`` (opt-in, :mod:`bench.perf.arcache`): AR generation with the KV cache vs
  re-reading the prefix, same weights and prompts;
- ``blockcache`` (opt-in, :mod:`bench.perf.blockcache`): semi-autoregressive sampling with a
  block KV cache (prefix / dual) vs none: seconds and forward-equivalents per sample, token
  agreement;
- ``genppl`` (opt-in, :mod:`bench.perf.genppl`): tokens/s of the Gen. PPL scorer.
- ``startup`` (opt-in, :mod:`bench.perf.startup`): wall seconds of ``python -m bench.sweep
  --help / --list / --status / --dry-run`` and ``python -m bench.report`` on a small store,
  each a fresh process (docs/measurements/startup.md).
- ``calibrate`` (opt-in, :mod:`bench.perf.calibrate`): the cost model's throughput table of this
  machine (bare forwards and steps fitted over shapes, each model's forward-equivalents, the
  trainer, a job's start, the sandbox), stored where ``--dry-run`` finds it (:mod:`bench.cost`).

The models (labels, opt-in fast paths) and ``--scale`` presets are :mod:`bench.cost.catalogue`';
timing, memory and batch helpers :mod:`bench.perf.common`'s; the flags and the output
:mod:`bench.perf.suite`'s; what a method declares for the benchmarks (an exact velocity, a KV
cache, block caches) :mod:`bench.perf.capabilities`'. Results print as a table and are written
atomically to ``--out`` (JSON) when given.
"""

from __future__ import annotations

from bench.cost.catalogue import BARE, FAST_PATHS, MODELS, SCALES, VARIANTS
from bench.perf.agreement import agreement_cells, token_agreement
from bench.perf.suite import BENCHES, BENCHMARKS, main

__all__ = [
    "BARE",
    "BENCHES",
    "BENCHMARKS",
    "FAST_PATHS",
    "MODELS",
    "SCALES",
    "VARIANTS",
    "agreement_cells",
    "main",
    "token_agreement",
]
