"""What ``bench.method.bound_times`` and ``bench.likelihood.layout`` claim of the bounds: each
call's times are one uniform time in each of the n strata of [1e-3, 1] (the reference's set of
times), dealt to the rows at random so every row's time ranges over all of [1e-3, 1]; and in the
padded layout the pad positions are given to the model, clean in x_t, as s-flm@18d586f's
``q_xt(valid_tokens)`` keeps them (kuleshov-group/mdlm noises them)."""

from __future__ import annotations

import pytest
import torch
from helpers import make_model
from torch import nn

from bench import registry
from bench.config import TaskConfig
from bench.likelihood import datasets as lds
from bench.likelihood.evaluate import evaluate
from bench.method import bound_times

torch.set_num_threads(1)
EPS = 1e-3


def test_bound_times_are_one_per_stratum_dealt_at_random():
    n, calls = 4, 400
    g = torch.Generator().manual_seed(0)
    strata = []
    for _ in range(calls):
        t = bound_times(n, generator=g)
        assert t.dtype == torch.float64 and ((t >= EPS) & (t <= 1)).all()
        s = torch.floor((t - EPS) / (1 - EPS) * n).long()
        assert sorted(s.tolist()) == list(range(n))  # the reference's set: one per stratum
        strata.append(s)
    counts = torch.stack(strata).T  # (row, call)
    for row in counts:  # the reference gives row i stratum i every time; here each row sees all
        freq = torch.bincount(row, minlength=n) / calls
        assert (freq - 1 / n).abs().max() < 0.1, freq


class Recording(nn.Module):
    """The backbone, recording every x_t it is called with."""

    def __init__(self, net):
        super().__init__()
        self.net, self.seen = net, []

    def forward(self, x, *args, **kw):
        self.seen.append(x.clone())
        return self.net(x, *args, **kw)


@pytest.mark.parametrize("method", ["mdlm", "duo"])
def test_padded_layout_keeps_pads_clean_in_x_t(tmp_path, method):
    f = tmp_path / "digits.txt"
    f.write_text("1 2 3\n4 5\n6 7 8 9 0 1 2 3\n")
    task = registry.make_task(TaskConfig(name="sort", options={"n_digits": 4}))
    blocks = lds.load_blocks(task, f"text:{f}", wrap=False)
    pads = ~blocks.loss_mask
    assert pads[:2].any() and not pads[2].any() and not blocks.clean_mask.any()
    m, net = make_model(method, vocab=task.vocab_size, seq_len=task.seq_len)
    rec = Recording(net.eval())
    evaluate(m, rec, blocks, n_draws=64, batch_size=3, seed=0, device="cpu")
    xt = torch.cat(rec.seen)
    x0, pad = blocks.x.repeat(len(rec.seen), 1), pads.repeat(len(rec.seen), 1)
    assert torch.equal(xt[pad], x0[pad])  # every pad clean in every draw
    assert (xt[~pad] != x0[~pad]).any()  # while the counted positions were noised
