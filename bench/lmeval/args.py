"""The lm-eval adapter's ``model_args`` (:mod:`bench.lmeval.model`'s docstring): the model's
name, the defaults and the checks of the values (a bad one is a one-line :class:`ConfigError`).
"""

from __future__ import annotations

import logging

import torch

from bench.config import ConfigError

NAME = "sflm-bench"
#: ``batch_size`` when lm-eval gives none or ``auto`` (the adapter has no memory probe)
AUTO_BATCH = 16
#: model_args ``greedy``: how ``is_greedy`` is decided (module docstring). Not "none": lm-eval's
#: argument parser reads ``none`` as None (the default)
GREEDY_RULES = ("one_pass", "decode", "off")
#: model_args lm-eval itself passes or a user may carry over from the hf model; accepted, unused
IGNORED = frozenset({"max_batch_size", "trust_remote_code"})

#: the adapter's one logger, by the name of the model's module (a filter on it sees every line)
log = logging.getLogger("bench.lmeval.model")


def positive_int(key: str, v, *, none_ok: bool = True) -> int | None:
    if v is None and none_ok:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{NAME}: model_args {key}: must be an integer >= 1, got {v!r}")
    return v


def batch_size(v) -> int:
    if v is None:
        return AUTO_BATCH
    if isinstance(v, str) and v.startswith("auto"):
        return AUTO_BATCH
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{NAME}: batch_size: an integer or 'auto', got {v!r}") from None
    return positive_int("batch_size", n, none_ok=False)


def device(v) -> torch.device:
    if v is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(str(v))
    if dev.type == "cuda" and not torch.cuda.is_available():
        log.warning("%s: device %s asked for, but there is no CUDA device: using the CPU", NAME, v)
        return torch.device("cpu")
    return dev


def greedy_args(greedy: str | None, greedy_steps) -> tuple[str, int | None]:
    """(the ``is_greedy`` rule, its steps) of model_args ``greedy`` / ``greedy_steps``."""
    rule = "one_pass" if greedy is None else greedy
    if rule not in GREEDY_RULES:
        raise ConfigError(
            f"{NAME}: model_args greedy: one of {', '.join(GREEDY_RULES)}, got {greedy!r}"
        )
    steps = positive_int("greedy_steps", greedy_steps)
    if steps is not None and rule != "decode":
        raise ConfigError(
            f"{NAME}: model_args greedy_steps: only with greedy=decode (greedy is {rule})"
        )
    return rule, steps
