#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-19, ASan+UBSan) and runs each for a
# bounded time. Fails on any crash, leak, timeout or out-of-memory.
#   scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
CC=clang-19 CXX=clang++-19 cmake -S . -B build-fuzz -G Ninja \
  -DSTRATA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() { # name corpus-dir extra-args...
  local name=$1 seeds=$2; shift 2
  mkdir -p "$work/$name"
  echo "fuzz: $name for ${secs}s (seeds: $seeds)"
  mkdir -p build-fuzz/artifacts
  build-fuzz/bin/$name "$work/$name" "$seeds" -max_total_time="$secs" \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/artifacts/$name- "$@" \
    >"$work/$name.log" 2>&1 || { tail -60 "$work/$name.log"; echo "fuzz: $name FAILED (input kept in build-fuzz/artifacts/)"; exit 1; }
  grep -E 'stat::number_of_executed_units|Done' "$work/$name.log" | tail -2
}

# Parser: every .strata file in the repo is a seed.
mkdir -p "$work/parser-seeds"
for f in $(git ls-files '*.strata' 2>/dev/null || find models test -name '*.strata'); do
  cp "$f" "$work/parser-seeds/$(echo "$f" | tr / _)"
done
run strata-parser-fuzzer "$work/parser-seeds" -max_len=65536 \
  -dict=test/fuzz/strata.dict
if [ -x build-fuzz/bin/strata-gguf-fuzzer ]; then
  run strata-gguf-fuzzer test/fuzz/corpus/gguf -max_len=8192
fi
# Tokenizer: the first byte picks text (round trip over a built-in
# vocabulary), token ids to decode, or a GGUF image as the vocabulary.
run strata-tokenizer-fuzzer test/fuzz/corpus/tokenizer -max_len=4096
# strata-serve's request bodies (both endpoints), chat templates and stop
# strings: the first byte of a seed ('0' to '3') picks which.
if [ -x build-fuzz/bin/strata-request-fuzzer ]; then
  run strata-request-fuzzer test/fuzz/corpus/request -max_len=4096 \
    -dict=test/fuzz/request.dict
else
  echo "fuzz: strata-request-fuzzer SKIPPED (strata-serve's core is not" \
    "built: PCRE2 or cpp-httplib missing)"
fi
# Plans: seeds are real plans of the four archs (tiny models, T = 4, host
# and gfx1151 storage policies, and the stateful form with --max-context 16)
# and hand-made minimal plans; each validating
# plan runs on the tiny GGUF of its arch (STRATA_PLAN_FUZZ_DIR). Huge
# allocations a plan asks for are errors, not fuzzer crashes.
mkdir -p "$work/plan-seeds" "$work/plan-gguf"
cp test/fuzz/corpus/plan/* "$work/plan-seeds/"
for arch in qwen3 qwen3moe qwen3next qwen4exp; do
  extra=()
  [ "$arch" = qwen4exp ] && extra=(--compress-ratio 4)
  build-fuzz/bin/strata-gguf synth --arch "$arch" --preset tiny --seed 1 \
    "${extra[@]}" -o "$work/plan-gguf/$arch.gguf" >/dev/null
  for precision in f32 bf16; do
    build-fuzz/bin/strata-compile "models/$arch.strata" \
      --gguf "$work/plan-gguf/$arch.gguf" --max-tokens 4 \
      --precision "$precision" -o "$work/plan-$arch-$precision" >/dev/null
    cp "$work/plan-$arch-$precision/plan.json" \
      "$work/plan-seeds/$arch-$precision.json"
  done
  # The stateful form (plan version 3: KV caches, conv windows, delta-rule
  # states, QSA indexer keys, the PLE history; rows of slot 0).
  build-fuzz/bin/strata-compile "models/$arch.strata" \
    --gguf "$work/plan-gguf/$arch.gguf" --max-tokens 4 --max-context 16 \
    --max-batch 2 -o "$work/plan-$arch-state" >/dev/null
  cp "$work/plan-$arch-state/plan.json" "$work/plan-seeds/$arch-state.json"
done
STRATA_PLAN_FUZZ_DIR="$work/plan-gguf" \
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1" \
  run strata-plan-fuzzer "$work/plan-seeds" -max_len=262144
echo "fuzz: ok"
