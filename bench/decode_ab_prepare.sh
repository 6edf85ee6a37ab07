#!/usr/bin/env bash
# On the development machine: plans for an A/B of decode forms
# (bench/decode_ab_run.sh on the GPU machine; carry build-decode-ab), each
# variant compiled with its --codegen-opt list:
#   full.gguf, VARIANT/        the full Qwen4-Exp (shapes only, the
#                              UD-IQ4_XS-like mix of bench/decode_prepare.sh):
#                              --max-tokens 64 --max-context 4224
#                              --max-batch 1 --logits last, cubins only
#   tiny/ARCH/model.gguf, tiny/ARCH/VARIANT/   the bundled models (tiny
#                              preset, seed 1) in block-type mixes that cover
#                              the decode forms' types (Q8_0, Q4_K, Q5_K,
#                              Q6_K, IQ4_NL, IQ4_XS, IQ3_S), bf16 policy,
#                              --max-context 128 --max-tokens 16, for
#                              strata-run --check
#   tokens-1024.txt            a 1024-id prompt
# VARIANT is NAME: or NAME:OPT,OPT (codegen options NAME=VALUE, or compiler
# flags given whole: --skip-pass=fold-delta-inputs); NAME@DIR:...
# compiles that variant with DIR/strata-compile instead (a build of another
# commit: an A/B of a pass, which no codegen option turns off).
#   bash bench/decode_ab_prepare.sh base: i8:gemm-decode-int8=1
#   bash bench/decode_ab_prepare.sh old@../old/build/bin: new:
# PRESET=full12 makes the model 12 layers deep (the full width; it fits an
# H100's 80 GB, where the full model does not).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}/bin
OUT=build-decode-ab
TYPES='q4_k,*hc_*down*=f16,*hc_*up*=f16,output.weight=q6_k,per_layer_token_embd*=q8_0,*ple_key*=q8_0,*ple_value*=q8_0,*attn_v*=q6_k,*indexer*=q8_0,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl,*ffn_down_shexp*=q8_0'
mkdir -p "$OUT"
[ -f "$OUT/full.gguf" ] ||
  "$B/strata-gguf" synth --arch qwen4exp --preset "${PRESET:-full}" --seed 0 --shapes-only --types "$TYPES" -o "$OUT/full.gguf"
[ -f "$OUT/tokens-1024.txt" ] ||
  python3 bench/strata_bench.py tokens --T 1024 --vocab 248320 -o "$OUT/tokens-1024.txt"
strip() { find "$1" \( -name '*.ptx' -o -name '*.cu' -o -name '*.hip' -o -name '*.ptxas.txt' \) -delete; }
for v in "$@"; do
  name=${v%%:*} opts=${v#*:}
  cb=$B
  if [[ $name == *@* ]]; then cb=${name#*@} name=${name%%@*}; fi
  args=()
  IFS=, read -ra list <<< "$opts"
  for o in "${list[@]}"; do
    case $o in
      '') ;;
      -*) args+=("$o") ;; # a compiler flag as is (--skip-pass=NAME)
      *) args+=(--codegen-opt "$o") ;;
    esac
  done
  rm -rf "${OUT:?}/$name"
  "$cb/strata-compile" models/qwen4exp.strata --gguf "$OUT/full.gguf" --max-tokens 64 --max-context 4224 \
    --max-batch 1 --logits last --target sm_90 ${args[@]+"${args[@]}"} -o "$OUT/$name" > /dev/null
  strip "$OUT/$name"
  for m in qwen4exp:'q6_k,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl' \
           qwen3moe:'q4_k,*attn_v*=q6_k,*_exps*=iq4_nl' qwen3next:'q5_k,*_exps*=iq4_xs' qwen3:q8_0; do
    arch=${m%%:*} types=${m#*:}
    d=$OUT/tiny/$arch
    mkdir -p "$d"
    [ -f "$d/model.gguf" ] ||
      "$B/strata-gguf" synth --arch "$arch" --preset tiny --seed 1 --types "$types" -o "$d/model.gguf" > /dev/null
    rm -rf "${d:?}/$name"
    "$cb/strata-compile" "models/$arch.strata" --gguf "$d/model.gguf" --max-context 128 --max-batch 1 \
      --max-tokens 16 --logits last --target sm_90 --precision bf16 ${args[@]+"${args[@]}"} -o "$d/$name" > /dev/null
    strip "$d/$name"
  done
done
(git describe --always --dirty 2>/dev/null || echo unknown) > "$OUT/COMMIT"
du -sh "$OUT"
