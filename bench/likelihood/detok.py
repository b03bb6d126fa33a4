"""The detokenizers the MDLM / Duo zero-shot evaluation applies to each corpus before GPT-2
tokenisation: they undo the corpora's tokenised spacing (``" @-@ "``, ``" n't"``, ``" , "``).
The output must equal the reference's character for character (the numbers depend on it), so
each rule below is one of the reference's, in its order; quirks included."""

from __future__ import annotations

import re

# (old, new) literal replacements and (pattern, replacement) regexes, applied in list order


def _apply(text: str, rules) -> str:
    for kind, old, new in rules:
        text = text.replace(old, new) if kind == "s" else re.sub(old, new, text)
    return text


# kuleshov-group/mdlm dataloader.py::wt_detokenizer
_WIKITEXT = [
    ("s", "s '", "s'"),
    ("r", r"/' [0-9]/", r"/'[0-9]/"),  # sic: a literal pattern in the reference, kept
    *(("s", f" @{c}@ ", c) for c in "-,."),
    *(("s", f" {p} ", f"{p} ") for p in ":;.!?,"),
    ("r", r"\(\s*([^\)]*?)\s*\)", r"(\1)"),
    ("r", r"\[\s*([^\]]*?)\s*\]", r"[\1]"),
    ("r", r"{\s*([^}]*?)\s*}", r"{\1}"),
    ("r", r"\"\s*([^\"]*?)\s*\"", r'"\1"'),
    ("r", r"'\s*([^']*?)\s*'", r"'\1'"),
    ("s", "= = = =", "===="),
    ("s", "= = =", "==="),
    ("s", "= =", "=="),
    ("s", " \N{DEGREE SIGN} ", "\N{DEGREE SIGN}"),
    ("s", " \n", "\n"),
    ("s", "\n ", "\n"),
    ("s", " N ", " 1 "),
    ("s", " 's", "'s"),
]

# kuleshov-group/mdlm dataloader.py::ptb_detokenizer (its " N " loop runs 10 times)
_PTB = [
    ("s", " 's", "'s"),
    ("s", "s ' ", "s' "),
    ("s", " n't", "n't"),
    ("s", " \n ", "\n"),
    ("s", "\\/", "/"),
    *(("s", " N ", " 1 "),) * 10,
    ("s", "$ 1", "$1"),
    ("s", "# 1", "#1"),
    ("s", "<unk>", "?"),
]

# kuleshov-group/mdlm dataloader.py::lm1b_detokenizer
_LM1B = [
    ("s", "http : / / ", "http://"),
    ("s", "https : / / ", "https://"),
    ("r", r" \'(\w+)", r"'\1"),
    ("r", r" (\w+) \. ", r" \1. "),
    ("r", r" (\w+) \.$", r" \1."),
    ("s", " ? ", "? "),
    ("r", r" \?$", "?"),
    ("s", " ! ", "! "),
    ("r", r" \!$", "!"),
    *(("s", f" {p} ", f"{p} ") for p in ",:;"),
    ("s", " / ", "/"),
    ("r", r"\" ([^\"]+) \"", r'"\1"'),
    ("r", r"\' ([^\']+) \'", r"'\1'"),
    ("r", r"\( ([^\(\)]+) \)", r"(\1)"),
    ("r", r"\[ ([^\[\]]+) \]", r"[\1]"),
    ("s", "$ ", "$"),
    ("s", "\N{POUND SIGN} ", "\N{POUND SIGN}"),
]


def wikitext(text: str) -> str:
    return _apply(text, _WIKITEXT)


def ptb(text: str) -> str:
    return _apply(text, _PTB)


def lm1b(text: str) -> str:
    return _apply(text, _LM1B)


def lambada(text: str) -> str:
    # kuleshov-group/mdlm dataloader.py::lambada_detokenizer: curly double quotes, a leading newline
    text = text.replace("\N{LEFT DOUBLE QUOTATION MARK}", '"')
    return "\n" + text.replace("\N{RIGHT DOUBLE QUOTATION MARK}", '"').strip()


def scientific_papers(text: str) -> str:
    # kuleshov-group/mdlm dataloader.py::scientific_papers_detokenizer: WikiText's, then LM1B's
    return lm1b(wikitext(text))


#: name -> function (the zero-shot table names them; bench.likelihood.zeroshot)
DETOKENIZERS = {
    "wikitext": wikitext,
    "ptb": ptb,
    "lm1b": lm1b,
    "lambada": lambada,
    "scientific_papers": scientific_papers,
}
