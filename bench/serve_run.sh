#!/usr/bin/env bash
# On the GPU machine, after bench/serve_prepare.sh here (carry build-decode):
# strata-serve --parallel 16 on the full Qwen4-Exp (shapes-only GGUF,
# synthetic weights, plan-serve16) under bench/serve_load.py: 16 concurrent
# streaming completions of 1024 prompt ids and 256 generated tokens each
# (temperature 0, ignore_eos). Then, with the server stopped, the
# references on the same plan: strata-run alone on client 0's prompt (its
# ids set against stream 0's; a GPU run of several rows may take other GEMM
# forms than a run of one, so near-ties may part them) and decode_run.sh's
# batched decode (B = 16 after 256-token prompts, 32 steps) whose tokens/s
# the issue's bar is 80 % of, and the same after the server's 1024-token
# prompts (its context: the cache reads of attention and QSA selection).
# One results file in RESULTS_DIR (the argument, else $RESULTS_DIR, else
# $OUT, else bench/results): serve-STAMP.txt with the machine, the date, the
# commits, the plan's options, every number, the server's /metrics at the
# end and its log; serve-STAMP.json beside it (the client's numbers and each
# stream's ids). The server is build-rt/'s (test/device/build_runtime.sh),
# or, where that build has none (no cpp-httplib or PCRE2 headers there),
# build-decode/serve-bin/'s (built here by serve_prepare.sh, with its
# libraries). Every step has a timeout within a budget of SERVE_BUDGET
# seconds (default 480). SERVE_PLAN names another plan folder of
# build-decode (serve_prepare.sh's, same variable). Without a GPU: "SKIPPED: no GPU", exit status 77.
#   bash bench/serve_run.sh [RESULTS_DIR]
#   bash bench/serve_run.sh --dry-run [RESULTS_DIR]   here, on the CPU: a
#     tiny qwen4exp (shapes only, its vocabulary removed as full.gguf has
#     none, synthetic weights) and a host plan in SERVE_DRY_DIR (default
#     build-serve-dry/), tools from SERVE_BIN (default build/bin); 4
#     clients, 64-token prompts, 16 tokens each; stream 0 must equal
#     strata-run's ids exactly (ctest serve_bench_dry runs this)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s)
BUDGET=${SERVE_BUDGET:-480}
# tmo CAP: a step's timeout: CAP seconds, or what the budget has left.
tmo() {
  local left=$((BUDGET - ($(date +%s) - T0)))
  local t=$((left < $1 ? left : $1))
  echo $((t < 5 ? 5 : t))
}

DRY=0
if [ "${1:-}" = --dry-run ]; then
  DRY=1
  shift
fi
RES=${1:-${RESULTS_DIR:-${OUT:-bench/results}}}
mkdir -p "$RES"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
if [ $DRY = 1 ]; then
  out=$RES/serve-dry-$STAMP.txt
else
  out=$RES/serve-$STAMP.txt
fi
: > "$out"
say() { echo "$*" | tee -a "$out"; }

SEED=1 # --synthetic-weights, as decode_run.sh
SERVE_ENV=()
if [ $DRY = 1 ]; then
  B=${SERVE_BIN:-build/bin}
  D=${SERVE_DRY_DIR:-build-serve-dry}
  N=4 P=64 G=16
  for tool in strata-gguf strata-compile strata-run strata-serve; do
    [ -x "$B/$tool" ] || { say "error: $B/$tool missing: build the project first (or set SERVE_BIN)"; exit 1; }
  done
  mkdir -p "$D"
  TYPES=$(sed -n "s/^TYPES='\(.*\)'\$/\1/p" bench/decode_prepare.sh)
  if [ ! -f "$D/tiny.gguf" ]; then
    "$B/strata-gguf" synth --arch qwen4exp --preset tiny --seed 0 --shapes-only --types "$TYPES" \
      -o "$D/tiny-vocab.gguf" > /dev/null || exit 1
    python3 test/serve/no_vocab_gguf.py "$D/tiny-vocab.gguf" "$D/tiny.gguf" || exit 1
  fi
  GGUF=$D/tiny.gguf
  PLAN=$D/plan
  OPTS="--max-tokens 16 --max-context 96 --max-batch 4 --logits all --target host"
  rm -rf "$PLAN"
  # shellcheck disable=SC2086
  "$B/strata-compile" models/qwen4exp.strata --gguf "$GGUF" $OPTS -o "$PLAN" > /dev/null || exit 1
  echo "strata-compile models/qwen4exp.strata --gguf tiny.gguf $OPTS" > "$PLAN/OPTIONS"
  python3 - "$D/tokens-$P.txt" "$P" <<'PY'
