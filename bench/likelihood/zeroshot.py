"""The zero-shot corpora of the MDLM / Duo likelihood tables, loaded as their code loads them
(kuleshov-group/mdlm ``dataloader.py::get_dataset`` and ``get_dataloaders``; s-sahoo/duo the same):
the ``datasets`` id and config, the evaluation split (``test`` for LM1B and AG News, the
``validation`` split otherwise; LAMBADA: OpenAI's ``lambada_test.jsonl``), the text column and
the detokenizer (:mod:`bench.likelihood.detok`). One row is one document.

Offline (no hub, no network) loading fails; :func:`documents` says so in one line
(:class:`~bench.config.ConfigError`) and suggests ``text:PATH`` with a local copy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bench.config import ConfigError
from bench.likelihood.detok import DETOKENIZERS


@dataclass(frozen=True)
class Corpus:
    """One zero-shot corpus: ``path`` / ``config`` for ``datasets.load_dataset`` (``path`` a URL
    for LAMBADA), ``split``, the text ``column``, the ``detok`` name ("" = none)."""

    path: str
    config: str | None
    split: str
    column: str
    detok: str


LAMBADA_URL = "https://openaipublic.blob.core.windows.net/gpt-2/data/lambada_test.jsonl"

#: spec name -> corpus (mdlm dataloader.py::get_dataset; splits: get_dataloaders)
CORPORA = {
    "ptb": Corpus("ptb_text_only", None, "validation", "sentence", "ptb"),
    "wikitext2": Corpus("wikitext", "wikitext-2-raw-v1", "validation", "text", "wikitext"),
    "wikitext103": Corpus("wikitext", "wikitext-103-raw-v1", "validation", "text", "wikitext"),
    "lm1b": Corpus("lm1b", None, "test", "text", "lm1b"),
    "lambada": Corpus(LAMBADA_URL, None, "test", "text", "lambada"),
    "ag_news": Corpus("ag_news", None, "test", "text", ""),
    "pubmed": Corpus("scientific_papers", "pubmed", "validation", "article", "scientific_papers"),
    "arxiv": Corpus("scientific_papers", "arxiv", "validation", "article", "scientific_papers"),
}


def _lambada_rows(url: str) -> list[dict]:
    # kuleshov-group/mdlm dataloader.py::get_lambada_test_dataset: one JSON object per line
    import urllib.request

    with urllib.request.urlopen(url, timeout=60) as r:
        return [json.loads(line) for line in r.read().decode("utf-8").splitlines() if line.strip()]


def _rows(c: Corpus):
    if c.path == LAMBADA_URL:
        return _lambada_rows(c.path)
    import datasets

    return datasets.load_dataset(c.path, c.config, split=c.split)


def documents(name: str) -> list[str]:
    """The detokenised documents of corpus ``name`` (a key of :data:`CORPORA`), in file order.
    ConfigError (one line) when it cannot be loaded (offline: no hub)."""
    c = CORPORA[name]
    try:
        rows = _rows(c)
        texts = [r[c.column] for r in rows] if isinstance(rows, list) else rows[c.column]
    except Exception as e:  # offline: ConnectionError, OfflineModeIsEnabled, URLError, ...
        first = str(e).splitlines()[0][:160] if str(e) else ""
        where = c.path + (f"/{c.config}" if c.config else "")
        raise ConfigError(
            f"likelihood dataset {name}: cannot load {where} ({type(e).__name__}: {first}); "
            f"offline, save its {c.split} split as text and use text:PATH"
        ) from None
    detok = DETOKENIZERS[c.detok] if c.detok else None
    return [detok(t) if detok else t for t in texts]
