#!/usr/bin/env bash
# On the development machine: what test/device/state_run.sh needs to run
# generation plans (plan v3 state: KV caches, conv windows, delta-rule
# states, QSA indexer keys, the PLE history) on the GPU, in
# build-device-state/ (carry it). Per bundled model (tiny preset,
# shapes-only GGUF: weights synthesised with seed 5 on both sides): sm_90
# plans with state (--max-context 128 --max-batch 1 --max-tokens 16
# --logits last) under the bf16 and f32 policies, and the CPU backend's
# greedy continuation of a 37-token prompt (prefill chunks of 16, 16, 5,
# then 24 decode steps) from the host f32 plan: ids and every step's logits.
#   bash test/device/state_prepare.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
B=$BUILD/bin
OUT=build-device-state
rm -rf "$OUT" && mkdir -p "$OUT"
python3 -c "import random; random.seed(37); print(','.join(str(random.randrange(1, 250)) for _ in range(37)))" > "$OUT/tokens.txt"
tokens=$(cat "$OUT/tokens.txt")
common=(--max-context 128 --max-batch 1 --max-tokens 16 --logits last)
for arch in qwen3 qwen3moe qwen3next qwen4exp; do
  d=$OUT/$arch
  mkdir -p "$d"
  "$B/strata-gguf" synth --arch "$arch" --preset tiny --seed 1 --shapes-only -o "$d/model.gguf" >/dev/null
  "$B/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" "${common[@]}" \
    --target host --precision f32 -o "$d/host" >/dev/null
  for policy in bf16 f32; do
    "$B/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" "${common[@]}" \
      --target sm_90 --precision "$policy" -o "$d/$policy.sm90" >/dev/null
    # Cubins only: the GPU machine loads them (PTX and sources stay here).
    find "$d/$policy.sm90/kernels" -name '*.cu' -o -name '*.ptx' -o -name '*.hip' | xargs rm -f
  done
  "$B/strata-run" "$d/host" --gguf "$d/model.gguf" --synthetic-weights 5 \
    --tokens "$tokens" -n 24 --ignore-eos --dump-ids "$d/cpu.ids" \
    --dump-logits "$d/cpu.f32" >/dev/null 2>"$d/cpu.log"
  rm -rf "$d/host"
done
du -sh "$OUT"
