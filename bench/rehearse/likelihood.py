"""The likelihood phase (:func:`likelihood_phase`): one call of the method's bound on blocks of
the evaluated length at batch 1 and 2. All of the rehearsal's likelihood-specific code is here."""

from __future__ import annotations

import torch

from bench.method import Batch
from bench.rehearse.measuring import Phase
from bench.rehearse.models import Model, architecture, twin_key


def likelihood_phase(r, m: Model, method, backbone) -> Phase:
    """The likelihood phase of model ``m`` (its likelihood cell, ``m.likelihood``) in rehearsal
    ``r`` (:class:`bench.rehearse.rehearsal.Rehearsal`)."""
    lc = m.likelihood
    dev = r.device
    L = lc.block or int(r.task.seq_len)
    ph = Phase(
        m.label(),
        "likelihood",
        lc.label(),
        batch=lc.batch_size,
        note=f"blocks of {L} random ids, {lc.draws} draw(s)",
    )
    vocab = int(r.task.vocab_size)

    def run(n: int):
        g = torch.Generator().manual_seed(n)
        x = torch.randint(0, vocab, (n, L), generator=g)
        clean = torch.zeros(n, L, dtype=torch.bool)
        batch = Batch(x, clean, ~clean).to(dev)

        def call(batch=batch, n=n):
            gen = torch.Generator(device=dev).manual_seed(0)
            with torch.no_grad():
                out = method.nll_bound(backbone, batch, n_draws=lc.draws, generator=gen)
            if out.ndim != 2 or out.shape[1] != n:
                raise ValueError(
                    f"nll_bound returned shape {tuple(out.shape)}, expected (draws, {n})"
                )
            if not bool(torch.isfinite(out).all()):
                raise FloatingPointError("non-finite bound")
            return out

        r.run_phase(ph, call, batch_note=f" (batch {n})", module=backbone)

    run(1)
    V = int(method.vocab_size)
    key = (twin_key(m.train, architecture(backbone, V)), "likelihood")
    r.second(ph, key, lambda: run(2), vocab=V)
    r.check_memory(ph)
    return ph
