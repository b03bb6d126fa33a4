"""TinyGSM as the paper's harness builds it: the separator, one preparation per
sweep (a file lock shared by processes), and the token-length statistics."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import tinygsm_bpe, tinygsm_options, tinygsm_rows

from bench import atomic
from bench.config import TaskConfig
from bench.data.program import length_stats as stats
from bench.data.program import tinygsm
from bench.text.char import CharTokenizer

ROOT = Path(__file__).resolve().parents[3]
ROWS = tinygsm_rows()
_opts = tinygsm_options
bpe = pytest.fixture(tinygsm_bpe, scope="module", name="bpe")


# --------------------------------------------------------------------------- separator


def test_the_reference_separator_is_backslash_n():
    # the reference configs (configs/data/tiny-gsm.yaml, gsm8k-test.yaml) write this line
    line = "separator: '\\n'\n"
    assert yaml.safe_load(line)["separator"] == "\\n" == tinygsm.REFERENCE_SEPARATOR
    assert len(tinygsm.REFERENCE_SEPARATOR) == 2 and tinygsm.NEWLINE_SEPARATOR == "\n"
    try:
        from omegaconf import OmegaConf
    except ImportError:
        pass
    else:  # what the reference's Hydra config system reads
        assert OmegaConf.create(line).separator == tinygsm.REFERENCE_SEPARATOR
    assert tinygsm.TinyGSMOptions().separator == tinygsm.REFERENCE_SEPARATOR
    from bench.data.program.arith import ArithTask
    from bench.data.program.gsm8k import GSM8KTask

    assert GSM8KTask.Options().separator == tinygsm.REFERENCE_SEPARATOR
    assert ArithTask.Options().separator == tinygsm.NEWLINE_SEPARATOR
    sweep = yaml.safe_load((ROOT / "sweeps" / "gsm8k_nfe.yaml").read_text())
    assert sweep["task"]["options"]["separator"] == tinygsm.REFERENCE_SEPARATOR
    with pytest.raises(ValueError, match="separator"):
        tinygsm.TinyGSMOptions(separator=None)


def test_separator_ids_lengths_and_cache_key(tmp_path, bpe):
    qs, cs = [r["question"] for r in ROWS], [r["code"] for r in ROWS]
    ref, ref_pl = tinygsm.encode_pair(bpe, qs, cs)  # default: the reference's
    nl, nl_pl = tinygsm.encode_pair(bpe, qs, cs, "\n")
    bs, n = (bpe(s, add_special_tokens=False)["input_ids"] for s in ("\\", "n"))
    sep = bpe("\\n", add_special_tokens=False)["input_ids"]
    assert (
        sep == bs + n and len(sep) == 2 and bpe("\n", add_special_tokens=False)["input_ids"] != sep
    )
    for r, p, m, q in zip(ref, ref_pl, nl, nl_pl):
        assert r[p - 2 : p] == sep and len(r) == len(m) + 1 and p == q + 1
        assert r[: p - 2] == m[: q - 1] and r[p:] == m[q:]  # same question, same program
    assert tinygsm.cache_key(_opts(), bpe) != tinygsm.cache_key(_opts(separator="\n"), bpe)
    a = tinygsm.prepare(_opts(), bpe, str(tmp_path))
    b = tinygsm.prepare(_opts(separator="\n"), bpe, str(tmp_path))
    assert a != b
    meta = json.loads((a / "meta.json").read_text())
    assert meta["options"]["separator"] == "\\n"
    tr = tinygsm.load_split(a, "train")
    for row, clean in zip(tr.x.tolist(), tr.clean_mask):
        p = int(clean.sum())
        assert row[p - 2 : p] == sep  # both separator tokens are in the clean prompt


def test_a_length_at_the_limit_is_kept_with_newline_dropped_with_reference(tmp_path, bpe):
    """The separator moves examples across the <= max_len filter (one token longer)."""
    ids, _ = tinygsm.encode_pair(
        bpe, [r["question"] for r in ROWS], [r["code"] for r in ROWS], "\n"
    )
    limit = sorted(len(s) for s in ids)[len(ids) // 2]  # some examples exactly at the limit
    at_limit = sum(len(s) == limit for s in ids)
    assert at_limit >= 1
    kept = {}
    for sep in ("\n", "\\n"):
        meta = json.loads(
            (
                tinygsm.prepare(_opts(max_len=limit, separator=sep), bpe, str(tmp_path))
                / "meta.json"
            ).read_text()
        )
        kept[sep] = meta["counts"]["train"] + meta["counts"]["valid"]
    assert kept["\n"] - kept["\\n"] == at_limit


def test_gsm8k_prompts_end_with_the_separator(tmp_path, bpe):
    from bench.data.program.gsm8k import GSM8KTask

    f = tmp_path / "test.jsonl"
    f.write_text(
        "".join(
            json.dumps({"question": q, "answer": f"x\n#### {i}"}) + "\n"
            for i, q in enumerate(["Tom has 3 apples.", "How  many 5?"])
        )
    )
    for sep in ("\\n", "\n"):
        opts = {"gsm8k_source": str(f), "workers": 1}
        if sep == "\n":
            opts["separator"] = "\n"
        task = GSM8KTask(TaskConfig(name="gsm8k", options=opts), tokenizer=bpe)
        ev = task.eval_data("test", 2)
        sep_ids = bpe(sep, add_special_tokens=False)["input_ids"]
        for row, pl, q in zip(ev.x.tolist(), ev.meta["prompt_len"], ev.meta["question"]):
            assert row[pl - len(sep_ids) : pl] == sep_ids
            assert row[:pl] == [
                bpe.bos_token_id,
                *bpe(q.strip(), add_special_tokens=False)["input_ids"],
                *sep_ids,
            ]
        assert task.tinygsm.separator == sep


# --------------------------------------------------------------------------- one preparation


def _prepare_in_a_process(tok, data_dir, counter, barrier, hold_s, use_lock, out_q):
    """A "train job": prepares TinyGSM; tokenising appends its pid to ``counter``."""
    import contextlib

    inner = tinygsm._tokenized

    def counted(opts, t):
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(hold_s)  # a long tokenisation: the other process arrives meanwhile
        return inner(opts, t)

    tinygsm._tokenized = counted
    if not use_lock:  # bench.atomic.build_once then runs unlocked
        atomic.build_lock = lambda path, what="": contextlib.nullcontext(False)
    barrier.wait(timeout=60)  # both start at once on an empty cache
    out_q.put(str(tinygsm.prepare(_opts(), tok, data_dir)))


def _race(tmp_path, tok, use_lock):
    ctx = mp.get_context("fork")  # the children inherit the tokenizer: no re-import
    tmp_path.mkdir(parents=True)
    counter, data_dir = tmp_path / "tokenised.txt", tmp_path / "data"
    barrier, out_q = ctx.Barrier(2), ctx.Queue()
    procs = [
        ctx.Process(
            target=_prepare_in_a_process,
            args=(tok, str(data_dir), str(counter), barrier, 1.0, use_lock, out_q),
        )
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    dirs = {out_q.get(timeout=5) for _ in procs}
    return counter.read_text().split(), dirs, data_dir


def test_two_concurrent_preparations_tokenise_once(tmp_path, bpe):
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # quiet fork warning
    pids, dirs, data_dir = _race(tmp_path / "locked", bpe, use_lock=True)
    assert len(pids) == 1 and len(dirs) == 1  # one tokenisation, both use its cache
    (d,) = dirs
    assert (Path(d) / "meta.json").is_file()
    assert not [
        p for p in (data_dir / "tinygsm").iterdir() if p.is_dir() and p.name.startswith(".")
    ]
    # the control: without the lock both processes tokenise (so the check above can fail)
    pids, dirs, _ = _race(tmp_path / "unlocked", bpe, use_lock=False)
    assert len(pids) == 2 and len(dirs) == 1


def test_lock_failure_warns_and_still_prepares(tmp_path, bpe, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    # only the cache lock fails (datasets' own file locks keep working)
    fake = type(
        "fcntl",
        (),
        {"flock": staticmethod(no_locks), "LOCK_EX": fcntl.LOCK_EX, "LOCK_NB": fcntl.LOCK_NB},
    )
    monkeypatch.setattr(atomic, "fcntl", fake)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        d = tinygsm.prepare(_opts(), bpe, str(tmp_path))
    assert (d / "meta.json").is_file()
    assert any("cannot lock" in str(x.message) for x in w)


# --------------------------------------------------------------------------- statistics


def test_length_stats_counts():
    lengths = np.array([10, 20, 511, 512, 513, 600])
    st = stats.length_stats(lengths, 512, shift=1, bin_width=100)
    assert (st["n"], st["kept"], st["dropped"]) == (6, 4, 2)
    assert st["kept_other_separator"] == 5  # 513 - 1 fits with a one-token-shorter separator
    assert st["median"] == 511.5 and st["max"] == 600 and st["min"] == 10
    assert (
        st["histogram"]["counts"] == [2, 0, 0, 0, 0, 3, 1] and sum(st["histogram"]["counts"]) == 6
    )
    with pytest.raises(ValueError, match="no examples"):
        stats.length_stats(np.array([], dtype=int), 512)


def test_token_lengths_and_stats_on_the_fixture(bpe):
    opts = _opts(max_len=512)
    lengths = tinygsm.token_lengths(opts, bpe)
    ids, _ = tinygsm.encode_pair(bpe, [r["question"] for r in ROWS], [r["code"] for r in ROWS])
    assert lengths.tolist() == [len(s) for s in ids]
    out = stats.tinygsm_stats(_opts(max_len=150), {"bpe": bpe, "char": CharTokenizer()})
    assert "NOT the TinyGSM dataset" in out["data"] and out["separator"] == "\\n"
    st = out["tokenizers"]["bpe"]
    assert st["kept"] == sum(len(s) <= 150 for s in ids) and st["separator_tokens"] == 2
    assert st["kept_other_separator"] == sum(len(s) - 1 <= 150 for s in ids)
    assert out["tokenizers"]["char"]["median"] > st["median"]  # characters: longer
    text = stats.format_stats(out)
    assert "NOT the TinyGSM dataset" in text and "bpe" in text and "char" in text


def test_stats_cli(tmp_path, bpe, monkeypatch, capsys):
    from bench.data.__main__ import main

    monkeypatch.setattr(stats, "load_tokenizer", lambda name: bpe)
    out = tmp_path / "s.json"
    assert (
        main(
            ["tinygsm", "--stats", "--standin", "200", "--tokenizers", "smollm", "--json", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "stand-in" in printed and "NOT the TinyGSM dataset" in printed
    got = json.loads(out.read_text())
    assert got["tokenizers"]["smollm"]["n"] == 200
    assert main(["tinygsm", "--stats", "--tokenizers", "nope"]) == 2
    assert (
        main(
            [
                "tinygsm",
                "--stats",
                "--data-files",
                str(tmp_path / "none.jsonl"),
                "--tokenizers",
                "smollm",
            ]
        )
        == 2
    )
    assert "not found" in capsys.readouterr().err
