"""The shipped throughput tables (:mod:`bench.cost.table`'s schema), one per device kind, each
section with its source. ``python -m bench.perf calibrate`` measures the same entry on the
machine at hand; a calibrated entry wins over these.

Sources (each entry's ``measured`` says when, in one line):

- ``cpu``: ``python -m bench.perf calibrate`` on the project's 2-core AMD EPYC VM (AVX-512), one
  thread (the quickstart's jobs: two at once, one thread each; other thread counts are scaled,
  :func:`bench.cost.table.load`), and the quickstart's measured scoring times. Every section
  but the sampling factors is the mean of two idle runs (``cpu_calibrate_1t*.json`` in
  docs/measurements/); the sampling factors (``methods.sample``) are copied from four later runs
  on the same shapes with a job's huge pages, the median of each number, after the samplers changed
  (docs/measurements/sampling_factors.md);
- ``h200``: the project's H200 runs (docs/measurements/gpu_h200_perf_tiny.json: train steps/s and
  sampling seconds per call of every model, tiny DiT, batch 256, bf16;
  gpu_h200_perf_velocity_b1 / b32 / b32_f32.json: the small DiT's forward at batch 1 and 32 and
  S-FLM's exact velocity at |V| 49,152);
- ``h100``: the paper's training-cost table (tab:training-cost: steps/s on 8 H100s, TinyGSM,
  small DiT, L 512, batch 64 per GPU, bf16) for training; sampling as the H200's, its compute
  scaled by 0.9 (same GH100 compute, slower memory: 3.35 vs 4.8 TB/s);
- ``a100``: the H100 entry scaled by the A100 / H100 dense bf16 ratio (312 / 989 TFLOP/s,
  the vendor's data sheets).

Large-|V| sampling factors of the categorical samplers on a GPU (MDLM, Duo, CANDI, FLM at
|V| = 49,152) were not measured: they are estimated from memory traffic (about 120 bytes per
(B, L, |V|) element in float64, 60 in float32: the Gumbel-max cast, uniforms, two logs, the
sum and the argmax) at the HBM bandwidth, relative to the measured forward of that shape.
"""

from __future__ import annotations

import copy

#: forward-equivalents per sampling call, [small |V|, large |V|] per dtype: the head shares the
#: pairs were measured at are each entry's ``methods.head_share``
_GPU_SAMPLE = {
    # tiny DiT, |V| 13, batch 256 (perf_tiny: s_per_call / the fitted bare forward, 16.7 ms);
    # large |V|: the traffic estimate of the module docstring at batch 32, L 512, |V| 49,152
    "ar|sample": {"float64": [1.65, 1.65], "float32": [1.65, 1.65]},
    "ar|greedy": {"float64": [1.6, 1.6], "float32": [1.6, 1.6]},
    "mdlm|ancestral": {"float64": [1.38, 2.0], "float32": [1.38, 1.5]},
    "mdlm|greedy": {"float64": [1.3, 1.4], "float32": [1.3, 1.3]},
    "duo|ancestral": {"float64": [1.38, 2.1], "float32": [1.38, 1.55]},
    "duo|greedy": {"float64": [1.3, 1.5], "float32": [1.3, 1.35]},
    "candi|cached": {"float64": [1.43, 2.2], "float32": [1.43, 1.65]},
    "candi|nocache": {"float64": [1.43, 2.2], "float32": [1.43, 1.65]},
    "candi/pure-gaussian|continuous": {"float64": [1.4, 1.8], "float32": [1.4, 1.5]},
    "flm|euler": {"float64": [1.41, 2.4], "float32": [1.41, 1.9]},
    # S-FLM: small |V| from perf_tiny; large |V|: 1 + the velocity step over the forward at
    # batch 32 (4.56 in float64, 1.23 in float32; gpu_h200_perf_velocity_b32*.json)
    "sflm|exact": {"float64": [1.45, 5.56], "float32": [1.45, 2.23]},
    "sflm|stochastic": {"float64": [1.45, 5.56], "float32": [1.45, 2.23]},
    "sflm|top1": {"float64": [1.4, 4.5], "float32": [1.4, 1.9]},
    "sflm|topk": {"float64": [1.45, 5.0], "float32": [1.45, 2.1]},
    # the S-arch: its forward over the DiT's (perf_tiny: 34.5 vs 23.0 ms per call), then the
    # DiT's velocity on top
    "sflm/sarch|exact": {"float64": [2.07, 6.2], "float32": [2.07, 2.85]},
    "sflm/sarch|stochastic": {"float64": [2.07, 6.2], "float32": [2.07, 2.85]},
    "sflm/sarch|top1": {"float64": [2.0, 5.1], "float32": [2.0, 2.5]},
    "sflm/sarch|topk": {"float64": [2.07, 5.6], "float32": [2.07, 2.7]},
}
#: head shares of the two shapes: the tiny DiT at |V| 13, L 180; the small DiT at |V| 49,152,
#: L 512 (the output layer's part of a forward's FLOPs, bench.cost.model.Net.head_share)
_GPU_SHARES = [0.00025, 0.286]

