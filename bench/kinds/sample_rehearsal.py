"""What the rehearsal tries of a model's sample cells (:meth:`bench.kinds.sample.Sample.rehearse`):
one cell per sampling setup (:func:`setups`), each a sampling call at batch 1 and 2 with its
output's shape, id range and call count checked (:func:`rehearse_setup`)."""

from __future__ import annotations

import dataclasses
import json

from bench.config import config_hash
from bench.kinds.sampling import batch_seed, cell_sampler, sample_batch
from bench.plan import SampleCell

#: the NFE of a sampling call: the smallest that runs a middle step and the last one (FLM's
#: middle steps hold twice the memory of its last: nfe = 1 would halve its extrapolated peak)
REHEARSAL_NFE = 2
#: positions a method whose NFE is the generated length (AR) generates in the rehearsal: a
#: prefill, then one cached call
LENGTH_NFE_TAIL = 2


def setup_name(sc: SampleCell) -> str:
    """A sampling setup: the decoding, and the sampling-only options that are not defaults."""
    extra = getattr(sc, "sampling", None)
    return sc.decoding + (f" {json.dumps(extra, sort_keys=True)}" if extra else "")


def setups(cells: list[SampleCell]) -> list[SampleCell]:
    """One cell per distinct sampling setup (sampling options, decoding, dtype), in plan order:
    what the rehearsal tries of a model's sample cells, whatever its NFE and temperature grid."""
    seen, out = set(), []
    for sc in cells:
        setup = (config_hash(sc.options), sc.decoding, bool(sc.float64))
        if setup not in seen:
            seen.add(setup)
            out.append(sc)
    return out


def rehearse_setup(sc: SampleCell, ctx):
    """The rehearsal's sample phase of setup ``sc`` (``ctx``: :meth:`Sample.rehearse`'s): one
    sampling call at batch 1 and 2 through :func:`sample_batch`, its output's shape, id range
    and NFE count checked."""
    import torch

    r, m, backbone, inp = ctx.r, ctx.m, ctx.backbone, ctx.inp
    dev = r.device
    name = f"sample {setup_name(sc)}"
    ph = ctx.Phase(m.label(), name, sc.label(), batch=sc.batch_size)
    try:
        sampler = cell_sampler(ctx.method, sc, r.task, dev, ctx.cache)
    except Exception as e:  # noqa: BLE001
        raise r.fail(sc.label(), name, f"{type(e).__name__}: {e}") from e
    length_nfe = bool(sampler.nfe_is_length)
    # at least the calls the decoding needs (min_nfe: MDLM's blocks take one each)
    least = ctx.min_nfe(sampler, inp.data.clean_mask[:1])
    cell = dataclasses.replace(sc, nfe=sc.nfe if length_nfe else max(REHEARSAL_NFE, least))
    if length_nfe:
        ph.note = (
            f"NFE = length: prefill of L - {LENGTH_NFE_TAIL} positions + "
            f"{LENGTH_NFE_TAIL - 1} cached call (an upper bound)"
        )
    V = int(sampler.vocab_size)
    # sample.eos_stop: the cell's rows stop at the task's EOS where the decoding can
    eos = r.task.eos_id() if getattr(sc, "eos_stop", False) else None
    stops = eos is not None and sampler.eos_stopping(cell.decoding)

    def run(n: int):
        prompt = inp.data.x[:n].to(dev)
        pmask = inp.data.clean_mask[:n].clone()
        if length_nfe:
            pmask[:, : pmask.shape[1] - LENGTH_NFE_TAIL] = True
        pmask = pmask.to(dev)

        def call(prompt=prompt, pmask=pmask):
            gen = torch.Generator(device=dev).manual_seed(batch_seed(sc, 0))
            sampler.nfe_counter = 0
            sampler.eos_id = eos
            try:
                ids = sample_batch(sampler, backbone, cell, prompt, pmask, gen, float64=sc.float64)
            finally:
                sampler.eos_id = None
            want = sampler.nfe_for(cell.nfe, pmask)
            if tuple(ids.shape) != tuple(prompt.shape):
                raise ValueError(
                    f"sampler returned shape {tuple(ids.shape)}, expected {tuple(prompt.shape)}"
                )
            if ids.dtype.is_floating_point or ids.dtype == torch.bool:
                raise TypeError(f"sampler returned {ids.dtype} ids")
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):
                raise ValueError(f"sampled id outside [0, {V}): {int(ids.min())}..{int(ids.max())}")
            # a call-skipping decoding (a cache) and an EOS stop make at most nfe_for calls
            skips = sampler.resolve_decoding(cell.decoding) in sampler.call_skipping or stops
            if sampler.nfe_counter > want or (sampler.nfe_counter != want and not skips):
                raise ValueError(f"{sampler.nfe_counter} backbone calls, nfe_for says {want}")
            return ids

        return r.run_phase(ph, call, batch_note=f" (batch {n})", module=backbone)

    ids = run(1)
    if r.scored is None:
        r.scored = (sc, ids, inp)
    r.second(ph, ctx.twin(f"{name} {bool(sc.float64)}", V), lambda: run(2), vocab=V)
    r.check_memory(ph)
    return ph
