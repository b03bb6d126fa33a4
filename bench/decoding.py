"""A method's decodings as a table: one :class:`Decoding` object per name, in its class's
``DECODINGS`` dict (first = default). The method samples with ``self.DECODINGS[name]`` (no
comparison of names); ``decodings``, ``temperature_free``, ``call_skipping`` and ``stops_at_eos``
are read off the table (:func:`flagged`), and so are ``python -m bench.sweep --list``
(:func:`bench.registry.listing`) and the decoding table of each ``docs/methods/<method>.md``
(:func:`markdown_table`; ``python -m bench.decoding --write`` rewrites them,
tests/bench/test_decoding_tables.py checks that they match).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class Decoding:
    """One decoding of a method. A method subclasses it with the code that runs (its ``run`` or
    step) and the parameters that tell entries sharing that code apart.

    Attributes:
        summary: one line: what a step does.
        reference: one line: the paper equation and the reference-code location it follows.
        options: the method options this decoding reads.
        cost: what a step adds to its backbone call (docs).
        temperature_free: temperature has no effect (the planner keeps T = 1 only).
        call_skipping: a cache may skip calls: at most :meth:`calls` of them.
        calls_note: how the calls are spent, where it is not one per step (docs, ``--list``).
        eos_stop: the sampler can stop a row at the task's EOS (``sample.eos_stop``: the row's
            calls stop counting, the batch stops when every row is done); a method may ask for
            more (MDLM: ``block_length`` > 0: :meth:`bench.method.Method.eos_stopping`).
        eos_note: how it stops and what it needs, or, when it cannot, why not (docs, ``--list``).
    """

    summary: str
    reference: str
    options: tuple[str, ...] = ()
    cost: str = ""
    temperature_free: bool = False
    call_skipping: bool = False
    calls_note: str = ""
    eos_stop: bool = False
    eos_note: str = ""

    def calls(self, nfe: int) -> int:
        """Backbone calls of one sampling request whose budget is ``nfe``
        (``Method.nfe_for``; AR: the generated length), at most this when ``call_skipping``:
        every decoding here spends exactly its budget."""
        return nfe

    def calls_text(self) -> str:
        text = "at most nfe" if self.call_skipping else "nfe"
        return f"{text} ({self.calls_note})" if self.calls_note else text

    def eos_text(self) -> str:
        """``yes (...)`` / ``no (...)``: whether a row can stop at the task's EOS, and how or why
        not (the docs' "EOS stop" column, ``--list``)."""
        if self.eos_stop:
            return f"yes ({self.eos_note})" if self.eos_note else "yes"
        return f"no ({self.eos_note or NO_EOS_STOP})"


#: why a decoding cannot stop a row at the EOS, unless it says otherwise (``Decoding.eos_note``)
NO_EOS_STOP = "every call updates the whole canvas: no row is done before the last call"


def flagged(table: Mapping[str, Decoding], flag: str) -> tuple[str, ...]:
    """The names of ``table`` whose decoding has ``flag`` (``temperature_free``,
    ``call_skipping``, ``eos_stop``) set: a method's ``Method.temperature_free`` /
    ``call_skipping`` / ``stops_at_eos``."""
    return tuple(n for n, d in table.items() if getattr(d, flag))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(cls) -> str:
    """The decoding table of ``docs/methods/<cls.name>.md``, from ``cls.DECODINGS``."""
    rows = [
        "| decoding | what a step does | reference (paper; code) | backbone calls | adds to a "
        "call | options | EOS stop |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, (name, d) in enumerate(cls.DECODINGS.items()):
        tags = [t for t, on in (("default", i == 0), ("T-free", d.temperature_free)) if on]
        label = f"`{name}`" + (f" ({', '.join(tags)})" if tags else "")
        opts = ", ".join(f"`{o}`" for o in d.options) or "none"
        cells = (label, d.summary, d.reference, d.calls_text(), d.cost or "-", opts, d.eos_text())
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows)


BEGIN = "<!-- decodings: generated from {where} DECODINGS by `python -m bench.decoding --write` -->"
END = "<!-- end decodings -->"


#: the tree whose docs/methods/ pages hold the tables
ROOT = Path(__file__).resolve().parent.parent


def docs_path(cls, root: Path) -> Path:
    return root / "docs" / "methods" / f"{cls.name}.md"


def render_block(cls) -> str:
    where = f"`{cls.__module__}.{cls.__name__}`"
    return f"{BEGIN.format(where=where)}\n{markdown_table(cls)}\n{END}"


def _block_re() -> re.Pattern:
    return re.compile(r"<!-- decodings: generated from .*?" + re.escape(END), re.S)


def docs_block(text: str) -> str | None:
    """The generated block of a docs page (markers included), or None."""
    m = _block_re().search(text)
    return m.group(0) if m else None


def table_methods() -> list:
    """The built-in method classes that hold a ``DECODINGS`` table."""
    from bench import registry

    return [registry.METHODS[n] for n in sorted(registry.METHODS) if registry.METHODS[n].DECODINGS]


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.split("\n")[0]
    ap = argparse.ArgumentParser(prog="python -m bench.decoding", description=doc)
    ap.add_argument("--write", action="store_true", help="rewrite the docs' decoding tables")
    args = ap.parse_args(argv)
    stale = 0
    for cls in table_methods():
        path = docs_path(cls, ROOT)
        text = path.read_text()
        old, new = docs_block(text), render_block(cls)
        if old == new:
            continue
        stale += 1
        if not args.write:
            print(f"{path}: decoding table differs from {cls.__name__}.DECODINGS", file=sys.stderr)
        elif old is None:
            print(f"{path}: no generated block (add the markers)", file=sys.stderr)
            return 1
        else:
            path.write_text(text.replace(old, new))
            print(f"{path}: rewritten")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    raise SystemExit(main())
