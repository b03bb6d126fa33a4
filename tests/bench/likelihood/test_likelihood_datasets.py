"""Dataset specs -> blocks (bench.likelihood.datasets): ``text:PATH`` wrapped and padded into the
right blocks and masks (with and without a tokenizer's BOS / EOS), ``heldout`` in the task's own
format, unknown specs and blocks longer than the model's positions as one-line ConfigErrors, a
zero-shot corpus cached once and, offline, one line naming it and suggesting ``text:PATH``, and
detokenizers that give the reference's text."""

from __future__ import annotations

import pytest
import torch

from bench import registry
from bench.config import ConfigError, TaskConfig
from bench.likelihood import datasets as lds
from bench.likelihood import detok, layout, zeroshot


def sort_task(data_dir=""):
    return registry.make_task(TaskConfig(name="sort", data_dir=str(data_dir),
                                         options={"n_digits": 4}))  # fmt: skip


class WordTokenizer:
    """Words -> ids 3.. (BOS 1, EOS 2, PAD 0); what the loaders call of an HF tokenizer."""

    name_or_path, bos_token_id, eos_token_id, pad_token_id = "words", 1, 2, 0
    model_max_length = 1024

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def __len__(self):
        return 64

    def _ids(self, text):
        return [3 + self.vocab.setdefault(w, len(self.vocab) % 60) for w in text.split()]

    def __call__(self, text, add_special_tokens=False):
        ids = [self._ids(t) for t in text] if isinstance(text, list) else self._ids(text)
        return {"input_ids": ids}


class WordTask:
    """A task with a tokenizer (BOS / EOS / PAD), for the framed layouts and the zero-shot path."""

    name, vocab_size, seq_len = "words", 64, 8

    def __init__(self, data_dir=""):
        self.tokenizer = WordTokenizer()
        self.cfg = TaskConfig(name="sort", data_dir=str(data_dir))

    def encode_text(self, text):
        return self.tokenizer(text)["input_ids"]


def test_text_wrapped_without_specials_concatenates_and_cuts(tmp_path):
    f = tmp_path / "digits.txt"
    f.write_text("1 2 3\n\n4 5 6 7 8\n9 0 1 2 3 4 5\n")  # 15 ids, blank line skipped
    d = lds.load_blocks(sort_task(), f"text:{f}")
    assert d.x.tolist() == [[1, 2, 3, 4, 5, 6, 7, 8]]  # L = 8; the 7-id tail is dropped
    assert d.loss_mask.all() and not d.clean_mask.any()
    assert lds.load_blocks(sort_task(), f"text:{f}", block=5).x.tolist() == [
        [1, 2, 3, 4, 5],
        [6, 7, 8, 9, 0],
        [1, 2, 3, 4, 5],
    ]


def test_text_padded_one_document_per_block(tmp_path):
    f = tmp_path / "digits.txt"
    f.write_text("1 2 3\n4 5 6 7 8 9 0 1 2 3\n")
    d = lds.load_blocks(sort_task(), f"text:{f}", wrap=False)
    assert d.x.tolist() == [[1, 2, 3, 0, 0, 0, 0, 0], [4, 5, 6, 7, 8, 9, 0, 1]]  # cut to L
    assert d.loss_mask.sum(-1).tolist() == [3, 8]
    assert d.loss_mask[0].tolist() == [True] * 3 + [False] * 5
    # padding is out of the loss; clean_mask marks the task's givens only (none in a text block):
    # the bound keeps pads clean in x_t as s-flm@18d586f does (test_bound_times_and_pads.py)
    assert not d.clean_mask.any()


def test_text_with_bos_eos_frames_blocks_as_mdlm(tmp_path):
    f = tmp_path / "words.txt"
    f.write_text("a b c\nd e\nf g h i j k l\n")
    task = WordTask()
    a, b, c, d, e = (task.encode_text(w)[0] for w in "abcde")
    w = lds.load_blocks(task, f"text:{f}")  # [BOS] 6 tokens [EOS]; documents end with EOS
    assert w.x[0].tolist() == [1, a, b, c, 2, d, e, 2]
    assert len(w) == 2 and (w.x[:, 0] == 1).all() and (w.x[:, -1] == 2).all()
    p = lds.load_blocks(task, f"text:{f}", wrap=False)
    assert p.x[1].tolist() == [1, d, e, 2, 0, 0, 0, 0]
    assert p.loss_mask[1].tolist() == [True] * 4 + [False] * 4
    assert p.x[2, -1] == 2 and p.loss_mask[2].all()  # cut to L with its EOS kept


def test_layout_wraps_within_batches_of_documents():
    sp = layout.Specials(None, 9, 0)
    docs = [[1, 2, 3]] * 5  # 20 tokens with separators; batches of 2 documents: 8 + 8 + 4
    assert layout.wrap(docs, 3, sp, batch=2).shape == (5, 3)  # each batch's tail is dropped
    assert layout.wrap(docs, 3, sp, batch=1000).shape == (6, 3)
    assert layout.wrap(docs, 3, sp)[0].tolist() == [1, 2, 3] and sp.eos == 9


def test_heldout_is_the_tasks_own_format():
    task = sort_task()
    d = lds.load_blocks(task, "heldout", n=6)
    ref = task.heldout_data(task.groups(), 6)
    assert torch.equal(d.x, ref.x) and torch.equal(d.clean_mask, ref.clean_mask)
    assert d.clean_mask[:, :4].all() and d.loss_mask[:, 4:].all() and not d.loss_mask[:, :4].any()


