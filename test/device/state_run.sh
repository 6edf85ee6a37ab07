#!/usr/bin/env bash
# On the lent GPU machine, after test/device/state_prepare.sh here: the
# generation plans of build-device-state/ on the cuda backend. Per model:
#   - cache consistency (cache-consistency-check --backend cuda, f32
#     policy): decode steps against prefill rows of the prefill-only plan
#     (chunks of 1, 7 and 16), 4 sequences decoded together against each
#     alone; bars NMSE <= 1e-6 (another kernel: the prefill's attention
#     tiles and chunked delta rule sum in other orders than the state
#     kernels; also for the steps against the same plan's own prefill rows,
#     whose GEMMs take other forms than a decode row's) and 1e-8;
#   - a 600-token prompt chunk in a plan that decodes (long.sm90, bf16
#     policy, --max-tokens 1024) with --check: the forms decode plans take
#     only at long chunks (fuse-route-sort's `_slices` alternate);
#   - per policy, strata-run -n 24 with --check (every kernel of every
#     prefill chunk and decode step, state writes included, against the cpu
#     backend), then again through CUDA graphs: ids and step logits against
#     the CPU's f32 continuation. Bars: f32 policy every id equal and every
#     step's logits NMSE <= 1e-5; bf16 policy the logits bar of run.sh
#     (NMSE <= 1e-3) on every step both ran on the same sequence.
#   - the KV caches in bf16 and int8 (strata-compile --kv): cache
#     consistency of cc-gen-{bf16,int8} (against the f32 prefill-only
#     reference: decode NMSE <= 1e-3, the bf16 policy's bar, where the CPU
#     measures <= 2.6e-5 on F32 weights; self, a decode
#     step against the same plan's prefill row: <= 1e-4, as the GPU's
#     prefill and decode GEMMs round K and V differently before the cache
#     stores them; batch <= 1e-8); kv-{bf16,int8} (bf16 policy) with
#     --check (kv_store, attention_cached and its split-K pre-launch,
#     block_mean_cached against the cpu backend, which quantises alike)
#     and graphs, against the CPU's continuation with the same --kv (the
#     bf16 policy's bar, NMSE <= 1e-3); and reported, no bar: the logits
#     of the int8 and bf16 caches against the f32 cache's (the bf16 policy
#     plan's graph run) at the same prompt, ids equal and step NMSE.
# One results file in RESULTS_DIR; SKIPPED (exit 77) without a GPU.
#   bash test/device/state_run.sh RESULTS_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
RES=${1:?results dir}
mkdir -p "$RES"
out=$RES/state-$(date -u +%Y%m%dT%H%M%SZ).txt
if ! nvidia-smi >/dev/null 2>&1; then
  echo "SKIPPED: no GPU" | tee "$out"
  exit 77
