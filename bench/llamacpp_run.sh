#!/usr/bin/env bash
# On the GPU machine, after bench/llamacpp_prepare.sh here (carry
# build-carry): llama.cpp's CUDA backend (llama-bench) and strata on the same
# GGUF files, in the same run (issue 33 item 5). For each model of
# bench/llamacpp_models.sh (moe: Qwen3-30B-A3B's shape, Q4_K_M-like; q4x:
# Qwen4-Exp full width, 12 layers, dense attention, UD-IQ4_XS-like):
#   llama-bench -p 512,16384 -n 128 -ngl 99 -fa on -r 3 (its default batch
#     2048 and ubatch 512): pp512, pp16384, tg128;
#   strata-run plan-prefill on 512 and 16,384 prompt ids (--repeat 4: the
#     median of runs 2-4, graph replays; 3 or 2 runs where pp512's median
#     says the long prompt takes over 8 or 20 s a run), and plan-decode after a 16-token
#     prompt, -n 129 (128 decode steps: the first token comes from the
#     prompt's logits; tokens/s = 128 / the generation time).
# Phases (each skips what is already there; the machine keeps ignored build
# outputs between calls while it stays warm, so build-peer/ and build-rt/
# survive only then):
#   prep  unpack build-carry/*.tar.xz into build-peer/; build llama-bench
#         (CUDA, sm_90, build-peer/llama-build; not where
#         build-carry/llama-bench-sm90.tar.xz holds one that runs) while the strata runtime
#         (build-rt/) builds and strata-gguf synth writes the data GGUFs
#         (build-peer/{moe,q4x}.gguf, --quant fast, 16 threads)
#   moe   the benchmarks of moe (runs prep's missing steps first)
#   q4x   the benchmarks of q4x (likewise)
# Default: prep moe q4x. Every phase rewrites the report from all results
# so far (build-peer/results/*.json) into RESULTS_DIR (default $OUT, else
# bench/results): llamacpp-STAMP.txt (machine, date, commits, every number,
# the ratio table strata / llama.cpp), llamacpp-STAMP.json and the raw log
# llamacpp-STAMP.log: three files.
#   bash bench/llamacpp_run.sh [prep] [moe] [q4x]
#   bash bench/llamacpp_run.sh --dry-run   here, on the CPU: PEER_TINY=1
#     bench/llamacpp_prepare.sh's host plans, tiny GGUFs, llama-bench built
#     CPU-only (PEER_LLAMA_BIN, default build-peer/llama-cpu/bin), strata
#     from PEER_STRATA_BIN (default build/bin); pp512 and tg128 only
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/llamacpp_models.sh
T0=$(date +%s)
BUDGET=${PEER_BUDGET:-580}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
# tmo RESERVE: a command's timeout, the budget less RESERVE seconds (>= 10).
tmo() { local t=$(($(left) - $1)); echo $((t < 10 ? 10 : t)); }

DRY=0
PHASES=()
for a in "$@"; do
  case $a in
  --dry-run) DRY=1 ;;
  prep | moe | q4x) PHASES+=("$a") ;;
  *) echo "usage: bash bench/llamacpp_run.sh [--dry-run] [prep] [moe] [q4x]"; exit 2 ;;
  esac
