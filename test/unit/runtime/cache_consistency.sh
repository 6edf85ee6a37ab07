#!/usr/bin/env bash
# Cache consistency of generation plans (docs/generation-design.md, "Bars"):
# for tiny synthetic qwen3, qwen3moe, qwen3next and qwen4exp models with F32
# weights (KV caches; conv windows and delta-rule states; QSA indexer keys;
# the PLE token history and conv window), a plan with
# KV caches (--max-context 128 --max-batch 4 --max-tokens 64, host, f32) is
# checked by cache-consistency-check against the prefill-only plan of the
# same description and file (--max-tokens 128): decode steps equal prefill
# rows (NMSE <= 1e-10) over prompts prefilled in chunks of 1, 7, 16 and 64
# (positions across chunk boundaries and, for qwen4exp, past the QSA
# budget of 16 tokens, so decode selects blocks over the cache),
# sequences decoded together equal each decoded alone (NMSE <= 1e-12), a
# position past the context is refused before any kernel runs.
#
# With QUICK as a fifth argument (ctest cache_consistency_quick, the one the
# sanitizer suite runs: the full check is minutes at -O0): qwen4exp with QSA
# only (its delta nets, PLE layer and QSA layer use every state op),
# --max-context 48 --max-tokens 16 against a reference of 48.
#
# With the KV caches in bf16 and int8 (strata-compile --kv; qwen3, qwen3next
# and qwen4exp with QSA): decode steps equal the generation plan's own
# prefill rows (self, NMSE <= 1e-10) and batches equal each sequence alone
# (1e-12), as with f32; against the f32 prefill-only reference the decode
# steps and prefill rows stay within KV_BAR_BF16 / KV_BAR_INT8 below.
#
# usage: cache_consistency.sh BIN_DIR SOURCE_DIR WORK_DIR CHECK_TOOL [QUICK]
set -euo pipefail
bin=$1 src=$2 work=$3 tool=$4 quick=${5:-}
context=128 rows=64
[ -z "$quick" ] || context=48 rows=16
rm -rf "$work"
mkdir -p "$work"
# qwen4exp: the tiny preset's QSA layer (blocks of 4: indexer raw keys and
# block keys) and PLE layer (token history, conv window), and the same file
# with --compress-ratio 0 (dense attention).
check() {
  local name=$1 arch=$2
  shift 2
  local gguf=$work/$name.gguf
  "$bin/strata-gguf" synth --arch "$arch" --preset tiny --seed 1 "$@" -o "$gguf" >/dev/null
  "$bin/strata-compile" "$src/models/$arch.strata" --gguf "$gguf" \
    --max-tokens "$rows" --max-context "$context" --max-batch 4 --precision f32 \
    -o "$work/$name.gen"
  "$bin/strata-compile" "$src/models/$arch.strata" --gguf "$gguf" \
    --max-tokens "$context" --precision f32 -o "$work/$name.ref"
  echo "== $name"
  "$tool" "$work/$name.gen" "$work/$name.ref" "$gguf"
}
# Against the f32 reference: bf16 rounds each cached value (relative 2^-9),
# int8 each row to 1/254 of its largest value. Measured worst (decode and
# prefill rows): bf16 1.9e-6, int8 2.6e-5 (qwen3); the bars keep 10x.
KV_BAR_BF16=2e-5 KV_BAR_INT8=2e-4
# kvcheck NAME ARCH KV BAR: NAME's file and reference (check ran first), the
# generation plan with --kv KV.
kvcheck() {
  local name=$1 arch=$2 kv=$3 bar=$4
  local gguf=$work/$name.gguf
  "$bin/strata-compile" "$src/models/$arch.strata" --gguf "$gguf" \
    --max-tokens "$rows" --max-context "$context" --max-batch 4 --precision f32 \
    --kv "$kv" -o "$work/$name-$kv.gen"
  echo "== $name --kv $kv"
  "$tool" "$work/$name-$kv.gen" "$work/$name.ref" "$gguf" --decode-bar "$bar"
}
if [ -n "$quick" ]; then
  check qwen4exp qwen4exp
  kvcheck qwen4exp qwen4exp int8 "$KV_BAR_INT8"
  exit 0
fi
for arch in qwen3 qwen3moe qwen3next qwen4exp; do
  check "$arch" "$arch"
done
check qwen4exp-dense qwen4exp --compress-ratio 0
for arch in qwen3 qwen3next qwen4exp; do
  kvcheck "$arch" "$arch" bf16 "$KV_BAR_BF16"
  kvcheck "$arch" "$arch" int8 "$KV_BAR_INT8"
done
