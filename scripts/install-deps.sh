#!/usr/bin/env bash
# Installs every build and test dependency of strata-compile on Debian 12, idempotently.
# Debian packages: toolchain, LLVM 19 (device code, lit/FileCheck, fuzzer runtime), fmt, gtest, JSON.
# PyPI packages: test oracles (gguf, numpy) and lit.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

DEB_PKGS=(
  build-essential cmake ninja-build pkg-config python3 python3-pip python3-venv
  clang-19 lld-19 llvm-19-tools llvm-19-dev libclang-rt-19-dev clang-format-19
  libfmt-dev libgtest-dev nlohmann-json3-dev
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
PIP_PKGS=(gguf numpy lit)
need_pip=0
for m in gguf numpy lit; do
  "$PY" -c "import $m" 2>/dev/null || need_pip=1
done
if [ $need_pip -eq 1 ]; then
  echo "install-deps: installing PyPI packages: ${PIP_PKGS[*]}"
  "$PY" -m pip install -q --disable-pip-version-check "${PIP_PKGS[@]}" 2>/dev/null ||
    "$PY" -m pip install -q --disable-pip-version-check --break-system-packages "${PIP_PKGS[@]}"
else
  echo "install-deps: PyPI packages present"
fi
