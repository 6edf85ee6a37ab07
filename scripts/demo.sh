#!/usr/bin/env bash
# The main job on the embedded default: synthesise a tiny qwen4exp model
# (its GGUF names and metadata, with unsloth's UD-IQ4_XS layout: Q6_K trunk,
# IQ3_S gate/up and IQ4_NL down experts), compile the bundled description for
# it, run the plan on the CPU backend, and print the top tokens of the last
# position and the kernel report; then generate text from a prompt with the
# model's own byte-level BPE vocabulary (its weights are random: the text is
# not meant to read well). The qwen3 family gets a Q8_0-based mix.
#   scripts/demo.sh [ARCH]     ARCH: qwen4exp (default), qwen3, qwen3moe,
#                              qwen3next
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-qwen4exp}
case "$arch" in
qwen4exp) types='q6_k,*ffn_gate_exps*=iq3_s,*ffn_up_exps*=iq3_s,*ffn_down_exps*=iq4_nl' ;;
*) types='q8_0,*ffn_down*=q6_k,*_exps*=iq3_s,*attn_v*=iq4_nl,*attn_output*=iq4_xs' ;;
esac
bash scripts/install-deps.sh >/dev/null
export CC=clang-19 CXX=clang++-19
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target strata-gguf strata-compile strata-run >/dev/null
work=build/demo
mkdir -p "$work"
set -x
build/bin/strata-gguf synth --arch "$arch" --preset tiny --seed 1 \
  --types "$types" \
  -o "$work/$arch-tiny.gguf"
build/bin/strata-compile "models/$arch.strata" --gguf "$work/$arch-tiny.gguf" \
  --max-tokens 64 --target host -o "$work/$arch.plan" --report
build/bin/strata-run "$work/$arch.plan" --gguf "$work/$arch-tiny.gguf" \
  --tokens 11,42,7,300,5,99,123,8 --backend cpu --top 5
# Generation: the prompt tokenized with the GGUF's vocabulary, 24 tokens
# greedily (a plan of the last position's logits), streamed as they come.
# The plan keeps KV caches and recurrent state of 64 positions, prefills the
# prompt in chunks of 16 rows and decodes one row a token.
build/bin/strata-compile "models/$arch.strata" --gguf "$work/$arch-tiny.gguf" \
  --max-context 64 --max-tokens 16 --target host --logits last \
  -o "$work/$arch-last.plan"
build/bin/strata-run "$work/$arch-last.plan" --gguf "$work/$arch-tiny.gguf" \
  --prompt "The quick brown fox" -n 24
