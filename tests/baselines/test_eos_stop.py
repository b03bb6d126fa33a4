"""The EOS stop (``sample.eos_stop``: ``Method.eos_id`` set): AR stops each row at its EOS, MDLM's
blocked decodings after the block that holds it; with ``eos_id`` None nothing changes. A stub
backbone writes each row's EOS at a chosen position (its logits peaked at 60 nats: every draw
is the peak), the real code paths sample."""

from __future__ import annotations

import pytest
import torch
from helpers import make_model
from torch import nn

from bench.method import fill_after_eos

V, L, EOS = 8, 12, 5
PEAK = 60.0


def stub_token(pos: torch.Tensor) -> torch.Tensor:
    """The stub's token at position ``pos`` (never the EOS)."""
    return pos % 4 + 1  # 1..4


class EosAt(nn.Module):
    """Deterministic logits: position p of row r is the EOS where p == ``at[r]``, else
    :func:`stub_token`. ``causal``: AR's contract (output j predicts position j + 1, no time
    input); else MDLM's (output p predicts position p, V + 1 classes). Records each call's
    input canvas in ``seen``."""

    def __init__(self, at: list[int], causal: bool):
        super().__init__()
        self.at, self.causal, self.seen = torch.tensor(at), causal, []

    def forward(self, x, *args, **kwargs):
        n, width = x.shape
        self.seen.append(x.clone())
        pos = torch.arange(width).expand(n, width) + int(self.causal)
        tok = torch.where(pos == self.at[:, None], EOS, stub_token(pos))
        out = torch.zeros(n, width, V + (not self.causal))
        return out.scatter_(-1, tok[..., None], PEAK)


def _ar(at, prompt_len=2):
    m, _ = make_model("ar", vocab=V, seq_len=L)
    n = len(at)
    prompt = torch.zeros(n, L, dtype=torch.long)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    pmask[:, :prompt_len] = True
    return m, EosAt(at, causal=True), prompt, pmask


def test_ar_stops_each_row_at_its_eos():
    """Per-row calls = the positions up to and with its EOS (a row without one: all of them),
    batch calls = their max, positions after the EOS hold it; the tokens before it are the
    run's without ``eos_id``."""
    at = [4, 7, 30]  # the last row writes no EOS inside the canvas
    m, net, prompt, pmask = _ar(at)
    free = m.sample(net, prompt, pmask, nfe=0, decoding="greedy")
    assert m.nfe_counter == L - 2 and m.row_calls is None
    m.nfe_counter, m.eos_id = 0, EOS
    out = m.sample(net, prompt, pmask, nfe=0, decoding="greedy")
    want = torch.tensor([4 - 2 + 1, 7 - 2 + 1, L - 2])
    assert torch.equal(m.row_calls[:, 1], want) and (m.row_calls[:, 0] == 0).all()
    assert m.nfe_counter == int(want.max())
    for r, a in enumerate(at):
        stop = min(a, L - 1)
        assert torch.equal(out[r, : stop + 1], free[r, : stop + 1])
        assert (out[r, stop + 1 :] == EOS).all()
        assert (out[r, 2:stop] != EOS).all()
    assert out[0, 4] == EOS and out[1, 7] == EOS


def test_ar_eos_stop_ends_the_batch_at_the_last_eos():
    """Every row's EOS early: the batch makes max(EOS position) - start + 1 calls, not L - start."""
    m, net, prompt, pmask = _ar([3, 5])
    m.eos_id = EOS
    m.sample(net, prompt, pmask, nfe=0, decoding="sample", generator=torch.Generator())
    assert m.nfe_counter == 5 - 2 + 1 and m.row_calls[:, 1].tolist() == [2, 4]
    assert len(net.seen) == 4


def test_ar_keeps_teacher_forced_positions_after_the_eos():
    """A clean position inside the generated region (a Sudoku given) stays the prompt's after
    the row's EOS; the others after it are the EOS."""
    m, net, prompt, pmask = _ar([4])
    prompt[0, 8], pmask[0, 8] = 2, True
    m.eos_id = EOS
    out = m.sample(net, prompt, pmask, nfe=0, decoding="greedy")
    assert out[0, 8] == 2 and (out[0, 5:8] == EOS).all() and (out[0, 9:] == EOS).all()


@pytest.mark.parametrize("decoding", ["sample", "greedy"])
def test_ar_eos_stop_draws_the_same_tokens_up_to_the_eos(decoding):
    """A random tiny AR DiT (its KV cache on) with the same generator: with ``eos_id`` each row
    is the run without it up to its first generated EOS, the EOS after it; each row's calls are
    the positions up to it."""
    m, net = make_model("ar", vocab=V, seq_len=L, seed=3)
    net.eval()
    prompt = torch.randint(0, V, (6, L), generator=torch.Generator().manual_seed(1))
    pmask = torch.zeros(6, L, dtype=torch.bool)
    pmask[:, :3] = True
    g = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    free = m.sample(net, prompt, pmask, nfe=0, temperature=3.0, decoding=decoding, generator=g())
    m.eos_id, m.nfe_counter = EOS, 0
    out = m.sample(net, prompt, pmask, nfe=0, temperature=3.0, decoding=decoding, generator=g())
    hits = 0
    for r in range(6):
        eos = (free[r, 3:] == EOS).nonzero()
        stop = int(eos[0]) + 3 if len(eos) else L - 1
        hits += bool(len(eos))
        assert torch.equal(out[r, : stop + 1], free[r, : stop + 1])
        assert (out[r, stop + 1 :] == EOS).all()
        assert int(m.row_calls[r].sum()) == stop - 3 + 1
    assert m.nfe_counter == int(m.row_calls.sum(-1).max())
    if decoding == "sample":
        assert hits >= 2  # the check is not vacuous: T = 3 over 8 classes writes the EOS
    assert torch.equal(fill_after_eos(free, ~pmask, EOS), out)


