#!/usr/bin/env bash
# On the development machine: what bench/decode_run.sh needs on the GPU
# machine, in build-decode/ (carry it):
#   full.gguf      the full-size qwen4exp as shapes only (bench/prepare.sh's
#                  UD-IQ4_XS-like mix)
#   plan/          its sm_90 plan with state: --max-tokens 64 (prefill
#                  chunks) --max-context 4224 --max-batch 1 --logits last
#                  (cubins only), and the --report of one decode step at
#                  P = 4096 (plan/decode-report.txt)
#   plan-b16-r8/   the plan for batched decode (--logits all, --max-batch 16
#                  --max-context 320; gemm-decode-rows 8)
#   plan-16k/      the plan for P = 16,384: --max-context 16640, as plan/;
#   plan-16k-bf16/, plan-16k-int8/  the same with --kv bf16 and --kv int8
#   dense.gguf, plan-dense-16k/  the same model with dense attention
#                  (--compress-ratio 0): the attention kernels the decode
#                  peers (bench/peers.py attn_decode) are set against
#   tokens-P.txt   prompts of P = 256, 1024, 4096 and 16384 ids
# The plan is always remade (it follows the code generator); the GGUF and
# prompts only when missing.
#   bash bench/decode_prepare.sh [BUILD_DIR] [OUT_DIR]   (build, build-decode)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}/bin
OUT=${2:-build-decode}
TYPES='q4_k,*hc_*down*=f16,*hc_*up*=f16,output.weight=q6_k,per_layer_token_embd*=q8_0,*ple_key*=q8_0,*ple_value*=q8_0,*attn_v*=q6_k,*indexer*=q8_0,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl,*ffn_down_shexp*=q8_0'
for tool in strata-gguf strata-compile; do
  [ -x "$B/$tool" ] || { echo "error: $B/$tool missing: build the project first"; exit 1; }
done
mkdir -p "$OUT"
[ -f "$OUT/full.gguf" ] ||
  "$B/strata-gguf" synth --arch qwen4exp --preset full --seed 0 --shapes-only --types "$TYPES" -o "$OUT/full.gguf"
rm -rf "$OUT/plan"
"$B/strata-compile" models/qwen4exp.strata --gguf "$OUT/full.gguf" --max-tokens 64 --max-context 4224 \
  --max-batch 1 --logits last --target sm_90 -o "$OUT/plan" > /dev/null
"$B/strata-compile" models/qwen4exp.strata --gguf "$OUT/full.gguf" --max-tokens 64 --max-context 4224 \
  --max-batch 1 --logits last --target sm_90 --no-codegen --context 4096 --report -o "$OUT/plan-report" |
  grep -i "decode step" > "$OUT/plan/decode-report.txt"
rm -rf "$OUT/plan-report"
# P = 16,384: the model as above and with dense attention.
[ -f "$OUT/dense.gguf" ] ||
  "$B/strata-gguf" synth --arch qwen4exp --preset full --seed 0 --shapes-only --compress-ratio 0 \
    --types "$TYPES" -o "$OUT/dense.gguf"
for v in plan-16k:full:f32 plan-16k-bf16:full:bf16 plan-16k-int8:full:int8 plan-dense-16k:dense:f32; do
  name=${v%%:*} rest=${v#*:}
  gguf=${rest%%:*} kv=${rest##*:}
  rm -rf "$OUT/$name"
  "$B/strata-compile" models/qwen4exp.strata --gguf "$OUT/$gguf.gguf" --max-tokens 64 --max-context 16640 \
    --max-batch 1 --logits last --kv $kv --target sm_90 -o "$OUT/$name" > /dev/null
  "$B/strata-compile" models/qwen4exp.strata --gguf "$OUT/$gguf.gguf" --max-tokens 64 --max-context 16640 \
    --max-batch 1 --logits last --kv $kv --target sm_90 --no-codegen --context 16384 --report -o "$OUT/plan-report" |
    grep -i "decode step" > "$OUT/$name/decode-report.txt"
  rm -rf "$OUT/plan-report"
  find "$OUT/$name" \( -name '*.ptx' -o -name '*.cu' -o -name '*.hip' -o -name '*.ptxas.txt' \) -delete
done
# Batched decode (strata-run --batch B): every row's logits, 16 slots of 320
# positions, decode forms up to 8 rows (the default) and up to 16.
rm -rf "$OUT/plan-b16-r16"
for rows in 8; do
  rm -rf "$OUT/plan-b16-r$rows"
  "$B/strata-compile" models/qwen4exp.strata --gguf "$OUT/full.gguf" --max-tokens 64 --max-context 320 \
    --max-batch 16 --logits all --target sm_90 --codegen-opt gemm-decode-rows=$rows -o "$OUT/plan-b16-r$rows" > /dev/null
  find "$OUT/plan-b16-r$rows" \( -name '*.ptx' -o -name '*.cu' -o -name '*.hip' -o -name '*.ptxas.txt' \) -delete
done
[ -f "$OUT/tokens-256.txt" ] || python3 bench/strata_bench.py tokens --T 256 --vocab 248320 -o "$OUT/tokens-256.txt"
(git describe --always --dirty 2>/dev/null || echo unknown) > "$OUT/plan/COMMIT"
find "$OUT/plan" \( -name '*.ptx' -o -name '*.cu' -o -name '*.hip' -o -name '*.ptxas.txt' \) -delete
for p in 1024 4096 16384; do
  [ -f "$OUT/tokens-$p.txt" ] || python3 bench/strata_bench.py tokens --T "$p" --vocab 248320 -o "$OUT/tokens-$p.txt"
done
du -sh "$OUT"
