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
# With quick as a fifth argument (ctest cache_consistency_quick, the one the
# sanitizer suite runs: the full check is minutes at -O0): qwen4exp with QSA
# only (its delta nets, PLE layer and QSA layer use every state op),
# --max-context 48 --max-tokens 16 against a reference of 48.
#
# With sanitizer instead (cache_consistency_quick in a STRATA_SANITIZE
# build; quick took 452 s there in CI, 349 s measured on two busy cores,
# the suite's longest test, for what the main suite has already checked
# number for number; this mode took 102 s beside that 349): the quick
# model and plans, each code path once rather than every position. The
# main suite's runs (quick and full) keep every case; there the question is
# the numbers, here memory safety, which a path run once answers:
#   - f32 caches: prefill chunks of 1, 7 and 16 rows (single-row runs from
#     position 0, whose conv windows and token histories reach before the
#     sequence; odd chunks that cross QSA blocks of 4 and end in a partial
#     one; full runs), each to the last position (47: every row checked
#     against the reference on the way, past the QSA budget of 16 tokens,
#     a decode step that reads the whole context) and to position 0 (a
#     decode step with nothing cached);
#   - int8 caches (what they add is the store's quantisation and the
#     readers' dequantisation): full chunks to the last position, so
#     multi-row and single-row stores and reads over every cache position;
#   - both: the batch check (four slots in one run, slots alone) and the
#     refusals, as in quick.
#
# With the KV caches in bf16 and int8 (strata-compile --kv; qwen3, qwen3next
# and qwen4exp with QSA): decode steps equal the generation plan's own
# prefill rows (self, NMSE <= 1e-10) and batches equal each sequence alone
# (1e-12), as with f32; against the f32 prefill-only reference the decode
# steps and prefill rows stay within KV_BAR_BF16 / KV_BAR_INT8 below.
#
# usage: cache_consistency.sh BIN_DIR SOURCE_DIR WORK_DIR CHECK_TOOL [quick|sanitizer]
set -euo pipefail
bin=$1 src=$2 work=$3 tool=$4 mode=${5:-}
case "$mode" in
  "" | quick | sanitizer) ;;
  *) echo "cache_consistency.sh: unknown mode '$mode' (quick or sanitizer)" >&2; exit 2 ;;
esac
context=128 rows=64
[ -z "$mode" ] || context=48 rows=16
# The cases of each check (cache-consistency-check --chunks/--positions;
# empty: every one). It always adds the plan's max_tokens to the chunks and
# max_context - 1 to the positions.
f32cases=() kvcases=()
if [ "$mode" = sanitizer ]; then
  f32cases=(--chunks 1,7 --positions 0)
  kvcases=(--chunks "$rows" --positions $((context - 1)))
fi
rm -rf "$work"
mkdir -p "$work"
# qwen4exp: the tiny preset's QSA layer (blocks of 4: indexer raw keys and
# block keys) and PLE layer (token history, conv window), and the same file
# with --compress-ratio 0 (dense attention).
# check NAME ARCH [SYNTH ARGS...]: with f32cases.
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
  "$tool" "$work/$name.gen" "$work/$name.ref" "$gguf" ${f32cases[@]+"${f32cases[@]}"}
}
# Against the f32 reference: bf16 rounds each cached value (relative 2^-9),
# int8 each row to 1/254 of its largest value. Measured worst (decode and
# prefill rows): bf16 1.9e-6, int8 2.6e-5 (qwen3); the bars keep 10x.
KV_BAR_BF16=2e-5 KV_BAR_INT8=2e-4
# kvcheck NAME ARCH KV BAR: NAME's file and reference (check ran first), the
# generation plan with --kv KV; with kvcases (in the quick modes only
# int8 runs).
kvcheck() {
  local name=$1 arch=$2 kv=$3 bar=$4
  local gguf=$work/$name.gguf
  "$bin/strata-compile" "$src/models/$arch.strata" --gguf "$gguf" \
    --max-tokens "$rows" --max-context "$context" --max-batch 4 --precision f32 \
    --kv "$kv" -o "$work/$name-$kv.gen"
  echo "== $name --kv $kv"
  "$tool" "$work/$name-$kv.gen" "$work/$name.ref" "$gguf" --decode-bar "$bar" \
    ${kvcases[@]+"${kvcases[@]}"}
}
if [ -n "$mode" ]; then
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
