#!/usr/bin/env bash
# The performance issue's benchmark, one command on the lent GPU machine:
# strata's kernels (the full qwen4exp prefill plan of build-full/, synthetic
# weights, strata-run --profile=json at T = 16058 for the per-layer
# components and at T = 1024, 4096, 16384 for tokens/s) and the peers a user
# would otherwise pick (bench/peers.py: torch eager / torch.compile, the copy
# rate, torch._grouped_mm, SDPA flash / cuDNN, flash-linear-attention, HF's
# torch fallback), side by side in the same run. Writes under RESULTS_DIR
# (default $OUT, else bench/results), at most 7 files:
#   bench-STAMP.txt   GPU, driver, date, commit, the comparison table (ours,
#                     peers, floor, ratio, bar), every peer, the profiles
#   bench-STAMP.json  every number (strata's per-kernel profiles, the peers)
#   bench-STAMP.log   this script's output;  strata-STAMP-raw.log strata-run's
#   strata-STAMP.json, peers-STAMP.json   the two halves (kept if a part fails)
#   roofline-plan-last-T16058-STAMP.png   achieved vs intensity per family
#
#   bash bench/run.sh [RESULTS_DIR] [--only strata|peers] [--dry-run]
#
# Needs (carried to the GPU machine): build-full/ (made here by
# bench/prepare.sh: shapes-only GGUF, sm_90 plan, prompts) and .whl/ (the
# flash-linear-attention wheel, fla-core). Builds the runtime there as
# test/device/full_run.sh does. Without build-full/ the peers still run;
# without an NVIDIA GPU it says SKIPPED (exit 77), except with --dry-run:
# tiny shapes on the CPU (a tiny qwen4exp host plan made with build/bin, peers
# with --device cpu --small), to check the scripts without a GPU.
# Budget: BENCH_BUDGET seconds in all (default 570, under the device call's
# 600); the peers get what strata leaves (at least BENCH_PEERS_MIN = 90 s,
# else they are skipped: run again with --only peers).
set -uo pipefail
cd "$(dirname "$0")/.."
RES=""
ONLY=all
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY=${2:?--only needs strata or peers}; shift 2 ;;
    --only=*) ONLY=${1#--only=}; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "bench/run.sh: unknown option $1 (see --help)"; exit 2 ;;
    *) RES=$1; shift ;;
  esac
done
case "$ONLY" in all|strata|peers) ;; *) echo "bench/run.sh: --only takes strata or peers"; exit 2 ;; esac
RES=${RES:-${OUT:-bench/results}}
mkdir -p "$RES"
START=$(date +%s)
BUDGET=${BENCH_BUDGET:-570}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOG="$RES/bench-$STAMP.log"
export PYTHONUNBUFFERED=1
elapsed() { echo $(( $(date +%s) - START )); }