import random, sys
rng = random.Random(0)
open(sys.argv[1], "w").write(",".join(str(rng.randrange(256)) for _ in range(int(sys.argv[2]))) + "\n")
PY
  TOKENS=$D/tokens-$P.txt
  REF_TOKENS=$TOKENS
  SERVE=$B/strata-serve
  RUN=$B/strata-run
  EXTRA=(--threads 2)
  SERVE_FROM="$B (dry run)"
else
  if ! nvidia-smi > /dev/null 2>&1; then
    echo "SKIPPED: no GPU" | tee "$out"
    exit 77
  fi
  D=build-decode
  N=16 P=1024 G=256
  GGUF=$D/full.gguf
  PLAN=$D/${SERVE_PLAN:-plan-serve16}
  TOKENS=$D/tokens-1024.txt
  REF_TOKENS=$D/tokens-256.txt
  for f in "$GGUF" "$PLAN/plan.json" "$TOKENS" "$REF_TOKENS"; do
    [ -e "$f" ] || { say "error: $f missing: run bash bench/serve_prepare.sh here and carry build-decode"; exit 1; }
  done
  timeout "$(tmo 240)" bash test/device/build_runtime.sh || { say "error: the runtime did not build"; exit 1; }
  RUN=build-rt/bin/strata-run
  # The carried server finds its libraries through LD_LIBRARY_PATH, set for
  # it alone (strata-run keeps the machine's).
  if [ -x build-rt/bin/strata-serve ]; then
    SERVE=build-rt/bin/strata-serve
    SERVE_FROM="build-rt (built here)"
  elif [ -x "$D/serve-bin/strata-serve" ]; then
    SERVE=$D/serve-bin/strata-serve
    SERVE_ENV=(env "LD_LIBRARY_PATH=$PWD/$D/serve-bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    SERVE_FROM="$D/serve-bin (built on the development machine, commit $(cat "$D/serve-bin/COMMIT"); build-rt has none: $(grep -h 'strata-serve:\|PCRE2' build-rt.log 2> /dev/null | head -2 | tr '\n' ' '))"
    if "${SERVE_ENV[@]}" ldd "$SERVE" | grep -q "not found"; then
      say "error: $SERVE cannot load its libraries: $("${SERVE_ENV[@]}" ldd "$SERVE" | grep 'not found' | tr -s ' \t\n' ' ')"
      exit 1
    fi
  else
    say "error: build-rt/bin/strata-serve was not built (build-rt.log: $(grep -h 'strata-serve:\|PCRE2' build-rt.log 2> /dev/null | tr '\n' ' ')) and $D/serve-bin/ is missing: run bench/serve_prepare.sh here"
    exit 1
  fi
  EXTRA=()
fi

{
  echo "# strata-serve --parallel $N under bench/serve_load.py: $N concurrent streaming completions, $P prompt ids, $G generated each (temperature 0, ignore_eos)"
  if [ $DRY = 1 ]; then
    echo "# DRY RUN on the CPU ($(nproc) cores): tiny qwen4exp, host plan; $(date -u); commit $(git describe --always --dirty 2> /dev/null || echo "unknown (no git)")"
  else
    echo "# $(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), commit $(git describe --always --dirty 2> /dev/null || echo "unknown (no git)"), plan commit $(cat "$PLAN/COMMIT" 2> /dev/null)"
    echo "# model: full Qwen4-Exp, shapes-only GGUF (no vocabulary: token ids in and out), synthetic weights (seed $SEED)"
    echo "# decode step of the plan: $(cat "$PLAN/decode-report.txt" 2> /dev/null)"
  fi
  echo "# plan: $(cat "$PLAN/OPTIONS")"
  echo "# server: $SERVE_FROM"
  echo "#   $SERVE $PLAN --gguf $GGUF --host 127.0.0.1 --port 0 --parallel $N --queue 0 --synthetic-weights $SEED ${EXTRA[*]} --chat-format none"
} | tee -a "$out"

LOG=$(mktemp)
# The shapes-only GGUF has no chat template (strata-serve refuses to start
# without one or --chat-format); the load test sends completions of ids.
"${SERVE_ENV[@]}" "$SERVE" "$PLAN" --gguf "$GGUF" --host 127.0.0.1 --port 0 --parallel $N --queue 0 \
  --synthetic-weights $SEED "${EXTRA[@]}" --chat-format none 2> "$LOG" &
SPID=$!
stop_server() {
  [ -n "${SPID:-}" ] || return 0
  local how="stopped (SIGTERM)"
  kill -0 "$SPID" 2> /dev/null || how="had exited"
  kill -TERM "$SPID" 2> /dev/null
  local _
  for _ in $(seq 1 60); do
    kill -0 "$SPID" 2> /dev/null || break
    sleep 0.5
  done
  if kill -0 "$SPID" 2> /dev/null; then
    say "error: strata-serve did not stop within 30 s of SIGTERM; killed"
    kill -KILL "$SPID" 2> /dev/null
  fi
  wait "$SPID" 2> /dev/null
  local rc=$?
  say "server $how, exit status $rc"
  SPID=
  { echo "== server log"; cat "$LOG"; } >> "$out"
  rm -f "$LOG"
}
trap 'stop_server' EXIT

# The "listening on" line gives the port; then /health must answer.
URL=
deadline=$(($(date +%s) + $(tmo 180)))
while [ "$(date +%s)" -lt "$deadline" ]; do
  URL=$(sed -n 's/.*listening on \(http:\/\/[0-9.]*:[0-9]*\).*/\1/p' "$LOG" | head -1)
  [ -n "$URL" ] && break
  kill -0 "$SPID" 2> /dev/null || break
  sleep 0.5
done
if [ -z "$URL" ]; then
  say "error: strata-serve did not start: $(tail -3 "$LOG" | tr '\n' ' ')"
  exit 1
fi
say "listening: $URL after $(($(date +%s) - T0)) s of this script ($(grep -h 'listening on' "$LOG"))"
python3 - "$URL" <<'PY' || { say "error: $URL/health did not answer"; exit 1; }
import sys, time, urllib.request
for _ in range(60):
    try:
        if urllib.request.urlopen(sys.argv[1] + "/health", timeout=5).status == 200:
            sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit(1)
PY

say "== load: $N clients"
JSON=${out%.txt}.json
LT=$(tmo 300)
timeout $((LT + 10)) python3 bench/serve_load.py --url "$URL" --clients $N --prompt-tokens $P \
  --max-tokens $G --tokens-file "$TOKENS" --timeout "$LT" --json "$JSON" 2>&1 | tee -a "$out"
LOAD_RC=${PIPESTATUS[0]}
say "serve_load exit status $LOAD_RC"

say "== /metrics after the load"
python3 -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1] + '/metrics', timeout=10).read().decode())" "$URL" 2>&1 |
  grep -v '^#' | grep -v '^$' >> "$out"