_GPU_SCORERS = {
    "item_s": 1e-4,
    "cell_s": 0.5,
    "sandbox_cpu_s": 0.022,
    "genppl_load_s": 30.0,
    "genppl_tokens_per_s": 60_000.0,
    "tokenizer_load_s": 2.0,
    "source": "sandbox: the CPU rate (128 programs in 1.4 s on 2 cores, docs/gsm8k-sandbox.md); "
    "Gen. PPL: GPT-2 large's 1.5 GFLOP per token at 1e14 FLOP/s; the rest estimates",
}

H200 = {
    "kind": "h200",
    "threads": 0,
    "device_name": "cuda: NVIDIA H200",
    "source": "the project's H200 runs (docs/measurements/gpu_h200_*.json)",
    "measured": "2026-11-26 (the H200 runs)",
    "memory_bytes": 143_771 * 2**20,
    "forward": {
        "overhead_s": 0.0083,
        "flops_per_s": 2.9e14,
        "source": "small DiT forward at |V| 49,152, L 512: 8.78 ms at batch 1, 23.1 ms at batch 32 "
        "(gpu_h200_perf_velocity_b1 / b32.json)",
    },
    "train": {
        "overhead_s": 0.01,
        "flops_per_s": 1.43e14,
        "param_s": 0.0,
        "source": "MDLM 16.3 steps/s, tiny DiT, batch 256, L 180, bf16 (gpu_h200_perf_tiny.json)",
    },
    "trainer": {
        "step_s": 0.005,
        "start_s": 20.0,
        "source": "estimate (Lightning hooks and the EMA per step; set-up and CUDA start once)",
    },
    "job": {
        "start_s": 15.0,
        "load_bytes_per_s": 1e9,
        "write_bytes_per_s": 1e9,
        "download_bytes_per_s": 1e8,
        "source": "estimate (imports and CUDA start; a shared file system at 1 GB/s)",
    },
    "methods": {
        "head_share": _GPU_SHARES,
        "sample": _GPU_SAMPLE,
        # steps/s relative to MDLM's (gpu_h200_perf_tiny.json vs_mdlm, inverted)
        "train": {
            "ar": [0.81, 0.81],
            "mdlm": [1.0, 1.0],
            "duo": [1.0, 1.0],
            "candi": [1.1, 1.1],
            "candi/pure-gaussian": [1.1, 1.1],
            "flm": [1.0, 1.0],
            "sflm": [1.125, 1.125],
            "sflm/sarch": [2.23, 2.23],
        },
        "source": "gpu_h200_perf_tiny.json (train vs_mdlm, sample s_per_call), "
        "gpu_h200_perf_velocity_b32*.json (S-FLM at |V| 49,152); large-|V| categorical "
        "samplers: memory-traffic estimates",
    },
    "scorers": _GPU_SCORERS,
}


def _scaled(entry: dict, kind: str, name: str, rate: float, memory: int, source: str) -> dict:
    out = copy.deepcopy(entry)
    out.update(kind=kind, device_name=name, memory_bytes=memory, source=source)
    for sec in ("forward", "train"):
        out[sec]["flops_per_s"] = entry[sec]["flops_per_s"] * rate
        out[sec]["source"] = f"{entry[sec]['source']}, x {rate:g} ({source})"
    return out


H100 = _scaled(H200, "h100", "cuda: NVIDIA H100 80GB HBM3", 0.9, 80 * 2**30,
               "the H200 entry, compute x 0.9 (same GH100 compute, 3.35 vs 4.8 TB/s)")  # fmt: skip
