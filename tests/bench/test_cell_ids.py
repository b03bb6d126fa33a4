"""The cells of every shipped sweep keep their ids: a re-cut of the planner (cell kinds, layers)
must plan the same train, sample and likelihood cells, or a user's store would be computed
again. ``tests/fixtures/sweep_cell_ids.json`` holds the ids planned at 28b74c8 (before the cell
kinds), offline (a released checkpoint planned by its catalogue entry); a new shipped sweep is
added to it with ``python tests/bench/test_cell_ids.py > tests/fixtures/sweep_cell_ids.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "sweep_cell_ids.json"


def planned_ids() -> dict[str, dict[str, list[str]]]:
    from bench.config import load_sweep
    from bench.plan import plan

    out = {}
    for f in sorted((ROOT / "sweeps").glob("*.yaml")):
        cfg = load_sweep(f)
        cfg.results_dir = "/nonexistent-results"  # not part of an id; nothing is read or written
        p = plan(cfg, str(f), offline_ok=True)
        out[f.name] = {
            "train": sorted(t.id for t in p.train_cells),
            "cells": sorted(c.id for c in p.sample_cells),
        }
    return out


@pytest.fixture(scope="module")
def now(monkeypatch_module):
    return planned_ids()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")  # a released file is planned by its catalogue entry
        yield mp


def test_every_shipped_sweep_plans_the_ids_it_always_had(now):
    want = json.loads(FIXTURE.read_text())
    assert sorted(now) == sorted(want), "a shipped sweep was added or removed: regenerate"
    for name, ids in want.items():
        assert now[name]["train"] == ids["train"], name
        assert now[name]["cells"] == ids["cells"], name


if __name__ == "__main__":
    json.dump(planned_ids(), sys.stdout, indent=1, sort_keys=True)
    print()
