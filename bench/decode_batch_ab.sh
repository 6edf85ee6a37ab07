#!/usr/bin/env bash
# A/B of batched decode forms (B = 16 rows a step), prepare here and run on
# the GPU machine (carry build-decode-batch):
#   bash bench/decode_batch_ab.sh prepare VARIANT...   (development machine)
#     VARIANT is NAME or NAME:OPT,OPT (codegen options NAME=VALUE, or
#     strata-compile flags --FLAG=VALUE such as --greedy-ids=off). Per variant: the full Qwen4-Exp (shapes only,
#     bench/decode_prepare.sh's mix) at --max-tokens 64 --max-context 1344
#     --max-batch 16 --logits all (cubins only), and the four bundled
#     models (tiny preset, shapes only, the block-type mixes of
#     decode_ab_prepare.sh; synthetic weights on the GPU) at --max-tokens 16 --max-context 128
#     --max-batch 16, bf16 policy, for strata-run --check.
#     PRESET=full12: the 12-layer full-width model (an H100's 80 GB).
#     MODEL=moe: the llama.cpp peer's Qwen3-MoE of Qwen3-30B-A3B's shape
#     and Q4_K_M-like mix (bench/llamacpp_models.sh) instead of the
#     Qwen4-Exp (a separate directory, D=build-decode-batch-moe).
#   bash bench/decode_batch_ab.sh run [RESULTS_DIR]     (GPU machine)
#     Per variant: each tiny model's 16 sequences (-n 6 --batch 16) with
#     --check (every kernel of every prefill chunk and decode step against
#     the cpu backend); then the full model's batched decode (16 sequences
#     after 256-token prompts, 32 steps through CUDA graphs), the variants
#     interleaved over ROUNDS (default 2) rounds; BATCHES="1 4 16" times
#     those row counts too (default 16); PROMPTS="256:33 16:129" times
#     prompts of P tokens with N generated each (default 256:33; 16:129
#     is llama-bench's tg128 shape, the past 16 to 144 slots; prepare
#     makes tokens-16.txt too). CHECKS=0 skips the
#     checks; CHECK_BATCHES="2 4 9 16" checks at those row counts (default
#     16: 2 to 8 rows run the 8-row forms, 9 the 16-row forms part full).
#     PROFILE_BATCHES="1 16" adds each variant's --profile of a step of
#     those rows, grouped by bench/profile_groups.py (15 slowest groups);
#     TRACE_BATCHES="1 16" each variant's CUPTI trace of the steps through
#     CUDA graphs (bench/trace_decode.sh: the kernels' own times, no events
#     between them; a summary and the trace files beside the results).
#     A variant named check* is checked, not timed (options that
#     only the tiny models' shapes exercise, such as gemm-decode-grid=4). One results file
#     decode-batch-STAMP.txt (machine, date, commit, every number).
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-q4x}
case $MODEL in
q4x) D=build-decode-batch ;;
moe) D=build-decode-batch-moe ;;
*) echo "error: MODEL=$MODEL: q4x or moe"; exit 2 ;;
esac
mode=${1:?prepare or run}
shift
if [ "$mode" = prepare ]; then
  set -e
  . bench/variant_args.sh
  B=${BUILD:-build}/bin
  mkdir -p "$D"
  if [ "$MODEL" = moe ]; then
    . bench/llamacpp_models.sh
    ARCH=qwen3moe VOCAB=$(peer_vocab moe)
    # shellcheck disable=SC2046
    [ -f "$D/full.gguf" ] || "$B/strata-gguf" synth $(peer_synth_args moe) --shapes-only -o "$D/full.gguf" \
      2> >(grep -v 'selects no tensor' >&2)
  else
    ARCH=qwen4exp VOCAB=248320
    TYPES=$(sed -n "s/^TYPES='\(.*\)'\$/\1/p" bench/decode_prepare.sh)
    [ -f "$D/full.gguf" ] ||
      "$B/strata-gguf" synth --arch qwen4exp --preset "${PRESET:-full}" --seed 0 --shapes-only --types "$TYPES" -o "$D/full.gguf"
  fi
  for p in 256 16; do
    [ -f "$D/tokens-$p.txt" ] ||
      python3 bench/strata_bench.py tokens --T $p --vocab "$VOCAB" -o "$D/tokens-$p.txt"
  done
  (git describe --always --dirty 2> /dev/null || echo unknown) > "$D/COMMIT"
  strip() { find "$1" \( -name '*.ptx' -o -name '*.cu' -o -name '*.hip' -o -name '*.ptxas.txt' \) -delete; }
  for v in "$@"; do
    name=${v%%:*} opts=${v#*:}
    [ "$opts" = "$v" ] && opts=
    variant_args "$opts"
    rm -rf "${D:?}/$name"
    "$B/strata-compile" "models/$ARCH.strata" --gguf "$D/full.gguf" --max-tokens 64 --max-context 1344 \
      --max-batch 16 --logits all --target sm_90 ${args[@]+"${args[@]}"} -o "$D/$name" > /dev/null
    strip "$D/$name"
    for m in qwen4exp:'q6_k,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl' \
             qwen3moe:'q4_k,*attn_v*=q6_k,*_exps*=iq4_nl' qwen3next:'q5_k,*_exps*=iq4_xs' qwen3:q8_0 \
             qwen3moe+q4k:'q4_k,*attn_v*=q6_k,*ffn_down_exps*=q6_k'; do
      # LABEL[+TAG]:TYPES; +q4k: Q4_K and Q6_K experts (the peer's mix).
      label=${m%%:*} types=${m#*:}
      arch=${label%%+*}
      t=$D/tiny/$label
      mkdir -p "$t"
      [ -f "$t/model.gguf" ] ||
        "$B/strata-gguf" synth --arch "$arch" --preset tiny --seed 1 --shapes-only --types "$types" \
          -o "$t/model.gguf" > /dev/null
      rm -rf "${t:?}/$name"
      "$B/strata-compile" "models/$arch.strata" --gguf "$t/model.gguf" --max-context 128 --max-batch 16 \
        --max-tokens 16 --logits all --target sm_90 --precision bf16 ${args[@]+"${args[@]}"} -o "$t/$name" > /dev/null
      strip "$t/$name"
    done
  done
  du -sh "$D"
  exit 0
fi
[ "$mode" = run ] || { echo "usage: $0 prepare VARIANT... | run [RESULTS_DIR]"; exit 2; }
RES=${1:-${OUT:-bench/results}}
ROUNDS=${ROUNDS:-2}
mkdir -p "$RES"
out=$RES/decode-batch-$(date -u +%Y%m%dT%H%M%SZ).txt
if ! nvidia-smi > /dev/null 2>&1; then
  echo "SKIPPED: no GPU" | tee "$out"
  exit 77
fi
bash test/device/build_runtime.sh || exit 1
B=build-rt/bin
variants=$(cd $D && for p in */plan.json; do [ "${p%%/*}" = tiny ] || dirname "$p"; done)
{
  echo "# batched decode A/B: $(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), plans of $(cat $D/COMMIT)"
  echo "# model: MODEL=$MODEL ($D/full.gguf, shapes only, synthetic weights)"
  for v in $variants; do
    echo "# $v: $(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('options'))" $D/$v/plan.json)"
  done
  fails=0
  for v in $variants; do
    [ "${CHECKS:-1}" = 1 ] || break
    for t in $D/tiny/*; do
      for cb in ${CHECK_BATCHES:-16}; do
        line=$(timeout 300 $B/strata-run "$t/$v" --gguf "$t/model.gguf" --synthetic-weights 1 --tokens 1,2,3,4,5,6,7,8,9,10,11 -n 6 \
          --batch "$cb" --check 2>&1 > /dev/null | grep -E "check|error|timings" | tr '\n' ' ')
        rc=${PIPESTATUS[0]}
        echo "check $v $(basename "$t") B=$cb: rc $rc: $line"
        [ "$rc" = 0 ] || fails=$((fails + 1))
      done
    done
  done
  echo "checks failed: $fails"
  for r in $(seq 1 "$ROUNDS"); do
    for pn in ${PROMPTS:-256:33}; do
      p=${pn%%:*} n=${pn#*:}
      # The default prompt keeps the lines as before (no P= field).
      tag=$([ "$pn" = 256:33 ] || echo " P=$p")
      for b in ${BATCHES:-16}; do
        for v in $variants; do
          case $v in check*) continue ;; esac
          line=$(timeout 120 $B/strata-run "$D/$v" --gguf "$D/full.gguf" --synthetic-weights 1 \
            --tokens-file "$D/tokens-$p.txt" -n "$n" --batch "$b" 2>&1 > /dev/null | grep -E "timings|error")
          echo "round $r $v B=$b$tag: $line"
        done
      done
    done
  done
  for b in ${PROFILE_BATCHES:-}; do
    for v in $variants; do
      case $v in check*) continue ;; esac
      prof=$(mktemp)
      timeout 120 $B/strata-run "$D/$v" --gguf "$D/full.gguf" --synthetic-weights 1 \
        --tokens-file "$D/tokens-256.txt" -n 33 --batch "$b" --profile=json 2> /dev/null | sed -n '/^{/,$p' > "$prof"
      echo "profile $v B=$b:"
      python3 bench/profile_groups.py "$prof" > "$prof.txt" 2>&1
      head -16 "$prof.txt"
      rm -f "$prof" "$prof.txt"
    done
  done
  for b in ${TRACE_BATCHES:-}; do
    for v in $variants; do
      case $v in check*) continue ;; esac
      echo "trace $v B=$b:"
      bash bench/trace_decode.sh "$(basename "$out" .txt)-$v-b$b" "$D/$v" "$D/full.gguf" \
        "$D/tokens-256.txt" "$RES" 33 -- --batch "$b"
    done
  done
} 2>&1 | tee "$out"
