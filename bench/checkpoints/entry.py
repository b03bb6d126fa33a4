"""A sweep's method entry with ``checkpoint:`` at plan time (:mod:`bench.plan`): the checkpoint's
facts (its spec, the options it gives the entry, the source the import cell records, the model's
vocabulary) read from the file's header or the catalogue, checked against the entry and the task,
and the one-line error for a checkpoint the task cannot serve."""

from __future__ import annotations

from bench import registry
from bench.checkpoints import CheckpointError, plan_spec, resolve_options
from bench.checkpoints.families import pad_is_class
from bench.config import ConfigError, MethodEntry, TaskConfig


def import_facts(entry: MethodEntry, task, where: str, offline_ok: bool):
    """(the checkpoint's Spec, the options it gives this entry, the source dict, the model's
    vocab_size override) for an entry with ``checkpoint:``."""
    forced = entry.family or None
    try:
        sp, source = plan_spec(entry.checkpoint, family=forced)
        if sp.method != entry.method:
            raise ConfigError(
                f"{where}.method: the sweep says {entry.method!r}, {entry.checkpoint} is a "
                f"{sp.method} checkpoint ({sp.family})"
            )
        opts = resolve_options(sp, entry.options, where=f"{where}.options")
    except CheckpointError as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith(where) else f"{where}.checkpoint: {msg}") from None
    if source.sha256 is None and not offline_ok:
        raise ConfigError(
            f"{where}.checkpoint: {entry.checkpoint}: not fetched and the hub is unreachable, so "
            f"its sha256 (part of the cell id) is unknown; fetch it by hand with: "
            f"{source.fetch_hint()} (--dry-run plans offline)"
        )
    if sp.vocab_size == task.vocab_size:
        vocab = None
    elif sp.vocab_size == task.vocab_size + 1 and pad_is_class(sp.method):
        vocab = sp.vocab_size  # the reference's [PAD] is a class of this model (Method.reference)
    else:
        raise ConfigError(_vocab_mismatch(entry.checkpoint, sp, task, where))
    if sp.seq_len and task.seq_len > sp.seq_len:
        raise ConfigError(
            f"{where}.checkpoint: the task's sequences ({task.seq_len}) are longer than the "
            f"model was trained on ({sp.seq_len})"
        )
    src = {"checkpoint": entry.checkpoint, "sha256": source.sha256, "family": sp.family,
           "forced": forced}  # fmt: skip
    return sp, opts, src, vocab


def _vocab_mismatch(checkpoint: str, sp, task, where: str) -> str:
    """The one-line error for a checkpoint whose |V| the task cannot serve, naming the way
    forward: the other built-in tasks (default options) it fits, else a task of its own."""
    pad = pad_is_class(sp.method)  # the reference's [PAD] is a class: |V| may be the task's + 1
    fits = []
    for name in sorted(registry.TASKS):
        if name == task.name:
            continue
        try:
            v = registry.make_task(TaskConfig(name=name)).vocab_size
        except Exception:  # a plug-in task its defaults cannot build: not a suggestion
            continue
        if v == sp.vocab_size or (pad and v + 1 == sp.vocab_size):
            fits.append(name)
    head = (
        f"{where}.checkpoint: {checkpoint} ({sp.family} family) has |V| = {sp.vocab_size}, "
        f"task {task.name} has {task.vocab_size}"
    )
    if fits:
        return f"{head}; task {' or '.join(fits)} fits it: --task {fits[0]} (task.name in a sweep)"
    sizes = f"{sp.vocab_size - 1} or {sp.vocab_size}" if pad else f"{sp.vocab_size}"
    why = ""
    if not pad and sp.vocab_size == task.vocab_size + 1:
        pads = ", ".join(m for m in sorted(registry.METHODS) if pad_is_class(m))
        why = f" (only {pads} files may have one class more than the task, the reference's [PAD])"
    return (
        f"{head}{why}; no built-in task has {sizes} tokens: serve it with a task plug-in of "
        f"{sizes} tokens (docs/adding-a-task.md)"
    )
