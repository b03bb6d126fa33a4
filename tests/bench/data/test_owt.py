"""The OWT task (bench/data/owt/task.py, its block cache bench/data/owt/blocks.py) and the offline
GPT-2 tokenizer (bench/text/gpt2.py)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from genppl_tiny import tiny_gpt2
from helpers import owt_cache_copy, owt_corpus, owt_task

from bench.config import ConfigError, TaskConfig
from bench.data.owt import blocks as owt_blocks
from bench.data.owt import task as owt
from bench.text import gpt2 as gpt2_mod
from bench.text.gpt2 import load_gpt2_tokenizer

EOT = 50256
FIXTURES = Path(__file__).parents[2] / "fixtures"
MIXED = [
    "Hello world",
    "I can't  believe it's 2024!\n\n  naïve café 🤖 日本語",
    "    def f(x):\n\treturn x**2  # trailing   \n",
    "The U.S.A. won 3-2; they'll (probably) say \"we're #1\".",
]


@pytest.fixture(scope="module")
def data_dir(owt_standin):
    """The session's shared stand-in cache (tests/conftest.py): its blocks and the offline
    GPT-2 tokenizer folder are built once; tests here only read it."""
    return owt_standin[1]


@pytest.fixture(scope="module")
def offline_tok(data_dir):
    # never skipped: the offline copy is a project dependency (scripts/setup.sh)
    return load_gpt2_tokenizer("whisper", data_dir)


# --------------------------------------------------------------------------- tokenizer


def test_offline_gpt2_ids_on_fixed_text(offline_tok):
    tok = offline_tok
    assert len(tok) == 50257 and tok.eos_token_id == EOT and tok.bos_token_id == EOT
    assert tok.sflm_source.startswith("openai-whisper")
    # ids of the hub tokenizer / tiktoken r50k_base for these strings
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.encode("The quick brown fox") == [464, 2068, 7586, 21831]
    assert tok.encode("Hello<|endoftext|>world") == [15496, EOT, 6894]
    assert tok.encode(" the dog") == [262, 3290]
    for s in MIXED:
        assert tok.decode(tok.encode(s)) == s


def _rank_bpe(ranks: dict[bytes, int], text: str) -> list[int]:
    """tiktoken's algorithm, written out: GPT-2 regex pieces, then repeatedly merge the
    adjacent pair of lowest rank; a piece's ids are the ranks of its final parts."""
    import regex

    pat = regex.compile(
        r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    )
    out = []
    for piece in pat.findall(text):
        parts = [bytes([b]) for b in piece.encode()]
        while len(parts) > 1:
            r, i = min(
                (ranks.get(parts[i] + parts[i + 1], 1 << 30), i) for i in range(len(parts) - 1)
            )
            if r == 1 << 30:
                break
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        out += [ranks[p] for p in parts]
    return out


def test_offline_tokenizer_equals_rank_bpe_on_the_official_ranks(offline_tok):
    ranks = gpt2_mod.read_ranks(gpt2_mod.whisper_ranks_path())  # sha256-checked r50k_base
    assert len(ranks) == 50256
    for s in MIXED:
        assert offline_tok.encode(s) == _rank_bpe(ranks, s), s


def test_offline_tokenizer_gives_the_committed_reference_ids(offline_tok):
    """The ids of the hub's gpt2 tokenizer for MIXED and a special token inside text, committed
    in tests/fixtures/gpt2_reference_ids.json (worked out offline from the official ranks; the
    file says how): runs everywhere, CI included, where the hub tokenizer cannot load."""
    rows = json.loads((FIXTURES / "gpt2_reference_ids.json").read_text())["gpt2"]
    assert {t for t, _ in rows} >= {*MIXED, "Hello<|endoftext|>world"}
    for s, ids in rows:
        assert offline_tok.encode(s) == ids, s
        assert offline_tok.decode(ids) == s


# --------------------------------------------------------------------------- layout


def test_wrap_blocks_is_mdlm_group_texts():
    E = 9
    blocks = owt.wrap_blocks([[1, 2, 3], [4, 5], [6]], L=6, eot=E)
    # flat = 1 2 3 E 4 5 E 6 E (9 tokens) -> two 4-token pieces, tail [E] dropped
    assert blocks.dtype == np.uint16
    assert blocks.tolist() == [[E, 1, 2, 3, E, E], [E, 4, 5, E, 6, E]]
    assert owt.wrap_blocks([[1, 2]], L=6, eot=E).shape == (0, 6)


_corpus, _task = owt_corpus, owt_task  # 240 short documents; L = 32, 40 held out


