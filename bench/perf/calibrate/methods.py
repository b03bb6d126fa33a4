"""Each model's factors (:func:`_method_factors`): its sampling calls and training steps as
forward-equivalents of the bare backbone's, timed right before it at the same shape, and its own
seconds per call or step (:func:`_split`, from two batch sizes)."""

from __future__ import annotations

import types

import torch

from bench.cost import catalogue as models
from bench.perf import capabilities, common
from bench.perf.calibrate.backbone import (
    TRAIN_WARMUP,
    _adamw,
    _bare_forward,
    _bare_step,
    _lo,
    _net,
    _shape,
    _train_step_fn,
)
from bench.perf.calibrate.timing import _timed

#: sampling calls per timed run of a non-AR sampler
NFE = 4


def _decodings(name: str, opts: dict, vocab: int, seq_len: int) -> list[tuple[str, str]]:
    """(table decoding key, decoding passed to the sampler) of a model: each of its decodings,
    S-FLM's ``topk`` as top 5."""
    from bench import registry

    cls = registry.METHODS[name]
    m = cls(cls.Options(**opts), vocab, seq_len)
    out = []
    for d in m.decodings:
        out.append((d, "top5" if d == "topk" else d))
    return out


def _split(t_lo: float, ref_lo: float, t_hi: float, ref_hi: float) -> tuple[float, float]:
    """(factor, seconds per call) with ``t = factor x ref + seconds``, from two batch sizes (the
    seconds are the sampler's or the loss's own per-call work that no batch row pays for)."""
    fe = (t_hi - t_lo) / (ref_hi - ref_lo) if ref_hi > ref_lo else t_hi / ref_hi
    oh = t_lo - fe * ref_lo
    if oh < 0 or fe <= 0:
        return t_hi / ref_hi, 0.0
    return fe, oh


def _method_factors(model_list, shapes, entry, args, device, rows) -> dict:
    """Each model's forward-equivalents per sampling call (each decoding; float64 at the small
    shape, both dtypes at the large one) and per training step, and its own seconds per call /
    step (from the small shape at two batch sizes): its times over the bare forward's and step's
    of the same shape, timed right before it (so that a change of the machine's load since the
    fit does not count, and the factor is the model's work over the bare backbone's, whatever
    the fit says of that shape)."""
    sample, train, shares = {}, {}, []
    for which in ("small", "large"):
        size, V, L, B = shapes[which]
        shares.append(_net(size, V).head_share(L))
    settings = (("lo", _lo(shapes["small"])), ("small", shapes["small"]),
                ("large", shapes["large"]))  # fmt: skip
    for label, name, opts in model_list:
        tt: dict[str, tuple[float, float]] = {}  # setting -> (seconds, reference) per step
        ts: dict[tuple, tuple[float, float]] = {}  # (decoding, dtype, setting) -> per call
        for which, shape in settings:
            _time_model(label, name, opts, which, shape, entry, args, device, rows, tt, ts)
        _fit_model(label, tt, ts, train, sample)
        tf = train[label]
        common.progress(
            f"calibrate {label}: train x{tf['factor'][0]:.2f}/{tf['factor'][1]:.2f} "
            f"+{tf['step_s'] * 1e3:.1f} ms; sample "
            + ", ".join(
                f"{k.split('|')[1]} x{v['float64'][0]:.2f}/{v['float64'][1]:.2f}"
                f" +{v['call_s'] * 1e3:.1f} ms"
                for k, v in sample.items()
                if k.startswith(label + "|")
            )  # fmt: skip
        )
    return {"head_share": shares, "sample": sample, "train": train}


