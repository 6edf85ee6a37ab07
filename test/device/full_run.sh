#!/usr/bin/env bash
# On the lent GPU machine with build-full/ carried (made on the development
# machine: the shapes-only full qwen4exp GGUF, its sm_90 plans for T = 16384
# with all and last logits, prompts of 1024, 4096 and 16384 tokens): builds
# the runtime, runs the plans with --synthetic-weights and --profile, and
# writes the profiles and a summary under RESULTS_DIR.
#   bash test/device/full_run.sh RESULTS_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
RES=${1:?results folder}
mkdir -p "$RES"
nvidia-smi > /dev/null 2>&1 || { echo "SKIPPED: no NVIDIA GPU"; exit 77; }
bash test/device/build_runtime.sh || exit 1
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)
for run in "last 1024" "last 4096" "last 16384" "all 16384"; do
  set -- $run
  out="$RES/full-qwen4exp-$1-T$2.txt"
  {
    echo "# full qwen4exp (48 layers, 512 experts; UD-IQ4_XS-like layout), synthetic weights seed 1"
    echo "# plan build-full/plan-$1 (logits $1), T = $2, $(date -u +%Y-%m-%dT%H:%M:%SZ), GPU $GPU"
    /usr/bin/time -f "# wall %e s, max rss %M KB" build-rt/bin/strata-run "build-full/plan-$1" \
      --gguf build-full/full.gguf --synthetic-weights 1 --tokens-file "build-full/tokens-$2.txt" \
      --profile --top 3 2>&1
  } > "$out"
  grep -E "^time:|^profile:|error" "$out" | sed "s|^|$1 T=$2: |"
done
