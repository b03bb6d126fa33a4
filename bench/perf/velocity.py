"""``velocity``: the exact-velocity sampling step (S-FLM) at a GPT-2-sized vocabulary.

Default |V| = 49,152, d = 768, L = 512, batch 1, the ``small`` DiT; with ``--scale`` the scale's
DiT size, |V|, L and batch (``--scale tinygsm-cpu``: ``cpu-small``, d = 128, |V| 49,153, L 256,
batch 4); each ``--vel-*`` flag overrides. Measured: the time of one sampler step outside the
denoiser (softmax, ``exact_velocity``, exp map) relative to one denoiser forward, and the peak
extra memory of the run in units of one (B, L, V) buffer of the sampling dtype. Timed through
the real sampler (the method's ``sample``) with the backbone call wrapped, not a
re-implementation. Runs on every registered method whose class sets
``exact_velocity`` (:mod:`bench.perf.capabilities`).
"""

from __future__ import annotations

import time

import torch

from bench import registry
from bench.config import ConfigError
from bench.perf import capabilities, common

HELP = "one exact-velocity sampler step vs one denoiser forward (time, extra memory)"


def add_arguments(group) -> None:
    group.add_argument("--vel-vocab", type=int, help="|V| (default 49,152, or the --scale's)")
    group.add_argument("--vel-dim", type=int, help="width check (default: the DiT's width)")
    group.add_argument("--vel-len", type=int, help="L (default 512, or the --scale's)")
    group.add_argument("--vel-batch", type=int, help="batch (default 1, or the --scale's)")
    group.add_argument(
        "--vel-size",
        help="DiT size of the velocity benchmark's denoiser (default small, or the --scale's)",
    )
    group.add_argument("--vel-steps", type=int, default=3, help="timed velocity steps")
    group.add_argument(
        "--vel-float32", action="store_true", help="sample in float32 (default float64)"
    )


def velocity_methods() -> list[str]:
    """The registered methods whose sampler computes an exact velocity between backbone calls."""
    return [n for n, cls in registry.METHODS.items() if capabilities.exact_velocity(cls)]


#: the velocity shape without ``--scale`` (the ``small`` DiT at a GPT-2-sized vocabulary)
DEFAULTS = {"vel_vocab": 49_152, "vel_len": 512, "vel_batch": 1, "vel_size": "small"}
#: ``--vel-*`` flag <- ``--scale`` key
FROM_SCALE = {"vel_vocab": "vocab", "vel_len": "seq_len", "vel_batch": "batch", "vel_size": "size"}


def resolve_shape(args) -> None:
    """Fill each ``--vel-*`` flag left unset from ``--scale`` when one is given, else from
    :data:`DEFAULTS`."""
    from bench.cost.catalogue import SCALES

    scale = SCALES.get(getattr(args, "scale", None) or "", {})
    for key, default in DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, scale.get(FROM_SCALE[key], default))


def run(model_list, args, device) -> list[dict]:
    resolve_shape(args)
    names = velocity_methods()
    if not names:
        raise ConfigError("velocity: no registered method has an exact-velocity sampler")
    return [_one(name, args, device) for name in names]


