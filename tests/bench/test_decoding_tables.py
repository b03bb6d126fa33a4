"""The decoding tables (bench.decoding): each method that keeps ``DECODINGS`` samples with exactly
its names, reads its flags off the table, spends the calls the table says, and its docs page
holds the table generated from it (``python -m bench.decoding --write`` rewrites a stale one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import make_model

from bench import decoding, registry
from bench.config import BackboneConfig

ROOT = Path(__file__).resolve().parents[2]
TABLED = decoding.table_methods()


def test_every_built_in_method_keeps_a_table():
    assert {c.name for c in TABLED} >= {"ar", "mdlm", "duo", "candi", "flm", "sflm"}


@pytest.mark.parametrize("cls", TABLED, ids=lambda c: c.name)
def test_docs_table_is_the_generated_one(cls):
    text = decoding.docs_path(cls, ROOT).read_text()
    block = decoding.docs_block(text)
    assert block is not None, f"{cls.name}.md has no generated decodings block"
    assert block == decoding.render_block(cls), "stale: run python -m bench.decoding --write"


@pytest.mark.parametrize("cls", TABLED, ids=lambda c: c.name)
def test_flags_are_read_off_the_table(cls):
    table = cls.DECODINGS
    assert set(cls.decodings) <= set(table)
    assert set(cls.temperature_free) == set(decoding.flagged(table, "temperature_free"))
    assert set(cls.call_skipping) == set(decoding.flagged(table, "call_skipping"))
    for d in table.values():
        assert d.summary and d.reference and "\n" not in d.summary + d.reference
        fields = set(cls.Options.__dataclass_fields__)
        assert set(d.options) <= fields, set(d.options) - fields


@pytest.mark.parametrize("cls", TABLED, ids=lambda c: c.name)
def test_each_decoding_spends_the_calls_its_table_says(cls):
    """A tiny model samples every decoding of the class at nfe 3: the calls counted by
    ``Method.call`` equal ``Decoding.calls`` of the request's budget (``nfe_for``: AR's is the
    generated length; at most that for a call-skipping decoding)."""
    method, net = make_model(cls.name, vocab=6, seq_len=8, backbone=BackboneConfig(size="cpu-mini"))
    prompt = torch.zeros(2, 8, dtype=torch.long)
    pmask = torch.zeros(2, 8, dtype=torch.bool)
    pmask[:, :2] = True
    for name in method.decodings:
        d = cls.DECODINGS[name]
        method.nfe_counter = 0
        g = torch.Generator().manual_seed(0)
        method.sample(net, prompt, pmask, nfe=3, decoding=name, generator=g)
        calls, planned = method.nfe_counter, d.calls(method.nfe_for(3, pmask))
        assert calls <= planned if d.call_skipping else calls == planned, name


def test_list_prints_each_decoding_with_its_calls_and_options():
    lines = registry.listing().splitlines()
    for cls in TABLED:
        start = next(i for i, x in enumerate(lines) if x.split()[:1] == [cls.name])
        for name, d in cls.DECODINGS.items():
            line = next(x for x in lines[start:] if x.split()[:1] == [name])
            assert f"calls: {d.calls_text()}" in line, line
            assert ", ".join(d.options) in line and d.summary in lines[lines.index(line) + 1]


def test_write_fixes_a_stale_table(tmp_path, monkeypatch):
    """``python -m bench.decoding`` (check) exits 1 on a stale table, ``--write`` rewrites it."""
    cls = TABLED[0]
    page = tmp_path / "docs" / "methods" / f"{cls.name}.md"
    page.parent.mkdir(parents=True)
    good = decoding.docs_path(cls, ROOT).read_text()
    stale = good.replace("| decoding | what a step does |", "| decoding | what it does |", 1)
    assert stale != good
    page.write_text(stale)
    monkeypatch.setattr(decoding, "table_methods", lambda: [cls])
    monkeypatch.setattr(decoding, "ROOT", tmp_path)
    assert decoding.main([]) == 1
    assert decoding.main(["--write"]) == 0
    assert page.read_text() == good
