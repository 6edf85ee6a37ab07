#!/usr/bin/env bash
# On the GPU machine: Nsight Systems' GPU trace of a decode run, every graph
# node a row (--cuda-graph-trace=node: the kernels' own durations, no
# events between them as strata-run --profile puts), summarised by
# bench/nsys_summary.py over the run's last STEPS decode steps: per kernel
# name, calls, time, and the idle gaps between kernels (the launch cost a
# step pays beyond its kernels). One summary file and the trace (CSV, xz)
# under OUT_DIR, named NAME.
#   bash bench/nsys_decode.sh NAME PLAN_DIR GGUF TOKENS OUT_DIR [N]
# N: tokens generated (default 33); STEPS (default 16): decode steps
# summarised (the last ones: the prompt's prefill and the first step's
# capture are left out). Needs build-rt/bin/strata-run
# (test/device/build_runtime.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
NAME=$1 PLAN=$2 GGUF=$3 TOKENS=$4 DEST=$5 N=${6:-33}
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
  /usr/local/cuda*/nsight-systems*/bin/nsys 2> /dev/null | head -1)
[ -n "$NSYS" ] || { echo "SKIPPED: nsys not found (Nsight Systems)"; exit 77; }
mkdir -p "$DEST"
T=$(mktemp -d)
timeout 150 "$NSYS" profile -o "$T/run" --force-overwrite true --cuda-graph-trace=node -t cuda \
  build-rt/bin/strata-run "$PLAN" --gguf "$GGUF" --synthetic-weights 1 --tokens-file "$TOKENS" \
  -n "$N" --ignore-eos > "$T/log" 2>&1 || { echo "error: nsys profile failed:"; tail -5 "$T/log"; exit 1; }
"$NSYS" stats --report cuda_gpu_trace --format csv -o "$T/run" "$T/run.nsys-rep" > /dev/null 2>&1
csv=$(ls "$T"/run*cuda_gpu_trace*.csv 2> /dev/null | head -1)
[ -n "$csv" ] || { echo "error: nsys stats wrote no cuda_gpu_trace CSV"; exit 1; }
python3 bench/nsys_summary.py "$csv" --plan "$PLAN/plan.json" --steps "${STEPS:-16}" > "$DEST/$NAME-nsys.txt"
xz -T0 -c "$csv" > "$DEST/$NAME-trace.csv.xz"
head -30 "$DEST/$NAME-nsys.txt"
rm -rf "$T"
