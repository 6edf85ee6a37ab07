#!/usr/bin/env bash
# Prefill of a short prompt by plans compiled for different --max-tokens:
# SelectExpertKernels picks one tile variant per GEMM at the plan's largest
# run, so a plan compiled for 16,384 rows runs its 512-token prompts on the
# grouped experts' 128-row tiles (a few dozen rows an expert: most of the
# tile is padding), where a plan compiled for 512 rows took the 16-row
# tiles until the cost model counted the weights' decode once per row tile
# (2026-12-07: the 128-row tiles measured 2-2.8x faster there). This
# measures such plans side by side, in one run.
#   bash bench/pp_rows_ab.sh prepare   (development machine; carry build-pp)
#   bash bench/pp_rows_ab.sh run [RESULTS]   (GPU machine)
# prepare: for each model of bench/llamacpp_models.sh (moe, q4x), plans
# NAME-512 (--max-tokens 512) and NAME-16k (--max-tokens 16384) from the
# shapes-only GGUF, and 512 prompt ids; PP_PLANS="P ..." names others to
# make (keeping the rest): P is 512 or 16k and a suffix naming the compiler
# (512n: plans of this build beside 512's of an earlier one). run times
# the plans PP_PLANS names (default 512 16k) and profiles the last two.
# (At 26e6342 a third plan, 16k-rows, took the removed option
# grouped-tile-rows: the grouped tiles by each run's rows.)
# run: strata-run of each plan on the 512 ids (--synthetic-weights 1:
# synthetic weights route differently from the data file's, so the A/B is
# of the two plans on the same weights, not a figure for the peer table),
# --repeat 4, two interleaved rounds; then the grouped kernels of one run of
# each (--profile). One results file pp-rows-ab-STAMP.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
D=${PP_DIR:-build-pp}
mode=${1:?prepare or run}
. bench/llamacpp_models.sh
if [ "$mode" = prepare ]; then
  set -e
  B=${BUILD:-build}/bin
  mkdir -p "$D"
  for m in moe q4x; do
    args=$(peer_synth_args $m)
    # shellcheck disable=SC2086
    "$B/strata-gguf" synth $args --shapes-only -o "$D/$m.shapes.gguf" 2> >(grep -v 'selects no tensor' >&2)
    for p in ${PP_PLANS:-512 16k}; do
      t=512
      case $p in 16k*) t=16384 ;; esac
      rm -rf "${D:?}/$m-$p"
      "$B/strata-compile" "$(peer_model_file $m)" --gguf "$D/$m.shapes.gguf" --max-tokens $t \
        --logits last --target sm_90 -o "$D/$m-$p" > /dev/null
    done
    python3 bench/strata_bench.py tokens --T 512 --vocab "$(peer_vocab $m)" -o "$D/$m-tokens-512.txt"
  done
  find "$D" \( -name '*.ptx' -o -name '*.cu' -o -name '*.hip' -o -name '*.ptxas.txt' \) -delete
  (git describe --always --dirty 2>/dev/null || echo unknown) > "$D/COMMIT"
  du -sh "$D"
  exit 0
fi
[ "$mode" = run ] || { echo "usage: pp_rows_ab.sh prepare|run [RESULTS_DIR]"; exit 2; }
RES=${2:-bench/results}
mkdir -p "$RES"
out=$RES/pp-rows-ab-$(date -u +%Y%m%dT%H%M%SZ).txt
if ! nvidia-smi > /dev/null 2>&1; then
  echo "SKIPPED: no GPU" | tee "$out"
  exit 77
fi
bash test/device/build_runtime.sh || exit 1
BIN=build-rt/bin
{
  echo "# prefill of 512 ids by plans of --max-tokens 512 and 16384 (shapes-only GGUF, synthetic weights)"
  echo "# $(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), plans at $(cat "$D/COMMIT" 2> /dev/null || echo unknown)"
  for round in 1 2; do
    for m in moe q4x; do
      for p in ${PP_PLANS:-512 16k}; do
        echo "== round $round: $m-$p"
        timeout 120 "$BIN/strata-run" "$D/$m-$p" --gguf "$D/$m.shapes.gguf" --synthetic-weights 1 \
          --tokens-file "$D/$m-tokens-512.txt" --repeat 4 2>&1 | grep -E '^(time|repeat|graph):|error'
      done
    done
  done
  for m in moe q4x; do
    for p in $(echo ${PP_PLANS:-512 16k} | tr ' ' '\n' | tail -2); do
      echo "== profile: $m-$p"
      timeout 120 "$BIN/strata-run" "$D/$m-$p" --gguf "$D/$m.shapes.gguf" --synthetic-weights 1 \
        --tokens-file "$D/$m-tokens-512.txt" --profile 2>&1 | sed -n '/^profile:/,$p' | head -30
    done
  done
} 2>&1 | tee "$out"