stop_server

# The references on the same plan, the GPU to themselves.
say "== strata-run alone on stream 0's prompt ($P ids), -n $G --temp 0 --ignore-eos"
REF=$(mktemp)
timeout "$(tmo 90)" "$RUN" "$PLAN" --gguf "$GGUF" --synthetic-weights $SEED --tokens-file "$TOKENS" \
  -n $G --temp 0 --ignore-eos "${EXTRA[@]}" 2> "$REF.err" > "$REF"
say "$(grep -E 'timings|error' "$REF.err")"
SAME=$(python3 - "$JSON" "$REF" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
mine = r["streams"][0]["ids"]
ref = [int(x) for x in open(sys.argv[2]).read().split()]
if mine == ref:
    print(f"equal ({len(ref)} ids)")
else:
    k = next((i for i, (a, b) in enumerate(zip(mine, ref)) if a != b), min(len(mine), len(ref)))
    print(f"differ from token {k} on ({len(mine)} and {len(ref)} ids)")
PY
)
say "stream 0's ids against strata-run alone: $SAME"
rm -f "$REF" "$REF.err"
REF_RATE=
if [ $DRY = 0 ]; then
  say "== batched decode reference (decode_run.sh's): B = 16 sequences after 256-token prompts, 32 steps"
  line=$(timeout "$(tmo 90)" "$RUN" "$PLAN" --gguf "$GGUF" --synthetic-weights $SEED \
    --tokens-file "$REF_TOKENS" -n 33 --batch 16 2>&1 > /dev/null | grep -E "timings|error")
  say "$line"
  REF_RATE=$(echo "$line" | sed -n 's/.*(\([0-9.]*\) ms a step, \([0-9.]*\) tokens\/s in all).*/\2/p')
  # The same at the server's context (its prompts): attention and QSA
  # selection read ~4x the cache of the 256-token reference.
  say "== batched decode at the server's context: B = $N sequences after $P-token prompts, 32 steps"
  line=$(timeout "$(tmo 120)" "$RUN" "$PLAN" --gguf "$GGUF" --synthetic-weights $SEED \
    --tokens-file "$TOKENS" -n 33 --batch $N 2>&1 > /dev/null | grep -E "timings|error")
  say "$line"
  REF_RATE_P=$(echo "$line" | sed -n 's/.*(\([0-9.]*\) ms a step, \([0-9.]*\) tokens\/s in all).*/\2/p')