fi
bash test/device/build_runtime.sh || exit 1
B=build-rt/bin
D=build-device-state
tokens=$(cat "$D/tokens.txt")
fail=0
{
  echo "state_run: $(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  for arch in qwen3 qwen3moe qwen3next qwen4exp; do
    # state_prepare.sh may have made a subset of the models.
    if [ ! -d "$D/$arch" ]; then
      echo "== $arch: not prepared (state_prepare.sh ... $arch), skipped"
      continue
    fi
    echo "== $arch cache consistency (cuda, f32 policy)"
    "$B/cache-consistency-check" "$D/$arch/cc-gen.sm90" "$D/$arch/cc-ref.sm90" \
      "$D/$arch/model.gguf" --backend cuda --decode-bar 1e-6 --self-bar 1e-6 \
      --batch-bar 1e-8 || fail=1
    for kv in bf16 int8; do
      echo "== $arch cache consistency (cuda, f32 policy, --kv $kv)"
      "$B/cache-consistency-check" "$D/$arch/cc-gen-$kv.sm90" "$D/$arch/cc-ref.sm90" \
        "$D/$arch/model.gguf" --backend cuda --decode-bar 1e-3 --self-bar 1e-4 \
        --batch-bar 1e-8 || fail=1
    done
    if [ -d "$D/$arch/long.sm90" ]; then
      echo "== $arch a 600-token prompt chunk, --check (cuda, bf16 policy)"
      if ! "$B/strata-run" "$D/$arch/long.sm90" --gguf "$D/$arch/model.gguf" --backend cuda \
          --tokens-file "$D/tokens-600.txt" -n 3 --ignore-eos --check >/dev/null \
          2>"$D/$arch/long-check.log"; then
        echo "FAIL $arch long chunk --check: $(tail -3 "$D/$arch/long-check.log")"
        fail=1
      else
        echo "PASS $arch long chunk --check: $(grep -h timings "$D/$arch/long-check.log")"
      fi
    fi
    for policy in f32 bf16 kv-bf16 kv-int8; do
      p=$D/$arch/$policy.sm90
      w=$D/$arch/run-$policy
      mkdir -p "$w"
      if ! "$B/strata-run" "$p" --gguf "$D/$arch/model.gguf" --backend cuda \
          --tokens "$tokens" -n 24 --ignore-eos --check \
          --dump-ids "$w/check.ids" >/dev/null 2>"$w/check.log"; then
        echo "FAIL $arch $policy --check: $(tail -3 "$w/check.log")"
        fail=1
        continue
      fi
      if ! "$B/strata-run" "$p" --gguf "$D/$arch/model.gguf" --backend cuda \
          --tokens "$tokens" -n 24 --ignore-eos \
          --dump-ids "$w/graph.ids" --dump-logits "$w/graph.f32" >/dev/null 2>"$w/graph.log"; then
        echo "FAIL $arch $policy graphs: $(tail -3 "$w/graph.log")"
        fail=1
        continue
      fi
      python3 - "$D/$arch" "$w" "$policy" "$arch" <<'PY' || fail=1
import sys
import numpy as np
d, w, policy, arch = sys.argv[1:5]
def ids(path):
    return [l.strip() for l in open(path)][1].split(",")
# The kv plans against the CPU's continuation with the same --kv.
ref = f"cpu-{policy}" if policy.startswith("kv-") else "cpu"
cpu, chk, gr = ids(f"{d}/{ref}.ids"), ids(f"{w}/check.ids"), ids(f"{w}/graph.ids")
a = np.fromfile(f"{d}/{ref}.f32", dtype=np.float32).reshape(len(cpu), -1)
b = np.fromfile(f"{w}/graph.f32", dtype=np.float32).reshape(len(gr), -1)
same = 0
while same < min(len(cpu), len(gr)) and cpu[same] == gr[same]:
    same += 1
steps = min(same + 1, len(cpu), len(gr))
worst = max(float(((b[i] - a[i]) ** 2).sum() / (a[i] ** 2).sum()) for i in range(steps))
ok = worst <= 1e-3 if policy != "f32" else (same == len(cpu) and worst <= 1e-5)
print(f"{'PASS' if ok else 'FAIL'} {arch:9s} {policy:7s} --check ok; graphs: ids equal to the CPU's {same}/{len(cpu)}, "
      f"check-run ids equal to graph-run ids: {chk == gr}, worst step logits NMSE over the agreeing steps {worst:.3g}")
if policy.startswith("kv-"):
    # Reported: this cache against the f32 cache (the bf16 policy plan's
    # graph run, same prompt), on the GPU.
    base = ids(f"{d}/run-bf16/graph.ids")
    c = np.fromfile(f"{d}/run-bf16/graph.f32", dtype=np.float32).reshape(len(base), -1)
    k = 0
    while k < min(len(base), len(gr)) and base[k] == gr[k]:
        k += 1
    n = min(k + 1, len(base), len(gr))
    e = max(float(((b[i] - c[i]) ** 2).sum() / (c[i] ** 2).sum()) for i in range(n))
    print(f"  {arch:9s} {policy:7s} against the f32 cache (GPU, bf16 policy): ids equal {k}/{len(base)}, "
          f"step logits NMSE over the agreeing steps {e:.3g} (first step {float(((b[0] - c[0]) ** 2).sum() / (c[0] ** 2).sum()):.3g})")
sys.exit(0 if ok else 1)
PY
      grep -h "graph:\|timings" "$w/graph.log" | sed "s/^/  $arch $policy: /"
    done
  done
  echo "state_run: $([ $fail = 0 ] && echo all passed || echo FAILURES)"
} 2>&1 | tee "$out"
exit $fail