def test_standin_task_blocks_cache_and_labels(tmp_path, owt_standin, offline_tok):
    corpus, data_dir = owt_standin  # its blocks were built once for the session
    task = _task(corpus, data_dir)
    assert task.groups() == ["standin-my_corpus"] and task.stand_in_for == "OpenWebText"
    d = task.train_data(task.groups())
    n = len(d)
    assert n > 20 and d.x.shape == (n, 32)
    x = d.x[torch.tensor([0, 3, n - 1])]
    assert x.dtype == torch.int64 and (x[:, 0] == EOT).all() and (x[:, -1] == EOT).all()
    assert not d.clean_mask[torch.arange(4)].any() and d.loss_mask[torch.arange(4)].all()
    assert isinstance(task.split("train").memmap(), np.memmap)
    # held-out documents are separate: no validation block equals a training block
    v = task.valid_blocks()
    train_rows = {r.tobytes() for r in task.split("train").memmap()}
    assert len(v) > 0 and not any(r.astype(np.uint16).tobytes() in train_rows for r in v)
    # text survives: blocks decode to the corpus' words
    assert "river" in offline_tok.decode(v.reshape(-1)) or "city" in offline_tok.decode(
        v.reshape(-1)
    )
    # second instance: read from the cache, no tokenising
    again = _task(corpus, data_dir)
    orig = owt_blocks._worker_blocks
    owt_blocks._worker_blocks = None  # would fail if called
    try:
        assert np.array_equal(again.valid_blocks(), v)
    finally:
        owt_blocks._worker_blocks = orig
    # another key (valid_docs) is another cache entry (written to a copy of the shared cache)
    other = _task(corpus, owt_cache_copy(owt_standin, tmp_path / "cache"), valid_docs=60)
    assert other.split("valid").path != task.split("valid").path


def _prepare_in_child(corpus, data_dir, log):
    def logged(path, batches):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(path, batches)

    real = owt_blocks._write_blocks
    owt_blocks._write_blocks = logged
    _task(corpus, data_dir).split("train", progress=False)


def test_concurrent_jobs_prepare_the_cache_once(tmp_path, offline_tok):
    corpus = _corpus(tmp_path / "c.jsonl", n_docs=300)
    data_dir, log = str(tmp_path / "cache"), str(tmp_path / "built.log")
    load_gpt2_tokenizer("whisper", data_dir)  # the tokenizer folder, not the blocks
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_prepare_in_child, args=(corpus, data_dir, log)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert len(open(log).read().split()) == 1
    assert len(list((tmp_path / "cache" / "owt").glob("*.u16"))) == 1


def test_eval_canvas_is_all_masked(owt_standin):
    task = _task(*owt_standin)
    d = task.eval_data(task.groups()[0], 5)
    assert d.x.shape == (5, 32) and not d.clean_mask.any() and d.loss_mask.all()
    with pytest.raises(ValueError, match="unknown group"):
        task.eval_data("openwebtext", 5)


def test_evaluate_and_data_reference(owt_standin, offline_tok):
    from bench.evaluate.genppl.evaluator import GenPPL, wrap_model

    task = _task(*owt_standin, bootstrap=50)  # bootstrap is not in the cache key: reads it
    ref = wrap_model(tiny_gpt2(50257, n_positions=64, eos=EOT), offline_tok, "tiny", device="cpu")
    task._genppl = GenPPL(
        ref=ref, ref_model="tiny", sample_tokenizer=offline_tok, progress=False, n_resamples=50
    )
    g = task.groups()[0]
    collapsed = torch.full((4, 32), 262)
    collapsed[:, 0] = EOT
    m = {v.metric: v for v in task.evaluate(collapsed, task.eval_data(g, 4), g)}
    assert set(m) >= {"gen_ppl", "gen_ppl_pooled", "entropy"}
    assert m["entropy"].value == pytest.approx(
        -(1 / 32 * np.log(1 / 32) + 31 / 32 * np.log(31 / 32))
    )
    assert m["gen_ppl"].n == 4 and task.last_rows[0]["ref_model"] == "tiny"
    assert task.protocol() == "corpus=standin-my_corpus; L=32; ref=tiny; eot=paper"  # every row
    data = {v.metric: v for v in task.data_reference(3)}
    assert data["entropy"].n == 3 and data["entropy"].value > 2.0
    with pytest.raises(ValueError, match=r"\(N, 32\)"):
        task.evaluate(torch.zeros(2, 16, dtype=torch.long), task.eval_data(g, 2), g)


def test_option_errors_name_the_key(tmp_path, data_dir):
    with pytest.raises(ConfigError, match="task.options.nope"):
        owt.OWTTask(TaskConfig(name="owt", options={"nope": 1}))
    with pytest.raises(ConfigError, match="task.options.gen_ppl_mode"):
        owt.OWTTask(TaskConfig(name="owt", options={"gen_ppl_mode": "mean"}))
    task = _task(_corpus(tmp_path / "c.jsonl", n_docs=30), data_dir)
    with pytest.raises(ConfigError, match="task.options.valid_docs"):
        task.split("train")
    real = owt.OWTTask(TaskConfig(name="owt"))
    assert real.groups() == ["openwebtext"] and real.seq_len == 1024 and real.vocab_size == 50257
