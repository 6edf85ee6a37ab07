#!/usr/bin/env bash
# Decode of the full Qwen4-Exp (synthetic weights) over the grid the decode
# issue's table asks for: B = 1, 4, 16 sequences a step after prompts of
# P = 1,024, 4,096 and 16,384 tokens.
#   bash bench/decode_grid.sh prepare [VARIANT...] (development machine; carry
#                                             build-decode-grid)
#   bash bench/decode_grid.sh run [RESULTS]  (GPU machine; default
#                                             bench/results)
# prepare: the shapes-only GGUF of bench/decode_prepare.sh's mix, one plan
# with state (--max-tokens 1024: prompts prefill in chunks of 1,024 rows,
# so 16 prompts of 16K take seconds, not minutes; --max-context 16640
# --max-batch 16 --logits all: every row's logits, one row a sequence;
# f32 KV cache, cubins only), its decode-step --report at B = 1, 4, 16 and
# P = 4096 (the floors), and the prompts.
# prepare VARIANT... compiles one plan a variant, NAME or NAME:OPT,OPT
# (codegen options NAME=VALUE, or strata-compile flags --FLAG=VALUE), in
# $D/NAME (default: one variant "plan" with the default options); run times
# every variant at every point, the variants side by side at each (P, B).
# run: per (P, B), strata-run --batch B: B sequences, each prompt prefilled
# alone, then 32 greedy steps of B rows through one CUDA graph per row count;
# then the kernels of one decode step of each variant at P = 1,024 and
# B = 1, 16 (--profile; PROFILE=0 skips them); one results file
# decode-grid-STAMP.txt (machine, date, commit, every timing line).
# GRID_DIR=DIR keeps the files in DIR (both modes); GRID_PS and GRID_BS
# replace the lists of P and B; PRESET=full12 prepares
# the 12-layer full-width model (it fits an H100's 80 GB; the full one does
# not: its weights ran out of an H100's memory at layer 23's experts,
# 2026-12-06); GRID_MAX_CONTEXT (default 16640) sizes the plan's caches
# (4352 with GRID_PS="1024 4096": 5.8 GB of state instead of 17).
set -uo pipefail
cd "$(dirname "$0")/.."
D=${GRID_DIR:-build-decode-grid}
mode=${1:?prepare or run}
PS=${GRID_PS:-"1024 4096 16384"}
BS=${GRID_BS:-"1 4 16"}
if [ "$mode" = prepare ]; then
  set -e
  . bench/variant_args.sh
  B=${BUILD:-build}/bin
  TYPES='q4_k,*hc_*down*=f16,*hc_*up*=f16,output.weight=q6_k,per_layer_token_embd*=q8_0,*ple_key*=q8_0,*ple_value*=q8_0,*attn_v*=q6_k,*indexer*=q8_0,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl,*ffn_down_shexp*=q8_0'
  ARGS=(models/qwen4exp.strata --gguf "$D/full.gguf" --max-tokens 1024 --max-context "${GRID_MAX_CONTEXT:-16640}"
    --max-batch 16 --logits all --target sm_90)
  mkdir -p "$D"
  [ -f "$D/full.gguf" ] ||
    "$B/strata-gguf" synth --arch qwen4exp --preset "${PRESET:-full}" --seed 0 --shapes-only --types "$TYPES" -o "$D/full.gguf"
  shift
  [ $# -gt 0 ] || set -- plan
  rm -f "$D/VARIANTS"
  for v in "$@"; do
    name=${v%%:*} opts=${v#*:}
    [ "$opts" = "$v" ] && opts=
    variant_args "$opts"
    rm -rf "${D:?}/$name"
    "$B/strata-compile" "${ARGS[@]}" ${args[@]+"${args[@]}"} -o "$D/$name" > /dev/null
    find "$D/$name" \( -name '*.ptx' -o -name '*.cu' -o -name '*.hip' -o -name '*.ptxas.txt' \) -delete
    for b in $BS; do
      "$B/strata-compile" "${ARGS[@]}" ${args[@]+"${args[@]}"} --no-codegen --report --context 4096 \
        --max-batch "$b" -o "$D/plan-report" | grep -i "decode step" >> "$D/$name/decode-report.txt"
      rm -rf "$D/plan-report"
    done
    echo "${opts:-defaults}" > "$D/$name/OPTIONS"
    (git describe --always --dirty 2>/dev/null || echo unknown) > "$D/$name/COMMIT"
    echo "$name" >> "$D/VARIANTS"
  done
  for p in $PS; do
    [ -f "$D/tokens-$p.txt" ] ||
      python3 bench/strata_bench.py tokens --T "$p" --vocab 248320 -o "$D/tokens-$p.txt"
  done
  du -sh "$D"
  exit 0
fi
[ "$mode" = run ] || { echo "usage: decode_grid.sh prepare|run [RESULTS_DIR]"; exit 2; }
RES=${2:-bench/results}
mkdir -p "$RES"
out=$RES/decode-grid-$(date -u +%Y%m%dT%H%M%SZ).txt
if ! nvidia-smi > /dev/null 2>&1; then
  echo "SKIPPED: no GPU" | tee "$out"
  exit 77
fi
[ -f "$D/VARIANTS" ] || { echo "error: $D/VARIANTS missing: run 'bash bench/decode_grid.sh prepare' and carry $D"; exit 1; }
mapfile -t VS < "$D/VARIANTS"
for v in "${VS[@]}"; do
  [ -f "$D/$v/plan.json" ] || { echo "error: $D/$v/plan.json missing"; exit 1; }
done
bash test/device/build_runtime.sh || exit 1
BIN=build-rt/bin
{
  echo "# decode grid of the full Qwen4-Exp (shapes-only GGUF, synthetic weights)"
  echo "# $(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  echo "# plans: --max-tokens 1024 --max-context $(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['options'].get('max_context'))" "$D/${VS[0]}/plan.json") --max-batch 16 --logits all --target sm_90 (f32 KV cache)"
  for v in "${VS[@]}"; do
    echo "# variant $v: commit $(cat "$D/$v/COMMIT"), codegen options $(cat "$D/$v/OPTIONS")"
    sed "s/^/# $v floor: /" "$D/$v/decode-report.txt"
  done
  for p in $PS; do
    for b in $BS; do
      for v in "${VS[@]}"; do
        echo "== $v: P = $p, B = $b: $b sequences after $p-token prompts, 32 steps"
        timeout 150 "$BIN/strata-run" "$D/$v" --gguf "$D/full.gguf" --synthetic-weights 1 \
          --tokens-file "$D/tokens-$p.txt" -n 33 --ignore-eos --batch "$b" 2>&1 > /dev/null |
          grep -E "timings|error"
      done
    done
  done
  # The kernels of one decode step per variant at P = 1,024, B = 1 and
  # 16 (--profile: device events around each kernel, so a kernel of a few
  # microseconds carries its launch gap; PROFILE=0 skips them).
  if [ "${PROFILE:-1}" != 0 ]; then
    for b in 1 16; do
      for v in "${VS[@]}"; do
        echo "== $v: profile of one decode step of B = $b after 1024-token prompts"
        timeout 120 "$BIN/strata-run" "$D/$v" --gguf "$D/full.gguf" --synthetic-weights 1 \
          --tokens-file "$D/tokens-1024.txt" -n 3 --ignore-eos --batch "$b" --profile 2>&1 |
          sed -n '/^profile:/,/^slowest/p' | head -40
      done
    done
  fi
} 2>&1 | tee "$out"
