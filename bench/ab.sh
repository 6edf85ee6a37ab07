#!/usr/bin/env bash
# A/B of compiler variants on the full qwen4exp prefill (T = 16,384), the
# optimisation loop's measurement: a variant is the plan strata-compile makes
# with some code generation options (--codegen-opt, e.g. gemm-core=mma;
# strata-compile --codegen-opt help lists them) and/or with another build's
# binaries (a branch's worktree); every variant is
# profiled in one GPU call, alternating, so the differences are measured side
# by side on the same machine state.
#   here: bash bench/ab.sh prepare NAME[=OPT=VAL,...][@BIN_DIR] ...
#         plan-NAME in build-full/ (cubins, plan.json, COMMIT, OPTIONS) for each
#         spec; BIN_DIR defaults to build/bin; needs build-full/full.gguf and
#         the prompts (bash bench/prepare.sh). Carry build-full/ to the GPU.
#         A BIN_DIR of another worktree (another commit) compiles that
#         worktree's models/qwen4exp.strata, and its runtime's source goes
#         along (plan-NAME/runtime.tar.gz: git archive of CMakeLists.txt,
#         runtime/ and tools/, ~160 KB), as the runtime of this tree may
#         refuse an older plan format.
#   GPU:  bash bench/ab.sh run RESULTS_DIR [--repeat N] NAME ...
#         builds the runtime (and each plan's own from runtime.tar.gz, if
#         it has one), runs `strata-run --profile` on plan-NAME N times
#         each (2), alternating, and writes RESULTS_DIR/ab-STAMP.txt: GPU,
#         driver, date, each plan's commit and options, the mean ms of
#         every kernel family per plan and its change against the first plan,
#         then the raw profiles. Without an NVIDIA GPU: SKIPPED, exit 77.
set -uo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '2,17p' "$0"; }
die() { echo "bench/ab.sh: error: $*" >&2; exit 2; }

