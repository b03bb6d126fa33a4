"""Exact-velocity precision, chunking and memory: the float32 path against the
float64 reference, chunked == unchunked, the automatic chunking under a memory budget, and the
float32-vs-float64 token agreement count of ``bench.perf agreement``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from bench import perf
from sflm.geometry import log_map, normalize
from sflm.sampler import (
    WORKSPACE_BUFFERS,
    exact_velocity,
    parse_decoding,
    sample_sphere_flow,
    workspace_rows,
)


def _problem(n=37, V=211, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    E = normalize(torch.randn(V, d, generator=g, dtype=torch.float64))
    z = normalize(torch.randn(n, d, generator=g, dtype=torch.float64))
    z[0] = E[3]  # exactly on a token (w = 0)
    z[1] = -E[4]  # antipodal to a token
    logits = torch.randn(n, V, generator=g) * 3
    return z, E, logits


def _brute(z, p, E):
    """sum_v p_v log_z(e_v) with a (n, V, d) tensor (paper eq. flm-marginal-vf)."""
    return (p[..., None] * log_map(z[:, None, :], E[None])).sum(1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_fused_softmax_path_matches_brute_force_in_float64(temperature):
    z, E, logits = _problem()
    p = torch.softmax(logits.double() / temperature, -1)
    ref = _brute(z[2:], p[2:], E)  # rows 0, 1: log_map's own conventions at w = 0, pi
    v = exact_velocity(z, logits, E, logits=True, temperature=temperature)
    assert torch.allclose(v[2:], ref, atol=1e-13, rtol=0)
    assert torch.allclose(exact_velocity(z, p, E), v, atol=1e-15, rtol=0)
    assert v[0].abs().max() < 1e-12 or torch.isfinite(v[0]).all()
    assert torch.isfinite(v).all()


def test_float32_path_is_close_to_float64():
    z, E, logits = _problem(n=64, V=500, d=32)
    v64 = exact_velocity(z, logits, E, logits=True, temperature=0.8)
    v32 = exact_velocity(z.float(), logits, E.float(), logits=True, temperature=0.8)
    assert v32.dtype == torch.float32
    err = (v32.double() - v64).abs().max().item()
    assert err < 1e-5, err
    assert err > 0  # really computed in float32


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_chunked_equals_unchunked(dtype):
    z, E, logits = _problem(n=50)
    z, E = z.to(dtype), E.to(dtype)
    # row 1 (exactly antipodal, velocity undefined; S = w / max(sin w, eps) there) is at the
    # mercy of the last bit of the cosine, which the matmul's blocking may change (in float64 too:
    # a one-row chunk runs a matrix-vector product, 1.4e-14 apart on some CPUs)
    rows = slice(2, None)
    tol = 1e-15 if dtype == torch.float64 else 1e-6
    full = exact_velocity(z, logits, E, logits=True, chunk=50)
    for chunk in (1, 7, 49, 1000):
        part = exact_velocity(z, logits, E, logits=True, chunk=chunk)
        assert torch.allclose(part[rows], full[rows], atol=tol, rtol=0)
    by_budget = exact_velocity(z, logits, E, logits=True, budget=3 * 211 * 4 * z.element_size())
    assert torch.allclose(by_budget[rows], full[rows], atol=tol, rtol=0)


def _staged_velocity(z, logits, E, temperature, chunk):
    """exact_velocity as it was before the unstaged softmax: the logits copied into the
    workspace, divided there, then the softmax (the test oracle, bit for bit)."""
    out = []
    for a in range(0, z.shape[0], chunk):
        zc = z[a : a + chunk]
        s = logits[a : a + chunk].to(z.dtype).clone()
        if temperature != 1.0:
            s.div_(temperature)
        p = torch.softmax(s, -1)
        c = zc @ E.T
        sin = torch.addcmul(torch.ones((), dtype=z.dtype), c, c, value=-1.0)
        sin = sin.clamp_min_(1e-12).sqrt_()
        w = torch.atan2(sin, c).div_(sin).mul_(p)
        o = w @ E
        out.append(o - zc * (zc * o).sum(-1, keepdim=True))
    return torch.cat(out)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_from_the_logits_is_the_staged_one_bit_for_bit(dtype, temperature):
    """Logits of z's dtype go straight into the softmax (no staging copy), others are staged:
    either way the velocity is the staged computation's, bit for bit, with a workspace kept
    across calls or not."""
    from sflm.sampler import velocity_workspace

    z, E, logits = _problem(n=40)
    z, E = z.to(dtype), E.to(dtype)
    for lg in (logits.to(dtype), logits):  # same dtype as z / float32 logits
        ref = _staged_velocity(z, lg, E, temperature, chunk=16)
        v = exact_velocity(z, lg, E, logits=True, temperature=temperature, chunk=16)
        assert torch.equal(v, ref)
        ws = velocity_workspace(40, 211, dtype, z.device, budget=16 * 211 * WORKSPACE_BUFFERS * 8)
        assert ws.shape == (WORKSPACE_BUFFERS, 16 if dtype == torch.float64 else 20, 211)
        ws = ws[:, :16]  # chunks of 16 rows, as the oracle's
        for _ in range(2):  # the same workspace twice: nothing carried over
            v_ws = exact_velocity(z, lg, E, logits=True, temperature=temperature, workspace=ws)
            assert torch.equal(v_ws, ref)


def test_workspace_rows_accounting():
    cpu = torch.device("cpu")
    per_row = 1000 * WORKSPACE_BUFFERS * 8
    assert workspace_rows(100, 1000, torch.float64, cpu, budget=10 * per_row) == 10
    assert workspace_rows(100, 1000, torch.float64, cpu, budget=10 * per_row - 1) == 9
    assert workspace_rows(100, 1000, torch.float32, cpu, budget=10 * per_row) == 20
    assert workspace_rows(100, 1000, torch.float64, cpu, budget=1) == 1  # at least one row
    # at most half the rows: the workspace stays within 2 (B, L, V) buffers
    assert workspace_rows(100, 1000, torch.float64, cpu, budget=1 << 40) == 50
    assert workspace_rows(101, 1000, torch.float64, cpu, budget=1 << 40) == 51
    assert workspace_rows(1, 1000, torch.float64, cpu, budget=1 << 40) == 1
    auto = workspace_rows(10**9, 50_000, torch.float64, cpu)  # free-memory default, capped
    assert 1 <= auto * 50_000 * WORKSPACE_BUFFERS * 8 <= 256 << 20


def test_sampler_tokens_do_not_depend_on_the_workspace():
    V, d, n, L = 40, 12, 3, 20
    g = torch.Generator().manual_seed(5)
    E = normalize(torch.randn(V, d, generator=g))
    W = torch.randn(d, V, generator=g) * 4

    def call(z, a):
        return (z.float() @ W) * (1 + a.float())

    prompt = torch.randint(0, V, (n, L), generator=g)
    pm = torch.rand(n, L, generator=g) < 0.3
    alphas = torch.linspace(0.0, 0.9, 9, dtype=torch.float64)

    def run(ws, f64=True, temperature=0.9):
        return sample_sphere_flow(
            call,
            E,
            alphas,
            prompt,
            pm,
            decoding=parse_decoding("exact", 3),
            temperature=temperature,
            float64=f64,
            generator=torch.Generator().manual_seed(1),
            workspace_bytes=ws,
        )

    ref = run(None)
    assert torch.equal(run(V * WORKSPACE_BUFFERS * 8), ref)  # one row at a time
    assert torch.equal(run(7 * V * WORKSPACE_BUFFERS * 8), ref)
    # float32 starts from the float64 noise (rounded), so with this well-separated toy model
    # it decodes the same tokens
    assert torch.equal(run(None, f64=False), ref)


def test_auto_chunking_bounds_the_peak_memory():
    """Fresh process, |V| = 16,384, d = 32, 256 rows: one (rows, V) float64 buffer is 32 MiB.
    With a 4 MiB budget the extra peak resident memory of exact_velocity (logits in, softmax
    fused) stays below half a buffer; one chunk of all rows needs its 4 workspace buffers."""
    code = textwrap.dedent(
        """
        import sys, torch
        torch.set_num_threads(1)
        from sflm.sampler import exact_velocity
        def status(key):  # bytes, from /proc/self/status (as bench.perf's CPU peak)
            for line in open('/proc/self/status'):
                if line.startswith(key + ':'):
                    return int(line.split()[1]) * 1024
        N, V, d = 256, 16384, 32
        E = torch.randn(V, d, dtype=torch.float64); E.div_(E.norm(dim=-1, keepdim=True))
        z = torch.randn(N, d, dtype=torch.float64); z.div_(z.norm(dim=-1, keepdim=True))
        lg = torch.randn(N, V)
        exact_velocity(z[:4], lg[:4, :16], E[:16], logits=True)  # warm up kernels
        try:  # reset the peak resident set (VmHWM), Linux >= 4.0
            open('/proc/self/clear_refs', 'w').write('5')
        except OSError:
            print('skip')
            sys.exit(0)
        before = status('VmRSS')
        if sys.argv[1] == 'budget':
            exact_velocity(z, lg, E, logits=True, budget=4 << 20)
        else:
            exact_velocity(z, lg, E, logits=True, chunk=N)
        print((status('VmHWM') - before) / (N * V * 8))
        """
    )

    def buffers(mode):
        res = subprocess.run(
            [sys.executable, "-c", code, mode], capture_output=True, text=True, timeout=300
        )
        assert res.returncode == 0, res.stderr
        out = res.stdout.strip().splitlines()[-1]
        if out == "skip":
            pytest.skip("cannot reset the peak resident set (/proc/self/clear_refs)")
        return float(out)

    small = buffers("budget")
    assert small < 0.5, f"budget 4 MiB: {small:.2f} (B, L, V) buffers of extra memory"
    whole = buffers("whole")
    assert 3.0 < whole < 4.5, f"one chunk: {whole:.2f} buffers (expected the 4-buffer workspace)"


def test_token_agreement_counts_positions():
    prompt = torch.zeros(2, 5, dtype=torch.long)
    pmask = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    base = torch.arange(10).reshape(2, 5)

    def sample(p, m, f64, gen):
        out = base.clone()
        if not f64:
            out[0, 3] = 99  # one generated position differs
            out[1, 0] = 98  # and one prompt position
        return out

    res = perf.token_agreement(sample, prompt, pmask, seed=0)
    assert res["positions"] == 10 and res["agree"] == 8
    assert res["generated"] == 7 and res["generated_agree"] == 6
    assert torch.equal(res["float64_ids"], base) and res["float32_ids"][0, 3] == 99


def test_agreement_needs_a_trained_run(tmp_path, capsys):
    assert perf.main(["agreement"]) == 2
    assert "--runs" in capsys.readouterr().err
    assert perf.main(["agreement", "--runs", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra,option,asked,expected",
    [
        (1, "auto", True, False),  # above the size: float32 by default
        (1, "sample", True, True),  # unless the option follows sample.float64
        (0, "auto", True, True),  # at the size: as asked
        (1, "auto", False, False),
        (0, "sample", False, False),
    ],
)
def test_sampler_dtype_follows_the_vocabulary_size(monkeypatch, extra, option, asked, expected):
    """S-FLM samples in float32 above FLOAT32_ABOVE_VOCAB tokens (``velocity_dtype: auto``, the
    default), else in the dtype ``float64`` asks for."""
    from helpers import make_model

    import sflm.method as sm

    m, bb = make_model("sflm", {"velocity_dtype": option}, vocab=sm.FLOAT32_ABOVE_VOCAB + extra)
    seen = {}
    monkeypatch.setattr(
        sm, "sample_sphere_flow", lambda *a, **k: seen.update(k) or torch.zeros(1, 16).long()
    )
    prompt = torch.zeros(1, 16, dtype=torch.long)
    m.sample(bb, prompt, prompt.bool(), nfe=2, float64=asked)
    assert seen["float64"] is expected
    assert m.float32_by_size() is (extra == 1 and option == "auto")


def test_velocity_dtype_option_is_omitted_at_its_default():
    """Declared ``omit_default``: at ``auto`` the cells planned before it existed keep their ids.
    (Not a ``sampling_options`` entry: bench.plan splits those off the full options, which an
    omitted key is not in; so ``velocity_dtype: sample`` is another model cell.)"""
    import dataclasses

    from sflm.method import SFLMOptions

    f = {f.name: f for f in dataclasses.fields(SFLMOptions)}["velocity_dtype"]
    assert f.default == "auto" and f.metadata.get("omit_default") is True