def _time_model(label, name, opts, which, shape, entry, args, device, rows, tt, ts) -> None:
    """Model ``label`` at the setting ``which`` (``shape``): the bare forward and step timed
    right before it, then its training step into ``tt[which]`` and each sampling call into
    ``ts[(decoding, dtype, which)]``, as (its seconds, the bare backbone's) per step / call."""
    from bench.cost.model import forward_s, train_step_s

    size, V, L, B = shape
    at = _shape(size, V, L, B)
    now_f = _timed(_bare_forward(size, V, L, B, args, device), args.calib_reps, device,
                   what=f"forward {at} (before {label})")  # fmt: skip
    now_t = _timed(_bare_step(size, V, L, B, args, device), args.calib_reps, device,
                   what=f"train step {at} (before {label})")  # fmt: skip
    method, bb = common.make_model(name, opts, V, L, size, device)
    models.fast_path(label, method, bb)
    common.as_asked(method)
    arch = "sarch" if opts.get("backbone") == "sarch" else "dit"
    net = _net(size, V, arch=arch, causal=not method.uses_time)
    batch = common.sudoku_batch(B, V, L, device, prompt_frac=0.5)
    # training step
    bb.train()
    opt = _adamw(bb, device)
    a = types.SimpleNamespace(batch=B, precision=args.precision)
    T = L - 1 if net.causal else L
    ctx = T / 2 if net.causal else T
    step = _train_step_fn(method, bb, opt, batch, a, device)
    # some models settle only after a few steps (FLM: 2.5x its steady time for the first
    # five at batch 16), which a min over three calls after two would keep
    s = _timed(step, args.calib_reps, device, warmup=TRAIN_WARMUP,
               what=f"train {label} {at}")  # fmt: skip
    tt[which] = (
        s,
        now_t * train_step_s(entry, net, B, T, ctx) / train_step_s(entry, _net(size, V), B, L, L),
    )
    rows.append({"bench": "calibrate", "what": f"train {label}", "vocab": V, "batch": B,
                 "seconds": s, "bare_s": now_t})  # fmt: skip
    # sampling calls
    bb.eval()
    dtypes = ("float64",) if which != "large" else ("float64", "float32")
    for key, dec in _decodings(name, opts, V, L):
        for dtype in dtypes:
            s, calls = _sample_time(method, bb, batch, dec, dtype, args, device,
                                    what=f"sample {label} {key} {dtype} {at}")  # fmt: skip
            cached = bool(capabilities.kv_cache(method)) and method.nfe_is_length
            if cached:
                given = L - calls
                ref = forward_s(entry, net, B, given, given) + (calls - 1) * forward_s(
                    entry, net, B, 1, (given + L) / 2
                )
            else:
                ref = calls * forward_s(entry, net, B, L, L)
            # the bare forward as timed just now, scaled to this model's calls
            ref *= now_f / forward_s(entry, _net(size, V), B, L, L)
            ts[(key, dtype, which)] = (s / calls, ref / calls)
            what = f"sample {label} {key} {dtype}"
            rows.append({"bench": "calibrate", "what": what, "vocab": V, "batch": B,
                         "calls": calls, "seconds": s, "bare_s": now_f})  # fmt: skip


def _fit_model(label, tt, ts, train: dict, sample: dict) -> None:
    """Model ``label``'s factors and own seconds from its timings (:func:`_split`) into
    ``train[label]`` and ``sample["label|decoding"]``."""
    fe, oh = _split(*tt["lo"], *tt["small"])
    fe_lv = max(0.0, (tt["large"][0] - oh) / tt["large"][1])
    train[label] = {"factor": [fe, fe_lv], "step_s": oh}
    for key in dict.fromkeys(k for k, _, _ in ts):
        fe, oh = _split(*ts[(key, "float64", "lo")], *ts[(key, "float64", "small")])
        lv = {dt: max(0.0, (ts[(key, dt, "large")][0] - oh) / ts[(key, dt, "large")][1])
              for dt in ("float64", "float32")}  # fmt: skip
        sample[f"{label}|{key}"] = {
            "float64": [fe, lv["float64"]],
            "float32": [fe, lv["float32"]],
            "call_s": oh,
        }


def _sample_time(
    method, backbone, batch, decoding, dtype, args, device, what: str = ""
) -> tuple[float, int]:
    def once():
        method.nfe_counter = 0
        with common.autocast(device, args.precision):
            method.sample(backbone, batch.x, batch.clean_mask, nfe=NFE, decoding=decoding,
                          float64=dtype == "float64",
                          generator=torch.Generator(device=device).manual_seed(0))  # fmt: skip

    s = _timed(once, args.calib_reps, device, what=what)
    return s, method.nfe_counter
