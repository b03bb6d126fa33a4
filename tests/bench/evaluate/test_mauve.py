"""MAUVE of OWT samples (bench/evaluate/mauve_score.py through bench/data/owt/task.py): held-out
references cut to each sample's length, features from the featurizer the row names, the value
over k-means seeds; high for held-out text, low for a collapsed generator; re-computed by
``bench.rescore`` from what a sweep stored; refused on a task without free text."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from genppl_tiny import tiny_gpt2
from helpers import owt_cache_copy, owt_corpus, owt_task, require_extra

from bench.config import ConfigError, TaskConfig
from bench.evaluate import degenerate as dg
from bench.evaluate import mauve_score as ms
from bench.text.gpt2 import load_gpt2_tokenizer

EOT, PAD = 50256, 50257


# --------------------------------------------------------------------------- references


def test_references_are_cut_to_each_samples_length():
    blocks = [
        [EOT, 1, 2, 3, 4, 5],  # block 0: the data point's, never a reference with skip_first=1
        [EOT, 10, 11, EOT, 12, 13],
        [EOT, EOT, 20, 21, 22, 23],  # leading end-of-texts dropped: 4 ids
        [EOT, 30, 31, 32, 33, 34],
    ]
    pool = list(ms.reference_pool(blocks, EOT, skip_first=1))
    assert [r.block for r in pool] == [3, 2, 1]  # from the last block backwards
    assert pool[1].ids == (20, 21, 22, 23) and pool[2].ids == (10, 11, EOT, 12, 13)
    # a sample's text: leading end-of-texts dropped, [PAD] dropped, later end-of-texts kept
    samples = [ms.text_ids([EOT, 7, PAD, 8, EOT, 9], EOT, PAD), [6, 6], [5, 5, 5, 5, 5]]
    assert samples[0] == [7, 8, EOT, 9]
    pairs = ms.pair_references([len(s) for s in samples], iter(pool))
    # each takes the next block of at least its length, its first len(sample) ids
    assert [(r.block, cut) for r, cut in pairs] == [
        (3, [30, 31, 32, 33]),
        (2, [20, 21]),
        (1, [10, 11, EOT, 12, 13]),
    ]
    ms.check_equal_lengths(samples, [cut for _, cut in pairs])
    with pytest.raises(ValueError, match="no held-out block left for sample 2"):
        ms.pair_references([5, 5, 5], iter(pool))  # block 2 holds only 4 ids: skipped


def test_a_length_mismatch_is_caught():
    with pytest.raises(ValueError, match="sample 1 has 3 tokens, its reference 5"):
        ms.check_equal_lengths([[1, 2], [1, 2, 3]], [[4, 5], [4, 5, 6, 7, 8]])
    with pytest.raises(ValueError, match="2 samples, 1 references"):
        ms.check_equal_lengths([[1], [2]], [[3]])


def test_interval_over_seeds():
    r = ms.MauveResult([0.5, 0.6, 0.7], [25, 26, 27], n=10)
    # mean 0.6, sd 0.1, t_{0.975, 2} = 4.303: 0.6 -+ 0.248
    assert r.mean == pytest.approx(0.6) and r.sd == pytest.approx(0.1)
    assert r.interval() == pytest.approx((0.6 - 0.24842, 0.6 + 0.24842), abs=1e-4)
    m = {v.metric: v for v in r.metric_values()}
    assert m["mauve"].n == 10 and "3 k-means seeds" in m["mauve"].ci_method
    assert m["mauve_seed_sd"].value == pytest.approx(0.1) and m["mauve_seed_sd"].n == 3
    assert ms.MauveResult([0.01, 0.02, 0.9], [1, 2, 3], 5).interval()[0] == 0.0  # within [0, 1]
    assert ms.MauveResult([0.5], [25], 5).interval() == (None, None)


# --------------------------------------------------------------------------- on the OWT task


@pytest.fixture(scope="module")
def mauve_owt(owt_standin, tmp_path_factory):
    """``(corpus, data_dir, ref)``: a 600-document stand-in (300 held out: 235 blocks of L = 32)
    in a private copy of the shared cache, and a tiny random GPT-2 as reference LM / featurizer."""
    require_extra("mauve")
    root = tmp_path_factory.mktemp("mauve")
    data_dir = owt_cache_copy(owt_standin, root / "cache")
    corpus = owt_corpus(root / "corpus.jsonl", n_docs=600)
    tok = load_gpt2_tokenizer("whisper", data_dir)
    from bench.evaluate.genppl.evaluator import wrap_model

    ref = wrap_model(tiny_gpt2(50257, n_positions=64, eos=EOT), tok, "tiny", device="cpu")
    owt_task(corpus, data_dir, valid_docs=300).split("valid", progress=False)
    return corpus, data_dir, ref


def _task(mauve_owt, **opts):
    from bench.evaluate.genppl.evaluator import GenPPL

    corpus, data_dir, ref = mauve_owt
    task = owt_task(corpus, data_dir, valid_docs=300, bootstrap=50, mauve=True, **opts)
    task._genppl = GenPPL(
        ref=ref, ref_model="tiny", sample_tokenizer=ref.tokenizer, progress=False, n_resamples=50
    )
    return task


def test_mauve_is_high_on_held_out_text_and_low_on_a_collapsed_generator(mauve_owt):
    task = _task(mauve_owt, mauve_seeds=3)
    n, g = 40, task.groups()[0]
    data = {v.metric: v for v in task.data_reference(n)}
    used = [r["mauve_reference"] for r in task.last_rows]
    # held-out blocks [0, n) are the samples; their references come from the other blocks
    assert len(set(used)) == n and min(used) >= n
    assert data["mauve"].value > 0.8 and data["mauve"].n == n
    assert data["mauve_seed_sd"].n == 3 and "t-interval" in data["mauve"].ci_method
    assert data["mauve"].ci_low <= data["mauve"].value <= data["mauve"].ci_high
    collapsed = torch.full((n, 32), 262)  # one repeated token: the smoke's S-FLM cells
    low = {v.metric: v for v in task.evaluate(collapsed, task.eval_data(g, n), g)}
    assert low["mauve"].value < 0.1 < data["mauve"].value - 0.7
    # the collapsed cell is flagged degenerate as before; MAUVE is a row beside it
    assert low[dg.METRIC].value == 1.0 and dg.cell_is_degenerate(low[dg.METRIC].value)
    # random ids after a BOS: far from text too
    noise = torch.randint(0, 50000, (n, 32), generator=torch.Generator().manual_seed(0))
    noise[:, 0] = EOT
    assert {v.metric: v for v in task.evaluate(noise, task.eval_data(g, n), g)}["mauve"].value < 0.2


def test_empty_samples_are_left_out_and_records_name_the_references(mauve_owt):
    task = _task(mauve_owt, mauve_seeds=1)
    n, g = 12, task.groups()[0]
    x = torch.from_numpy(task.valid_blocks(n)).clone()
    x[:3] = EOT  # nothing after the BOS: no text
    data = task.eval_data(g, n)
    m = {v.metric: v for v in task.evaluate(x, data, g)}
    assert m["mauve"].n == n - 3 and m["mauve"].ci_low is None  # one seed: no interval
    recs = task.record_fields(x, data, g)
    assert [r["mauve_reference"] for r in recs[:3]] == [None] * 3
    blocks = [r["mauve_reference"] for r in recs[3:]]
    assert len(set(blocks)) == n - 3 and min(blocks) >= n
    assert math.isnan(m["mauve_seed_sd"].value)


def test_the_row_names_its_featurizer_and_a_missing_one_is_an_error(mauve_owt):
    from bench.text.reference_lm import ReferenceModelError

    task = _task(mauve_owt)
    assert task.protocol().endswith("; mauve=tiny")  # '' = the Gen. PPL reference LM, loaded
    off = owt_task(mauve_owt[0], mauve_owt[1], valid_docs=300)
    assert "mauve" not in off.protocol()
    asked = _task(mauve_owt, mauve_featurizer="gpt2-large")
    assert asked.protocol().endswith("; ref=tiny; eot=paper; mauve=gpt2-large")
    # HF_HUB_OFFLINE and no cached gpt2-large: an error, never the offline LM in its place
    with pytest.raises(ReferenceModelError, match="gpt2-large"):
        asked.featurizer()


def test_mauve_without_its_extra_is_a_plan_time_error(monkeypatch):
    import importlib.util

    from bench.config import BackboneConfig, SampleConfig, TrainConfig

    task = owt_task("olmo_eval", "", mauve=True)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n: None if n == "faiss" else real(n))
    with pytest.raises(ConfigError, match=r"task.options.mauve: MAUVE needs faiss: pip install"):
        task.validate_plan(backbone=BackboneConfig(), train=TrainConfig(), sample=SampleConfig())


@pytest.mark.parametrize("name", ["sudoku", "sort"])
def test_mauve_options_need_a_free_text_task(name):
    from bench import registry

    with pytest.raises(ConfigError, match=rf"task.options.mauve: .*task '{name}' does not"):
        registry.make_task(TaskConfig(name=name, options={"mauve": True}))


# --------------------------------------------------------------------------- bench.rescore

SWEEP = """
name: mv
results_dir: {rd}
task: {{name: owt, seed: 3, data_dir: {dd}, options: {{corpus: {corpus}, valid_docs: 300,
        seq_len: 32, num_proc: 1, ref_model: {ref}, bootstrap: 50, mauve: true,
        mauve_seeds: 2}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 2, batch_size: 4, warmup_steps: 0, checkpoint_every: 2}}
sample: {{nfe: [2], temperature: [1.0], n_samples: 20, batch_size: 20}}
executor: {{kind: debug}}
methods: [{{method: mdlm}}]
"""


@pytest.mark.slow  # trains and samples a tiny OWT model: about 30 s on 2 cores
def test_rescore_recomputes_mauve_from_the_records(mauve_owt, tmp_path, capsys):
    from bench import cells, records
    from bench.commands.rescore import main as rescore_main
    from bench.config import load_sweep
    from bench.data.owt.task import OWTTask
    from bench.plan import plan
    from bench.results import Store

    corpus, data_dir, ref = mauve_owt
    folder = tmp_path / "tiny-ref"  # the reference LM / featurizer as a folder a sweep names
    ref.model.save_pretrained(folder)
    ref.tokenizer.save_pretrained(folder)
    rd = tmp_path / "results"
    path = tmp_path / "mv.yaml"
    path.write_text(SWEEP.format(rd=rd, dd=data_dir, corpus=corpus, ref=folder))
    p = plan(load_sweep(path), str(path))
    for tc in p.train_cells:
        cells.run_train_then_samples(tc, p.samples_of(tc), progress=False)
    df = Store(rd).read()
    s = df[(df["kind"] == "sample") & (df["metric"] == "mauve")]
    assert len(s) == 1 and s.iloc[0]["n"] >= 2
    assert s.iloc[0]["task_protocol"].endswith(f"; mauve={folder}")
    assert len(df[(df["kind"] == "reference") & (df["metric"] == "mauve")]) == 1
    # the records hold the samples' ids and the held-out block each reference was cut from
    row = s.iloc[0]
    recs = records.read(rd, row["records"], row["records_sha256"])
    ids = torch.tensor([r["prompt_ids"] + r["output_ids"] for r in recs])
    assert all(r["mauve_reference"] is None or r["mauve_reference"] >= 20 for r in recs)
    cell = json.loads(next(Path(rd).glob("runs/*/cell.json")).read_text())
    task, g = OWTTask(TaskConfig(**cell["task"])), row["subset"]
    data = task.eval_data(g, len(ids))
    m = {v.metric: v for v in task.evaluate(ids, data, g)}
    assert m["mauve"].value == row["value"] and m["mauve"].ci_low == row["ci_low"]
    assert [r["mauve_reference"] for r in task.record_fields(ids, data, g)] == [
        r["mauve_reference"] for r in recs
    ]
    capsys.readouterr()
    assert rescore_main(["--results-dir", str(rd)]) == 0  # every stored value, MAUVE included
    assert "1 of 1 cells reproduce every stored value" in capsys.readouterr().out
    # another scorer setting: a re-scored cell beside the sampled one, MAUVE over 3 seeds
    assert rescore_main(["--results-dir", str(rd), "--set", "task.options.mauve_seeds=3"]) == 0
    df = Store(rd).read()
    new = df[(df["rescored_from"] == row["cell_id"]) & (df["metric"] == "mauve_seed_sd")]
    assert len(new) == 1 and new.iloc[0]["n"] == 3
