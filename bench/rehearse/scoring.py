"""The score phase (:func:`score_phase`): the task's ``evaluate`` on one item, with its reference
LM where the task has one (:func:`reference_lm`: the configured model when it is on this
machine, else its architecture with random weights from a known configuration)."""

from __future__ import annotations

import torch

from bench.config import canonical, config_hash
from bench.data.base import TaskData
from bench.rehearse.measuring import Phase

#: Gen. PPL reference LMs whose architecture is known here (transformers' GPT-2 configurations)
GPT2_CONFIGS = {
    "gpt2": {"n_embd": 768, "n_layer": 12, "n_head": 12},
    "gpt2-medium": {"n_embd": 1024, "n_layer": 24, "n_head": 16},
    "gpt2-large": {"n_embd": 1280, "n_layer": 36, "n_head": 20},
    "gpt2-xl": {"n_embd": 1600, "n_layer": 48, "n_head": 25},
}


def reference_lm(r) -> None:
    """Give the task's Gen. PPL evaluator its reference LM: the configured one when this
    machine has it, else its architecture with random weights (a known configuration)."""
    ev = r.task.genppl()
    if ev.ref is not None:
        return
    from bench.evaluate.genppl.evaluator import ReferenceModelError, load_reference

    name = ev.ref_model
    try:
        ev.ref = load_reference(
            name, device=r.device, data_dir=ev.data_dir, max_context=ev.max_context
        )
        return
    except ReferenceModelError as e:
        why = str(e)
    if name not in GPT2_CONFIGS:
        raise RuntimeError(f"{why}; no known configuration of {name!r} to build it from")
    from transformers import GPT2Config, GPT2LMHeadModel

    from bench.evaluate.genppl.evaluator import wrap_model
    from bench.text.gpt2 import load_gpt2_tokenizer

    tok = load_gpt2_tokenizer(r.task.opts.tokenizer_source, r.task.cfg.data_dir)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=1024, **GPT2_CONFIGS[name])
    model = _random_gpt2(GPT2LMHeadModel, cfg)
    if r.device.type == "cuda":
        model = model.to(torch.bfloat16)
    ev.ref = wrap_model(
        model, tok, f"{name} (random weights)", device=r.device, max_context=ev.max_context
    )
    r.notes.append(
        f"Gen. PPL reference LM {name!r} is not on this machine: its architecture "
        f"(transformers GPT2Config {GPT2_CONFIGS[name]}) with random weights scored the item"
    )


def score_phase(r) -> Phase | None:
    """The task's scorer on the first model's sample of rehearsal ``r``
    (:class:`bench.rehearse.rehearsal.Rehearsal`), once per task settings in a run; None when
    nothing was sampled."""
    if r.scored is None:
        return None
    sc, ids, inp = r.scored
    ph = Phase("(the task's scorer)", "score", sc.label(), note="one item")
    if not inp.real:
        ph.note = "skipped: the task's evaluation items are unavailable here"
        return ph
    settings = config_hash(canonical(r.p.cfg.task))
    if settings in r.shared.scored:  # the same scorer on the same kind of item
        ph.note = f"as measured for {r.shared.scored[settings]} (the same task settings)"
        return ph
    r.shared.scored[settings] = r.source
    data = TaskData(
        inp.data.x[:1],
        inp.data.clean_mask[:1],
        inp.data.loss_mask[:1],
        {k: list(v)[:1] for k, v in inp.data.meta.items()},
    )
    if hasattr(r.task, "genppl"):  # a reference LM (OWT): built before it is measured
        lm = Phase("(the task's scorer)", "reference LM", sc.label())
        r.run_phase(lm, lambda: reference_lm(r))
        lm.note = r.task.genppl().ref.name
        r.phases.append(lm)
    r.run_phase(ph, lambda: r.task.evaluate(ids[:1], data, inp.subset))
    if hasattr(r.task, "genppl"):  # nothing of this sweep outlives it (Shared)
        r.task.genppl().ref = None
    return ph


def _random_gpt2(cls, cfg):
    """A GPT-2 of ``cfg`` with random weights, built without transformers' initialisation (its
    module-by-module init is slow at gpt2-large's size): structure on the meta device,
    then every matrix drawn N(0, 0.02) (GPT-2's initializer_range), biases 0, norm scales 1, the
    head tied to the embedding. The model has no buffers to fill."""
    with torch.device("meta"):
        model = cls(cfg)
    model = model.to_empty(device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim > 1:
                p.normal_(0.0, cfg.initializer_range, generator=g)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.fill_(1.0)
    model.tie_weights()
    return model.eval()
