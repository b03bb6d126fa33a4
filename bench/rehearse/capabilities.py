"""What a method declares for the rehearsal: capabilities the rehearsal owns, not members of
:class:`bench.method.Method`'s core (docs/adding-a-method.md, "Capabilities the tools read"). A
method that has one declares it as its own attribute; :class:`Rehearsable` says what each is, and
the helpers read it off a method with the default of one that does not declare it.
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor


class Rehearsable(Protocol):
    """What the rehearsal reads off a method when the method declares it (each member optional,
    not part of :class:`bench.method.Method`'s core; docs/adding-a-method.md, "Capabilities the
    tools read"); the helpers below give the default of a method that does not.

    Attributes:
        memory_neutral_options: ``Options`` fields that change no tensor's shape, dtype or count
            in a training step or a sampling call (a schedule's constants): models that differ
            only in them hold the same memory per batch element and measure their batch-2 point
            once (:func:`twin_key`). Default none (safe: leave out anything you are unsure of).
    """

    memory_neutral_options: tuple[str, ...]

    def decoding_family(self, decoding: str) -> tuple[str, int]:
        """(family, size) of a resolved decoding: decodings of one family run the same code and
        hold memory growing with ``size`` (S-FLM's top-k: k); the largest of each is rehearsed.
        Default: every decoding its own family."""

    def min_nfe(self, prompt_mask: Tensor) -> int:
        """The smallest ``nfe`` the sampler accepts for the request (MDLM's blocks: one call
        each); the sampling phase makes no fewer calls. Default 1."""


def memory_neutral_options(cls) -> tuple[str, ...]:
    """:attr:`Rehearsable.memory_neutral_options` of a method class (default none)."""
    return tuple(getattr(cls, "memory_neutral_options", ()))


def decoding_family(method, decoding: str) -> tuple[str, int]:
    """:meth:`Rehearsable.decoding_family` of a method (default: ``(decoding, 0)``)."""
    own = getattr(method, "decoding_family", None)
    return own(decoding) if own is not None else (decoding, 0)


def min_nfe(method, prompt_mask: Tensor) -> int:
    """:meth:`Rehearsable.min_nfe` of a method (default 1)."""
    own = getattr(method, "min_nfe", None)
    return int(own(prompt_mask)) if own is not None else 1