prepare() {
  [ $# -gt 0 ] || die "prepare needs at least one NAME[=OPT=VAL,...][@BIN_DIR]"
  [ -f build-full/full.gguf ] || die "build-full/full.gguf missing: run bash bench/prepare.sh first"
  for spec in "$@"; do
    local name=$spec opts="" bin=build/bin
    if [[ "$name" == *@* ]]; then bin=${name##*@}; name=${name%@*}; fi
    if [[ "$name" == *=* ]]; then opts=${name#*=}; name=${name%%=*}; fi
    [[ "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || die "'$spec': NAME must be letters, digits, '.', '_' or '-'"
    [ -x "$bin/strata-compile" ] || die "'$spec': $bin/strata-compile missing (build it first)"
    local items=() args=()
    if [ -n "$opts" ]; then
      IFS=, read -ra items <<< "$opts"
      for v in "${items[@]}"; do
        [[ "$v" =~ ^[a-z0-9-]+=.+$ ]] || die "'$spec': '$v' is not OPTION=VALUE (strata-compile --codegen-opt help)"
        args+=(--codegen-opt "$v")
      done
    fi
    local out=build-full/plan-$name tmp model=models/qwen4exp.strata
    local tree
    tree=$(cd "$bin/../.." 2>/dev/null && git rev-parse --show-toplevel 2>/dev/null) || tree=""
    local own=0
    if [ -n "$tree" ] && [ "$tree" != "$(git rev-parse --show-toplevel)" ]; then
      own=1
      model=$tree/models/qwen4exp.strata
    fi
    tmp=$(mktemp -d)
    if ! "$bin/strata-compile" "$model" --gguf build-full/full.gguf \
        --max-tokens 16384 --target sm_90 --logits last "${args[@]}" -o "$tmp/plan" > "$tmp/log" 2>&1; then
      echo "bench/ab.sh: error: '$spec' did not compile:" >&2; tail -5 "$tmp/log" >&2
      rm -rf "$tmp"; exit 1
    fi
    rm -rf "$out" && mkdir -p "$out/kernels"
    cp "$tmp/plan/plan.json" "$out/" && cp "$tmp/plan/kernels/"*.cubin "$out/kernels/"
    (cd "$(dirname "$bin")/.." 2>/dev/null && git describe --always --dirty 2>/dev/null) > "$out/COMMIT" ||
      echo unknown > "$out/COMMIT"
    echo "${opts:-(none)}" > "$out/OPTIONS"
    if [ $own = 1 ]; then
      git -C "$tree" archive --format=tar.gz -o "$(pwd)/$out/runtime.tar.gz" HEAD CMakeLists.txt runtime tools
    fi
    rm -rf "$tmp"
    echo "plan-$name: $(ls "$out/kernels" | wc -l) kernels, commit $(cat "$out/COMMIT"), options ${opts:-(none)}"
  done
  du -sh build-full
}

run() {
  local res=${1:-}; [ -n "$res" ] || die "run needs RESULTS_DIR"; shift
  local repeat=2
  if [ "${1:-}" = --repeat ]; then repeat=${2:?--repeat needs a count}; shift 2; fi
  [[ "$repeat" =~ ^[1-9][0-9]*$ ]] || die "--repeat takes a positive count"
  [ $# -gt 0 ] || die "run needs at least one plan NAME"
  for n in "$@"; do
    [ -f "build-full/plan-$n/plan.json" ] || die "build-full/plan-$n missing (bench/ab.sh prepare here, then carry build-full/)"
  done
  if ! nvidia-smi > /dev/null 2>&1; then
    echo "SKIPPED: no NVIDIA GPU here (bench/ab.sh run runs on the lent GPU machine)"; exit 77
  fi
  bash test/device/build_runtime.sh || exit 1
  # A plan of another commit runs on that commit's runtime.
  declare -A rt
  for n in "$@"; do
    rt[$n]=build-rt/bin/strata-run
    local src=build-full/plan-$n/runtime.tar.gz own=/tmp/ab-rt-$n
    [ -f "$src" ] || continue
    rm -rf "$own" && mkdir -p "$own/src" && tar xzf "$src" -C "$own/src" || die "plan-$n: runtime.tar.gz does not unpack"
    if ! { cmake -S "$own/src" -B "$own/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_RUNTIME_ONLY=ON \
             -DSTRATA_TESTS=OFF && cmake --build "$own/build" -j --target strata-run; } > "$own/build.log" 2>&1; then
      tail -20 "$own/build.log"; die "plan-$n: its runtime did not build"
    fi
    rt[$n]=$own/build/bin/strata-run
  done
  mkdir -p "$res"
  local stamp raw
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  raw=$(mktemp)
  for ((i = 1; i <= repeat; ++i)); do
    for n in "$@"; do
      echo "## plan-$n run $i" >> "$raw"
      "${rt[$n]}" "build-full/plan-$n" --gguf build-full/full.gguf --synthetic-weights 1 \
        --tokens-file build-full/tokens-16384.txt --profile >> "$raw" 2>&1 ||
        echo "## plan-$n run $i: strata-run failed (rc $?)" >> "$raw"
    done
  done
  {
    echo "# bench/ab.sh: kernel families per plan, full qwen4exp, T = 16384, synthetic weights seed 1"
    echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ), GPU $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $repeat runs each, alternating"
    for n in "$@"; do
      echo "# plan-$n: commit $(cat "build-full/plan-$n/COMMIT" 2>/dev/null || echo unknown), options $(cat "build-full/plan-$n/OPTIONS" 2>/dev/null || echo unknown), runtime ${rt[$n]}"
    done
    python3 bench/ab_table.py "$raw" "$@"
    echo
    cat "$raw"
  } > "$res/ab-$stamp.txt"
  rm -f "$raw"
  sed -n '/^| family/,/^$/p' "$res/ab-$stamp.txt"
  echo "wrote $res/ab-$stamp.txt"
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  -h|--help) usage ;;
  *) usage; exit 2 ;;
esac