done
[ ${#PHASES[@]} -eq 0 ] && PHASES=(prep moe q4x)

RES=${RESULTS_DIR:-${OUT:-bench/results}}
mkdir -p "$RES"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOG=$RES/llamacpp-$STAMP.log
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }

if [ $DRY = 1 ]; then
  export PEER_TINY=1
  W=build-peer/tiny
  PLANS=$W
  LB=${PEER_LLAMA_BIN:-build-peer/llama-cpu/bin}
  SB=${PEER_STRATA_BIN:-build/bin}
  PP=512
  REPS=1
  NGL=0
else
  if ! nvidia-smi > /dev/null 2>&1; then
    echo "SKIPPED: no GPU" | tee -a "$LOG"
    exit 77
  fi
  W=build-peer
  PLANS=$W/plans
  LB=$W/llama-build/bin
  SB=build-rt/bin
  PP=${PEER_PP// /,}
  REPS=3
  NGL=99
fi
mkdir -p "$W/results"

# --- prep ------------------------------------------------------------------

unpack() {
  [ $DRY = 1 ] && return 0
  for f in build-carry/llamacpp.tar.xz build-carry/peer-plans.tar.xz; do
    [ -f "$f" ] || { say "error: $f missing: carry build-carry (bash bench/llamacpp_prepare.sh here)"; return 1; }
  done
  # The plans follow the carried archive every call (they are small).
  rm -rf "$PLANS" && mkdir -p "$PLANS" && untar build-carry/peer-plans.tar.xz "$PLANS" || return 1
  [ -d "$W/llama.cpp" ] || untar build-carry/llamacpp.tar.xz "$W" || return 1
  # A llama-bench built here beside the sources (optional, see
  # bench/llamacpp_prepare.sh): used if it runs.
  if [ -f build-carry/llama-bench-sm90.tar.xz ] && [ ! -x "$W/llama-carried/llama-bench" ]; then
    mkdir -p "$W/llama-carried" && untar build-carry/llama-bench-sm90.tar.xz "$W/llama-carried" || return 1
  fi
}

# untar ARCHIVE DIR, by Python's tarfile (no xz binary needed).
untar() {
  python3 - "$1" "$2" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall(sys.argv[2], filter="data")
    except TypeError:
        t.extractall(sys.argv[2])
PY
}

build_llama() {
  if [ $DRY = 0 ] && [ -x "$W/llama-carried/llama-bench" ] && "$W/llama-carried/llama-bench" --help > /dev/null 2>&1; then
    [ "$LB" = "$W/llama-carried" ] || say "   llama-bench: the carried build ($(cat "$W/llama-carried/BUILD" 2>/dev/null))"
    LB=$W/llama-carried
    return 0
  fi
  [ -x "$LB/llama-bench" ] && return 0
  if [ $DRY = 1 ]; then
    say "error: $LB/llama-bench missing: build llama.cpp CPU-only (bench/README.md)"
    return 1
  fi
  local t
  t=$(date +%s)
  say "== building llama-bench (CUDA, sm_90) in $W/llama-build"
  cmake -S "$W/llama.cpp" -B "$W/llama-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_OPENSSL=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_NUMBER=0 \
    -DLLAMA_BUILD_COMMIT="$(cat "$W/llama.cpp/STRATA_LLAMA_COMMIT" 2>/dev/null || echo unknown)" \
    >> "$W/llama-build.log" 2>&1 &&
    cmake --build "$W/llama-build" --target llama-bench -j "$(nproc)" >> "$W/llama-build.log" 2>&1
  local rc=$?
  say "   llama-bench build: rc $rc in $(($(date +%s) - t)) s"
  [ $rc = 0 ] || { tail -30 "$W/llama-build.log" | tee -a "$LOG"; return 1; }
  # The build took 396 s of a 600 s call (2026-12-03): hand the static
  # binary back through RESULTS_DIR, to be carried as
  # build-carry/llama-bench-sm90.tar.xz by later calls (see above).
  echo "llama.cpp $(cat "$W/llama.cpp/STRATA_LLAMA_COMMIT" 2>/dev/null || echo unknown), CUDA sm_90, static, built $(date -u +%FT%TZ)" \
    > "$W/llama-build/bin/BUILD"
  if tar -C "$W/llama-build/bin" -cf - llama-bench BUILD | xz -T0 -6 > "$RES/llama-bench-sm90.tar.xz"; then
    say "   llama-bench packed: $RES/llama-bench-sm90.tar.xz ($(du -h "$RES/llama-bench-sm90.tar.xz" | cut -f1)); carry it as build-carry/llama-bench-sm90.tar.xz"
  else
    rm -f "$RES/llama-bench-sm90.tar.xz"
    say "   llama-bench not packed (tar/xz failed): later calls build it again"
  fi
}

# build-rt/ once a call (ninja's no-op when it is up to date: a build-rt/
# left by another tree on a warm machine is brought up to this one).
STRATA_BUILT=0
build_strata() {
  if [ $DRY = 1 ]; then
    [ -x "$SB/strata-run" ] || { say "error: $SB/strata-run missing"; return 1; }
    return 0
  fi
  [ $STRATA_BUILT = 1 ] && return 0
  local t
  t=$(date +%s)
  bash test/device/build_runtime.sh >> "$LOG" 2>&1
  local rc=$?
  say "   strata runtime build: rc $rc in $(($(date +%s) - t)) s"
  [ $rc = 0 ] && STRATA_BUILT=1
  return $rc
}

# synth_model M: the data GGUF of model M, remade when its synth command
# (the plans' SYNTH) changed.
synth_model() {
  local m=$1 args
  args="$(cat "$PLANS/$m/SYNTH") --quant fast"
  if [ -f "$W/$m.gguf" ] && [ "$(cat "$W/$m.gguf.args" 2>/dev/null)" = "$args" ]; then
    return 0
  fi
  local t
  t=$(date +%s)
  rm -f "$W/$m.gguf" "$W/$m.gguf.args"
  # shellcheck disable=SC2086
  "$SB/strata-gguf" synth $args -o "$W/$m.gguf" 2> >(grep -v 'selects no tensor' >> "$LOG") || return 1
  echo "$args" > "$W/$m.gguf.args"
  say "   synth $m: $(du -h "$W/$m.gguf" | cut -f1) in $(($(date +%s) - t)) s"
}

prep() {
  unpack || return 1
  # strata's runtime and the GGUFs beside llama.cpp's build (its long nvcc
  # tail leaves cores idle).
  (build_strata && synth_model moe && synth_model q4x) &
  local bg=$!
  build_llama
  local rc=$?
  wait $bg || rc=1
  return $rc
}

# --- benchmarks --------------------------------------------------------------

# bench_model M: llama-bench and strata on model M; one JSON of results.
bench_model() {
  local m=$1
  local json=$W/results/$m.json
  { unpack && build_strata && synth_model "$m"; } || return 1
  build_llama || return 1
  local g=$W/$m.gguf
  say "== $m: $(cat "$PLANS/$m/SYNTH") --quant fast ($(du -h "$g" | cut -f1))"
  say "-- llama-bench -m $g -p $PP -n $PEER_TG -ngl $NGL -fa on -r $REPS"
  timeout $(tmo 60) "$LB/llama-bench" -m "$g" -p "$PP" -n "$PEER_TG" -ngl $NGL -fa on \
    -r $REPS -o jsonl -oe md > "$W/results/$m-llama.jsonl" 2>> "$LOG"
  say "   rc $? ($(wc -l < "$W/results/$m-llama.jsonl") results)"
  : > "$W/results/$m-strata.txt"
  local reps=4 ms
  for t in ${PP//,/ }; do
    # Longer prompts get fewer runs when the last one's median says a run
    # takes long (at least 2: the median of the later runs replays a graph).
    ms=$(awk '/^pp[0-9]+ repeat:/ {t = substr($1, 3); for (i = 1; i <= NF; i++) if ($i == "median") m = $(i + 1)} END {print (t ? m / t : 0)}' "$W/results/$m-strata.txt")
    reps=$(awk -v per="$ms" -v t="$t" 'BEGIN {e = per * t * 1.5 / 1000; print (e < 8 ? 4 : e < 20 ? 3 : 2)}')
    say "-- strata-run plan-prefill, $t tokens, --repeat $reps"
    timeout $(tmo 30) "$SB/strata-run" "$PLANS/$m/plan-prefill" --gguf "$g" \
      --tokens-file "$PLANS/$m/tokens-$t.txt" --repeat $reps 2>&1 |
      grep -E '^(time|repeat|graph):|error' | sed "s/^/pp$t /" | tee -a "$LOG" >> "$W/results/$m-strata.txt"
  done
  # The first prompt's kernels on the data file, grouped (the shapes-only
  # GGUF's synthetic weights gave q4x's pp512 27.6 ms against 43.6 ms here:
  # bench/peer_profile.sh).
  local first=${PP%%,*}
  say "-- strata-run plan-prefill, $first tokens, --profile (grouped by bench/profile_groups.py)"
  # (Beside the results, not among them: the report reads results/*.json
  # as the models' fragments.)
  mkdir -p "$W/profiles"
  timeout $(tmo 30) "$SB/strata-run" "$PLANS/$m/plan-prefill" --gguf "$g" \
    --tokens-file "$PLANS/$m/tokens-$first.txt" --profile=json 2> /dev/null |
    sed -n '/^{"backend"/,$p' > "$W/profiles/$m-pp$first.json" &&
    python3 bench/profile_groups.py "$W/profiles/$m-pp$first.json" > "$W/profiles/$m-pp$first.txt" &&
    head -24 "$W/profiles/$m-pp$first.txt" >> "$LOG"
  say "-- strata-run plan-decode, $PEER_TG_PROMPT-token prompt, -n $((PEER_TG + 1))"
  timeout $(tmo 10) "$SB/strata-run" "$PLANS/$m/plan-decode" --gguf "$g" \
    --tokens-file "$PLANS/$m/tokens-$PEER_TG_PROMPT.txt" -n $((PEER_TG + 1)) --ignore-eos 2>&1 > /dev/null |
    grep -E 'timings|error' | sed "s/^/tg$PEER_TG /" | tee -a "$LOG" >> "$W/results/$m-strata.txt"
  python3 bench/llamacpp_report.py fragment --model "$m" --synth "$(cat "$PLANS/$m/SYNTH") --quant fast" \
    --plan-commit "$(cat "$PLANS/$m/COMMIT")" --llama "$W/results/$m-llama.jsonl" \
    --strata "$W/results/$m-strata.txt" -o "$json" >> "$LOG" 2>&1
}

report() {
  local machine
  if [ $DRY = 1 ]; then
    machine="dry run on the CPU ($(nproc) cores): numbers meaningless"
  else
    machine="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader), $(nproc) cores, CUDA $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2)"
  fi
  python3 bench/llamacpp_report.py report --machine "$machine" \
    --commit "$(git describe --always --dirty 2>/dev/null || echo unknown)" \
    -o "$RES/llamacpp-$STAMP" "$W"/results/*.json 2>&1 | tee -a "$LOG"
}

say "# llama.cpp peer benchmark: phases ${PHASES[*]}, $(date -u)"
rc=0
for p in "${PHASES[@]}"; do
  say "== phase $p ($(left) s left)"
  if [ "$(left)" -lt 60 ]; then
    say "   skipped: under 60 s of the budget left"
    rc=1
    continue
  fi
  case $p in
  prep) prep || rc=1 ;;
  moe | q4x) bench_model "$p" || rc=1 ;;
  esac
  report > /dev/null
done
report
say "# done in $(($(date +%s) - T0)) s, rc $rc"
exit $rc