# training from the paper's table: MDLM 3.0 steps/s on TinyGSM (small DiT, |V| 49,153, L 512,
# batch 64 per H100): 3 x 64 x 512 x 264 MFLOP per position = 2.6e13 FLOP per step in 0.333 s
H100["train"] = {
    "overhead_s": 0.02,
    "flops_per_s": 8.3e13,
    "param_s": 0.0,
    "source": "the paper's training-cost table: MDLM / Duo 3.0 steps/s on TinyGSM (8 H100s, small "
    "DiT, L 512, batch 64 per GPU, bf16)",
}
H100["methods"] = copy.deepcopy(H200["methods"])
# the paper's steps/s relative to MDLM's (TinyGSM column): AR 5.4, S-FLM 4.2, S-FLM + S-arch 2.6,
# CANDI 3.0 (23.5 h), FLM 3.2 (21.7 h)
H100["methods"]["train"] = {
    "ar": [0.556, 0.556],
    "mdlm": [1.0, 1.0],
    "duo": [1.0, 1.0],
    "candi": [1.03, 1.03],
    "candi/pure-gaussian": [1.03, 1.03],
    "flm": [0.95, 0.95],
    "sflm": [0.72, 0.72],
    "sflm/sarch": [1.17, 1.17],
}
H100["methods"]["source"] = (
    "training: the paper's training-cost table (steps/s relative to MDLM's, TinyGSM); sampling: "
    + H200["methods"]["source"]
)

H100["measured"] = "training from the paper's table, sampling 2026-11-26 on an H200 (scaled)"

A100 = _scaled(H100, "a100", "cuda: NVIDIA A100-SXM4-80GB", 312 / 989, 80 * 2**30,
               "the H100 entry x 312 / 989 (dense bf16 TFLOP/s, vendor data sheets)")  # fmt: skip
A100["forward"]["overhead_s"] = 0.01
A100["measured"] = "never (the H100 entry scaled by the data sheets)"
A100["train"]["overhead_s"] = 0.025

#: one thread of the project's 2-core AMD EPYC VM (AVX-512), idle: the mean of two runs of ``python
#: -m bench.perf calibrate --threads 1`` (CPU seconds; the heap of a job, see
#: :mod:`bench.perf.calibrate`); factors [small |V|, large |V|] at head shares 0.007 (cpu-mini,
#: |V| 12, L 40) and 0.831 (cpu-mini, |V| 8,192, L 32); docs/measurements/cost_model.md
_CPU_TRAIN = {
    "ar": {"factor": [0.992, 0.978], "step_s": 2.06e-06},
    "candi": {"factor": [1.04, 1.43], "step_s": 0.00021},
    "candi/pure-gaussian": {"factor": [0.935, 1.26], "step_s": 0.00307},
    "duo": {"factor": [1.02, 1.18], "step_s": 0.000858},
    "flm": {"factor": [0.996, 1.37], "step_s": 0.000545},
    "mdlm": {"factor": [1.01, 1.01], "step_s": 0.0},
    "sflm": {"factor": [1.07, 0.915], "step_s": 0.00197},
    "sflm/sarch": {"factor": [1.32, 1.16], "step_s": 0.000268},
}
#: the sampling factors of the samplers that draw only where their law keeps a draw: each
#: number the median of four runs of ``python -m bench.perf calibrate --threads 1`` (the shapes
#: above, a job's huge pages: GLIBC_TUNABLES=glibc.malloc.hugetlb=1) on the same VM under load
#: (other work beside it; the factors are ratios to a bare forward timed right before them in
#: the same run); docs/measurements/sampling_factors.md
_CPU_SAMPLE = {
    "ar|greedy": {"float64": [0.509, 0.808], "float32": [0.509, 0.726], "call_s": 0.0},
    "ar|sample": {"float64": [0.521, 1.27], "float32": [0.521, 1.04], "call_s": 0.000102},
    "candi/pure-gaussian|continuous": {
        "float64": [1.0, 7.87],
        "float32": [1.0, 3.63],
        "call_s": 0.000698,
    },
    "candi|cached": {"float64": [1.06, 3.03], "float32": [1.06, 1.77], "call_s": 0.000639},
    "candi|nocache": {"float64": [1.14, 7.81], "float32": [1.14, 4.64], "call_s": 0.00111},
    "duo|ancestral": {"float64": [1.06, 1.86], "float32": [1.06, 1.8], "call_s": 0.000427},
    "duo|greedy": {"float64": [1.05, 1.54], "float32": [1.05, 1.53], "call_s": 0.000563},
    "duo|psi": {"float64": [1.08, 1.91], "float32": [1.08, 1.71], "call_s": 0.000395},
    "duo|psi-greedy": {"float64": [0.969, 1.47], "float32": [0.969, 1.69], "call_s": 0.000921},
    "flm|euler": {"float64": [1.24, 3.81], "float32": [1.24, 2.2], "call_s": 0.0},
    "mdlm|ancestral": {"float64": [1.05, 1.3], "float32": [1.05, 1.17], "call_s": 0.000456},
    "mdlm|cached": {"float64": [0.979, 1.16], "float32": [0.979, 1.12], "call_s": 0.00055},
    "mdlm|confidence": {"float64": [1.02, 1.62], "float32": [1.02, 1.54], "call_s": 0.000664},
    "mdlm|entropy": {"float64": [1.01, 1.66], "float32": [1.01, 1.68], "call_s": 0.000785},
    "mdlm|factor": {"float64": [0.98, 1.54], "float32": [0.98, 1.6], "call_s": 0.000958},
    "mdlm|greedy": {"float64": [1.06, 1.16], "float32": [1.06, 1.18], "call_s": 0.000543},
    "mdlm|margin": {"float64": [1.0, 1.77], "float32": [1.0, 1.85], "call_s": 0.000621},
    "mdlm|remdm-cap": {"float64": [0.959, 1.11], "float32": [0.959, 1.15], "call_s": 0.00141},
    "mdlm|remdm-conf": {"float64": [0.956, 1.36], "float32": [0.956, 1.09], "call_s": 0.00166},
    "mdlm|remdm-loop": {"float64": [0.907, 0.995], "float32": [0.907, 1.06], "call_s": 0.00178},
    "mdlm|remdm-rescale": {"float64": [1.01, 1.07], "float32": [1.01, 1.21], "call_s": 0.00112},
    "mdlm|threshold": {"float64": [0.965, 1.68], "float32": [0.965, 1.65], "call_s": 0.000762},
    "sflm/sarch|exact": {"float64": [1.09, 4.95], "float32": [1.09, 3.05], "call_s": 0.00104},
    "sflm/sarch|stochastic": {"float64": [1.09, 1.82], "float32": [1.09, 1.61], "call_s": 0.000777},
    "sflm/sarch|top1": {"float64": [1.05, 1.68], "float32": [1.05, 1.52], "call_s": 0.000968},
    "sflm/sarch|topk": {"float64": [1.09, 2.02], "float32": [1.09, 1.55], "call_s": 0.00116},
    "sflm|exact": {"float64": [1.08, 4.85], "float32": [1.08, 2.66], "call_s": 0.000818},
    "sflm|stochastic": {"float64": [1.02, 1.92], "float32": [1.02, 1.74], "call_s": 0.000943},
    "sflm|top1": {"float64": [1.06, 1.6], "float32": [1.06, 1.3], "call_s": 0.00093},
    "sflm|topk": {"float64": [1.02, 1.71], "float32": [1.02, 1.56], "call_s": 0.00108},
}
_CALIBRATED = "python -m bench.perf calibrate --threads 1 on the project's 2-core AMD EPYC VM"

