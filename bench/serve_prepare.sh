#!/usr/bin/env bash
# On the development machine: what bench/serve_run.sh needs on the GPU
# machine, in build-decode/ beside bench/decode_prepare.sh's files (one
# carry of build-decode serves both benchmarks):
#   full.gguf       the full-size qwen4exp as shapes only, no vocabulary
#                   (decode_prepare.sh's; made here, by the same command,
#                   only when missing)
#   plan-serve16/   its sm_90 plan for strata-serve --parallel 16:
#                   --max-tokens 512 (SERVE_CHUNK: a run's rows, the decode
#                   rows and a prompt chunk beside them; chunks of 64 cost
#                   a 64-row run about what a 512-row run costs, since
#                   either decodes most experts' weights: TTFT p50 39 s for
#                   16 x 1024 prompts, 2026-12-03) --max-context 1344 (a 1024-token prompt and 256
#                   generated, 1280, in chunks of 64) --max-batch 16
#                   --logits all (strata-serve refuses --parallel > 1 on a
#                   last-row plan); gemm-decode-rows 16 (SERVE_DECODE_ROWS):
#                   every decode step of up to 16 slots takes the decode
#                   forms, whose per-row sums do not depend on the other
#                   rows (the tiles from 9 rows, plan-b16-r8's, round
#                   through bf16 matrix units: a stream's greedy ids then
#                   differ from strata-run alone on near ties, 2026-12-03),
#                   with the trunk GEMMs' decode form on the matrix units
#                   at every row count (gemm-decode-mma=1) and the grouped
#                   experts' tiles from one row (grouped-decode-rows=0):
#                   each family one form at every row count, so a row's
#                   sums still do not depend on the others (SERVE_FORMS;
#                   H100, 12-layer model, 16-row step 14.2 ms against 18.3
#                   with the warp dot products, tiny plans --check PASS at
#                   B = 16: decode-batch-full12-ind-20261206T031111Z-h100.txt).
#                   Cubins only; OPTIONS (the
#                   compile command), COMMIT, decode-report.txt (the
#                   --report's decode step of 16 rows at 1280 positions)
#   tokens-1024.txt and tokens-256.txt  the prompts (as decode_prepare.sh)
#   serve-bin/      strata-serve from BUILD_DIR, stripped, and the shared
#                   libraries of it that the GPU machine's image may lack
#                   (cpp-httplib, Brotli, fmt, PCRE2) in serve-bin/lib: what
#                   serve_run.sh runs where build-rt/ could not build the
#                   server (no libcpp-httplib-dev or libpcre2-dev there)
# SERVE_PLAN names the plan's folder (default plan-serve16) and SERVE_OPTS
# adds codegen options (NAME=VALUE, comma-separated; SERVE_FORMS= empty
# drops the two forms above), for A/B runs of the
# server (serve_run.sh reads SERVE_PLAN too).
# The plan is always remade (it follows the code generator), the rest only
# when missing (serve-bin/ always: it follows the server). Prints the
# compile time and the sizes each part adds to build-decode's tar.xz.
#   bash bench/serve_prepare.sh [BUILD_DIR] [OUT_DIR]   (build, build-decode)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}/bin
OUT=${2:-build-decode}
for tool in strata-gguf strata-compile strata-serve; do
  [ -x "$B/$tool" ] || { echo "error: $B/$tool missing: build the project first"; exit 1; }
done
# The UD-IQ4_XS-like mix: decode_prepare.sh's, read from it so that the two
# scripts cannot make different full.gguf files.
TYPES=$(sed -n "s/^TYPES='\(.*\)'\$/\1/p" bench/decode_prepare.sh)
[ -n "$TYPES" ] || { echo "error: no TYPES='...' line in bench/decode_prepare.sh"; exit 1; }
mkdir -p "$OUT"
[ -f "$OUT/full.gguf" ] ||
  "$B/strata-gguf" synth --arch qwen4exp --preset full --seed 0 --shapes-only --types "$TYPES" -o "$OUT/full.gguf"
for p in 256 1024; do
  [ -f "$OUT/tokens-$p.txt" ] || python3 bench/strata_bench.py tokens --T "$p" --vocab 248320 -o "$OUT/tokens-$p.txt"
done

OPTS="--max-tokens ${SERVE_CHUNK:-512} --max-context 1344 --max-batch 16 --logits all --target sm_90 --codegen-opt gemm-decode-rows=${SERVE_DECODE_ROWS:-16}"
for o in ${SERVE_FORMS-gemm-decode-mma=1 grouped-decode-rows=0}; do OPTS="$OPTS --codegen-opt $o"; done
for o in ${SERVE_OPTS:+${SERVE_OPTS//,/ }}; do OPTS="$OPTS --codegen-opt $o"; done
P=$OUT/${SERVE_PLAN:-plan-serve16}
rm -rf "$P"
t0=$(date +%s.%N)
# shellcheck disable=SC2086
"$B/strata-compile" models/qwen4exp.strata --gguf "$OUT/full.gguf" $OPTS -o "$P" > /dev/null
t1=$(date +%s.%N)
# shellcheck disable=SC2086
"$B/strata-compile" models/qwen4exp.strata --gguf "$OUT/full.gguf" $OPTS --no-codegen --context 1280 \
  --report -o "$OUT/plan-serve16-report" | grep -i "decode step" > "$P/decode-report.txt"
rm -rf "$OUT/plan-serve16-report"
find "$P" \( -name '*.ptx' -o -name '*.cu' -o -name '*.hip' -o -name '*.ptxas.txt' \) -delete
echo "strata-compile models/qwen4exp.strata --gguf full.gguf $OPTS" > "$P/OPTIONS"
(git describe --always --dirty 2>/dev/null || echo unknown) > "$P/COMMIT"

# strata-serve and the libraries the GPU machine's image may not have.
S=$OUT/serve-bin
rm -rf "$S"
mkdir -p "$S/lib"
strip -o "$S/strata-serve" "$B/strata-serve" 2>/dev/null || cp "$B/strata-serve" "$S/strata-serve"
ldd "$B/strata-serve" | awk '/=> \//{print $3}' |
  grep -E '/lib(cpp-httplib|brotli(common|dec|enc)|fmt|pcre2-8)\.so' |
  while read -r lib; do cp -L "$lib" "$S/lib/"; done
(git describe --always --dirty 2>/dev/null || echo unknown) > "$S/COMMIT"

printf "$(basename "$P") compiled in %.1f s (%s)\n" "$(echo "$t1 - $t0" | bc)" "$OPTS"
cat "$P/decode-report.txt"
size() { tar -cJf - -C "$OUT" "$@" | wc -c; }
echo "sizes (xz-compressed, what each adds to build-decode's carry):"
printf "  %s: %.2f MB (%s uncompressed; cubins %s)\n" "$(basename "$P")" "$(echo "$(size "$(basename "$P")") / 1000000" | bc -l)" \
  "$(du -sh "$P" | cut -f1)" "$(du -ch "$P"/kernels/*.cubin | tail -1 | cut -f1)"
printf "  serve-bin:    %.2f MB (%s uncompressed)\n" "$(echo "$(size serve-bin) / 1000000" | bc -l)" \
  "$(du -sh "$S" | cut -f1)"
du -sh "$OUT"
