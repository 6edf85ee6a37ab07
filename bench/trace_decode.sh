#!/usr/bin/env bash
# On the GPU machine: a GPU trace of a decode run through CUPTI
# (bench/cupti_trace.c, preloaded: Nsight Systems is not usable there), every
# CUDA graph node a row: the kernels' own durations with no events between
# them (strata-run --profile puts events around each kernel, which adds a
# launch's latency to every one), summarised by bench/trace_summary.py over
# the run's last STEPS decode steps: per kernel name, calls, time, and the
# idle gaps between kernels (the launch cost a step pays beyond its
# kernels). One summary file and the trace (CSV, xz) under OUT_DIR, named
# NAME.
#   bash bench/trace_decode.sh NAME PLAN_DIR GGUF TOKENS OUT_DIR [N] [-- ARGS]
# TRACE_CSV=0 keeps the summary alone. N: tokens generated (default 33); ARGS: more strata-run flags (such as
# --batch 16); STEPS (default 16): decode steps summarised (the last ones:
# the prompt's prefill and the first step's capture are left out). Needs
# build-rt/bin/strata-run (test/device/build_runtime.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
NAME=$1 PLAN=$2 GGUF=$3 TOKENS=$4 DEST=$5 N=${6:-33}
shift $(($# < 6 ? $# : 6))
[ "${1:-}" = -- ] && shift
CUDA=${CUDA_HOME:-/usr/local/cuda}
LIB=build-rt/libcupti_trace.so
if [ ! -f "$LIB" ]; then
  cupti=$(find -L "$CUDA" "$CUDA/extras/CUPTI" -maxdepth 3 -name 'libcupti.so*' 2> /dev/null | head -1)
  [ -n "$cupti" ] || { echo "SKIPPED: libcupti not found under $CUDA"; exit 77; }
  inc=$CUDA/include
  [ -f "$inc/cupti.h" ] || inc=$CUDA/extras/CUPTI/include
  gcc -O2 -shared -fPIC -I"$inc" bench/cupti_trace.c -o "$LIB" "$cupti" \
    -Wl,-rpath,"$(dirname "$cupti")" || { echo "error: building the CUPTI tracer failed"; exit 1; }
fi
mkdir -p "$DEST"
T=$(mktemp -d)
# The tracer preloaded into strata-run alone (not into timeout, whose exit
# would write an empty trace over it).
timeout 300 env STRATA_TRACE_CSV="$T/trace.csv" LD_PRELOAD="$PWD/$LIB" \
  build-rt/bin/strata-run "$PLAN" --gguf "$GGUF" --synthetic-weights 1 --tokens-file "$TOKENS" \
  -n "$N" --ignore-eos "$@" > "$T/log" 2>&1 || { echo "error: the traced run failed:"; tail -5 "$T/log"; exit 1; }
grep cupti_trace "$T/log"
[ -s "$T/trace.csv" ] || { echo "error: the tracer wrote no kernels:"; tail -5 "$T/log"; exit 1; }
{
  echo "# $NAME: $(date -u), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), plan $PLAN, -n $N $*"
  echo "# strata-run's own timings under the tracer (CUPTI adds host time between steps; the span below is the GPU's):"
  grep -E 'timings|decode steps' "$T/log" | head -2
  python3 bench/trace_summary.py "$T/trace.csv" --plan "$PLAN/plan.json" --steps "${STEPS:-16}"
} > "$DEST/$NAME-trace.txt"
[ "${TRACE_CSV:-1}" = 0 ] || xz -T0 -c "$T/trace.csv" > "$DEST/$NAME-trace.csv.xz"
head -40 "$DEST/$NAME-trace.txt"
rm -rf "$T"
