"""One sample cell's sampler and its batches: the method instance that samples the cell, the seed of
each batch and draw, one batch's call (what the sample kind's job and the rehearsal both run;
:mod:`bench.kinds.sample`, :mod:`bench.kinds.sample_rehearsal`)."""

from __future__ import annotations

from bench import registry
from bench.config import config_hash
from bench.evaluate.draws import draw_seed
from bench.plan import SampleCell


def cell_sampler(method, c: SampleCell, task, device, cache: dict):
    """The method instance that samples cell ``c``: ``method`` (the trained model) itself, or,
    when the cell's entry sets sampling-only options (:mod:`bench.plan`), an instance with those
    options and the trained model's state, built once per option set in ``cache``."""
    key = config_hash(c.options)
    if key == config_hash(c.train.options):
        return method
    if key not in cache:
        cache[key] = registry.make_method(
            c.train.method, c.options, task, getattr(c.train, "vocab_size", None)
        )
        cache[key].load_state_dict(method.state_dict())  # the trained model's state
        cache[key].to(device)
    return cache[key]


def batch_seed(c: SampleCell, start: int, draw: int = 0) -> int:
    """The seed of draw ``draw`` of cell ``c``'s batch at example ``start`` (:func:`draw_seed`)."""
    return draw_seed(c.seed * 1_000_003 + start, draw)


def sample_batch(sampler, backbone, c: SampleCell, prompt, pmask, generator, *, float64: bool):
    """One batch of cell ``c``'s samples (ids on the CPU)."""
    return sampler.sample(
        backbone,
        prompt,
        pmask,
        nfe=c.nfe,
        temperature=c.temperature,
        decoding=c.decoding,
        float64=float64,
        generator=generator,
    ).cpu()