# --------------------------------------------------------------------------- MDLM


def _mdlm(at, block_length, prompt_len=2):
    m, _ = make_model("mdlm", {"block_length": block_length}, vocab=V, seq_len=L)
    n = len(at)
    prompt = torch.zeros(n, L, dtype=torch.long)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    pmask[:, :prompt_len] = True
    return m, EosAt(at, causal=False), prompt, pmask


def test_mdlm_blocks_stop_a_row_after_its_eos_block():
    """``confidence`` with blocks of 4 (positions 2-5, 6-9, 10-11), 2 calls each: a row with its
    EOS in block b makes 2 (b + 1) calls; its later blocks are never decoded (still [MASK] in
    every later call's canvas), then hold the EOS; nothing is left masked; the batch stops
    after the last row's EOS block."""
    at = [3, 7, 7]  # blocks 0, 1, 1: the third block is never run
    m, net, prompt, pmask = _mdlm(at, 4)
    m.eos_id = EOS
    out = m.sample_canvas(net, prompt, pmask, nfe=6, decoding="confidence")
    assert m.row_calls[:, 0].tolist() == [2, 4, 4] and m.nfe_counter == 4
    assert (out != m.mask_id).all()
    assert (out[0, 4:] == EOS).all() and (out[1:, 8:] == EOS).all()
    assert torch.equal(out[0, 2:4], torch.tensor([stub_token(torch.tensor(2)), EOS]))
    assert (net.seen[2][0, 6:] == m.mask_id).all() and (net.seen[3][0, 6:] == m.mask_id).all()
    # without eos_id: every block decoded with its calls, the stub's tokens after the EOS
    m.eos_id, m.nfe_counter, net.seen = None, 0, []
    full = m.sample_canvas(net, prompt, pmask, nfe=6, decoding="confidence")
    assert m.nfe_counter == 6 and m.row_calls[:, 0].tolist() == [6, 6, 6]
    assert torch.equal(full[:, :8][out[:, :8] != EOS], out[:, :8][out[:, :8] != EOS])
    assert full[0, 6] == stub_token(torch.tensor(6)) and full[0, 3] == EOS


@pytest.mark.parametrize("decoding", ["ancestral", "cached", "threshold"])
def test_mdlm_eos_stop_counts_only_rows_still_decoding(decoding):
    """One call per block: ``ancestral`` / ``cached`` / ``threshold`` reveal a block in its call;
    a row's calls are the blocks up to its EOS block; the sample holds no [MASK]."""
    at = [2, 6, 40]  # blocks of 2 from position 2: EOS in blocks 0, 2, none
    m, net, prompt, pmask = _mdlm(at, 2)
    m.eos_id = EOS
    out = m.sample(net, prompt, pmask, nfe=5, decoding=decoding, generator=torch.Generator())
    assert m.row_calls[:, 0].tolist() == [1, 3, 5] and m.nfe_counter == 5
    assert (out != m.mask_id).all() and (out[0, 3:] == EOS).all() and (out[1, 7:] == EOS).all()
    assert (out[2, 2:] != EOS).all()


def test_mdlm_without_blocks_cannot_stop():
    """``block_length`` 0: one block, the whole canvas: ``eos_stopping`` is False and the sample,
    calls and per-row calls are those without ``eos_id``; ReMDM never stops."""
    m, net, prompt, pmask = _mdlm([3, 5], 0)
    assert not m.eos_stopping("ancestral") and not m.eos_stopping("remdm-cap")
    free = m.sample(net, prompt, pmask, nfe=4, decoding="confidence")
    m.eos_id, m.nfe_counter = EOS, 0
    out = m.sample(net, prompt, pmask, nfe=4, decoding="confidence")
    assert torch.equal(out, free) and m.nfe_counter == 4 and out[0, 4] != EOS
    blocked, _ = make_model("mdlm", {"block_length": 2}, vocab=V, seq_len=L)
    assert blocked.eos_stopping("greedy") and not blocked.eos_stopping("remdm-loop")
    assert set(blocked.stops_at_eos) == {n for n, d in m.DECODINGS.items() if d.blocks}


def test_every_method_declares_its_eos_stop_off_the_table():
    """``stops_at_eos`` is the table's ``eos_stop`` flags: AR's decodings, MDLM's blocked ones,
    no other built-in method's."""
    from bench import decoding, registry

    for name, cls in registry.METHODS.items():
        if not cls.DECODINGS:
            continue
        assert set(cls.stops_at_eos) == set(decoding.flagged(cls.DECODINGS, "eos_stop")), name
        if name not in ("ar", "mdlm"):
            assert cls.stops_at_eos == (), name
    assert set(registry.METHODS["ar"].stops_at_eos) == {"sample", "greedy"}
