"""Degenerate samples and cells: text a generator has collapsed into, whose Gen. PPL says
nothing about its quality (a repeated token is easy to predict: low Gen. PPL, no text).

A **sample** is degenerate (:func:`sample_reason`, first reason that holds):

- ``"empty"``: no token before the first end-of-text (leading end-of-text ids, a BOS, are
  skipped, and the reference harness's added ``[PAD]`` id does not count): the paper's Gen. PPL
  masks "tokens at or after the first end-of-text", so nothing of it is scored;
- ``"repeated"``: one token repeated over the whole sample, i.e. unigram entropy 0;
- ``"low_entropy"``: unigram entropy below :data:`SAMPLE_ENTROPY_MIN` = ln 2 nats, i.e. an
  effective number of distinct tokens ``exp(H)`` below 2 (exp of the Shannon entropy is the
  Hill number of order 1): less varied than a text alternating two tokens. Far below the paper's
  visible window (appendix "Visible window": 4.5 <= H <= 6.0 nats at L = 1024) and below the
  held-out data at every length we run (H = 3.74 at L = 64).

A **cell** is degenerate (:func:`cell_is_degenerate`) when at least :data:`CELL_FRACTION` = half
of its samples are: its Gen. PPL is then mostly that of degenerate text. The results store
carries the measured fraction as the metric ``degenerate_fraction`` (n = samples, bootstrap
CI). Rows written before that metric existed get the flag from what they stored: a mean unigram
entropy below ln(2) / 2 means, by Markov's inequality (H >= 0, so P(H >= ln 2) <= E[H] / ln 2
< 1/2), that more than half of the samples lie below ln 2; a ``gen_ppl_empty_frac`` of at least
one half means at least half had nothing scored. Both are sufficient conditions of the rule
above: they never flag a cell the measured fraction would clear, and may miss some it would
flag.
"""

from __future__ import annotations

import math

#: per-sample unigram entropy (nats) below which a sample is degenerate: exp(H) < 2 tokens
SAMPLE_ENTROPY_MIN = math.log(2)
#: a cell is degenerate when at least this fraction of its samples is
CELL_FRACTION = 0.5
#: rows without ``degenerate_fraction``: mean entropy below this flags the cell (Markov bound)
LEGACY_MEAN_ENTROPY_MAX = SAMPLE_ENTROPY_MIN * CELL_FRACTION
#: the results-store metric (value in [0, 1], n = samples)
METRIC = "degenerate_fraction"
REASONS = ("empty", "repeated", "low_entropy")


def content_before_eot(ids, eot: int | None, ignore: int | None = None) -> int:
    """Number of ids before the first end-of-text ``eot``, after the leading end-of-text ids
    (a BOS), not counting ``ignore`` (the added ``[PAD]`` id). ``eot`` None: every id counts."""
    a = [int(t) for t in ids]
    i = 0
    while eot is not None and i < len(a) and a[i] == eot:
        i += 1
    rest = a[i:]
    if eot is not None and eot in rest:
        rest = rest[: rest.index(eot)]
    return sum(1 for t in rest if t != ignore)


def sample_reason(entropy: float, content: int | None) -> str:
    """Why one sample is degenerate ("" when it is not): ``entropy`` its unigram entropy in nats
    over all its ids, ``content`` the ids before its first end-of-text
    (:func:`content_before_eot`; None when unknown)."""
    if content is not None and content <= 0:
        return "empty"
    if entropy is None or not math.isfinite(float(entropy)):
        return ""
    if float(entropy) <= 1e-12:  # one distinct id: -1 * log(1) = 0
        return "repeated"
    return "low_entropy" if float(entropy) < SAMPLE_ENTROPY_MIN else ""


def cell_is_degenerate(
    fraction: float | None = None,
    mean_entropy: float | None = None,
    empty_fraction: float | None = None,
) -> bool | None:
    """The cell flag: from the measured ``fraction`` of degenerate samples when given, else
    from the stored mean entropy and empty fraction (module docstring); None when none of the
    three is known."""

    def known(v) -> bool:
        try:
            return math.isfinite(float(v))
        except (TypeError, ValueError):
            return False

    if known(fraction):
        return float(fraction) >= CELL_FRACTION
    if not known(mean_entropy) and not known(empty_fraction):
        return None
    low = known(mean_entropy) and float(mean_entropy) < LEGACY_MEAN_ENTROPY_MAX
    empty = known(empty_fraction) and float(empty_fraction) >= CELL_FRACTION
    return bool(low or empty)
