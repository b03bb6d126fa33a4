"""The sweep file's ``likelihood`` section: one likelihood cell per model and dataset, planned with
the model's sample cells (so every executor runs them in the model's job), ids that depend on
the evaluation settings and not on the sampling grid; a sweep without the section plans exactly
the cells it always did."""

from __future__ import annotations

from pathlib import Path

from bench.config import SweepConfig, apply_overrides, build, load_yaml
from bench.kinds.likelihood import LikelihoodCell
from bench.plan import plan

ROOT = Path(__file__).resolve().parents[3]


def _plan(*sets: str):
    """sweeps/quickstart.yaml without its likelihood section, then ``sets``."""
    raw = load_yaml(ROOT / "sweeps" / "quickstart.yaml")
    raw.pop("likelihood", None)
    raw = apply_overrides(raw, list(sets))
    return plan(build(SweepConfig, raw, where="quickstart"))


def test_no_section_no_likelihood_cells():
    p = _plan()
    assert not any(isinstance(c, LikelihoodCell) for c in p.sample_cells)


def test_one_cell_per_model_and_dataset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("1 2 3\n")
    base = _plan()
    p = _plan("likelihood.datasets=[heldout, 'text:notes.txt']", "likelihood.n_sequences=64")
    lk = [c for c in p.sample_cells if isinstance(c, LikelihoodCell)]
    assert len(lk) == 2 * len(p.train_cells)
    assert {(c.train.id, c.subset) for c in lk} == {
        (tc.id, d) for tc in p.train_cells for d in ("heldout", "text:notes.txt")
    }
    # the sampling cells are the ones the sweep always planned
    assert [c.id for c in p.sample_cells if not isinstance(c, LikelihoodCell)] == [
        c.id for c in base.sample_cells
    ]
    # each executor's job list: the model's sample cells then its likelihood cells
    for tc in p.train_cells:
        assert {c.subset for c in p.samples_of(tc) if isinstance(c, LikelihoodCell)} == {
            "heldout",
            "text:notes.txt",
        }
    assert all(c.n_samples == 64 and c.draws == 1 for c in lk)
    assert all(c.label().endswith(f"likelihood {c.subset}") for c in lk)


def test_ids_follow_the_evaluation_settings_only():
    a = _plan("likelihood.datasets=[heldout]")
    ids = lambda p: sorted(c.id for c in p.sample_cells if isinstance(c, LikelihoodCell))  # noqa: E731
    assert ids(a) == ids(_plan("likelihood.datasets=[heldout]", "sample.nfe=[8]"))
    assert ids(a) == ids(_plan("likelihood.datasets=[heldout]", "likelihood.batch_size=7"))
    for change in ("likelihood.draws=3", "likelihood.n_sequences=8", "likelihood.seed=1",
                   "likelihood.block=16", "likelihood.wrap=false"):  # fmt: skip
        other = ids(_plan("likelihood.datasets=[heldout]", change))
        assert not set(other) & set(ids(a)), change


def test_a_dataset_the_task_cannot_serve_is_refused_while_planning():
    import pytest

    from bench.config import ConfigError

    for spec, says in (("owt-valid", "OWT task"), ("text:/no/such.txt", "no such file")):
        with pytest.raises(ConfigError, match=says) as e:
            _plan(f"likelihood.datasets=[heldout, '{spec}']")
        assert "likelihood.datasets[1]" in str(e.value)


def test_a_cell_its_own_type_without_sample_sentinels():
    """A likelihood cell is not a sample cell: no NFE, temperature or decoding to misread."""
    from bench.plan import SampleCell

    (c, *_) = _plan("likelihood.datasets=[heldout]").cells["likelihood"]
    assert not isinstance(c, SampleCell)
    assert not any(hasattr(c, k) for k in ("nfe", "temperature", "decoding", "float64"))


def test_a_cell_pickled_before_the_kinds_folder_still_runs_as_planned():
    """A queued job pickled its likelihood cells under ``bench.likelihood.kind`` when they were
    sample cells with sentinels (nfe 0, temperature 1, decoding "likelihood"): such a cell loads
    as today's, names its kind, and gives the settings and id it was planned with."""
    import copy
    import pickle

    from bench.likelihood.cells import Settings, cell_id

    (c, *_) = _plan("likelihood.datasets=[heldout]", "likelihood.draws=2").cells["likelihood"]
    old = copy.copy(c)
    vars(old).update(nfe=0, temperature=1.0, decoding="likelihood", float64=True, sampling={},
                     limit=None)  # fmt: skip
    blob = pickle.dumps(old, protocol=0)
    assert b"bench.kinds.likelihood\nLikelihoodCell" in blob
    blob = blob.replace(
        b"bench.kinds.likelihood\nLikelihoodCell", b"bench.likelihood.kind\nLikelihoodCell"
    )
    back = pickle.loads(blob)
    assert type(back) is LikelihoodCell and back.kind == "likelihood"
    assert (
        Settings.of(back) == Settings.of(c)
        and cell_id(back.train, back.subset, Settings.of(back)) == c.id
    )
