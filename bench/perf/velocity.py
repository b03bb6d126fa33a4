"""``velocity``: the exact-velocity sampling step (S-FLM) at a GPT-2-sized vocabulary.

Default |V| = 49,152, d = 768, L = 512, batch 1, the ``small`` DiT: the time of one sampler step
outside the denoiser (softmax, ``exact_velocity``, exp map) relative to one denoiser forward,
and the peak extra memory of the run in units of one float64 (B, L, V) buffer. Timed through
the real sampler (the method's ``sample``) with the backbone call wrapped, not a
re-implementation. Runs on every registered method whose class sets
:attr:`bench.method.Method.exact_velocity`.
"""

from __future__ import annotations

import time

import torch

from bench import registry
from bench.config import ConfigError
from bench.perf import common

HELP = "one exact-velocity sampler step vs one denoiser forward (time, extra memory)"


def add_arguments(group) -> None:
    group.add_argument("--vel-vocab", type=int, default=49_152)
    group.add_argument("--vel-dim", type=int, default=768)
    group.add_argument("--vel-len", type=int, default=512)
    group.add_argument("--vel-batch", type=int, default=1)
    group.add_argument(
        "--vel-size", default="small", help="DiT size of the velocity benchmark's denoiser"
    )
    group.add_argument("--vel-steps", type=int, default=3, help="timed velocity steps")
    group.add_argument(
        "--vel-float32", action="store_true", help="sample in float32 (default float64)"
    )


def velocity_methods() -> list[str]:
    """The registered methods whose sampler computes an exact velocity between backbone calls."""
    return [n for n, cls in registry.METHODS.items() if getattr(cls, "exact_velocity", False)]


def run(model_list, args, device) -> list[dict]:
    names = velocity_methods()
    if not names:
        raise ConfigError("velocity: no registered method has an exact-velocity sampler")
    return [_one(name, args, device) for name in names]


def _one(name: str, args, device) -> dict:
    """One exact-velocity sampler step vs one denoiser forward, through the method's sample."""
    V, d, L, B = args.vel_vocab, args.vel_dim, args.vel_len, args.vel_batch
    method, backbone = common.make_model(name, {}, V, L, args.vel_size, device)
    if backbone.embed.weight.shape[-1] != d:
        raise ConfigError(
            f"--vel-dim {d}: the {args.vel_size!r} DiT has width "
            f"{backbone.embed.weight.shape[-1]} (pick --vel-size to match)"
        )
    backbone.eval()
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

    sample(2)  # warm-up
    peaks = {}
    for label, n in (("forward_only", 1), ("sampler", args.vel_steps + 1)):
        base = common.reset_peak(device)
        total = sample(n)  # n = 1: one decode-only call; else vel_steps velocity steps + a decode
        peaks[label] = None if base is None else common.peak(device) - base
    fwd = sum(forward_s) / len(forward_s)
    step = (total - sum(forward_s)) / args.vel_steps
    buf = B * L * V * (4 if args.vel_float32 else 8)
    extra = None if None in peaks.values() else max(0, peaks["sampler"] - peaks["forward_only"])
    common.progress(
        f"velocity {name}: step {step * 1e3:.1f} ms vs forward {fwd * 1e3:.1f} ms "
        f"({step / fwd:.2f}x)"
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
        "peak_forward_only_bytes": peaks["forward_only"],
        "peak_sampler_bytes": peaks["sampler"],
        "velocity_extra_blv_buffers": None if extra is None else extra / buf,
        "note": (
            "peaks are above the memory in use before the run (CUDA: allocator; CPU: resident "
            "set, VmHWM reset through /proc/self/clear_refs); the velocity's extra is the "
            "sampler's peak minus the decode-only run's, in float (B, L, V) buffers of the "
            "sampling dtype"
        ),
    }
