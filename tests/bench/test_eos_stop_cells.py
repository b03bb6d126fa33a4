"""``sample.eos_stop`` end to end (bench.kinds.sample): the tokens a row generated
(``Task.generated_tokens``: up to and with its first generated EOS), and a tiny sweep on the
GSM8K stand-in (``arith_standin``, its character tokenizer: offline) whose models write the EOS
at once on every other row: those rows' records have 1 token and the calls up to their EOS, the
cell's rows the budget as ``nfe`` and tokens_mean / calls_mean below the generated length /
the budget."""

from __future__ import annotations

import pytest
import torch

from bench import cell_model, cells, records, registry
from bench.config import TaskConfig, load_sweep
from bench.data.base import Task, TaskData
from bench.plan import plan
from bench.results import Store


def _arith():
    return registry.make_task(TaskConfig(name="arith_standin", n_train=16))


def test_generated_tokens_count_up_to_the_first_generated_eos():
    """Up to and with the first EOS among the positions the prompt does not give: an EOS in the
    prompt does not end the row, what follows the EOS (a second one, padding) is not counted, a
    row without one counts every generated position."""
    task = _arith()
    data = task.eval_data("heldout", 3)
    eos, pl = task.eos_id(), data.meta["prompt_len"]
    L = data.x.shape[1]
    s = data.x.clone()
    s[~data.clean_mask] = 7  # a token that is not the EOS
    s[0, pl[0] + 4] = s[0, pl[0] + 6] = eos
    s[1, 1] = eos  # inside the prompt
    s[2, pl[2]] = eos
    assert task.generated_tokens(s, data) == [5, L - pl[1], 1]


def test_a_task_without_eos_counts_every_generated_position():
    class NoEos(Task):
        pass

    x = torch.full((2, 6), 3)
    clean = torch.tensor([[1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    data = TaskData(x, clean, ~clean)
    assert NoEos.eos_id(NoEos.__new__(NoEos)) is None
    assert NoEos.generated_tokens(NoEos.__new__(NoEos), x, data) == [3, 5]


SWEEP = """
name: eos
results_dir: {rd}
task: {{name: arith_standin, n_train: 32, seed: 42, options: {{bootstrap: 50}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 1, batch_size: 8, warmup_steps: 1, checkpoint_every: 1, val_every: 0}}
sample: {{nfe: [6], temperature: [1.0], n_samples: 4, batch_size: 4, eos_stop: true}}
executor: {{kind: debug}}
methods:
  - {{method: ar}}
  - {{method: mdlm, options: {{block_length: 16}}}}
"""


def _eos_early(real):
    """``real`` (cell_model.method_backbone) whose models write the EOS at every position of the
    even rows (their logit raised by 1e4); the odd rows are the model's own."""

    def patched(tc, task):
        method, backbone = real(tc, task)
        forward, eos = backbone.forward, task.eos_id()

        def early(*a, **k):
            out = forward(*a, **k).clone()
            out[0::2, :, eos] += 1e4
            return out

        backbone.forward = early
        return method, backbone

    return patched


@pytest.fixture
def eos_early(monkeypatch):
    """The models a sample cell builds write the EOS at once on the even rows."""
    monkeypatch.setattr(cell_model, "method_backbone", _eos_early(cell_model.method_backbone))


def test_eos_stop_cells_record_the_calls_and_tokens_each_row_needed(tmp_path, eos_early):
    path = tmp_path / "eos.yaml"
    path.write_text(SWEEP.format(rd=tmp_path / "results"))
    p = plan(load_sweep(path), str(path))
    for tc in p.train_cells:
        cells.run_train_then_samples(tc, p.samples_of(tc), progress=False)
    task = _arith()
    data = task.eval_data("heldout", 4)
    pl = data.meta["prompt_len"]
    L = data.x.shape[1]
    store = Store(tmp_path / "results")
    seen = set()
    for c in p.sample_cells:
        rows = store.load(c.id)
        r = rows[0]
        recs = records.read(tmp_path / "results", r["records"], r["records_sha256"])
        method = c.train.method
        seen.add(method)
        assert r["eos_stop"] is True
        if method == "ar":  # budget: the generated length from the shortest prompt
            budget = L - min(pl)
            first = [1] * 4  # an even row: the EOS at its first generated position
        else:  # 3 blocks of 16 (at most 44 generated positions), 2 calls each
            budget, first = 6, [2] * 4
        assert r["nfe"] == budget
        calls, tokens = [x["calls"] for x in recs], [x["tokens"] for x in recs]
        # AR's even rows: the calls from the batch's first generated position to their EOS
        if method == "ar":
            first = [pl[i] - min(pl) + 1 for i in range(4)]
        assert [calls[i] for i in (0, 2)] == [first[0], first[2]], calls
        assert [tokens[i] for i in (0, 2)] == [1, 1], tokens
        assert all(1 <= k <= budget for k in calls) and r["calls_max"] <= budget
        assert all(1 <= t <= L - pl[i] for i, t in enumerate(tokens))
        assert r["tokens_mean"] < L - max(pl) and r["calls_mean"] < budget
        assert r["tokens_mean"] == pytest.approx(sum(tokens) / 4)
        assert r["tokens_per_s"] == pytest.approx(sum(tokens) / r["sample_s"])
        assert r["network_calls"] == max(calls)  # one batch: it stops at its last row
    assert seen == {"ar", "mdlm"}


def test_the_rehearsal_accepts_an_eos_stop_making_fewer_calls(tmp_path, monkeypatch, capsys):
    """``--rehearse`` samples an ``eos_stop`` cell with the task's EOS: AR's row writes it at its
    first generated position, one call where ``nfe_for`` says 2, and the rehearsal passes."""
    from bench import sweep
    from bench.rehearse import rehearsal

    patched = _eos_early(rehearsal.method_backbone)
    monkeypatch.setattr(rehearsal, "method_backbone", patched)
    calls = []
    real_sample = registry.METHODS["ar"].sample

    def counted(self, *a, **k):
        out = real_sample(self, *a, **k)
        calls.append((self.eos_id, self.nfe_counter, self.nfe_for(0, a[2])))
        return out

    monkeypatch.setattr(registry.METHODS["ar"], "sample", counted)
    path = tmp_path / "eos.yaml"
    text = SWEEP.format(rd=tmp_path / "results").replace(
        "  - {method: mdlm, options: {block_length: 16}}\n", ""
    )
    path.write_text(text)
    assert sweep.main([str(path), "--rehearse"]) == 0, capsys.readouterr().out
    eos = _arith().eos_id()
    assert (eos, 1, 2) in calls, calls
