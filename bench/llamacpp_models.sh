# Sourced by bench/llamacpp_prepare.sh (here) and bench/llamacpp_run.sh (on
# the GPU machine): the two models of the llama.cpp peer benchmark, so that
# the shapes-only GGUF the plans are compiled from and the GGUF with data
# that both engines run are made by the same synth command (the data file
# adds --quant fast and drops --shapes-only).
#
#   moe   Qwen3-MoE of Qwen3-30B-A3B's shape (strata-gguf synth --preset
#         30b-a3b), a Q4_K_M-like mix: Q4_K, with llama.cpp's Q4_K_M rule
#         use_more_bits(i, n) (the first and last eighth of the layers and
#         every third between) giving attn_v and ffn_down_exps Q6_K, output
#         Q6_K, routers F32. 17.3 GB.
#   q4x   Qwen4-Exp at full width, 12 layers (--preset full12), dense
#         attention (--compress-ratio 0: what llama.cpp computes), the
#         UD-IQ4_XS-like mix of bench/decode_prepare.sh. 16 GB.
# PEER_TINY=1 gives the tiny presets with the same types (the CPU dry run).

PEER_SEED=0

# attn_v and ffn_down_exps of the layers llama.cpp's Q4_K_M gives Q6_K.
peer_moe_types() {
  local n=$1 i t='q4_k,output.weight=q6_k'
  for ((i = 0; i < n; i++)); do
    if ((i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2)); then
      t+=",blk.$i.attn_v.weight=q6_k,blk.$i.ffn_down_exps.weight=q6_k"
    fi
  done
  echo "$t"
}

PEER_Q4X_TYPES='q4_k,*hc_*down*=f16,*hc_*up*=f16,output.weight=q6_k,per_layer_token_embd*=q8_0,*ple_key*=q8_0,*ple_value*=q8_0,*attn_v*=q6_k,*indexer*=q8_0,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl,*ffn_down_shexp*=q8_0'

# peer_synth_args NAME: the synth arguments of model NAME (moe | q4x), less
# -o, --shapes-only and --quant.
peer_synth_args() {
  case $1 in
  moe)
    if [ "${PEER_TINY:-0}" = 1 ]; then
      echo "--arch qwen3moe --preset tiny --seed $PEER_SEED --types $(peer_moe_types 2)"
    else
      echo "--arch qwen3moe --preset 30b-a3b --seed $PEER_SEED --types $(peer_moe_types 48)"
    fi ;;
  q4x)
    echo "--arch qwen4exp --preset $([ "${PEER_TINY:-0}" = 1 ] && echo tiny || echo full12) --seed $PEER_SEED --compress-ratio 0 --types $PEER_Q4X_TYPES" ;;
  *) echo "peer_synth_args: unknown model '$1'" >&2; return 1 ;;
  esac
}

# peer_vocab NAME: the token count (prompt ids are drawn below it).
peer_vocab() {
  if [ "${PEER_TINY:-0}" = 1 ]; then echo 1000; return; fi
  case $1 in moe) echo 151936 ;; q4x) echo 248320 ;; esac
}

# The strata model description of each.
peer_model_file() {
  case $1 in moe) echo models/qwen3moe.strata ;; q4x) echo models/qwen4exp.strata ;; esac
}

# Prompt lengths: prefill (llama-bench pp512, pp16384) and the decode
# prompt before tg128's 128 generated tokens.
PEER_PP="512 16384"
PEER_TG=128
PEER_TG_PROMPT=16
