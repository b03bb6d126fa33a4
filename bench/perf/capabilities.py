"""What the benchmarks read off a method beyond :class:`bench.method.Method`'s core: capabilities
the benchmarks own, declared by the methods that have them as class attributes of their own
(docs/adding-a-method.md, "Capabilities the tools read"). A method without one has none.

- ``exact_velocity`` (:func:`exact_velocity`): True when each sampling step computes an exact
  velocity over the whole vocabulary outside the backbone (softmax, expectation, exp map; float64
  unless ``sample(float64=False)``): the step ``python -m bench.perf velocity`` times and
  ``agreement`` compares in float32 and float64 (S-FLM);
- ``kv_cache`` (:func:`kv_cache`): None or absent, the sampler keeps no KV cache; True / False,
  it has one and uses it when True (an instance may switch it off: ``python -m bench.perf
  arcache`` times both on the same weights; the calibration counts a cached prefill; AR);
- ``block_caches`` (:func:`block_caches`): the block KV caches its semi-autoregressive sampler
  takes, a tuple of ``block_cache`` option values other than ``none`` (absent: none); such a
  method takes the sampling options ``block_length``, ``block_cache`` and ``cache_refresh``, and
  ``python -m bench.perf blockcache`` samples it with each cache and without (MDLM).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class ExactVelocity(Protocol):
    """A method whose sampler steps with an exact velocity over the vocabulary."""

    exact_velocity: bool


@runtime_checkable
class KVCache(Protocol):
    """A method whose sampler has a KV cache (``kv_cache``: used when True)."""

    kv_cache: bool | None


@runtime_checkable
class BlockCaches(Protocol):
    """A method whose semi-autoregressive sampler takes block KV caches (``block_caches``)."""

    block_caches: tuple[str, ...]


def exact_velocity(method) -> bool:
    """True when ``method`` (a class or an instance) declares the exact-velocity step."""
    return bool(getattr(method, "exact_velocity", False))


def kv_cache(method) -> bool | None:
    """``method``'s KV cache: None when it has none, else whether it is on."""
    return getattr(method, "kv_cache", None)


def block_caches(method) -> tuple[str, ...]:
    """The block caches ``method`` (a class or an instance) declares; () when none."""
    return tuple(getattr(method, "block_caches", ()))
