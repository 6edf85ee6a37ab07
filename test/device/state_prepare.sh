#!/usr/bin/env bash
# On the development machine: what test/device/state_run.sh needs to run
# generation plans (plan v3 state: KV caches, conv windows, delta-rule
# states, QSA indexer keys, the PLE history) on the GPU, in
# build-device-state/ (carry it). Per bundled model (tiny preset, seed 1,
# the goldens' quantised mixes as in test/codegen/identity.py; qwen4exp
# with QSA, compress ratio 4): sm_90 plans with state (--max-context 128
# --max-batch 1 --max-tokens 16 --logits last) under the bf16 and f32
# policies; for the cache consistency check the f32 policy's plan with 4
# slots (--max-context 64 --max-batch 4 --max-tokens 16) and its
# prefill-only reference (--max-tokens 64); and the CPU backend's greedy
# continuation of a 37-token prompt (prefill chunks of 16, 16, 5, then 24
# decode steps) from the host f32 plan: ids and every step's logits.
# The KV caches in bf16 and int8 (strata-compile --kv): sm_90 plans under
# the bf16 policy (kv-bf16.sm90, kv-int8.sm90), 4-slot cache-consistency
# plans (cc-gen-bf16.sm90, cc-gen-int8.sm90, f32 policy) and the CPU's
# continuation of the same prompt with each (host f32 plans: cpu-kv-*.ids,
# cpu-kv-*.f32). long.sm90: a plan with state of --max-tokens 1024 (bf16
# policy) that --checks a 600-token prompt chunk (tokens-600.txt).
# ARCH ... (default all four) limits the models: the folder with all four
# is about 55 MB, so a device call whose tree and carry must stay under
# 64 MiB may take two halves (state_run.sh runs the models it finds).
#   bash test/device/state_prepare.sh [BUILD_DIR [ARCH ...]]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
shift || true
archs=${*:-qwen3 qwen3moe qwen3next qwen4exp}
B=$BUILD/bin
OUT=build-device-state
rm -rf "$OUT" && mkdir -p "$OUT"
python3 -c "import random; random.seed(37); print(','.join(str(random.randrange(1, 250)) for _ in range(37)))" > "$OUT/tokens.txt"
tokens=$(cat "$OUT/tokens.txt")
python3 -c "import random; random.seed(600); print(','.join(str(random.randrange(1, 250)) for _ in range(600)))" > "$OUT/tokens-600.txt"
common=(--max-context 128 --max-batch 1 --max-tokens 16 --logits last)
for arch in $archs; do
  d=$OUT/$arch
  mkdir -p "$d"
  case $arch in
    qwen3) types=q8_0 ;;
    qwen3moe) types='q8_0,*_exps*=iq4_nl' ;;
    qwen3next) types='q8_0,*_exps*=iq4_xs' ;;
    qwen4exp) types='q6_k,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl' ;;
  esac
  "$B/strata-gguf" synth --arch "$arch" --preset tiny --seed 1 --types "$types" -o "$d/model.gguf" >/dev/null
  "$B/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" "${common[@]}" \
    --target host --precision f32 -o "$d/host" >/dev/null
  for policy in bf16 f32; do
    "$B/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" "${common[@]}" \
      --target sm_90 --precision "$policy" -o "$d/$policy.sm90" >/dev/null
    # Cubins only: the GPU machine loads them (PTX and sources stay here).
    find "$d/$policy.sm90/kernels" -name '*.cu' -o -name '*.ptx' -o -name '*.hip' | xargs rm -f
  done
  "$B/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" \
    --max-context 64 --max-batch 4 --max-tokens 16 --target sm_90 \
    --precision f32 -o "$d/cc-gen.sm90" >/dev/null
  "$B/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" \
    --max-tokens 64 --target sm_90 --precision f32 -o "$d/cc-ref.sm90" >/dev/null
  for kv in bf16 int8; do
    "$B/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" "${common[@]}" \
      --target sm_90 --precision bf16 --kv "$kv" -o "$d/kv-$kv.sm90" >/dev/null
    "$B/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" \
      --max-context 64 --max-batch 4 --max-tokens 16 --target sm_90 \
      --precision f32 --kv "$kv" -o "$d/cc-gen-$kv.sm90" >/dev/null
    "$B/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" "${common[@]}" \
      --target host --precision f32 --kv "$kv" -o "$d/host-kv-$kv" >/dev/null
    "$B/strata-run" "$d/host-kv-$kv" --gguf "$d/model.gguf" \
      --tokens "$tokens" -n 24 --ignore-eos --dump-ids "$d/cpu-kv-$kv.ids" \
      --dump-logits "$d/cpu-kv-$kv.f32" >/dev/null 2>"$d/cpu-kv-$kv.log"
    rm -rf "$d/host-kv-$kv"
    for p in kv-$kv cc-gen-$kv; do
      find "$d/$p.sm90/kernels" -name '*.cu' -o -name '*.ptx' -o -name '*.hip' | xargs rm -f
    done
  done
  # A prompt chunk of 600 tokens in a plan that decodes (bf16 policy,
  # --max-tokens 1024): the forms decode plans take only at long chunks
  # (fuse-route-sort's `_slices` alternate from T x k >= ~2,040 slots).
  "$B/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" \
    --max-context 1280 --max-batch 1 --max-tokens 1024 --logits last \
    --target sm_90 --precision bf16 -o "$d/long.sm90" >/dev/null
  for p in cc-gen cc-ref long; do
    find "$d/$p.sm90/kernels" -name '*.cu' -o -name '*.ptx' -o -name '*.hip' | xargs rm -f
  done
  "$B/strata-run" "$d/host" --gguf "$d/model.gguf" \
    --tokens "$tokens" -n 24 --ignore-eos --dump-ids "$d/cpu.ids" \
    --dump-logits "$d/cpu.f32" >/dev/null 2>"$d/cpu.log"
  rm -rf "$d/host"
done
du -sh "$OUT"
