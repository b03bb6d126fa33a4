"""The OWT task's rows carry the fraction of degenerate samples with its interval
(bench/data/owt/task.py through bench/evaluate/genppl/evaluator.py;
bench/evaluate/degenerate.py): a collapsed generator's cell is all degenerate, the held-out
data's none."""

from __future__ import annotations

import pytest
import torch
from genppl_tiny import tiny_gpt2
from helpers import owt_task

from bench.evaluate import degenerate as dg
from bench.text.gpt2 import load_gpt2_tokenizer

EOT = 50256


def test_owt_rows_carry_the_degenerate_fraction(owt_standin):
    from bench.evaluate.genppl.evaluator import GenPPL, wrap_model

    corpus, data_dir = owt_standin
    tok = load_gpt2_tokenizer("whisper", data_dir)
    task = owt_task(corpus, data_dir, bootstrap=50)
    ref = wrap_model(tiny_gpt2(50257, n_positions=64, eos=EOT), tok, "tiny", device="cpu")
    task._genppl = GenPPL(
        ref=ref, ref_model="tiny", sample_tokenizer=tok, progress=False, n_resamples=50
    )
    g = task.groups()[0]
    collapsed = torch.full((4, 32), 262)  # one repeated token: the smoke's S-FLM cells
    m = {v.metric: v for v in task.evaluate(collapsed, task.eval_data(g, 4), g)}
    d = m[dg.METRIC]
    # 4 of 4 degenerate: the Wilson interval, never zero-width (lower bound n / (n + z^2))
    z2 = 1.959963984540054**2
    assert d.value == 1.0 and d.n == 4 and d.ci_high == 1.0
    assert d.ci_low == pytest.approx(4 / (4 + z2)) and d.ci_method.startswith("Wilson")
    assert {r["degenerate"] for r in task.last_rows} == {"repeated"}
    # the collapsed cell's Gen. PPL and entropy rows carry their intervals too
    assert m["gen_ppl"].ci_low <= m["gen_ppl"].value <= m["gen_ppl"].ci_high
    assert m["entropy"].value == 0.0 and m["entropy"].ci_high == 0.0
    data = {v.metric: v for v in task.data_reference(3)}
    assert data[dg.METRIC].value == 0.0 and data[dg.METRIC].n == 3
    assert data["entropy"].ci_low <= data["entropy"].value <= data["entropy"].ci_high
    assert data["entropy"].ci_low < data["entropy"].ci_high  # three different blocks
    assert not dg.cell_is_degenerate(data[dg.METRIC].value)


@pytest.mark.parametrize("n_empty, flagged", [(1, False), (2, True)])
def test_owt_cells_of_empty_samples(owt_standin, n_empty, flagged):
    """Samples that end at once (BOS then end-of-text) score nothing: degenerate, and the cell
    is flagged from half of its samples on."""
    from bench.evaluate.genppl.evaluator import GenPPL, wrap_model

    corpus, data_dir = owt_standin
    tok = load_gpt2_tokenizer("whisper", data_dir)
    task = owt_task(corpus, data_dir, bootstrap=50)
    ref = wrap_model(tiny_gpt2(50257, n_positions=64, eos=EOT), tok, "tiny", device="cpu")
    task._genppl = GenPPL(
        ref=ref, ref_model="tiny", sample_tokenizer=tok, progress=False, n_resamples=50
    )
    g = task.groups()[0]
    x = torch.from_numpy(task.valid_blocks(4)).clone()
    # leading end-of-texts are a BOS, not the end: a [PAD] (not text) then the end-of-text
    x[:n_empty, :4] = torch.tensor([EOT, EOT, 50257, EOT])
    m = {v.metric: v for v in task.evaluate(x, task.eval_data(g, 4), g)}
    reasons = [r["degenerate"] for r in task.last_rows]
    assert reasons == ["empty"] * n_empty + [""] * (4 - n_empty)
    assert m[dg.METRIC].value == pytest.approx(n_empty / 4)
    assert dg.cell_is_degenerate(m[dg.METRIC].value) is flagged
