"""Top-k / top-p (nucleus) filtering of every categorical draw (AR, MDLM, Duo, CANDI's discrete
draws): ``bench.method.filter_logits`` against an independent transcription of the reference
(s-sahoo/duo ``utils.py::top_k_top_p_filtering``), its defining properties, and each sampler
drawing only from the classes kept."""

from __future__ import annotations

import pytest
import torch

from bench import registry
from bench.config import BackboneConfig
from bench.method import filter_logits


def reference_filter(logits, top_k=0, top_p=0.0):
    """s-sahoo/duo utils.py::top_k_top_p_filtering, transcribed step by step (in place on a
    copy, as the reference does; top_p = 0 is off there)."""
    logits = logits.clone()
    if top_k > 0:
        values, _ = torch.topk(logits, k=top_k, dim=-1)
        logits[logits < torch.min(values, dim=-1, keepdim=True)[0]] = -float("inf")
    if top_p > 0.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True, dim=-1)
        cum_probs = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        remove = cum_probs > top_p
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = 0
        mask = torch.empty_like(remove)
        mask.scatter_(dim=-1, index=sorted_indices, src=remove)
        logits[mask] = -float("inf")
    return logits


@pytest.mark.parametrize("top_k,top_p", [(0, 0.9), (3, 1.0), (5, 0.7), (1, 0.5), (0, 0.05)])
def test_filter_is_the_reference_filter(top_k, top_p):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 7, 50, generator=g, dtype=torch.float64) * 2
    logits[0, 0, :4] = 5.0  # ties at the top
    want = reference_filter(logits, top_k, top_p if top_p < 1.0 else 0.0)
    got = filter_logits(logits, top_k, top_p)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    assert torch.equal(got[~torch.isinf(got)], logits[~torch.isinf(got)])  # kept: unchanged
    assert filter_logits(logits, 0, 1.0) is logits  # off: the same tensor


def test_nucleus_keeps_the_smallest_set_reaching_p():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(200, 30, generator=g, dtype=torch.float64) * 1.5
    p = torch.softmax(logits, -1)
    for top_p in (0.3, 0.8, 0.95):
        kept = ~torch.isinf(filter_logits(logits, 0, top_p))
        mass = (p * kept).sum(-1)
        assert (mass >= top_p - 1e-12).all()  # reaches p
        # minimal: without its least likely kept class the set holds less than p
        least = torch.where(kept, p, torch.inf).min(-1).values
        assert (mass - least < top_p).all()
        # the kept classes are the most likely ones
        assert (
            torch.where(kept, p, torch.inf).min(-1).values
            >= torch.where(kept, -torch.inf, p).max(-1).values
        ).all()


def test_top_k_keeps_k_classes_and_a_draw_stays_inside():
    from bench.method import gumbel_argmax

    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]]).expand(4000, -1)
    f = filter_logits(logits, 2)
    assert (~torch.isinf(f)).sum(-1).eq(2).all()
    draws = gumbel_argmax(f, torch.Generator().manual_seed(0))
    assert set(draws.tolist()) == {0, 1}
    # renormalised over the kept classes: P(0) = e / (e + 1)
    want = torch.softmax(torch.tensor([2.0, 1.0]), -1)[0].item()
    assert abs(draws.eq(0).double().mean().item() - want) < 0.03


# -- every sampler -----------------------------------------------------------------------
V, L = 6, 12
#: the same logits at every position: class 0 most likely, then 1, ... (top-p 0.5 keeps 0 and
#: 1: p0 = 0.45 does not reach it)
CLASS_LOGITS = torch.tensor([3.0, 2.9, 1.0, 0.5, 0.0, -0.5], dtype=torch.float64)


class _Task:
    vocab_size, seq_len = V, L


def _fixed_call(n_out: int):
    def call(self, backbone, x, *args, **kwargs):
        logits = torch.full((n_out,), -1e6, dtype=torch.float32)
        logits[:V] = CLASS_LOGITS.float()
        return logits.expand(x.shape[0], x.shape[1], n_out).clone()

    return call


@pytest.mark.parametrize(
    "method,decoding",
    [
        ("ar", "sample"),
        ("mdlm", "ancestral"),
        ("duo", "ancestral"),
        ("candi", "cached"),
        ("candi", "nocache"),
    ],
)
def test_every_categorical_sampler_draws_only_the_kept_classes(method, decoding, monkeypatch):
    cls = registry.METHODS[method]
    n = 64
    prompt = torch.zeros(n, L, dtype=torch.long)
    pmask = torch.zeros(n, L, dtype=torch.bool)
    pmask[:, :2] = True
    prompt[:, :2] = 5

    def draw(**options):
        m = registry.make_method(method, cls.Options(**options), _Task())
        backbone = m.build_backbone(BackboneConfig(size="cpu-mini"))
        n_out = backbone.head.out_features if hasattr(backbone, "head") else V
        monkeypatch.setattr(cls, "call", _fixed_call(n_out))
        out = m.sample(
            backbone,
            prompt,
            pmask,
            nfe=8,
            decoding=decoding,
            generator=torch.Generator().manual_seed(3),
        )
        assert torch.equal(out[:, :2], prompt[:, :2])
        return set(out[:, 2:].flatten().tolist())

    assert len(draw()) > 2  # unfiltered: less likely classes appear too
    assert draw(top_k=1) == {0}
    assert draw(top_k=2) == {0, 1}
    assert draw(top_p=0.5) == {0, 1}
    assert draw(top_k=3, top_p=0.5) == {0, 1}


def test_filters_are_sampling_options_that_leave_hashes_alone():
    """A filter reuses the trained model (a sampling option), off it is left out of every cell
    id (stores written before it stay valid), and a bad value is a config error naming it."""
    import dataclasses

    from bench.config import ConfigError, build, canonical
    from bench.plan import _identity

    for name in ("ar", "mdlm", "duo", "candi"):
        cls = registry.METHODS[name]
        assert {"top_p", "top_k"} <= set(cls.sampling_options)
        m = registry.make_method(name, cls.Options(), _Task())
        ids = _identity(m, canonical(dataclasses.asdict(m.opts)))
        assert "top_p" not in ids and "top_k" not in ids
        on = registry.make_method(name, cls.Options(top_p=0.9), _Task())
        assert _identity(on, canonical(dataclasses.asdict(on.opts)))["top_p"] == 0.9
    with pytest.raises(ConfigError, match="top_p"):
        build(registry.METHODS["mdlm"].Options, {"top_p": 0.0}, where="s.yaml: methods[0]")
