#!/usr/bin/env bash
# Cache consistency of generation plans (docs/generation-design.md, "Bars"):
# for tiny synthetic qwen3, qwen3moe and qwen3next models with F32 weights
# (qwen3next: KV caches, conv windows and delta-rule states), a plan with
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
for arch in qwen3 qwen3moe qwen3next; do
  gguf=$work/$arch.gguf
  "$bin/strata-gguf" synth --arch "$arch" --preset tiny --seed 1 -o "$gguf" >/dev/null
  "$bin/strata-compile" "$src/models/$arch.strata" --gguf "$gguf" \
    --max-tokens 16 --max-context 64 --max-batch 4 --precision f32 \
    -o "$work/$arch.gen"
  "$bin/strata-compile" "$src/models/$arch.strata" --gguf "$gguf" \
    --max-tokens 64 --precision f32 -o "$work/$arch.ref"
  echo "== $arch"
  "$tool" "$work/$arch.gen" "$work/$arch.ref" "$gguf"
done
