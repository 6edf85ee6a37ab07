#!/usr/bin/env bash
# On the development machine (clang-19; ptxas for cubins): what bench/run.sh
# needs on the GPU machine, in build-full/ (carry it there with .whl/):
#   full.gguf        the full-size qwen4exp as shapes only (48 layers, 512
#                    experts, hidden 2560; the UD-IQ4_XS-like quant mix of
#                    test/Tools/strata-gguf-synth-shapes-only.test)
#   plan-last/       its sm_90 plan for T <= 16384, last-position logits
#                    (cubins only: PTX and sources are deleted)
#   tokens-T.txt     prompts of T = 1024, 4096, 16058, 16384 ids
# Only what is missing is made; nothing there is replaced. Also fetches the
# flash-linear-attention wheel into .whl/ when it is not there (pip download
# from PyPI; the GPU machine installs it with --no-index).
#   bash bench/prepare.sh [BUILD_DIR] [OUT_DIR]     (defaults: build, build-full)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}/bin
OUT=${2:-build-full}
FLA_VERSION=0.6.0
TYPES='q4_k,*hc_*down*=f16,*hc_*up*=f16,output.weight=q6_k,per_layer_token_embd*=q8_0,*ple_key*=q8_0,*ple_value*=q8_0,*attn_v*=q6_k,*indexer*=q8_0,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl,*ffn_down_shexp*=q8_0'
for tool in strata-gguf strata-compile; do
  [ -x "$B/$tool" ] || { echo "error: $B/$tool missing: build the project first (cmake --build ${1:-build})"; exit 1; }
done
mkdir -p "$OUT"
if [ ! -f "$OUT/full.gguf" ]; then
  "$B/strata-gguf" synth --arch qwen4exp --preset full --seed 0 --shapes-only --types "$TYPES" -o "$OUT/full.gguf"
fi
if [ ! -f "$OUT/plan-last/plan.json" ]; then
  "$B/strata-compile" models/qwen4exp.strata --gguf "$OUT/full.gguf" --max-tokens 16384 --target sm_90 \
    --logits last -o "$OUT/plan-last" > /dev/null
  # The commit the plan was compiled at, for the results files.
  (git describe --always --dirty 2>/dev/null || echo unknown) > "$OUT/plan-last/COMMIT"
  if ls "$OUT"/plan-last/kernels/*.cubin > /dev/null 2>&1; then
    find "$OUT/plan-last" \( -name '*.ptx' -o -name '*.cu' -o -name '*.ptxas.txt' \) -delete
  fi
fi
for t in 1024 4096 16058 16384; do
  [ -f "$OUT/tokens-$t.txt" ] || python3 bench/strata_bench.py tokens --T "$t" --vocab 248320 -o "$OUT/tokens-$t.txt"
done
if ! ls .whl/fla_core-*.whl > /dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "fla-core==$FLA_VERSION"
fi
du -sh "$OUT" .whl
