"""Dataset specs -> the blocks a model's likelihood is evaluated on (docs/likelihood.md).

A spec is one of:

- ``heldout``: the task's own held-out split in its training format
  (:meth:`bench.data.base.Task.heldout_data`): Sudoku, arith, GSM8K and sort are conditional (the
  prompt / givens are given, the rest is scored); OWT's is its validation blocks;
- ``owt-valid``: the OWT task's validation blocks (:meth:`bench.data.owt.task.OWTTask.valid_blocks`:
  the last 100,000 documents of OpenWebText wrapped into 1,024-token blocks, MDLM's protocol;
  offline, the stand-in corpus the task is configured with);
- ``text:PATH``: a local UTF-8 file, one document per non-blank line, encoded with the task's
  :meth:`~bench.data.base.Task.encode_text`, then wrapped or padded into blocks
  (:mod:`bench.likelihood.layout`);
- a zero-shot corpus of the MDLM / Duo tables (:data:`bench.likelihood.zeroshot.CORPORA`): loaded
  with ``datasets``, detokenised, encoded with the task's tokenizer, wrapped or padded, cached in
  the task's data cache (``<data cache>/likelihood/``) under a key that covers the corpus, split,
  layout, block length and the tokenizer's :func:`~bench.text.fingerprint.cache_fingerprint`.

``block`` (tokens per block; 0 = the task's sequence length) and ``wrap`` apply to ``text:`` and
the zero-shot corpora; ``heldout`` and ``owt-valid`` keep the task's own layout. A block longer
than the model's positions, an unknown spec or a corpus that cannot be loaded is one line
(:class:`~bench.config.ConfigError`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.config import ConfigError
from bench.data.base import TaskData
from bench.likelihood import layout
from bench.likelihood.zeroshot import CORPORA

LAYOUT_VERSION = 1
TEXT = "text:"
#: the specs without a path, in the order error messages list them
NAMES = ("heldout", "owt-valid", *CORPORA)


@dataclass(frozen=True)
class Spec:
    """A parsed spec: ``kind`` (``heldout`` | ``owt-valid`` | ``text`` | ``zeroshot``), the spec
    as written (``text``), the file of a ``text:`` spec (``path``)."""

    kind: str
    text: str
    path: str = ""
    #: a zero-shot corpus's own layout (``<corpus>@wrapped`` / ``@padded``), overriding the
    #: section's ``wrap`` for it, so one sweep evaluates both (mdlm#29: the cause of most
    #: zero-shot disagreements); None: the section's
    wrap: bool | None = None


#: ``<corpus>@<layout>``: the layout of one zero-shot corpus
LAYOUTS = {"wrapped": True, "padded": False}


def parse(spec: str) -> Spec:
    """The spec ``spec``; ConfigError listing the known ones when it is none of them. Reads
    nothing (a ``text:`` file's existence is checked when it is loaded)."""
    spec = str(spec).strip()
    if spec.startswith(TEXT) and spec[len(TEXT) :]:
        return Spec("text", spec, spec[len(TEXT) :])
    if spec in ("heldout", "owt-valid"):
        return Spec(spec, spec)
    if spec in CORPORA:
        return Spec("zeroshot", spec)
    name, _, lay = spec.partition("@")
    if name in CORPORA and lay in LAYOUTS:
        return Spec("zeroshot", spec, wrap=LAYOUTS[lay])
    raise ConfigError(
        f"likelihood dataset {spec!r}: unknown (known: {', '.join(NAMES)}, text:PATH; a corpus "
        f"may name its layout: <corpus>@{'|'.join(LAYOUTS)})"
    )


def block_length(spec: Spec, task, block: int = 0, positions: int | None = None) -> int:
    """The length of ``spec``'s blocks for ``task`` (``block`` or the task's sequence length) after
    checking it fits the model's ``positions`` (default: the task's sequence length, what models
    trained here have); ConfigError (one line) when it does not."""
    pos = positions or task.seq_len
    L = task.seq_len if spec.kind in ("heldout", "owt-valid") or not block else int(block)
    if L > pos:
        raise ConfigError(
            f"likelihood dataset {spec.text}: blocks of {L} tokens are longer than the model's "
            f"{pos} positions (likelihood.block)"
        )
    return L


def check(spec: Spec, task) -> None:
    """Reject, without loading anything, a spec ``task`` cannot serve (ConfigError, one line): a
    ``text:`` file that is not there, ``owt-valid`` for another task than OWT, a zero-shot corpus
    for a task without a text tokenizer. (A corpus that cannot be loaded is found when it is.)"""
    if spec.kind == "text" and not Path(spec.path).expanduser().is_file():
        raise ConfigError(f"likelihood dataset {spec.text}: no such file")
    if spec.kind == "owt-valid" and getattr(task, "valid_blocks", None) is None:
        raise ConfigError(
            f"likelihood dataset owt-valid: the OWT task's validation blocks; this model's task "
            f"is {task.name} (use heldout or text:PATH)"
        )
    if spec.kind == "zeroshot" and not _has_tokenizer(task):
        raise ConfigError(
            f"likelihood dataset {spec.text}: needs a task with a text tokenizer (task "
            f"{task.name} has none)"
        )


def _has_tokenizer(task) -> bool:
    """Whether ``task`` has a tokenizer, without loading it (OWT's and GSM8K's are properties)."""
    return "tokenizer" in vars(task) or isinstance(getattr(type(task), "tokenizer", None), property)


def load_blocks(
    task,
    spec: str | Spec,
    *,
    groups: list[str] | None = None,
    block: int = 0,
    wrap: bool = True,
    n: int = 0,
    positions: int | None = None,
) -> TaskData:
    """The first ``n`` (0 = every) blocks of ``spec`` for ``task`` (module docstring). ``groups``:
    the model's training groups (``heldout``; default: the task's groups)."""
    sp = spec if isinstance(spec, Spec) else parse(spec)
    L = block_length(sp, task, block, positions)
    check(sp, task)
    if sp.kind == "heldout":
        data = _heldout(task, groups or task.groups(), n)
    elif sp.kind == "owt-valid":
        data = _owt_valid(task, n)
    elif sp.kind == "text":
        data = _text(task, sp, L, wrap)
    else:
        data = _zeroshot(task, sp, L, wrap if sp.wrap is None else sp.wrap)
    if n and len(data) > n:
        data = data.subset(range(n))
    if len(data) == 0:
        raise ConfigError(f"likelihood dataset {sp.text}: no complete {L}-token block")
    return data


def _heldout(task, groups: list[str], n: int) -> TaskData:
    data = task.heldout_data(list(groups), n or task.cfg.n_valid)
    if data is None:
        raise ConfigError(f"likelihood dataset heldout: task {task.name} has no held-out split")
    return data


def _owt_valid(task, n: int) -> TaskData:
    return layout.as_task_data(task.valid_blocks(n or None))  # bench.data.owt.task


def _lay_out(docs: list[list[int]], L: int, wrap: bool, sp: layout.Specials) -> TaskData:
    if wrap:
        return layout.as_task_data(layout.wrap(docs, L, sp))
    return layout.as_task_data(*layout.pad(docs, L, sp))


def _text(task, sp: Spec, L: int, wrap: bool) -> TaskData:
    path = Path(sp.path).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"likelihood dataset {sp.text}: cannot read {path} ({e})") from None
    docs = []
    for k, line in enumerate(lines, 1):
        if line.strip():
            try:
                docs.append(list(task.encode_text(line)))
            except ValueError as e:
                raise ConfigError(f"likelihood dataset {sp.text}: line {k}: {e}") from None
    return _lay_out(docs, L, wrap, layout.special_ids(task))


