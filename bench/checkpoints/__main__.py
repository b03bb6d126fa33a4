"""``python -m bench.checkpoints inspect|convert|export`` (see :mod:`bench.checkpoints`).

Errors (a missing, truncated or foreign file, a family that does not match, an option the file
does not allow, a hub file not fetched while offline) are one line on stderr, exit 2; nothing
is written then.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench.config import ConfigError


def _inspect(args) -> int:
    from bench.checkpoints import open_source
    from bench.checkpoints.mapping import describe

    op = open_source(args.src, family=args.family)
    info = describe(op.ref, op.spec)
    info["sha256"] = op.source.sha256
    info["source"] = op.source.name
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True, default=str))
        return 0
    width = max(len(k) for k in info)
    for k, v in info.items():
        if isinstance(v, dict):
            v = ", ".join(f"{a}={b}" for a, b in v.items()) or "-"
        elif isinstance(v, list):
            v = "; ".join(str(x) for x in v) or "-"
        print(f"{k:<{width}}  {v}")
    return 0


def _convert(args) -> int:
    from bench.checkpoints import convert, parse_option

    options = dict(parse_option(o) for o in args.option)
    meta = convert(args.src, args.out, family=args.family, options=options)
    src = meta["source"]
    print(
        f"{args.out}: {meta['method']} ({meta['family']}), {meta['parameters']:,} parameters, "
        f"|V| {meta['vocab_size']}, step {src['global_step']}, sha256 {str(src['sha256'])[:12]}"
    )
    for n in meta["notes"]:
        print(f"note: {n}")
    return 0


def _export(args) -> int:
    from bench.checkpoints.export import export

    out = export(args.run_dir, args.out)
    print(f"{out}: written in the reference format")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.checkpoints",
        description="Inspect, convert and export checkpoints in the S-FLM reference format "
        "(SRC: a file or hf://jdeschena/s-flm/<path>), and read the methods' authors' Hugging "
        "Face-format repositories (SRC: hf://<owner>/<repo>, e.g. hf://kuleshov-group/mdlm-owt, "
        "or a folder of its config.json + model.safetensors; their code is never run)",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    fam = {"help": "force the family (one the registered methods declare: their "
           "Method.reference; docs/checkpoints.md) when the file's config cannot tell families "
           "with the same keys apart"}  # fmt: skip
    p = sub.add_parser("inspect", help="what a file is, without converting it")
    p.add_argument("src")
    p.add_argument("--family", **fam)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("convert", help="write a model folder this harness samples like a run")
    p.add_argument("src")
    p.add_argument("--out", required=True, help="the model folder to write")
    p.add_argument("--family", **fam)
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option the file allows a choice for (e.g. adaptive=true, attn_softcap=50)",
    )
    p = sub.add_parser("export", help="write a model trained here in the reference format")
    p.add_argument("run_dir")
    p.add_argument("--out", required=True, help="the .ckpt file to write")
    args = ap.parse_args(argv)
    try:
        return {"inspect": _inspect, "convert": _convert, "export": _export}[args.cmd](args)
    except ConfigError as e:  # CheckpointError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
