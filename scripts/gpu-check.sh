#!/usr/bin/env bash
# GPU checks (run on a CUDA machine from the repo root; not part of CI):
#   1. bench.perf train + sample on the paper's Sudoku DiT ("tiny", 9x9 shapes), bf16 autocast;
#   2. bench.perf velocity at |V| = 49,152, d = 768, L = 512 (batch 1 and 32), float64 and float32;
#   3. the CPU quickstart sweep end to end on the GPU (trainer picks bf16-mixed), then the report.
# Usage: bash scripts/gpu-check.sh OUTDIR [QUICKSTART_TIMEOUT_S]
set -uo pipefail
out=${1:?usage: gpu-check.sh OUTDIR [QUICKSTART_TIMEOUT_S]}
qs_timeout=${2:-240}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
$py -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)" | tee -a "$out/gpu.txt"
$py -m bench.perf train sample --size tiny --batch 256 --steps 30 --warmup 5 --nfe 16 \
  --out "$out/perf_tiny.json" 2>&1 | tee "$out/perf.log"
$py -m bench.perf velocity --vel-steps 5 --out "$out/perf_velocity_b1.json" 2>&1 | tee -a "$out/perf.log"
$py -m bench.perf velocity --vel-steps 5 --vel-batch 32 --out "$out/perf_velocity_b32.json" 2>&1 | tee -a "$out/perf.log"
$py -m bench.perf velocity --vel-steps 5 --vel-batch 32 --vel-float32 --out "$out/perf_velocity_b32_f32.json" 2>&1 | tee -a "$out/perf.log"
start=$(date +%s)
timeout "$qs_timeout" $py -m bench.sweep sweeps/quickstart.yaml --results-dir /tmp/gpu-qs --no-progress > "$out/quickstart.log" 2>&1
echo "quickstart rc=$? in $(( $(date +%s) - start )) s" | tee -a "$out/perf.log"
$py -m bench.report --results-dir /tmp/gpu-qs --out /tmp/gpu-qs/report >> "$out/quickstart.log" 2>&1
cp /tmp/gpu-qs/report/sudoku.md /tmp/gpu-qs/report/training.md "$out/" 2>/dev/null
tail -5 "$out/quickstart.log"