CPU = {
    "kind": "cpu",
    "threads": 1,
    "device_name": "cpu: AMD EPYC (2 cores, AVX-512)",
    "source": f"{_CALIBRATED} (2026-11-27, idle, mean of two runs; the sampling factors "
    "2026-12-02 under load, median of four); other thread counts scaled",
    "measured": "2026-11-27 (idle); sampling factors 2026-12-02 (under load)",
    "memory_bytes": 8 * 2**30,
    "forward": {"overhead_s": 0.000569, "flops_per_s": 6.1e10, "source": _CALIBRATED},
    "train": {
        "overhead_s": 0.00492,
        "flops_per_s": 6.39e10,
        "param_s": 2.38e-9,
        "source": _CALIBRATED,
    },
    "trainer": {"step_s": 0.0078, "start_s": 0.09, "source": _CALIBRATED},
    "job": {
        "start_s": 5.07,
        "load_bytes_per_s": 1.2e10,
        "write_bytes_per_s": 3.36e8,
        "download_bytes_per_s": 5e7,
        "source": f"{_CALIBRATED} (download: an estimate)",
    },
    "methods": {
        "head_share": [0.00703, 0.831],
        "sample": _CPU_SAMPLE,
        "train": _CPU_TRAIN,
        "source": f"{_CALIBRATED}: training 2026-11-27 (idle), sampling 2026-12-02 (under load)",
    },
    "scorers": {
        "item_s": 1e-4,
        "cell_s": 0.02,
        "sandbox_cpu_s": 0.0165,
        "genppl_load_s": 0.717,
        "genppl_tokens_per_s": 324.0,
        "tokenizer_load_s": 1.0,
        "source": f"{_CALIBRATED} (--calib-genppl: the offline SmolLM2 reference LM); Sudoku "
        "scoring: the quickstart's score_s, 0.02-0.05 s per 256-puzzle cell "
        "(docs/measurements/quickstart.md); tokenizer: a cached or offline load (where the hub "
        "is unreachable and HF_HUB_OFFLINE is unset, each load waits out ~47 s of retries: "
        "calibrate --calib-tokenizer measures it)",
    },
}

#: kind -> entry
DEFAULTS: dict[str, dict] = {"cpu": CPU, "a100": A100, "h100": H100, "h200": H200}
