"""The rehearsal's output: one progress line per model (:func:`progress_line`), the table of
phases (:func:`table`) and the cards each model fits (:func:`model_summary`)."""

from __future__ import annotations

from bench.rehearse.measuring import GB, Phase, fmt_gb

#: the cards the table compares with when no ``--memory-gb`` is given (nominal GB = 1e9 bytes)
CARDS_GB = (40, 80, 141)


def progress_line(phases: list[Phase]) -> str:
    parts = []
    for ph in phases:
        if not ph.seconds:  # not run (its note says why)
            parts.append(f"{ph.name}: {ph.note}")
            continue
        s = "/".join(f"{x:.1f}" for x in ph.seconds)
        x = ph.extrapolated()
        at = f" -> {x / GB:.1f} GB @{ph.batch}" if x is not None else ""
        parts.append(f"{ph.name} {s} s {fmt_gb(max((p or 0) for p in ph.peaks or [0]))} GB{at}")
    return "; ".join(parts)


def fits(x: float | None, memory_gb: float | None) -> str:
    if x is None:
        return ""
    cards = (memory_gb,) if memory_gb is not None else CARDS_GB
    return " / ".join("yes" if x <= c * GB else "no" for c in cards)


def table(phases: list[Phase], memory_gb: float | None) -> str:
    cards = f"{memory_gb:g} GB" if memory_gb is not None else " / ".join(f"{c}" for c in CARDS_GB)
    head = (
        "| model | phase | s (batch 1 / 2) | peak GB (batch 1 / 2) | sweep batch | "
        f"peak GB at that batch | fits {cards}{'' if memory_gb else ' GB'} | note |"
    )
    lines = [head, "|" + "---|" * 8]
    last = None
    for ph in phases:
        x = ph.extrapolated()
        batch = "" if ph.batch is None else f"{ph.batch}{' per device' if ph.per_device else ''}"
        model = ph.model if ph.model != last else ""
        last = ph.model
        peaks = " / ".join(fmt_gb(p) for p in ph.peaks)
        note = ph.note
        if ph.slope_of and len(ph.peaks) == 2:
            peaks = f"{fmt_gb(ph.peaks[0])} / ({fmt_gb(ph.peaks[1])})"
            note = "; ".join(
                x
                for x in (
                    note,
                    f"batch 2 not run: {ph.slope_of}'s growth from 1 to 2"
                    + (f" x {ph.slope_ratio}" if ph.slope_ratio else ""),
                )
                if x
            )
        lines.append(
            f"| {model} | {ph.name} | {' / '.join(f'{s:.1f}' for s in ph.seconds)} | "
            f"{peaks} | {batch} | "
            f"{'' if x is None else f'{x / GB:.1f}'} | {fits(x, memory_gb)} | {note} |"
        )
    return "\n".join(lines)


def model_summary(phases: list[Phase], memory_gb: float | None) -> str:
    """Per model: the largest extrapolated device peak and the cards it fits."""
    worst: dict[str, tuple[float, str]] = {}
    for ph in phases:
        x = ph.extrapolated()
        if x is not None and (ph.model not in worst or x > worst[ph.model][0]):
            worst[ph.model] = (x, ph.name)
    if not worst:
        return ""
    cards = f"{memory_gb:g} GB" if memory_gb is not None else " / ".join(map(str, CARDS_GB))
    lines = [
        f"| model | largest peak GB (phase) | fits {cards}{'' if memory_gb else ' GB'} |",
        "|---|---|---|",
    ]
    for model, (x, name) in worst.items():
        lines.append(f"| {model} | {x / GB:.1f} ({name}) | {fits(x, memory_gb)} |")
    return "\n".join(lines)