fi

python3 - "$JSON" "${REF_RATE:-}" "$DRY" "${REF_RATE_P:-}" <<'PY' | tee -a "$out"
import json, sys
r = json.load(open(sys.argv[1]))
ref = float(sys.argv[2]) if sys.argv[2] else None
ref_p = float(sys.argv[4]) if sys.argv[4] else None
print("== summary")
if "aggregate_tokens_per_s" not in r:
    print("  no numbers: the load failed (above)")
    sys.exit()
agg, dec = r["aggregate_tokens_per_s"], r["decode_phase_tokens_per_s"]
t, i = r["ttft_s"], r["itl_s"]
print(f"  aggregate {agg:.1f} tokens/s (prefill of every prompt included), decode phase {dec:.1f} tokens/s")
print(f"  TTFT p50 {t['p50']:.3f} s, p99 {t['p99']:.3f} s; ITL p50 {i['p50'] * 1e3:.1f} ms, p99 {i['p99'] * 1e3:.1f} ms")
if sys.argv[3] == "0":
    for name, base in (("the issue's figure (bench/results/decode-20261203T164145Z.txt)", 191.0),
                       ("today's batched decode on this plan", ref),
                       ("the same at the server's context", ref_p)):
        if base:
            print(f"  against {name}, {base:.1f} tokens/s: aggregate {100 * agg / base:.0f} %, "
                  f"decode phase {100 * dec / base:.0f} % (bar: 80 %)")
PY
say "total $(($(date +%s) - T0)) s"
[ "$LOAD_RC" = 0 ] || exit 1
if [ $DRY = 1 ] && [ "${SAME%% *}" != equal ]; then
  say "error: the dry run's stream 0 differs from strata-run alone"
  exit 1
fi
exit 0