main() {

if [ $DRY -eq 0 ] && ! nvidia-smi > /dev/null 2>&1; then
  echo "SKIPPED: no NVIDIA GPU here (bench/run.sh runs on the lent GPU machine; --dry-run checks the scripts on the CPU)"
  return 77
fi
# The commit the plans were compiled at (bench/prepare.sh writes it): a copy
# of the tree on the GPU machine may carry stale git metadata.
if [ -f build-full/plan-last/COMMIT ]; then
  COMMIT="$(cat build-full/plan-last/COMMIT) (plan)"
else
  COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ "$COMMIT" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then COMMIT="$COMMIT+changes"; fi
fi
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "# bench/run.sh $STAMP: date $(date -u +%Y-%m-%dT%H:%M:%SZ), GPU ${GPU:-none}, commit $COMMIT, only $ONLY, dry run $DRY"

# flash-linear-attention travels as wheels (.whl/, carried); torch, Triton
# and transformers are the machine's own.
if [ $DRY -eq 0 ] && ls .whl/*.whl > /dev/null 2>&1; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; then
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    echo "wheels: installed $(ls .whl | tr '\n' ' ')into /tmp/site"
  else
    echo "wheels: pip install of .whl/ failed: the fla peers will say unavailable"
  fi
elif [ $DRY -eq 0 ]; then
  echo "wheels: no .whl/ carried: the fla peers will say unavailable unless the machine has fla"
fi

STRATA_JSON="$RES/strata-$STAMP.json"
PEERS_JSON="$RES/peers-$STAMP.json"
rc=0

# strata's side.
if [ "$ONLY" != peers ]; then
  if [ $DRY -eq 1 ]; then
    BIN=${BENCH_BIN:-build/bin}
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT  # main runs in a subshell (the pipe into tee)
    types=$(python3 -c "import sys; sys.path.insert(0, 'test/golden'); from llama_golden import ARCH_MIX, MIX; print(ARCH_MIX.get('qwen4exp', (MIX,))[0])")
    if "$BIN/strata-gguf" synth --arch qwen4exp --preset tiny --seed 3 --types "$types" -o "$TMP/tiny.gguf" > /dev/null &&
       "$BIN/strata-compile" models/qwen4exp.strata --gguf "$TMP/tiny.gguf" --max-tokens 128 --precision bf16 \
         -o "$TMP/plan-tiny" > /dev/null; then
      python3 bench/strata_bench.py run --bin "$BIN" --plan "$TMP/plan-tiny" --gguf "$TMP/tiny.gguf" \
        --tokens-dir "$TMP" --seed-tokens 100 --prefill-tokens 32,64,128 --raw "$RES/strata-$STAMP-raw.log" \
        -o "$STRATA_JSON" || rc=1
    else
      echo "strata: dry run: cannot make the tiny qwen4exp plan with $BIN (set BENCH_BIN to a built bin/)"
      rc=1
    fi
  elif [ ! -f build-full/plan-last/plan.json ] || [ ! -f build-full/full.gguf ]; then
    echo "strata: build-full/plan-last or build-full/full.gguf missing: strata's side is not measured"
    echo "        (make it on the development machine with bash bench/prepare.sh and carry build-full)"
    rc=1
  else
    echo "strata: building the runtime (build-rt, -DSTRATA_RUNTIME_ONLY=ON) at $(elapsed) s"
    if bash test/device/build_runtime.sh > /dev/null; then
      echo "strata: runtime built at $(elapsed) s"
      # The 16058-token prompt is written into a temporary folder when
      # build-full lacks it (the same generator as build-full's prompts).
      python3 bench/strata_bench.py run --bin build-rt/bin --plan build-full/plan-last \
        --gguf build-full/full.gguf --tokens-dir build-full --seed-tokens 16058 \
        --prefill-tokens 1024,4096,16384 --synthetic-weights 1 --timeout "${BENCH_STRATA_TIMEOUT:-240}" \
        --raw "$RES/strata-$STAMP-raw.log" -o "$STRATA_JSON" || rc=1
    else
      tail -30 build-rt.log
      echo "strata: the runtime did not build: strata's side is not measured"
      rc=1
    fi
  fi
  echo "strata: done at $(elapsed) s"
fi

# The peers, with what is left of the budget.
if [ "$ONLY" != strata ]; then
  left=$(( BUDGET - $(elapsed) - 25 ))
  if [ $left -lt "${BENCH_PEERS_MIN:-90}" ]; then
    echo "peers: SKIPPED: only $left s left of the $BUDGET s budget; run bash bench/run.sh RESULTS_DIR --only peers"
    rc=1
  else
    echo "peers: start at $(elapsed) s, $left s budget"
    if [ $DRY -eq 1 ]; then
      python3 bench/peers.py --device cpu --small --T 100 --commit "$COMMIT" --deadline "$left" -o "$PEERS_JSON" || rc=1
    else
      python3 bench/peers.py --device cuda --commit "$COMMIT" --deadline "$left" -o "$PEERS_JSON" || rc=1
    fi
    echo "peers: done at $(elapsed) s"
  fi
fi

# The report: the table, every number, the roofline picture.
args=()
[ -f "$STRATA_JSON" ] && args+=(--strata "$STRATA_JSON")
[ -f "$PEERS_JSON" ] && args+=(--peers "$PEERS_JSON")
if [ ${#args[@]} -gt 0 ]; then
  python3 bench/report.py "${args[@]}" --commit "$COMMIT" -o "$RES/bench-$STAMP" || rc=1
  sed -n '/^## Summary/,/^## What/p' "$RES/bench-$STAMP.txt" | sed '$d'
else
  echo "report: nothing to report"
  rc=1
fi
echo "bench/run.sh: done in $(elapsed) s; results in $RES (stamp $STAMP)"
return $rc
}

# Everything it prints goes to the console and to bench-STAMP.log.
main 2>&1 | tee -a "$LOG"
exit "${PIPESTATUS[0]}"
