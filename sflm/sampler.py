"""S-FLM sampling: geodesic Euler over the posterior-weighted velocity (paper sec. 3.1, appendix
"Step Size with the Euler Sampler"; reference ``samplers.py::SFMSampler``).

Velocities (all take the posterior after temperature, paper eq. temperature-scaling):
- exact: v = sum_v p_v log_z(e_hat_v) (paper eq. flm-marginal-vf without the alpha'/(1-alpha)
  factor, which the step size absorbs), computed with two matrix products against the table;
- stochastic: v = log_z(e_hat_{x^}) with x^ ~ p (paper Alg. "Stochastic sampling");
- top-k: the exact sum restricted to the k largest logits, renormalised by a softmax over them
  (paper par. "Top-k velocity"); k = 1 is top-1 decoding and is temperature-free.
Step: z <- exp_z(s_n v) with s_n = (alpha_{n+1} - alpha_n) / (1 - alpha_n) (paper eq. step-size).
With ``float64`` the latent stays in float64 between steps. The reference casts its state back to
float32 after each step, a difference of about 2e-7 in the network input (docs/methods/sflm.md).
Without it the sampler runs in float32 from the float64 noise rounded, so both dtypes can be
compared token by token from one seed (``python -m bench.perf agreement``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from bench.method import categorical_draw
from sflm.decodings import DECODINGS
from sflm.geometry import EPS, exp_map, log_map, normalize, uniform_sphere


def _omega_over_sin(c: Tensor, eps: float) -> Tensor:
    """w / sin(w) for w = arccos(c), elementwise (a new tensor; ``c`` is left intact).

    sin w = sqrt(1 - c^2); the limit 1 is used where sin w < eps and c > 0 (w -> 0); at
    c -> -1 (antipodal, undefined) sin w is floored at ``eps`` like the reference
    (``scale = omega / sin(omega).clamp(min=eps)``). Peak extra memory: two buffers of c's size.
    """
    s = torch.mul(c, c).neg_().add_(1.0).clamp_min_(0.0).sqrt_()
    w = torch.atan2(s, c)
    near_zero = (s < eps) & (c > 0)
    w.div_(s.clamp_min_(eps))
    del s
    return w.masked_fill_(near_zero, 1.0)


#: float (rows, V) buffers of the exact velocity's workspace (probabilities, cosines then
#: w / sin w in place, sin w): bytes per row = 3 V itemsize
WORKSPACE_BUFFERS = 3
#: CPU: the workspace may use this fraction of MemAvailable; CUDA: of the free device memory
WORKSPACE_FRACTION = {"cpu": 0.25, "cuda": 0.5}
#: upper bound on the workspace (bytes) whatever the free memory: larger chunks are not faster
#: (measured, docs/methods/sflm.md "Measured cost"), and it keeps the extra peak memory of a
#: sampler step below one (B, L, V) buffer at the paper's batch sizes
WORKSPACE_CAP = {"cpu": 256 << 20, "cuda": 2 << 30}


def _free_bytes(device: torch.device) -> int | None:
    """Free memory the workspace may draw on: CUDA free device memory; CPU MemAvailable."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def workspace_rows(
    n: int, vocab: int, dtype: torch.dtype, device: torch.device, budget: int | None = None
) -> int:
    """Rows of (., V) processed at a time by ``exact_velocity`` so that its workspace
    (``WORKSPACE_BUFFERS`` buffers of (rows, V) in ``dtype``) fits ``budget`` bytes.

    ``budget=None``: ``WORKSPACE_FRACTION`` of the free memory, at most ``WORKSPACE_CAP``
    (devices other than cpu / cuda use the CPU numbers). At most half the rows (rounded up), so
    the workspace never exceeds two (B, L, V) buffers; always at least one row."""
    per_row = vocab * WORKSPACE_BUFFERS * torch.empty((), dtype=dtype).element_size()
    if budget is None:
        kind = "cuda" if device.type == "cuda" else "cpu"
        budget = WORKSPACE_CAP[kind]
        free = _free_bytes(device)
        if free is not None:
            budget = min(budget, int(free * WORKSPACE_FRACTION[kind]))
    return max(1, min((n + 1) // 2, int(budget) // per_row))


def velocity_workspace(
    n: int, vocab: int, dtype: torch.dtype, device: torch.device, budget: int | None = None
) -> Tensor:
    """The (``WORKSPACE_BUFFERS``, rows, V) workspace of :func:`exact_velocity` for ``n`` rows,
    rows = :func:`workspace_rows`."""
    rows = workspace_rows(n, vocab, dtype, device, budget)
    return torch.empty((WORKSPACE_BUFFERS, rows, vocab), dtype=dtype, device=device)


def exact_velocity(
    z: Tensor,
    probs: Tensor,
    embeddings: Tensor,
    *,
    eps: float = EPS,
    chunk: int | None = None,
    budget: int | None = None,
    logits: bool = False,
    temperature: float = 1.0,
    workspace: Tensor | None = None,
) -> Tensor:
    """sum_v p_v log_z(e_v): the exact velocity direction (paper eq. flm-marginal-vf /
    Alg. Sampling).

    Args:
        z: (..., d) unit vectors (B, L, d in the sampler); sets the compute dtype.
        probs: (..., V) posterior weights (rows sum to 1; any non-negative weights work), or
            with ``logits=True`` raw logits (any float dtype): p = softmax(logits / temperature)
            is then formed row block by row block in z's dtype, never as a whole (B, L, V) copy.
        embeddings: (V, d) unit rows e_hat_v, in z's dtype.
        chunk: rows of the flattened leading dims processed at a time; None: as many as fit
            ``budget`` bytes of workspace (``workspace_rows``; None: from the free memory).
        workspace: a (``WORKSPACE_BUFFERS``, rows, V) buffer of z's dtype to work in (its rows
            are the chunk; :func:`velocity_workspace`), kept by the caller across steps so that
            each step does not allocate (and, on CPU, page in) a new one.
    Returns:
        (..., d) tangent vectors at z, without the alpha'/(1 - alpha) factor.

    With C = z E^T, log_z(e_v) = w_v / sin w_v (e_v - C_v z) and w_v = arccos C_v, so
    sum_v p_v log_z(e_v) = (p * S) E - z sum_v p_v S_v C_v with S = w / sin w (reference
    ``sfm_compute_velocity``), and sum_v p_v S_v C_v = z . ((p * S) E), so the velocity is the
    tangent part of (p * S) E. The cost is two (N x d x V) matrix products; the (rows, V)
    workspace is allocated once and every elementwise step runs in place in it.
    """
    lead = z.shape[:-1]
    d = z.shape[-1]
    zf = z.reshape(-1, d)
    src = probs.reshape(-1, probs.shape[-1])
    n, V = src.shape
    if workspace is not None:
        ws, step = workspace, min(n, workspace.shape[1])
    else:
        if chunk is None:
            chunk = workspace_rows(n, V, z.dtype, z.device, budget)
        step = max(1, min(n, int(chunk)))
        ws = torch.empty((WORKSPACE_BUFFERS, step, V), dtype=z.dtype, device=z.device)
    one = torch.ones((), dtype=z.dtype, device=z.device)
    out = torch.empty_like(zf)
    Et = embeddings.T
    for a in range(0, n, step):
        m = min(step, n - a)
        p, c, s = ws[0, :m], ws[1, :m], ws[2, :m]
        zc = zf[a : a + m]
        if logits and src.dtype == z.dtype:  # softmax(logits / T), no staging copy
            if temperature != 1.0:
                torch.div(src[a : a + m], temperature, out=s)
            torch.softmax(s if temperature != 1.0 else src[a : a + m], -1, out=p)
        elif logits:  # softmax(logits / T) in the compute dtype, staged through s
            s.copy_(src[a : a + m])
            if temperature != 1.0:
                s.div_(temperature)
            torch.softmax(s, -1, out=p)
        else:
            p.copy_(src[a : a + m])
        torch.mm(zc, Et, out=c)  # cosines C_v
        # S = w / sin w with w = atan2(sin w, cos w), sin w = sqrt(1 - c^2) floored at eps: the
        # floor is the reference's (``omega / sin(omega).clamp(min=eps)``) at c -> -1, and at
        # c -> 1 it gives atan2(eps, c) / eps = 1 - O(eps^2), the limit 1 without a mask
        torch.addcmul(one, c, c, value=-1.0, out=s).clamp_min_(eps * eps).sqrt_()
        # w over C in place: C is not read again (the tangent part below uses z . y)
        w = torch.atan2(s, c, out=c)
        w.div_(s).mul_(p)  # p_v S_v
        # sum_v p_v S_v (e_v - C_v z) = y - (z . y) z with y = (p S) E, since
        # sum_v p_v S_v C_v = z . y: one (rows, d) product instead of a (rows, V) reduction
        o = out[a : a + m]
        torch.mm(w, embeddings, out=o)
        o.sub_(zc * (zc * o).sum(-1, keepdim=True))
    return out.reshape(*lead, d)


def stochastic_velocity(
    z: Tensor,
    logits: Tensor,
    embeddings: Tensor,
    *,
    generator: torch.Generator | None = None,
    float64: bool = True,
) -> Tensor:
    """log_z(e_hat_{x^}) with x^ ~ softmax(logits) (paper Alg. "Stochastic sampling"; the
    float64 inverse CDF of :func:`bench.method.categorical_draw`, one uniform per position: the
    same law as the Gumbel-max, without its (B, L, V) float64 noise)."""
    idx = categorical_draw(logits, generator, float64)
    return log_map(z, embeddings[idx].to(z.dtype))


def topk_path(k: int, vocab: int, dim: int) -> str:
    """Which computation :func:`topk_velocity` runs for k of ``vocab`` classes in ``dim``
    dimensions: "argmax" (k = 1), "gather" (k rows per position, (..., k, d)), "dense" (a
    scattered (..., V) distribution through the exact velocity), "exact" (k >= V)."""
    if k == 1:
        return "argmax"
    if k >= vocab:
        return "exact"
    return "gather" if k * dim <= 4 * vocab else "dense"


def topk_velocity(
    z: Tensor, logits: Tensor, embeddings: Tensor, k: int, *, eps: float = EPS
) -> Tensor:
    """Exact velocity restricted to the k largest logits, renormalised with a softmax over them
    (reference ``SFMSampler._select_topk``). k = 1: log_z(e_hat_argmax); k >= V: exact velocity."""
    V = logits.shape[-1]
    if k < 1:
        raise ValueError(f"top-k velocity: k must be >= 1, got {k}")
    return TOPK_PATHS[topk_path(k, V, embeddings.shape[-1])](z, logits, embeddings, k, eps)


def _topk_argmax(z: Tensor, logits: Tensor, embeddings: Tensor, k: int, eps: float) -> Tensor:
    """k = 1: log_z(e_hat_argmax)."""
    return log_map(z, embeddings[logits.argmax(-1)].to(z.dtype))


def _topk_all(z: Tensor, logits: Tensor, embeddings: Tensor, k: int, eps: float) -> Tensor:
    """k >= V: the exact velocity."""
    return exact_velocity(z, torch.softmax(logits.to(z.dtype), -1), embeddings, eps=eps)


def _topk_gather(z: Tensor, logits: Tensor, embeddings: Tensor, k: int, eps: float) -> Tensor:
    """The k rows of each position gathered: (..., k, d)."""
    top, idx = torch.topk(logits, k, dim=-1)
    p = torch.softmax(top.to(z.dtype), -1)
    e = embeddings[idx].to(z.dtype)
    c = torch.einsum("...d,...kd->...k", z, e).clamp_(-1.0, 1.0)
    ps = _omega_over_sin(c, eps).mul_(p)
    return torch.einsum("...k,...kd->...d", ps, e) - z * (ps * c).sum(-1, keepdim=True)


def _topk_dense(z: Tensor, logits: Tensor, embeddings: Tensor, k: int, eps: float) -> Tensor:
    """The top-k distribution scattered into (..., V), through the exact velocity."""
    top, idx = torch.topk(logits, k, dim=-1)
    p = torch.softmax(top.to(z.dtype), -1)
    dense = torch.zeros(logits.shape, dtype=z.dtype, device=z.device).scatter_(-1, idx, p)
    return exact_velocity(z, dense, embeddings, eps=eps)


#: :func:`topk_path` -> its computation
TOPK_PATHS = {
    "argmax": _topk_argmax,
    "exact": _topk_all,
    "gather": _topk_gather,
    "dense": _topk_dense,
}


def step_size(alpha_now: Tensor, alpha_next: Tensor, eps: float = EPS) -> Tensor:
    """s_n = (alpha_{n+1} - alpha_n) / (1 - alpha_n)  (paper eq. step-size; reference
    ``sfm_step_size`` non-inverted: (alpha_s - alpha_t) / clamp(1 - alpha_t, eps))."""
    return (alpha_next - alpha_now) / (1 - alpha_now).clamp_min(eps)


@dataclass
class Decoding:
    """A parsed decoding name: velocity kind (``exact`` | ``stochastic`` | ``topk``) and k."""

    velocity: str
    k: int = 0


def parse_decoding(name: str, default_k: int) -> Decoding:
    """``exact`` | ``stochastic`` | ``top1`` | ``topk`` (k from the options): the entry of
    :data:`DECODINGS`; or ``top<k>`` (any k >= 1)."""
    entry = DECODINGS.get(name)
    if entry is not None:
        return Decoding(entry.velocity, default_k if entry.k is None else entry.k)
    if name.startswith("top") and name[3:].isdigit() and int(name[3:]) >= 1:
        return Decoding("topk", int(name[3:]))
    raise ValueError(f"sflm: unknown decoding {name!r} (known: {', '.join(DECODINGS)}, top<k>)")


# --------------------------------------------------------------------------- the decodings


@dataclass
class Work:
    """What a velocity keeps across the steps of one run: the exact velocity's (rows, V)
    workspace (:func:`velocity_workspace`) within ``budget`` bytes (None: from free memory)."""

    budget: int | None = None
    workspace: Tensor | None = None


def _exact_step(z, raw, E, k, temperature, generator, float64, work: Work) -> Tensor:
    """The exact velocity, softmax fused in, block by block: no (B, L, V) copy."""
    if work.workspace is None:
        rows = z.shape[0] * z.shape[1]
        work.workspace = velocity_workspace(rows, E.shape[0], z.dtype, z.device, work.budget)
    v = exact_velocity(z, raw, E, logits=True, temperature=temperature, workspace=work.workspace)
    if z.device.type != "cpu":
        work.workspace = None
    return v


def _stochastic_step(z, raw, E, k, temperature, generator, float64, work: Work) -> Tensor:
    logits = raw.float() / temperature if temperature != 1.0 else raw
    return stochastic_velocity(z, logits, E, generator=generator, float64=float64)


def _topk_step(z, raw, E, k, temperature, generator, float64, work: Work) -> Tensor:
    return topk_velocity(z, raw.to(z.dtype) / temperature, E, k)


#: :attr:`Decoding.velocity` -> one step's velocity from the network's raw logits (the posterior
#: after temperature, paper eq. temperature-scaling)
VELOCITIES = {"exact": _exact_step, "stochastic": _stochastic_step, "topk": _topk_step}


def _final_argmax(raw: Tensor, temperature: float, generator, float64: bool) -> Tensor:
    """Reference ``noise_removal=greedy``; the float casts are exact and monotone: same argmax."""
    return raw.argmax(-1)


def _final_sample(raw: Tensor, temperature: float, generator, float64: bool) -> Tensor:
    """Reference ``ancestral``: a draw from softmax(logits / T) (float64 inverse CDF)."""
    logits = raw.float() / temperature if temperature != 1.0 else raw
    return categorical_draw(logits, generator, float64)


#: ``final_decode`` -> the last call's decode
FINAL_DECODES = {"argmax": _final_argmax, "sample": _final_sample}
#: ``final_decode`` -> whether the last call's decode reads the temperature (a draw does: a
#: temperature-free velocity such as top-1 then is not temperature-free)
FINAL_READS_TEMPERATURE = {"argmax": False, "sample": True}


def sample_sphere_flow(
    call: Callable[[Tensor, Tensor], Tensor],
    embeddings: Tensor,
    alphas: Tensor,
    prompt: Tensor,
    prompt_mask: Tensor,
    *,
    decoding: Decoding,
    temperature: float = 1.0,
    final: str = "argmax",
    float64: bool = True,
    generator: torch.Generator | None = None,
    renormalize: bool = True,
    sign: float = 1.0,
    workspace_bytes: int | None = None,
) -> Tensor:
    """Geodesic Euler sampler (paper Alg. Sampling / Stochastic sampling; reference ``SFMSampler``).

    Args:
        call: ``call(z, alpha)`` -> (n, L, V) logits: one counted backbone call at clean weight
            ``alpha`` (scalar tensor) on latents z (n, L, d).
        embeddings: (V, d) unit rows e_hat (the table the denoiser was trained with).
        alphas: (nfe + 1,) clean weights alpha_0 < ... on the time grid (alpha_nfe is unused:
            the last call only decodes).
        prompt, prompt_mask: (n, L) ids and bool; masked positions hold their clean embedding at
            every step and are returned unchanged.
        decoding: velocity kind; ``final``: ``argmax`` (reference ``noise_removal=greedy``) or
            ``sample`` (``ancestral``: a draw from softmax(logits / T)).
        renormalize: project z back onto the sphere after each move (float32 drift guard; the
            exp map keeps |z| = 1 up to rounding, so this changes nothing else).
        sign: +1 (the flow); -1 walks the velocity backwards (used only by tests to show that
            a wrong-signed sampler fails).
        workspace_bytes: memory for the exact velocity's (rows, V) workspace; None: a share of
            the free memory, capped (``workspace_rows``). Changes the chunking, not the result.
    Returns (n, L) ids. Makes exactly ``len(alphas) - 1`` calls.
    """
    nfe = len(alphas) - 1
    if nfe < 1:
        raise ValueError(f"sflm sampler: nfe must be >= 1, got {nfe}")
    n, L = prompt.shape
    dev = prompt.device
    dtype = torch.float64 if float64 else torch.float32
    E = normalize(embeddings.detach().to(dtype))
    # the noise is drawn in float64 whatever the dtype, so that a float32 run starts from the
    # float64 run's z_0 rounded (same seed -> comparable tokens; bench.perf agreement)
    z = uniform_sphere((n, L, E.shape[-1]), generator=generator, device=dev, dtype=torch.float64)
    z = z.to(dtype)
    pm = prompt_mask[..., None]
    clean = E[prompt]
    z = torch.where(pm, clean, z)
    alphas = alphas.to(torch.float64)
    x = None
    velocity = VELOCITIES[decoding.velocity]
    # the exact velocity's workspace, kept across steps on CPU (where a new one is paged in at
    # every allocation; CUDA's caching allocator reuses the block anyway, and the forward gets
    # the memory back between steps)
    work = Work(workspace_bytes)
    for k in range(nfe):
        raw = call(z, alphas[k])  # the network's logits; cast to ``dtype`` only where needed
        if k == nfe - 1:
            if final not in FINAL_DECODES:
                raise ValueError(
                    f"sflm sampler: unknown final decode {final!r} (known: "
                    f"{', '.join(FINAL_DECODES)})"
                )
            x = FINAL_DECODES[final](raw, temperature, generator, float64)
            break
        v = velocity(z, raw, E, decoding.k, temperature, generator, float64, work)
        del raw
        s = step_size(alphas[k], alphas[k + 1]).to(dtype)
        z = exp_map(z, (sign * s) * v)
        if renormalize:
            z = normalize(z)
        z = torch.where(pm, clean, z)
    return torch.where(prompt_mask, prompt, x)
