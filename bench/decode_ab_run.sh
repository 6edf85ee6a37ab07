#!/usr/bin/env bash
# On the GPU machine, after bench/decode_ab_prepare.sh (carry
# build-decode-ab): each variant's tiny plans with strata-run --check (every
# kernel of the prefill and 8 decode steps against the cpu backend), then
# the full Qwen4-Exp's decode at B = 1 after a 1024-token prompt (64 steps
# through CUDA graphs), the variants interleaved over ROUNDS rounds, and the
# profile of one decode step of each. One results file in RESULTS_DIR
# (default bench/results) with the machine, date, commit and every number.
#   bash bench/decode_ab_run.sh [RESULTS_DIR] [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/.."
RES=${1:-bench/results}
ROUNDS=${2:-2}
mkdir -p "$RES"
out=$RES/decode-ab-$(date -u +%Y%m%dT%H%M%SZ).txt
if ! nvidia-smi >/dev/null 2>&1; then
  echo "SKIPPED: no GPU" | tee "$out"
  exit 77
fi
bash test/device/build_runtime.sh || exit 1
B=build-rt/bin
D=build-decode-ab
variants=$(cd $D && for p in */plan.json; do dirname "$p"; done)
{
  echo "# decode A/B: $(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), plans of $(cat $D/COMMIT)"
  for v in $variants; do
    echo "# $v: $(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('options'))" $D/$v/plan.json)"
  done
  for v in $variants; do
    for d in $D/tiny/*; do
      # A variant's tiny plans may be left out to keep the carry small.
      if [ ! -f "$d/$v/plan.json" ]; then
        echo "== check $v $(basename "$d"): not prepared, skipped"
        continue
      fi
      r=$("$B/strata-run" "$d/$v" --gguf "$d/model.gguf" --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13 -n 8 \
            --ignore-eos --check 2>&1 >/dev/null)
      rc=$?
      echo "== check $v $(basename "$d"): $([ $rc = 0 ] && echo PASS || echo "FAIL (exit $rc)") $(echo "$r" | grep -iE 'check|error|nmse' | tail -2 | tr '\n' ' ')"
    done
  done
  for round in $(seq "$ROUNDS"); do
    for v in $variants; do
      echo "== $v round $round: prompt 1024, 64 steps"
      "$B/strata-run" "$D/$v" --gguf "$D/full.gguf" --synthetic-weights 1 \
        --tokens-file "$D/tokens-1024.txt" -n 64 --ignore-eos 2>&1 >/dev/null | grep -E "timings|error"
    done
  done
  for v in $variants; do
    echo "== $v: profile of one decode step at P ~ 1027"
    "$B/strata-run" "$D/$v" --gguf "$D/full.gguf" --synthetic-weights 1 \
      --tokens-file "$D/tokens-1024.txt" -n 4 --ignore-eos --profile 2>&1 | grep -v "^[0-9]*$" | sed -n '/^profile:/,/^slowest/p' | head -24
  done
} 2>&1 | tee "$out"
