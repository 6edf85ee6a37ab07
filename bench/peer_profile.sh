#!/usr/bin/env bash
# On the GPU machine (carry build-carry/peer-plans.tar.xz and
# build-peer/{moe,q4x}.shapes.gguf, made here by bench/llamacpp_prepare.sh):
# strata's side of the llama.cpp peer runs, profiled kernel by kernel, on
# the shapes-only GGUFs with synthetic weights (no 200 s synth of data
# files): the prefill plan at 512 and 16,384 tokens (--repeat 3 --profile:
# the last run) and the decode plan's step after a 16-token prompt. One
# file per run in RESULTS_DIR (default $OUT, else bench/results).
#   bash bench/peer_profile.sh [moe] [q4x]
set -uo pipefail
cd "$(dirname "$0")/.."
RES=${RESULTS_DIR:-${OUT:-bench/results}}
mkdir -p "$RES"
nvidia-smi > /dev/null 2>&1 || { echo "SKIPPED: no GPU"; exit 77; }
bash test/device/build_runtime.sh > /dev/null || exit 1
P=build-peer/plans
rm -rf "$P" && mkdir -p "$P" &&
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    build-carry/peer-plans.tar.xz "$P" || exit 1
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(moe q4x)
for m in "${models[@]}"; do
  g=build-peer/$m.shapes.gguf
  out=$RES/peer-profile-$m-$STAMP.txt
  {
    echo "# $m: strata's peer plans (commit $(cat $P/$m/COMMIT)), $g, synthetic weights; $(date -u); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    for t in 512 16384; do
      echo "== prefill $t tokens"
      build-rt/bin/strata-run "$P/$m/plan-prefill" --gguf "$g" --synthetic-weights 1 \
        --tokens-file "$P/$m/tokens-$t.txt" --repeat 3 --profile 2>&1 | grep -v "^ *[0-9]* *[0-9.-]*$" | head -70
    done
    echo "== decode step after 16 tokens"
    build-rt/bin/strata-run "$P/$m/plan-decode" --gguf "$g" --synthetic-weights 1 \
      --tokens-file "$P/$m/tokens-16.txt" -n 4 --ignore-eos --profile 2>&1 | grep -v "^[0-9]*$" | head -70
  } > "$out" 2>&1
  # Every kernel of the 512-token prefill and of a decode step (JSON), then
  # grouped by (label, variant, MB).
  build-rt/bin/strata-run "$P/$m/plan-prefill" --gguf "$g" --synthetic-weights 1 \
    --tokens-file "$P/$m/tokens-512.txt" --repeat 2 --profile=json 2> /dev/null |
    sed -n '/^{"backend"/,$p' > "${out%.txt}-pp512.json"
  build-rt/bin/strata-run "$P/$m/plan-decode" --gguf "$g" --synthetic-weights 1 \
    --tokens-file "$P/$m/tokens-16.txt" -n 4 --ignore-eos --profile=json 2> /dev/null |
    sed -n '/^{"backend"/,$p' > "${out%.txt}-decode.json"
  python3 bench/profile_groups.py "${out%.txt}-pp512.json" "${out%.txt}-decode.json" >> "$out"
  echo "$out: $(wc -l < "$out") lines"
done
