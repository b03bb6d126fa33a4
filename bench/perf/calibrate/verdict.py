"""Judging the machine a calibration ran on: the 1-min load besides the run
(:func:`others_load`, :func:`_loadavg`) and the timings' spreads give a verdict
(:func:`verdict`: ok, warn or refuse) that :func:`_judge` acts on."""

from __future__ import annotations

import os
import statistics

from bench.config import ConfigError
from bench.perf import common

#: refuse when the load besides this run leaves fewer free CPUs than this many per thread measured
BUSY_FREE = 1.0
#: warn when the load besides this run is above this share of the CPUs
LOAD_WARN = 0.25
#: refuse / warn when the median timing's spread ((max - min) / median of its runs) is above these
SPREAD_REFUSE = 0.15
SPREAD_WARN = 0.05
#: warn when one timing's spread is above this
SPREAD_ONE = 0.5


class CalibrationRefused(ConfigError):
    """A busy or noisy machine: the table would mislead the planner (one line)."""


def others_load(start: float | None, end: float | None, threads: int) -> float | None:
    """The 1-min load besides this run: the larger of the load before it and the load after it
    less its own ``threads`` (None when neither is known)."""
    seen = [v for v in (start, None if end is None else end - threads) if v is not None]
    return max(0.0, max(seen)) if seen else None


def verdict(
    spreads: dict[str, float], others: float | None, cpus: int, threads: int
) -> tuple[str, str]:
    """(``"ok"`` / ``"warn"`` / ``"refuse"``, the reason in one line) of a calibration whose
    timings had ``spreads`` (what -> (max - min) / median; empty before measuring) while the
    1-min load besides it was ``others`` (None: unknown) on ``cpus`` CPUs, measuring with
    ``threads`` threads (module docstring)."""
    refuse, warn = [], []
    if others is not None and cpus > 0:
        what = f"1-min load {others:.1f} besides this run on {cpus} CPUs"
        if cpus - others < BUSY_FREE * max(1, threads):
            refuse.append(f"machine busy: {what} leaves no free CPU for its {threads} thread(s)")
        elif others > LOAD_WARN * cpus:
            warn.append(f"machine not idle: {what}")
    if spreads:
        med = statistics.median(spreads.values())
        worst = max(spreads, key=spreads.__getitem__)
        noisy = (
            f"the median timing varies by {med:.0%} across repeats (most: {worst}, "
            f"{spreads[worst]:.0%})"
        )
        if med > SPREAD_REFUSE:
            refuse.append(f"timings noisy: {noisy}")
        elif med > SPREAD_WARN:
            warn.append(f"timings noisy: {noisy}")
        elif spreads[worst] > SPREAD_ONE:
            warn.append(f"one timing noisy: {worst} varies by {spreads[worst]:.0%} across repeats")
    if refuse:
        return "refuse", "; ".join(refuse + warn)
    if warn:
        return "warn", "; ".join(warn)
    return "ok", ""


def _judge(spreads, others, cpus: int, threads: int, force: bool, when: str) -> str:
    """Act on :func:`verdict`: raise :class:`CalibrationRefused` (unless ``force``), print one
    warning line; returns what the entry records (``ok``, ``warn: ...``, ``forced: ...``)."""
    v, why = verdict(spreads, others, cpus, threads)
    if v == "refuse" and not force:
        raise CalibrationRefused(
            f"calibrate: {why}; no table written {when} (--calib-force writes one anyway)"
        )
    if v == "refuse":
        common.progress(f"warning: calibrate: {why}; table written anyway (--calib-force)")
        return f"forced: {why}"
    if v == "warn":
        common.progress(f"warning: calibrate: {why}; its predictions may be off")
        return f"warn: {why}"
    return "ok"


def _loadavg() -> float | None:
    """The 1-min load average (``os.getloadavg``), None where the system has none."""
    try:
        return round(float(os.getloadavg()[0]), 2)
    except (OSError, AttributeError):
        return None
