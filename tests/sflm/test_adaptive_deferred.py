"""The adaptive schedule copies its (t, loss) pairs to the host buffer only when it refits or
its state is read (no host sync per training step on GPU), and ends with exactly the buffer,
refits and fitted schedule of the per-step copy it replaced."""

import numpy as np
import torch

from sflm.schedule import AdaptiveSchedule, LinearSchedule, TruncatedSchedule


def _per_step_reference(s: AdaptiveSchedule, t, loss, step) -> bool:
    """The record() before deferral: copy to the host ring buffer on every call."""
    if step < s.warmup:
        return False
    t_np, l_np = t.double().cpu().numpy().reshape(-1), loss.double().cpu().numpy().reshape(-1)
    if s.t_buf is None:
        size = s.buffer_size or s.refit_every * len(t_np)
        s.t_buf, s.loss_buf = np.zeros(size), np.zeros(size)
    size = len(s.t_buf)
    if len(t_np) >= size:
        t_np, l_np = t_np[-size:], l_np[-size:]
    idx = (s.buf_pos + np.arange(len(t_np))) % size
    s.t_buf[idx], s.loss_buf[idx] = t_np, l_np
    end = s.buf_pos + len(t_np)
    s.buf_filled = s.buf_filled or end >= size
    s.buf_pos = end % size
    if s.buf_filled and step % s.refit_every == 0:
        s.refit()
        return True
    return False


def test_deferred_copy_matches_the_per_step_copy():
    base = TruncatedSchedule(LinearSchedule(1e-3), 1e-3, 0.2, 1e-3)
    kw = {"warmup": 3, "refit_every": 4, "ema": 0.9, "buffer_size": 90}  # 90: wraps mid-batch
    new, old = AdaptiveSchedule(base, **kw), AdaptiveSchedule(base, **kw)
    gen = torch.Generator().manual_seed(0)
    got, want = [], []
    for step in range(30):
        n = 64 if step != 11 else 120  # one batch larger than the buffer
        t = torch.rand(n, generator=gen)
        loss = torch.sigmoid((t - 0.3) / 0.05) + 0.01 * torch.rand(n, generator=gen)
        got.append(new.record(t, loss, step))
        want.append(_per_step_reference(old, t, loss, step))
        if step == 5:  # after the refit at step 4, step 5's pairs wait; the host buffer lags
            assert len(new._pending) == 1 and not np.array_equal(new.t_buf, old.t_buf)
    assert got == want and sum(got) >= 4
    new.get_extra_state()  # a state read flushes what is pending
    assert not new._pending
    assert np.array_equal(new.t_buf, old.t_buf) and np.array_equal(new.loss_buf, old.loss_buf)
    assert (new.buf_pos, new.buf_filled, new.refit_count) == (
        old.buf_pos,
        old.buf_filled,
        old.refit_count,
    )
    t = torch.linspace(0, 1, 301, dtype=torch.float64)
    assert torch.equal(new.alpha(t), old.alpha(t))