def _zeroshot(task, sp: Spec, L: int, wrap: bool) -> TaskData:
    from bench.atomic import build_once
    from bench.text.fingerprint import cache_fingerprint
    from bench.text.locate import data_cache_root

    tok = task.tokenizer
    specials = layout.special_ids(task)
    name = sp.text.partition("@")[0]  # the corpus of ``<corpus>@<layout>``
    c = CORPORA[name]
    key = {
        "v": LAYOUT_VERSION,
        "corpus": [c.path, c.config, c.split, c.column, c.detok],
        "L": L,
        "wrap": bool(wrap),
        "specials": [specials.bos, specials.eos, specials.pad],
        "tokenizer": cache_fingerprint(tok),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    lay = "wrapped" if wrap else "padded"
    dest = data_cache_root(task.cfg.data_dir) / "likelihood" / f"{name}-{lay}-L{L}-{digest}.npz"

    def check(p: Path):
        if not p.is_file():
            return None
        try:
            with np.load(p) as z:
                if json.loads(str(z["key"])) != key:
                    return None
                return layout.as_task_data(z["x"], z["counted"])
        except (OSError, ValueError, KeyError):  # damaged: rebuilt
            return None

    def build(tmp: Path) -> None:
        from bench.likelihood.zeroshot import documents

        texts = documents(name)
        tok.model_max_length = 1 << 40  # whole documents: no length warning
        docs = [list(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
        data = _lay_out(docs, L, wrap, specials)
        with open(tmp, "wb") as f:  # a file object: numpy adds no .npz suffix
            np.savez(
                f,
                x=data.x.numpy().astype(np.int32),
                counted=data.loss_mask.numpy(),
                key=np.array(json.dumps(key, sort_keys=True)),
            )

    from bench.atomic import CacheBuildError

    try:
        return build_once(dest, build, check=check, folder=False)
    except CacheBuildError as e:
        cause = e.__cause__
        if isinstance(cause, ConfigError):  # the corpus cannot be loaded (offline): its line
            raise cause from None
        raise