def products_seconds(n: int, vocab: int, dim: int, dtype, device, reps: int = 2) -> float:
    """Seconds of the exact velocity's two matrix products at this shape: C = z E^T
    ((n, d) x (d, V)), then y = W E ((n, V) x (V, d)), on random operands, median of ``reps``
    after a warm-up."""
    g = torch.Generator(device=device).manual_seed(0)
    z = torch.randn(n, dim, generator=g, device=device, dtype=dtype)
    E = torch.randn(vocab, dim, generator=g, device=device, dtype=dtype)
    c = torch.empty(n, vocab, device=device, dtype=dtype)
    y = torch.empty(n, dim, device=device, dtype=dtype)

    def both():
        torch.mm(z, E.T, out=c)
        torch.mm(c, E, out=y)

    times = [common.seconds_per_call(both, 1 if i == 0 else 0, 1, device) for i in range(reps)]
    return sorted(times)[len(times) // 2]


def _model(name: str, args, device):
    """(method, backbone, width) of ``name`` at the ``--vel-*`` shape, in eval mode and the
    sampling dtype asked for; a ``--vel-dim`` the DiT size does not have is a usage error."""
    V, L = args.vel_vocab, args.vel_len
    method, backbone = common.make_model(name, {}, V, L, args.vel_size, device)
    d = backbone.embed.weight.shape[-1] if args.vel_dim is None else args.vel_dim
    if backbone.embed.weight.shape[-1] != d:
        raise ConfigError(
            f"--vel-dim {d}: the {args.vel_size!r} DiT has width "
            f"{backbone.embed.weight.shape[-1]} (pick --vel-size to match)"
        )
    backbone.eval()
    common.as_asked(method)  # float64 unless --vel-float32, whatever the method's default at |V|
    return method, backbone, d


def _timed_sampler(method, backbone, args, device):
    """(``sample(nfe)``: one sampling call from an empty prompt, its wall seconds; the list of
    its denoiser forwards' seconds, refilled at each call): ``method.call`` is timed."""
    B, L = args.vel_batch, args.vel_len
    forward_s: list[float] = []
    real_call = method.call

    def timed_call(bb, *a, **k):
        common.sync(device)
        t0 = time.perf_counter()
        out = real_call(bb, *a, **k)
        common.sync(device)
        forward_s.append(time.perf_counter() - t0)
        return out

    method.call = timed_call
    prompt = torch.zeros(B, L, dtype=torch.long, device=device)
    pmask = torch.zeros(B, L, dtype=torch.bool, device=device)

    def sample(nfe):
        forward_s.clear()
        common.sync(device)
        t0 = time.perf_counter()
        with common.autocast(device, args.precision):
            method.sample(
                backbone,
                prompt,
                pmask,
                nfe=nfe,
                float64=not args.vel_float32,
                generator=torch.Generator(device=device).manual_seed(0),
            )
        common.sync(device)
        return time.perf_counter() - t0

    return sample, forward_s


def _one(name: str, args, device) -> dict:
    """One exact-velocity sampler step vs one denoiser forward, through the method's sample."""
    V, L, B = args.vel_vocab, args.vel_len, args.vel_batch
    method, backbone, d = _model(name, args, device)
    sample, forward_s = _timed_sampler(method, backbone, args, device)
    sample(2)  # warm-up
    # timed first, with the allocator as sampling runs it: the peak-memory runs below trim the
    # CPU heap and fix malloc's mmap threshold, after which every large buffer (the forward's
    # logits, the BLAS packing buffers) is paged in anew at each allocation
    total = sample(args.vel_steps + 1)  # vel_steps velocity steps + a decode-only call
    fwd = sum(forward_s) / len(forward_s)
    step = (total - sum(forward_s)) / args.vel_steps
    dtype = torch.float32 if args.vel_float32 else torch.float64
    products = products_seconds(B * L, V, d, dtype, device, reps=args.vel_steps)
    peaks = {}
    for label, n in (("forward_only", 1), ("sampler", args.vel_steps + 1)):
        base = common.reset_peak(device)
        sample(n)  # n = 1: one decode-only call
        peaks[label] = None if base is None else common.peak(device) - base
    buf = B * L * V * (4 if args.vel_float32 else 8)
    extra = None if None in peaks.values() else max(0, peaks["sampler"] - peaks["forward_only"])
    common.progress(
        f"velocity {name}: step {step * 1e3:.1f} ms vs forward {fwd * 1e3:.1f} ms "
        f"({step / fwd:.2f}x; its two matrix products alone {products / fwd:.2f}x)"
    )
    return {
        "bench": "velocity",
        "model": name,
        "vocab": V,
        "dim": d,
        "seq_len": L,
        "batch": B,
        "size": args.vel_size,
        "dtype": "float32" if args.vel_float32 else "float64",
        "forward_s": fwd,
        "step_s": step,
        "step_over_forward": step / fwd,
        "products_s": products,
        "products_over_forward": products / fwd,
        "peak_forward_only_bytes": peaks["forward_only"],
        "peak_sampler_bytes": peaks["sampler"],
        "velocity_extra_blv_buffers": None if extra is None else extra / buf,
        "note": (
            "peaks are above the memory in use before the run (CUDA: allocator; CPU: resident "
            "set, VmHWM reset through /proc/self/clear_refs); the velocity's extra is the "
            "sampler's peak minus the decode-only run's, in float (B, L, V) buffers of the "
            "sampling dtype; products_s: the velocity's two (B L x d x V) matrix products "
            "alone (z E^T and (p S) E, all rows at once), the part of a step that no fusion of "
            "its elementwise work removes"
        ),
    }
