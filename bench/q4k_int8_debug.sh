#!/usr/bin/env bash
# The Q4_K experts' int8 --check failure (issue 33), located on the GPU:
#   bash bench/q4k_int8_debug.sh prepare      (here; carry build-q4kdbg)
#   bash bench/q4k_int8_debug.sh run [DIR]    (GPU machine; DIR default $OUT,
#                                              else bench/results)
# prepare: the tiny Qwen3-MoE with Q4_K gate/up and Q6_K down experts (as
# decode_batch_ab.sh's qwen3moe+q4k, with data: 9 MB) and two sm_90 plans
# of it (bf16 policy, --max-tokens 16 --max-context 128 --max-batch 16):
# i8 (the defaults: int8 decode forms) and off (gemm-decode-int8=off).
# run: --check of both plans on the GGUF's data and on --synthetic-weights 1
# (prompt 1..11, one chunk), then dumps of layer 1's MoE input (a.3), its
# routing (y.1.perm, y.1.off) and output (y.1.h) of both plans with the
# synthetic weights into DIR/q4k-STAMP/ (tarred: q4k-STAMP.tar). The same
# for two plans of --max-tokens 1 (i8r, offr: every prompt row runs the
# decode forms, one row a model run), checked on prompt 1..11,570 (570: the
# cpu backend's first greedy token after 1..11) and dumped at its last row
# into q4k-STAMP/row/. Then here:
#   python3 bench/q4k_int8_emulate.py q4k-STAMP      (and q4k-STAMP/row)
# compares the GPU's h with the int8 forms' exact emulation per expert and
# column.
set -uo pipefail
cd "$(dirname "$0")/.."
D=build-q4kdbg
mode=${1:?prepare or run}
if [ "$mode" = prepare ]; then
  set -e
  B=${BUILD:-build}/bin
  mkdir -p "$D"
  "$B/strata-gguf" synth --arch qwen3moe --preset tiny --seed 1 \
    --types 'q4_k,*attn_v*=q6_k,*ffn_down_exps*=q6_k' -o "$D/q4k.gguf" > /dev/null
  for v in i8:16: off:16:--codegen-opt=gemm-decode-int8=off i8r:1: offr:1:--codegen-opt=gemm-decode-int8=off; do
    name=${v%%:*} rest=${v#*:}
    tokens=${rest%%:*} opt=${rest#*:}
    rm -rf "${D:?}/$name"
    "$B/strata-compile" models/qwen3moe.strata --gguf "$D/q4k.gguf" --max-context 128 --max-batch 16 \
      --max-tokens "$tokens" --logits all --target sm_90 --precision bf16 ${opt:+"${opt%%=*}" "${opt#*=}"} \
      -o "$D/$name" > /dev/null
    find "$D/$name" \( -name '*.ptx' -o -name '*.cu' -o -name '*.ptxas.txt' \) -delete
  done
  git rev-parse --short HEAD > "$D/COMMIT"
  du -sh "$D"
  exit 0
fi
[ "$mode" = run ] || { echo "usage: $0 prepare | run [DIR]"; exit 2; }
RES=${2:-${OUT:-bench/results}}
if ! nvidia-smi > /dev/null 2>&1; then
  echo "SKIPPED: no GPU"
  exit 77
fi
[ -x build-rt/bin/strata-run ] || bash test/device/build_runtime.sh || exit 1
R=build-rt/bin/strata-run
stamp=$(date -u +%Y%m%dT%H%M%SZ)
Q=$RES/q4k-$stamp
mkdir -p "$Q"
T=1,2,3,4,5,6,7,8,9,10,11
{
  echo "# q4k int8 debug: $(date -u), $(nvidia-smi --query-gpu=name --format=csv,noheader), plans of $(cat $D/COMMIT)"
  for v in i8 off i8r offr; do
    for w in data syn; do
      S= P=$T
      [ $w = syn ] && S="--synthetic-weights 1"
      [ "${v%r}" = "$v" ] || P="$T,570 -n 1"
      line=$($R $D/$v --gguf $D/q4k.gguf $S --tokens $P --check 2>&1 | grep -E "check|error|time" | tr '\n' ' ')
      echo "check $v $w: $line"
    done
  done
  # Generation (the failing form until 2026-12-07): the prompt's chunk,
  # then decode steps of one row and of three.
  for v in i8 off; do
    for b in 1 3; do
      line=$($R $D/$v --gguf $D/q4k.gguf --synthetic-weights 1 --tokens $T -n 6 --batch $b --check 2>&1 |
        grep -E "check|error|timings" | tr '\n' ' ')
      echo "generate $v syn B=$b: rc ${PIPESTATUS[0]}: $line"
    done
  done
} | tee "$Q/checks.txt"
S="--synthetic-weights 1"
$R $D/i8 --gguf $D/q4k.gguf $S --tokens $T --dump-buffer a.3="$Q/a3.f32" --dump-buffer y.1.perm="$Q/perm.f32" \
  --dump-buffer y.1.off="$Q/off.f32" --dump-buffer y.1.h="$Q/i8.h.f32" > /dev/null 2>&1
$R $D/off --gguf $D/q4k.gguf $S --tokens $T --dump-buffer y.1.h="$Q/off.h.f32" > /dev/null 2>&1
mkdir -p "$Q/row"
$R $D/i8r --gguf $D/q4k.gguf $S --tokens $T,570 -n 1 --dump-buffer a.3="$Q/row/a3.f32" --dump-buffer y.1.perm="$Q/row/perm.f32" \
  --dump-buffer y.1.off="$Q/row/off.f32" --dump-buffer y.1.h="$Q/row/i8.h.f32" > /dev/null 2>&1
$R $D/offr --gguf $D/q4k.gguf $S --tokens $T,570 -n 1 --dump-buffer y.1.h="$Q/row/off.h.f32" > /dev/null 2>&1
(cd "$RES" && tar cf "q4k-$stamp.tar" "q4k-$stamp" && rm -rf "q4k-$stamp")
ls -la "$RES/q4k-$stamp.tar"
