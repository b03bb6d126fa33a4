"""Token-length statistics of TinyGSM-schema data, for the paper's token-length figure.

:func:`tinygsm_stats` tokenises every example as training does (``[BOS] question separator
program [EOS]``, :func:`bench.data.program.tinygsm.token_lengths`) under each tokenizer asked for
(``smollm``: the paper's SmolLM-135M; ``gpt2``: GPT-2, the reference config's default) and
reports the number of examples kept by the ``<= max_len`` filter, the median and the length
distribution, plus the number kept with the other separator (backslash + n vs a newline: the
lengths differ by a constant, the separators' token-count difference).

The data is always labelled: the hub TinyGSM (``TinyGSM/TinyGSM``); local files in the TinyGSM
schema (``--data-files``: e.g. the 30-row test fixture, NOT TinyGSM); or ``--standin N``
generated CPU stand-in problems (bench/data/program/arith.py, NOT TinyGSM). The CLI is
``python -m bench.data tinygsm --stats`` (bench/data/__main__.py).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import numpy as np

from bench.data.program.tinygsm import (
    NEWLINE_SEPARATOR,
    REFERENCE_SEPARATOR,
    TINYGSM_HF,
    TinyGSMOptions,
    token_lengths,
)

TOKENIZERS = ("smollm", "gpt2")
QUANTILES = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)


def load_tokenizer(name: str):
    """``smollm`` (:func:`bench.text.smollm.load_smollm_tokenizer`) or ``gpt2``
    (:func:`bench.text.gpt2.load_gpt2_tokenizer`); RuntimeError when unavailable."""
    if name == "smollm":
        from bench.text.smollm import load_smollm_tokenizer

        return load_smollm_tokenizer()
    if name == "gpt2":
        from bench.text.gpt2 import load_gpt2_tokenizer

        return load_gpt2_tokenizer()
    raise ValueError(f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {name!r}")


def length_stats(lengths: np.ndarray, max_len: int, shift: int = 0, bin_width: int = 32) -> dict:
    """Counts, quantiles and a histogram of ``lengths``; ``kept`` = lengths <= ``max_len``
    (the reference's ``filter_too_long``), ``kept_other_separator`` = (lengths - ``shift``)
    <= ``max_len``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        raise ValueError("no examples")
    top = int(lengths.max())
    edges = np.arange(0, top + bin_width + 1, bin_width)
    counts, _ = np.histogram(lengths, bins=edges)
    values, per_value = np.unique(lengths, return_counts=True)
    return {
        "n": int(lengths.size),
        "kept": int((lengths <= max_len).sum()),
        "dropped": int((lengths > max_len).sum()),
        "kept_other_separator": int((lengths - shift <= max_len).sum()),
        "median": float(np.median(lengths)),
        "mean": float(lengths.mean()),
        "min": int(lengths.min()),
        "max": top,
        "quantiles": {f"{q:g}": float(np.quantile(lengths, q)) for q in QUANTILES},
        "histogram": {
            "bin_width": bin_width,
            "edges": edges.tolist(),
            "counts": counts.tolist(),
        },
        # every length with its count: a figure chooses its own bins from these
        "length_counts": {"values": values.tolist(), "counts": per_value.tolist()},
    }


def source_label(opts: TinyGSMOptions) -> str:
    if opts.data_files:
        names = ", ".join(opts.data_files)
        return f"local files in the TinyGSM schema ({names}); NOT the TinyGSM dataset"
    if opts.source == TINYGSM_HF:
        return f"{TINYGSM_HF} (the TinyGSM dataset, hub or HF cache)"
    return f"{opts.source} (hub dataset)"


def standin_file(n: int, seed: int, directory: str | Path) -> Path:
    """``n`` generated stand-in problems (bench/data/program/arith.py, train split) as a
    TinyGSM-schema jsonl in ``directory``."""
    from bench.data.program.arith import generate

    path = Path(directory) / f"arith_standin_{n}_seed{seed}.jsonl"
    rows = generate(n, split="train", seed=seed)
    path.write_text(
        "".join(json.dumps({"question": e["question"], "code": e["code"]}) + "\n" for e in rows)
    )
    return path


def tinygsm_stats(opts: TinyGSMOptions, tokenizers: dict, label: str | None = None) -> dict:
    """Length statistics of ``opts``'s data under each tokenizer in ``tokenizers`` (name ->
    tokenizer); the other separator is a newline when ``opts.separator`` is the reference's
    backslash + n, else the reference's."""
    other = NEWLINE_SEPARATOR if opts.separator == REFERENCE_SEPARATOR else REFERENCE_SEPARATOR
    out = {
        "data": label or source_label(opts),
        "max_len": opts.max_len,
        "separator": opts.separator,
        "other_separator": other,
        "tokenizers": {},
    }
    for name, tok in tokenizers.items():
        lengths = token_lengths(opts, tok)
        n_sep = len(tok(opts.separator, add_special_tokens=False)["input_ids"])
        n_other = len(tok(other, add_special_tokens=False)["input_ids"])
        st = length_stats(lengths, opts.max_len, shift=n_sep - n_other)
        st.update(
            tokenizer=getattr(tok, "name_or_path", "") or name,
            tokenizer_source=getattr(tok, "sflm_source", ""),
            separator_tokens=n_sep,
            other_separator_tokens=n_other,
        )
        out["tokenizers"][name] = st
    return out


def format_stats(stats: dict) -> str:
    """A plain-text table of :func:`tinygsm_stats`' result."""
    lines = [
        f"data: {stats['data']}",
        f"filter: length <= {stats['max_len']} tokens; separator {stats['separator']!r} "
        f"(other: {stats['other_separator']!r})",
        "",
        f"{'tokenizer':<10} {'n':>10} {'kept':>10} {'dropped':>9} {'kept(other sep)':>16} "
        f"{'median':>7} {'mean':>7} {'p90':>6} {'p99':>6} {'max':>6}",
    ]
    for name, st in stats["tokenizers"].items():
        q = st["quantiles"]
        lines.append(
            f"{name:<10} {st['n']:>10,} {st['kept']:>10,} {st['dropped']:>9,} "
            f"{st['kept_other_separator']:>16,} {st['median']:>7.1f} {st['mean']:>7.1f} "
            f"{q['0.9']:>6.0f} {q['0.99']:>6.0f} {st['max']:>6}"
        )
    for name, st in stats["tokenizers"].items():
        h = st["histogram"]
        lines += ["", f"{name} ({st['tokenizer_source'] or st['tokenizer']}): length histogram"]
        for lo, c in zip(h["edges"][:-1], h["counts"]):
            if c:
                lines.append(f"  [{lo:>4}, {lo + h['bin_width']:>4})  {c:>10,}")
    return "\n".join(lines)


def run(
    *,
    data_files: list[str] | None = None,
    standin: int = 0,
    seed: int = 0,
    tokenizer_names: tuple[str, ...] = TOKENIZERS,
    max_len: int = 512,
    separator: str = REFERENCE_SEPARATOR,
    num_proc: int = 1,
) -> dict:
    """Resolve the data and the tokenizers, then :func:`tinygsm_stats`."""
    toks = {name: load_tokenizer(name) for name in tokenizer_names}
    base = TinyGSMOptions(max_len=max_len, separator=separator, num_proc=num_proc)
    if standin:
        with tempfile.TemporaryDirectory() as d:
            path = standin_file(standin, seed, d)
            opts = dataclasses.replace(base, data_files=[str(path)])
            label = (
                f"{standin:,} generated CPU stand-in problems (bench/data/program/arith.py, "
                f"seed {seed}); NOT the TinyGSM dataset"
            )
            return tinygsm_stats(opts, toks, label)
    return tinygsm_stats(dataclasses.replace(base, data_files=data_files or None), toks)
