#!/usr/bin/env bash
# On the lent GPU machine with build-full/ carried (made on the development
# machine: see full_run.sh): builds the runtime and times the full qwen4exp
# plan (last logits) with CUDA graphs (the default) and with --no-graphs at
# several prompt lengths, --repeat N runs each (the first run captures the
# graph; the figure is the later runs' median), and checks that both give the
# same logits. One results file per run and a summary under RESULTS_DIR.
#   bash test/device/graphs_run.sh RESULTS_DIR [REPEAT] [T ...]
# (default REPEAT 10, T = 1 1024; each strata-run loads and synthesises the
# weights anew, ~36 s in full_run.sh's results)
set -uo pipefail
cd "$(dirname "$0")/../.."
RES=${1:?results folder}
REPEAT=${2:-10}
shift $(( $# >= 2 ? 2 : $# ))
LENGTHS=${*:-1 1024}
mkdir -p "$RES"
nvidia-smi > /dev/null 2>&1 || { echo "SKIPPED: no NVIDIA GPU"; exit 77; }
[ -f build-full/tokens-4096.txt ] || { echo "error: build-full/ missing (see full_run.sh)"; exit 1; }
bash test/device/build_runtime.sh || exit 1
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)
SUMMARY="$RES/graphs-summary.txt"
echo "# full qwen4exp plan-last, synthetic weights seed 1, --repeat $REPEAT, GPU $GPU, $(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$SUMMARY"
fail=0
for t in $LENGTHS; do
  # The first t ids of the 4096-token prompt.
  tr -s ', \t\r' '\n\n\n\n' < build-full/tokens-4096.txt | grep -v '^$' | head -n "$t" | paste -sd, > "$RES/tokens-$t.txt"
  for mode in graphs no-graphs; do
    flag=$([ $mode = no-graphs ] && echo --no-graphs)
    out="$RES/graphs-T$t-$mode.txt"
    build-rt/bin/strata-run build-full/plan-last --gguf build-full/full.gguf --synthetic-weights 1 \
      --tokens-file "$RES/tokens-$t.txt" --repeat "$REPEAT" --top 3 $flag \
      --dump-logits "$RES/logits-T$t-$mode.f32" > "$out" 2>&1 || fail=1
    grep -E "^(time|repeat|graph):|error" "$out" | sed "s|^|T=$t $mode: |" | tee -a "$SUMMARY"
  done
  python3 - "$RES/logits-T$t-graphs.f32" "$RES/logits-T$t-no-graphs.f32" <<'PY' | sed "s|^|T=$t: |" | tee -a "$SUMMARY" || fail=1
import sys
import numpy as np
a, b = (np.fromfile(f, dtype=np.float32).astype(np.float64) for f in sys.argv[1:3])
if a.size != b.size or a.size == 0:
    sys.exit(f"logits: size mismatch {a.size} vs {b.size}")
same = bool((a == b).all())
nmse = float(((a - b) ** 2).sum() / max((b ** 2).sum(), 1e-300))
print(f"logits graphs vs no-graphs: {'bitwise identical' if same else f'NMSE {nmse:.3e}'}")
sys.exit(0 if nmse <= 1e-6 else 1)
PY
done
echo "wrote $SUMMARY"
exit $fail
