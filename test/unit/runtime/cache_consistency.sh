#!/usr/bin/env bash
# Cache consistency of generation plans (docs/generation-design.md, "Bars"):
# for tiny synthetic qwen3, qwen3moe, qwen3next and qwen4exp models with F32
# weights (KV caches; conv windows and delta-rule states; QSA indexer keys;
# the PLE token history and conv window), a plan with
# KV caches (--max-context 64 --max-batch 4 --max-tokens 16, host, f32) is
# checked by cache-consistency-check against the prefill-only plan of the
# same description and file (--max-tokens 64): decode steps equal prefill
# rows (NMSE <= 1e-10) over prompts prefilled in chunks of 1, 7 and 16,
# sequences decoded together equal each decoded alone (NMSE <= 1e-12), a
# position past the context is refused before any kernel runs.
#
# usage: cache_consistency.sh BIN_DIR SOURCE_DIR WORK_DIR CHECK_TOOL
set -euo pipefail
bin=$1 src=$2 work=$3 tool=$4
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
    --max-tokens 16 --max-context 64 --max-batch 4 --precision f32 \
    -o "$work/$name.gen"
  "$bin/strata-compile" "$src/models/$arch.strata" --gguf "$gguf" \
    --max-tokens 64 --precision f32 -o "$work/$name.ref"
  echo "== $name"
  "$tool" "$work/$name.gen" "$work/$name.ref" "$gguf"
}
for arch in qwen3 qwen3moe qwen3next qwen4exp; do
  check "$arch" "$arch"
done
check qwen4exp-dense qwen4exp --compress-ratio 0
