#!/usr/bin/env bash
# On the development machine: what bench/llamacpp_run.sh needs on the GPU
# machine (issue 33 item 5: llama.cpp's CUDA backend as the peer, on the same
# GGUF files, in the same run), in build-carry/ (carry it):
#   llamacpp.tar.xz   llama.cpp as vendored by llama-cpp-python 0.3.36's
#                     sdist (the first release with qwen4exp), less models/,
#                     docs/, media/ and .github/
#   peer-plans.tar.xz for each model (bench/llamacpp_models.sh: moe, q4x):
#                     plan-prefill/ (sm_90, --max-tokens 16384 --logits last:
#                     pp512 and pp16384 run in one chunk), plan-decode/
#                     (sm_90 with state: --max-tokens 64 --max-context 512
#                     --max-batch 1 --logits last: a 16-token prompt, then
#                     tg128), tokens-{512,16384,16}.txt, the synth command
#                     (SYNTH) and COMMIT; cubins only
# The plans are compiled from shapes-only GGUFs made by the same synth
# command that makes the data GGUFs there (build-peer/<model>.shapes.gguf).
# The sdist is downloaded once (build-peer/sdist/, pip download).
#   bash bench/llamacpp_prepare.sh [BUILD_DIR]     (default build)
# PEER_TINY=1: tiny presets and host plans into build-peer/tiny/ for the
# CPU dry run (bench/llamacpp_run.sh --dry-run); nothing is packed.
# PEER_OPTS="NAME=VALUE ...": codegen options of both plans (an option's
# A/B against the peer before it is the default); COMMIT records them.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}/bin
. bench/llamacpp_models.sh
for tool in strata-gguf strata-compile; do
  [ -x "$B/$tool" ] || { echo "error: $B/$tool missing: build the project first"; exit 1; }
done
TINY=${PEER_TINY:-0}
W=build-peer
[ "$TINY" = 1 ] && W=build-peer/tiny
mkdir -p "$W" build-carry

# llama.cpp: the vendored tree of llama-cpp-python 0.3.36.
SDIST=build-peer/sdist/llama_cpp_python-0.3.36.tar.gz
if [ "$TINY" != 1 ]; then
  if [ ! -f "$SDIST" ]; then
    mkdir -p build-peer/sdist
    python3 -m pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36 -d build-peer/sdist
  fi
  rm -rf build-peer/sdist/unpacked && mkdir -p build-peer/sdist/unpacked
  tar -xzf "$SDIST" -C build-peer/sdist/unpacked \
    --exclude='*/vendor/llama.cpp/models' --exclude='*/vendor/llama.cpp/docs' \
    --exclude='*/vendor/llama.cpp/media' --exclude='*/vendor/llama.cpp/.github' \
    --exclude='*/vendor/llama.cpp/.git' 'llama_cpp_python-0.3.36/vendor/llama.cpp'
  # The vendored commit (the sdist keeps the submodule's git directory):
  # llama-bench reports it as its build_commit.
  tar -xzOf "$SDIST" llama_cpp_python-0.3.36/.git/modules/vendor/llama.cpp/HEAD |
    cut -c1-10 > build-peer/sdist/unpacked/llama_cpp_python-0.3.36/vendor/llama.cpp/STRATA_LLAMA_COMMIT
  grep -q '"qwen4exp"' build-peer/sdist/unpacked/llama_cpp_python-0.3.36/vendor/llama.cpp/src/llama-arch.cpp ||
    { echo "error: this llama.cpp has no qwen4exp"; exit 1; }
  tar -C build-peer/sdist/unpacked/llama_cpp_python-0.3.36/vendor -cf - llama.cpp |
    xz -T2 -6 > build-carry/llamacpp.tar.xz
fi

target=sm_90
[ "$TINY" = 1 ] && target=host
maxpp=16384
[ "$TINY" = 1 ] && maxpp=512
for m in moe q4x; do
  args=$(peer_synth_args $m)
  rm -rf "$W/$m" && mkdir -p "$W/$m"
  # shellcheck disable=SC2086
  "$B/strata-gguf" synth $args --shapes-only -o "$W/$m.shapes.gguf" 2> >(grep -v 'selects no tensor' >&2)
  echo "$args" > "$W/$m/SYNTH"
  model=$(peer_model_file $m)
  opts=()
  for o in ${PEER_OPTS:-}; do opts+=(--codegen-opt "$o"); done
  "$B/strata-compile" "$model" --gguf "$W/$m.shapes.gguf" --max-tokens $maxpp \
    --logits last --target $target ${opts[@]+"${opts[@]}"} -o "$W/$m/plan-prefill" > /dev/null
  "$B/strata-compile" "$model" --gguf "$W/$m.shapes.gguf" --max-tokens 64 --max-context 512 \
    --max-batch 1 --logits last --target $target ${opts[@]+"${opts[@]}"} -o "$W/$m/plan-decode" > /dev/null
  find "$W/$m" \( -name '*.ptx' -o -name '*.cu' -o -name '*.hip' -o -name '*.ptxas.txt' \) -delete
  for t in $PEER_PP $PEER_TG_PROMPT; do
    [ "$t" -le $maxpp ] || continue
    python3 bench/strata_bench.py tokens --T "$t" --vocab "$(peer_vocab $m)" -o "$W/$m/tokens-$t.txt"
  done
  echo "$(git describe --always --dirty 2>/dev/null || echo unknown)${PEER_OPTS:+ $PEER_OPTS}" > "$W/$m/COMMIT"
done
if [ "$TINY" = 1 ]; then
  du -sh "$W"/*
  exit 0
fi
tar -C "$W" -cf - moe q4x | xz -T2 -6 > build-carry/peer-plans.tar.xz
# Optional: a llama-bench built here for sm_90 (static, GGML_NATIVE=OFF; see
# bench/README.md) saves the ~4 minutes of its build there.
LBIN=build-peer/llama-cuda-carry/bin/llama-bench
if [ -x "$LBIN" ]; then
  rm -rf build-peer/llama-carried && mkdir -p build-peer/llama-carried
  cp "$LBIN" build-peer/llama-carried/
  echo "llama.cpp $(cat build-peer/sdist/unpacked/llama_cpp_python-0.3.36/vendor/llama.cpp/STRATA_LLAMA_COMMIT), built $(date -u +%F) on $(hostname) with CUDA $(nvcc --version | grep -o 'release [0-9.]*' | cut -d' ' -f2), sm_90, static" > build-peer/llama-carried/BUILD
  tar -C build-peer/llama-carried -cf - . | xz -T2 -6 > build-carry/llama-bench-sm90.tar.xz
else
  rm -f build-carry/llama-bench-sm90.tar.xz
fi
ls -la build-carry/
du -ch build-carry/*.tar.xz | tail -1
