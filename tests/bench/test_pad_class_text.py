"""The reference's [PAD] class of an imported model (Duo / S-FLM files: |V| = the task's + 1) is
written ``[PAD]``, not as the id ``10``, in what ``python -m bench.generate`` prints and in the
per-item records, while the ids and the scores stay as they were."""

from __future__ import annotations

from types import SimpleNamespace

import checkpoints_ref as R
import pytest
import torch

from bench import records, registry
from bench.commands import generate as gen
from bench.config import TaskConfig

PAD = 10  # the sort task's 10 digits, then the reference's [PAD]


def _sort4():
    return registry.make_task(TaskConfig(name="sort", options={"n_digits": 4}))


def _expected(ids) -> str:
    return " ".join("[PAD]" if i == PAD else str(i) for i in ids)


@pytest.mark.parametrize("kind", ["duo", "sfm_dit_fixed"])
def test_generate_prints_the_imported_pad_class_as_pad(tmp_path, capsys, kind):
    info = R.write_reference_checkpoint(tmp_path / f"{kind}.ckpt", kind, vocab="owt", base_vocab=10)
    assert info["n_logits"] == 11 and info["pad_id"] == PAD
    argv = [str(info["path"]), "--task", "sort", "--set", "task.options.n_digits=4"]
    argv += ["--prompt", "3 1 2 0", "--n", "16", "--seed", "0", "--results-dir", str(tmp_path)]
    g = gen.generate(argv[0], "3 1 2 0", task="sort", sets=[argv[4]], n=16, seed=0,
                     results_dir=str(tmp_path))  # fmt: skip
    body = g.ids[:, g.span[0] : g.span[1]].tolist()
    assert any(PAD in row for row in body)  # the model did write its pad class
    assert gen.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:-1] == [_expected(row) for row in body]
    assert "[PAD]" in "\n".join(lines) and " 10" not in " " + " ".join(lines[:-1])


def test_records_show_pad_and_keep_ids_and_scores(tmp_path):
    task = _sort4()
    data = task.eval_data("sort4", 3)
    samples = data.x.clone()
    samples[1, 5] = PAD  # an imported model's pad class in the output
    samples[2, 6] = (samples[2, 6] + 1) % 10  # a wrong digit
    metrics = task.evaluate(samples, data, "sort4")
    assert metrics[0].value == pytest.approx(1 / 3)  # the pad is scored as a wrong token
    train = SimpleNamespace(method="duo", variant="base", train={"seed": 0})
    cell = SimpleNamespace(id="c1", train=train, subset="sort4", seed=0, temperature=1.0,
                           decoding="default", variant="base")  # fmt: skip
    recs = records.item_records(task, cell, samples, data, metrics, nfe=4)
    cols = records.write(tmp_path, "c1", recs)
    back = records.read(tmp_path, cols["records"], cols["records_sha256"])
    assert [r["correct"] for r in back] == [1, 0, 0]
    assert back[1]["output_ids"] == samples[1, 4:].tolist() and PAD in back[1]["output_ids"]
    assert back[1]["output"] == _expected(samples[1, 4:].tolist())
    assert "[PAD]" in back[1]["output"] and "[PAD]" not in back[2]["output"]
    assert back[1]["target"] == " ".join(map(str, data.x[1, 4:].tolist()))
    assert torch.equal(samples[0], data.x[0])
