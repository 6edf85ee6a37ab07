#!/usr/bin/env bash
# Parse-to-plan time of the full-size qwen4exp (48 layers, 512 experts,
# hidden 2560; the UD-IQ4_XS-like layout of test/Inputs/qwen4exp-real.kv) at
# T = 16384 for each target: the fusion issue's bar is <= 2 s on the 2-core
# development machine. Best of N runs (default 5); writes a results file.
#   bash bench/compile_time.sh [BUILD_DIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
RUNS=${2:-5}
OUT=bench/results/compile_time-$(date -u +%Y%m%dT%H%M%SZ).txt
mkdir -p bench/results
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "# strata-compile parse-to-plan time, models/qwen4exp.strata + test/Inputs/qwen4exp-real.kv, T = 16384"
  echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "# commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# target runs best_s median_s kernels"
  for target in host gfx1151 sm_90; do
    times=()
    for _ in $(seq "$RUNS"); do
      s=$(date +%s.%N)
      "$BUILD/bin/strata-compile" models/qwen4exp.strata --gguf test/Inputs/qwen4exp-real.kv \
        --max-tokens 16384 --target "$target" --no-codegen -o "$tmp/plan" > /dev/null
      e=$(date +%s.%N)
      times+=("$(echo "$e - $s" | bc -l)")
    done
    kernels=$(python3 -c "import json; print(len(json.load(open('$tmp/plan/plan.json'))['kernels']))")
    sorted=$(printf '%s\n' "${times[@]}" | sort -g)
    best=$(echo "$sorted" | head -1)
    median=$(echo "$sorted" | sed -n "$(( (RUNS + 1) / 2 ))p")
    printf '%s %d %.3f %.3f %s\n' "$target" "$RUNS" "$best" "$median" "$kernels"
  done
} | tee "$OUT"
echo "wrote $OUT"
