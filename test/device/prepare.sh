#!/usr/bin/env bash
# On the development machine (clang-19, ptxas optional): everything the GPU
# machine needs for test/device/run.sh, in build-device/ (carry it there):
# tiny GGUFs of the four bundled models with the goldens' quantised mixes
# (and qwen4exp with F16 hyper-connection projections),
# their sm_90 plans under both precision policies (kernels compiled here:
# the GPU machine has no clang), the prompt, and the CPU backend's f32
# logits (the reference the goldens hold to ~1e-12).
#   bash test/device/prepare.sh [BUILD_DIR]
# STRATA_DEVICE_SYNTHETIC=SEED: shapes-only GGUFs (KBs instead of ~32 MB, so
# all five models fit one device call beside the diffsuite), the CPU
# logits from weights synthesised with SEED, and build-device/SYNTHETIC
# holding SEED: test/device/run.sh then runs the models with the same
# --synthetic-weights (the file-weight path stays covered by the diffsuite,
# whose cases carry real blocks). Measured on the H200 (2026-12-01, seed 5,
# test/device/results/device-20261201T171010Z.txt): every kernel matches the
# CPU (--check, NMSE <= 1.1e-5) and the f32 logits agree to 1e-12, but the
# bf16 policy's logits miss their bars for qwen3next and qwen4exp at
# T = 37 / 100 (NMSE 2.0e-3 to 4.7e-3, top-1 0.946 to 0.973): the synthesised
# weights amplify bf16 rounding more than the default GGUFs' weights do. So
# the default (file GGUFs) stays the device gate; this mode is for calls
# the 64 MiB carry would not fit, and its bf16 FAILs there say so.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
B=$BUILD/bin
OUT=build-device
SEED=${STRATA_DEVICE_SYNTHETIC:-}
if [ -n "$SEED" ] && ! [[ "$SEED" =~ ^[0-9]+$ ]]; then
  echo "error: STRATA_DEVICE_SYNTHETIC must be a seed (digits), not '$SEED'" >&2
  exit 1
fi
rm -rf "$OUT" && mkdir -p "$OUT"
[ -z "$SEED" ] || echo "$SEED" > "$OUT/SYNTHETIC"
synth_flag=${SEED:+--shapes-only}
weights_flag=${SEED:+--synthetic-weights $SEED}
# Prompts of 1, 37 (no tile's multiple) and 100 tokens.
for t in 1 37 100; do
  python3 -c "import random; random.seed($t); print(','.join(str(random.randrange(1, 250)) for _ in range($t)))" > "$OUT/tokens-$t.txt"
done
# The four bundled models with the goldens' mixes, and qwen4exp with the
# F16 hyper-connection projections of the published layouts (K2's narrow
# down tile beside its f32 injection logits; 16-bit raw stages).
for model in qwen3 qwen3moe qwen3next qwen4exp qwen4exp_f16hc; do
  arch=${model%%_*}
  if [ "$model" = qwen4exp_f16hc ]; then
    types='q4_0,*hc_*up*=f16,*hc_*down*=f16'
  else
    types=$(python3 -c "import sys; sys.path.insert(0, 'test/golden'); from llama_golden import ARCH_MIX, MIX; print(ARCH_MIX.get('$arch', (MIX,))[0])")
  fi
  "$B/strata-gguf" synth --arch "$arch" --preset tiny --seed 3 --types "$types" $synth_flag -o "$OUT/$model.gguf" > /dev/null
  for prec in bf16 f32; do
    "$B/strata-compile" "models/$arch.strata" --gguf "$OUT/$model.gguf" --max-tokens 128 \
      --target sm_90 --precision "$prec" -o "$OUT/$model.$prec.sm90" > /dev/null
  done
  "$B/strata-compile" "models/$arch.strata" --gguf "$OUT/$model.gguf" --max-tokens 128 -o "$OUT/$model.host" > /dev/null
  for t in 1 37 100; do
    "$B/strata-run" "$OUT/$model.host" --gguf "$OUT/$model.gguf" --tokens-file "$OUT/tokens-$t.txt" \
      $weights_flag --dump-logits "$OUT/$model.cpu-f32.T$t.logits" > /dev/null
  done
  rm -rf "$OUT/$model.host"
done
# The plans load cubins (ptxas ran here); PTX and sources stay behind so the
# folder fits what a device call carries.
if ls "$OUT"/*/kernels/*.cubin > /dev/null 2>&1; then
  find "$OUT" \( -name '*.ptx' -o -name '*.cu' -o -name '*.ptxas.txt' \) -delete
fi
du -sh "$OUT"
