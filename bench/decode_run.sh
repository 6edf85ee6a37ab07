#!/usr/bin/env bash
# On the GPU machine, after bench/decode_prepare.sh (carry build-decode):
# decode of the full Qwen4-Exp (synthetic weights) at B = 1 after prompts of
# P = 1024 and 4096 tokens (prefilled in chunks of 64, then 64 decode steps,
# one CUDA graph per row count), P = 16,384 (QSA as the model has it, and
# the dense-attention variant), the profile of one decode step at P ~ 4096
# (strata-run -n 4 --profile: the last run's kernels) and at P ~ 16,384 on
# the dense variant, set against the decode peers of bench/peers.py
# (attn_decode: SDPA with one query; delta_step: fla's fused recurrent
# step; moe_decode: torch._grouped_mm with a row per routed expert and the
# copy rate of the routed experts' bytes). One results file in RESULTS_DIR
# (default bench/results) with the machine, the date, the commit and every
# number, and the peers' JSON beside it.
#   bash bench/decode_run.sh [RESULTS_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
RES=${1:-bench/results}
mkdir -p "$RES"
out=$RES/decode-$(date -u +%Y%m%dT%H%M%SZ).txt
if ! nvidia-smi >/dev/null 2>&1; then
  echo "SKIPPED: no GPU" | tee "$out"
  exit 77
fi
bash test/device/build_runtime.sh || exit 1
B=build-rt/bin
D=build-decode
{
  echo "# decode of the full Qwen4-Exp (shapes-only GGUF, synthetic weights), B = 1"
  echo "# $(date -u), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), plan commit $(cat $D/plan/COMMIT)"
  echo "# plan: --max-tokens 64 --max-context 4224 --max-batch 1 --logits last --target sm_90"
  echo "# floor: $(cat $D/plan/decode-report.txt)"
  echo "# batched: plan-b16-r8: --max-tokens 64 --max-context 320 --max-batch 16 --logits all (gemm-decode-rows 8)"
  echo "# P = 16,384: plan-16k (f32 KV cache), plan-16k-bf16, plan-16k-int8 (--kv), plan-dense-16k (dense attention, f32 cache): --max-context 16640"
  for p in 1024 4096; do
    echo "== prompt $p"
    "$B/strata-run" "$D/plan" --gguf "$D/full.gguf" --synthetic-weights 1 \
      --tokens-file "$D/tokens-$p.txt" -n 64 --ignore-eos 2>&1 >/dev/null | grep -E "timings|error"
  done
  for v in plan-16k plan-16k-bf16 plan-16k-int8 plan-dense-16k; do
    echo "== prompt 16384 ($v; floor: $(cat $D/$v/decode-report.txt))"
    "$B/strata-run" "$D/$v" --gguf "$D/$([ $v = plan-dense-16k ] && echo dense || echo full).gguf" --synthetic-weights 1 \
      --tokens-file "$D/tokens-16384.txt" -n 64 --ignore-eos 2>&1 >/dev/null | grep -E "timings|error"
  done
  for rows in 8; do
    for b in 1 4 16; do
      echo "== batched decode: B = $b sequences after 256-token prompts, 32 steps (gemm-decode-rows=$rows)"
      "$B/strata-run" "$D/plan-b16-r$rows" --gguf "$D/full.gguf" --synthetic-weights 1 \
        --tokens-file "$D/tokens-256.txt" -n 33 --batch $b 2>&1 >/dev/null | grep -E "timings|error"
    done
  done
  echo "== profile of one decode step at P ~ 4099"
  "$B/strata-run" "$D/plan" --gguf "$D/full.gguf" --synthetic-weights 1 \
    --tokens-file "$D/tokens-4096.txt" -n 4 --ignore-eos --profile 2>&1 | grep -v "^[0-9]*$" | head -64
} 2>&1 | tee "$out"
# Every kernel of that step (JSON, after the generated ids on stdout).
"$B/strata-run" "$D/plan" --gguf "$D/full.gguf" --synthetic-weights 1 \
  --tokens-file "$D/tokens-4096.txt" -n 4 --ignore-eos --profile=json 2>/dev/null |
  sed -n '/^{"backend"/,$p' > "${out%.txt}-profile.json"
python3 - "${out%.txt}-profile.json" <<'PY' | tee -a "$out"
import collections, json, sys
p = json.load(open(sys.argv[1]))
groups = collections.defaultdict(lambda: [0, 0.0, 0.0])
for k in p["kernels"]:
    g = groups[(k["label"], round(k["bytes"] / 1e6, 2))]
    g[0] += 1; g[1] += k["seconds"]; g[2] += k["floor_seconds"]
print("== decode step kernels by (label, MB at T = 1): calls, us each, GB/s, % of floor")
for (label, mb), (n, s, f) in sorted(groups.items(), key=lambda x: -x[1][1])[:40]:
    print(f"  {label:36s} {mb:9.2f} MB {n:4d} calls {1e6 * s / n:8.1f} us {mb * 1e-3 * n / s:8.1f} GB/s {100 * f / s:5.1f} %")
PY

# The decode peers against strata's kernels at P ~ 16,384 (dense attention).
"$B/strata-run" "$D/plan-dense-16k" --gguf "$D/dense.gguf" --synthetic-weights 1 \
  --tokens-file "$D/tokens-16384.txt" -n 4 --ignore-eos --profile=json 2>/dev/null |
  sed -n '/^{"backend"/,$p' > "${out%.txt}-profile-16k.json"
if ls .whl/*.whl > /dev/null 2>&1 &&
   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; then
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 bench/peers.py --only attn_decode,delta_step,moe_decode --P 16388 \
  -o "${out%.txt}-peers.json" > /dev/null 2>&1
python3 - "${out%.txt}-profile-16k.json" "${out%.txt}-peers.json" <<'PY' | tee -a "$out"
import collections, json, sys
prof = json.load(open(sys.argv[1]))
peers = json.load(open(sys.argv[2]))
us = collections.defaultdict(list)
for k in prof["kernels"]:
    us[k["label"]].append(1e6 * k["seconds"])
def mean(label):
    v = us.get(label, [])
    return sum(v) / len(v) if v else float("nan")
print("== decode step at P ~ 16,388 (dense attention): strata's kernels against the decode peers (us a call)")
rows = [("attention (one query, 24 q / 2 KV heads, D 256)", mean("attention_cached"), "attn_decode"),
        ("delta rule step (48 x 128 x 128, f32 state)", mean("gated_delta_cached"), "delta_step"),
        ("routed experts (10 x gate/up + down)", mean("moe_grouped_swiglu") + mean("moe_grouped_down"), "moe_decode")]
for name, s_us, group in rows:
    print(f"  {name}: strata {s_us:.1f} us")
    for r in peers["results"]:
        if r["group"] != group:
            continue
        if r["status"] == "ok":
            p_us = 1e3 * r["ms_median"]
            shape = r.get("shape", {})
            cache = f" [{shape['cache']} cache]" if "cache" in shape else ""
            print(f"    {r['impl']}{cache}: {p_us:.1f} us ({r['gbs']:.0f} GB/s); strata / peer = {s_us / p_us:.2f}")
        else:
            print(f"    {r['impl']}: {r['status']}: {r.get('reason', '')}")
print("  (strata's kernel times are the profile's: CUDA events around each kernel, a few us above a graph replay's)")
PY
