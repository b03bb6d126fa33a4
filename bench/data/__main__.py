"""Data utilities: ``python -m bench.data tinygsm --stats`` (bench/data/program/length_stats.py).

Examples (offline: the test fixture or the generated stand-in, each labelled as such)::

    python -m bench.data tinygsm --stats --data-files tests/fixtures/tinygsm_sample.jsonl
    python -m bench.data tinygsm --stats --standin 20000 --json lengths.json
    python -m bench.data tinygsm --stats --num-proc 16      # the hub TinyGSM (11.8 M rows)
"""

from __future__ import annotations

import argparse
import json
import sys

from bench import atomic


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.data", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="dataset", required=True)
    t = sub.add_parser("tinygsm", help="TinyGSM-schema data (question, code)")
    t.add_argument(
        "--stats",
        action="store_true",
        required=True,
        help="examples kept by the length filter and the token-length distribution",
    )
    src = t.add_mutually_exclusive_group()
    src.add_argument(
        "--data-files",
        nargs="+",
        metavar="FILE",
        help="local json/jsonl/parquet/csv files with columns question, code",
    )
    src.add_argument(
        "--standin",
        type=int,
        default=0,
        metavar="N",
        help="N generated CPU stand-in problems (bench/data/program/arith.py)",
    )
    t.add_argument("--seed", type=int, default=0, help="stand-in seed (default 0)")
    t.add_argument(
        "--tokenizers", default="smollm,gpt2", help="comma-separated: smollm, gpt2 (default: both)"
    )
    t.add_argument("--max-len", type=int, default=512, help="length filter (default 512)")
    t.add_argument(
        "--separator",
        choices=("reference", "newline"),
        default="reference",
        help="reference: backslash + n (the paper harness; default); newline",
    )
    t.add_argument("--num-proc", type=int, default=1, help="tokenisation processes")
    t.add_argument("--json", metavar="OUT", help="also write the statistics as JSON")
    args = ap.parse_args(argv)

    from bench.data.program import length_stats
    from bench.data.program.tinygsm import NEWLINE_SEPARATOR, REFERENCE_SEPARATOR

    names = tuple(n.strip() for n in args.tokenizers.split(",") if n.strip())
    bad = [n for n in names if n not in length_stats.TOKENIZERS]
    if bad or not names:
        print(f"error: --tokenizers: unknown {bad or names} (known: smollm, gpt2)", file=sys.stderr)
        return 2
    if args.standin < 0:
        print(f"error: --standin must be >= 0, got {args.standin}", file=sys.stderr)
        return 2
    sep = REFERENCE_SEPARATOR if args.separator == "reference" else NEWLINE_SEPARATOR
    try:
        result = length_stats.run(
            data_files=args.data_files,
            standin=args.standin,
            seed=args.seed,
            tokenizer_names=names,
            max_len=args.max_len,
            separator=sep,
            num_proc=args.num_proc,
        )
    except (RuntimeError, ValueError, FileNotFoundError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "tinygsm_data_files" in msg:  # the hub is out of reach: say what works offline
            msg += " (here: --data-files FILE... or --standin N)"
        print(f"error: {msg}", file=sys.stderr)
        return 2
    print(length_stats.format_stats(result))
    if args.json:
        atomic.write_text(args.json, json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
