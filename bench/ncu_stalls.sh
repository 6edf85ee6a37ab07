#!/usr/bin/env bash
# On the GPU machine: Nsight Compute's throughput, scheduler, warp-state,
# occupancy and launch sections for one launch (the second) of each of the
# plan's largest kernels at T = 16,384, one text file per kernel under OUT.
# Each kernel costs a whole plan run plus ~20 replay passes (~50 s on the
# H200); the clocks are left alone (--clock-control none).
#   bash bench/ncu_stalls.sh [PLAN_DIR] [OUT_DIR] [KERNEL_REGEX ...]
# (defaults: build-full/plan-last, $OUT or ., the GEMM/attention/delta/HC
# kernels of qwen4exp; build-rt/bin/strata-run must be built)
set -uo pipefail
cd "$(dirname "$0")/.."
PLAN=${1:-build-full/plan-last}
DEST=${2:-${OUT:-.}}
shift $(($# < 2 ? $# : 2))
KERNELS=("$@")
[ ${#KERNELS[@]} -gt 0 ] || KERNELS=(matmul_ moe_grouped_swiglu moe_grouped_down hc_down_inject hc_up_mix slice_attention slice_gated_delta_rule hc_write_norm)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "error: ncu not found (Nsight Compute)"; exit 1; }
P="--gguf build-full/full.gguf --synthetic-weights 1 --tokens-file build-full/tokens-16384.txt --no-graphs"
for k in "${KERNELS[@]}"; do
  timeout 120 "$NCU" --clock-control none -k "regex:^$k" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    build-rt/bin/strata-run "$PLAN" $P 2>&1 | grep -v '^==PROF==' > "$DEST/ncu-$k.txt"
  echo "$k: rc=${PIPESTATUS[0]}, $DEST/ncu-$k.txt"
done
