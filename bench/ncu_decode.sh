#!/usr/bin/env bash
# On the GPU machine: Nsight Compute's throughput, warp-state, occupancy,
# memory and launch sections for one decode launch (T = 1: the kernel's own
# symbol, which the prefill chunks' alternates do not share) of each named
# kernel of a decode plan, after a 1024-token prompt; one text file per
# kernel under OUT. Clocks left alone (--clock-control none). BATCH=B
# profiles a step of B sequences instead (strata-run --batch B: SYMBOL
# then names the row form, e.g. 'hc_up_mix_.*_rows16': a regex).
#   bash bench/ncu_decode.sh PLAN_DIR GGUF TOKENS OUT_DIR SYMBOL ...
# (build-rt/bin/strata-run must be built: test/device/build_runtime.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
PLAN=$1 GGUF=$2 TOKENS=$3 DEST=$4
shift 4
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "error: ncu not found (Nsight Compute)"; exit 1; }
# Stall reasons: warps stalled per issued instruction, by reason.
STALLS=$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' \
  long_scoreboard short_scoreboard mio_throttle lg_throttle wait no_instruction \
  barrier math_pipe_throttle not_selected selected dispatch_stall drain \
  imc_miss branch_resolving membar tex_throttle)
STALLS=${STALLS%,}
for k in "$@"; do
  timeout 150 "$NCU" --clock-control none -k "regex:^$k\$" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis --metrics "$STALLS" \
    build-rt/bin/strata-run "$PLAN" --gguf "$GGUF" --synthetic-weights 1 --tokens-file "$TOKENS" \
    -n 4 ${BATCH:+--batch "$BATCH"} --ignore-eos --no-graphs 2>&1 | grep -v '^==PROF==' > "$DEST/ncu-${k//[^A-Za-z0-9_]/}.txt"
  echo "$k: rc=${PIPESTATUS[0]}, $DEST/ncu-${k//[^A-Za-z0-9_]/}.txt"
done
