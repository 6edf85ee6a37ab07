#!/usr/bin/env bash
# Installs every build and test dependency of strata-compile on Debian 12, idempotently.
# Debian packages: toolchain, LLVM 19 (device code, lit/FileCheck, fuzzer runtime), fmt, gtest, JSON,
# PCRE2 (the tokenizer's pre-tokenizer regexes), cpp-httplib (strata-serve's HTTP).
# PyPI packages: test oracles (gguf, numpy), lit, and openai (the client that drives strata-serve's
# tests).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

DEB_PKGS=(
  build-essential cmake ninja-build pkg-config python3 python3-pip python3-venv
  clang-19 lld-19 llvm-19-tools llvm-19-dev libclang-rt-19-dev clang-format-19
  libfmt-dev libgtest-dev nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev
)

missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: Debian packages present"
fi

PY=${PYTHON:-python3}
PIP_PKGS=(gguf numpy lit openai matplotlib)
need_pip=0
for m in gguf numpy lit openai matplotlib; do
  "$PY" -c "import $m" 2>/dev/null || need_pip=1
done
if [ $need_pip -eq 1 ]; then
  echo "install-deps: installing PyPI packages: ${PIP_PKGS[*]}"
  "$PY" -m pip install -q --disable-pip-version-check "${PIP_PKGS[@]}" 2>/dev/null ||
    "$PY" -m pip install -q --disable-pip-version-check --break-system-packages "${PIP_PKGS[@]}"
else
  echo "install-deps: PyPI packages present"
fi

# llama.cpp, through llama-cpp-python, is the logits oracle of test/golden/llama_logits.py.
# pip builds llama.cpp from source: CPU only, portable x86-64 (AVX2/FMA/F16C, no -march=native),
# no BLAS, no OpenMP, no llava/mtmd, tools, tests or server. Pinned so goldens stay reproducible.
LLAMA_CPP_PYTHON=llama-cpp-python==0.3.36
if "$PY" -c "import llama_cpp" 2>/dev/null; then
  echo "install-deps: llama-cpp-python present"
else
  echo "install-deps: installing $LLAMA_CPP_PYTHON: builds llama.cpp from source (CPU only), takes several minutes"
  llama_log=$(mktemp)
  llama_install() {
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_BLAS=OFF -DGGML_OPENMP=OFF -DGGML_CCACHE=OFF \
-DGGML_CUDA=OFF -DGGML_HIP=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DLLAVA_BUILD=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      "$PY" -m pip install -q --disable-pip-version-check --no-cache-dir "$@" "$LLAMA_CPP_PYTHON" >"$llama_log" 2>&1
  }
  # Retry with --break-system-packages only where pip refused an externally managed Python,
  # so a failed build is not repeated.
  if ! llama_install && { ! grep -q externally-managed-environment "$llama_log" ||
                          ! llama_install --break-system-packages; }; then
    tail -n 40 "$llama_log" >&2
    echo "install-deps: building $LLAMA_CPP_PYTHON failed (full log: $llama_log)" >&2
    exit 1
  fi
  rm -f "$llama_log"
fi