def test_unknown_spec_lists_the_known_ones():
    with pytest.raises(ConfigError) as e:
        lds.parse("wikitext4")
    msg = str(e.value)
    assert "\n" not in msg and "wikitext4" in msg
    assert all(k in msg for k in ("heldout", "owt-valid", "ptb", "lambada", "text:PATH"))


def test_block_longer_than_the_models_positions(tmp_path):
    f = tmp_path / "d.txt"
    f.write_text("1 2 3\n")
    with pytest.raises(ConfigError, match="longer than the model's 8 positions") as e:
        lds.load_blocks(sort_task(), f"text:{f}", block=16)
    assert "\n" not in str(e.value)


def test_owt_valid_needs_the_owt_task():
    with pytest.raises(ConfigError, match="owt-valid.*task is sort"):
        lds.load_blocks(sort_task(), "owt-valid")


def test_zeroshot_offline_is_one_line_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ConfigError) as e:
        lds.load_blocks(WordTask(tmp_path), "wikitext2")
    msg = str(e.value)
    assert "\n" not in msg and "wikitext2" in msg and "text:PATH" in msg
    assert not list(tmp_path.rglob("*.npz"))  # nothing cached


def test_zeroshot_is_detokenised_wrapped_and_cached(monkeypatch, tmp_path):
    calls = []

    def docs(name):
        calls.append(name)
        return ["a b c", "d e f g h", "i"]

    monkeypatch.setattr(zeroshot, "documents", docs)
    task = WordTask(tmp_path)
    first = lds.load_blocks(task, "ag_news")
    assert calls == ["ag_news"] and first.x.shape == (2, 8) and (first.x[:, 0] == 1).all()
    again = lds.load_blocks(WordTask(tmp_path), "ag_news", n=1)  # from the cache
    assert calls == ["ag_news"] and torch.equal(again.x, first.x[:1])
    assert len(list((tmp_path / "likelihood").glob("ag_news-wrapped-L8-*.npz"))) == 1
    lds.load_blocks(task, "ag_news", wrap=False)  # another layout: another entry
    assert calls == ["ag_news", "ag_news"]


def test_a_corpus_may_name_its_layout(monkeypatch, tmp_path):
    """``<corpus>@padded`` / ``@wrapped`` overrides the section's ``wrap`` for that corpus (one
    sweep evaluates both layouts; the spec, hence the rows' subset and the cell id, says which)."""
    monkeypatch.setattr(zeroshot, "documents", lambda name: ["a b c", "d e f g h", "i"])
    task = WordTask(tmp_path)
    wrapped = lds.load_blocks(task, "ag_news")
    padded = lds.load_blocks(task, "ag_news@padded")  # the section says wrap: true
    assert torch.equal(padded.x, lds.load_blocks(task, "ag_news", wrap=False).x)
    assert not torch.equal(padded.x[:2], wrapped.x) and padded.x.shape[0] == 3  # one per document
    assert torch.equal(lds.load_blocks(task, "ag_news@wrapped", wrap=False).x, wrapped.x)
    assert lds.parse("ptb@padded").wrap is False and lds.parse("ptb").wrap is None
    for bad in ("ptb@unwrapped", "owt-valid@padded", "nope@padded"):
        with pytest.raises(ConfigError, match="<corpus>@wrapped|padded"):
            lds.parse(bad)


def test_detokenizers_undo_the_corpora_spacing():
    assert detok.wikitext(" = = Title = = \n 1 @,@ 000 km , the game 's") == (
        " == Title ==\n1,000 km, the game's"
    )
    assert detok.ptb("the firm 's N shares do n't \\/ <unk>") == "the firm's 1 shares don't / ?"
    assert detok.lm1b('he said , " yes " .') == 'he said, "yes" .'
    assert detok.lambada("\u201chi\u201d ") == '\n"hi"'
    assert set(zeroshot.CORPORA) == {
        "ptb", "wikitext2", "wikitext103", "lm1b", "lambada", "ag_news", "pubmed", "arxiv"
    }  # fmt: skip


def test_owt_valid_and_gpt2_text_on_the_owt_stand_in(owt_standin, tmp_path, monkeypatch):
    from helpers import owt_cache_copy, owt_task

    corpus, _ = owt_standin
    task = owt_task(corpus, owt_cache_copy(owt_standin, tmp_path / "cache"))
    valid = lds.load_blocks(task, "owt-valid", n=3)
    assert torch.equal(valid.x, torch.from_numpy(task.valid_blocks(3)))
    assert valid.loss_mask.all() and not valid.clean_mask.any()
    assert torch.equal(lds.load_blocks(task, "heldout", n=3).x, valid.x)
    f = tmp_path / "prose.txt"
    f.write_text("The river walked quickly under the bright old city.\n" * 12)
    text = lds.load_blocks(task, f"text:{f}")  # GPT-2: [EOT] + 30 tokens + [EOT], EOT-separated
    assert (
        text.x.shape[1] == 32 and (text.x[:, 0] == 50256).all() and (text.x[:, -1] == 50256).all()
    )
    monkeypatch.setattr(
        zeroshot, "documents", lambda name: ["The city.", "Seven green papers."] * 40
    )
    zs = lds.load_blocks(task, "lambada", n=2)
    assert zs.x.shape == (2, 32) and (zs.x[:, 0] == 50256).all()
