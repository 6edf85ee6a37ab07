#!/usr/bin/env bash
# The main job on the embedded default: parse and verify the bundled qwen3
# description, bind it to a tiny qwen3 header (key/value stand-in for a GGUF
# file), expand it into one flat function, and print it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >/dev/null
export CC=clang-19 CXX=clang++-19
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target strata-opt >/dev/null
model=${1:-models/qwen3.strata}
meta=${2:-test/Inputs/qwen3-tiny.kv}
echo "# strata-opt $model --meta $meta --pass-pipeline=expand" >&2
build/bin/strata-opt "$model" --meta "$meta" --pass-pipeline=expand
