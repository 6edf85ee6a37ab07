#!/usr/bin/env bash
# On the lent GPU machine, from a copy of the working tree with build-device/
# and/or build-diffsuite/ carried (made on the development machine by
# test/device/prepare.sh and test/device/diffsuite.py prepare):
# builds the runtime there (no LLVM or clang needed: -DSTRATA_RUNTIME_ONLY=ON),
# runs every bundled model's sm_90 plan (and qwen4exp with F16
# hyper-connection projections) with --check (every kernel against
# the cpu backend on the same inputs) under both precision policies, compares
# the logits with the CPU's f32 logits (bf16 policy: NMSE <= 1e-3 and top-1
# >= 97 %; f32 policy: NMSE <= 1e-5), runs it again without --check (the
# launches as one CUDA graph, replayed once more) and compares those logits
# the same way, runs each bundled model with synthetic weights made on the
# device by the plan's fill kernel (--verify-synthetic: byte-identical to
# the host fill; --check with them), then, if build-diffsuite/ is there,
# the differential suite (every op, fused family and GEMM variant x block
# type as a small model, strata-run --check per case x policy x T) and
# checks the wgmma descriptor convention the sm_90a GEMM tiles use, and
# writes one results file. Without an NVIDIA GPU it says SKIPPED and exits 77.
#   bash test/device/run.sh [RESULTS_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
RES=${1:-${OUT:-test/device/results}}
mkdir -p "$RES"
if ! nvidia-smi > /dev/null 2>&1; then
  echo "SKIPPED: no NVIDIA GPU here (test/device/run.sh runs on the lent GPU machine)"
  exit 77
fi
[ -d build-device ] || [ -d build-diffsuite ] || { echo "error: build-device/ and build-diffsuite/ missing: run test/device/prepare.sh (and/or test/device/diffsuite.py prepare) and carry them"; exit 1; }
bash test/device/build_runtime.sh || exit 1
FILE="$RES/device-$(date -u +%Y%m%dT%H%M%SZ).txt"
{
  echo "# test/device/run.sh: generated sm_90 kernels on the cuda backend, --check against the cpu backend"
  echo "# date $(date -u +%Y-%m-%dT%H:%M:%SZ), GPU $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  echo "# commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), prompts build-device/tokens-T.txt (T = 1, 37, 100)"
} > "$FILE"
fail=0
[ -d build-device ] || echo "no build-device/: the bundled models are not run" | tee -a "$FILE"
# Every model prepare.sh made whose GGUF is here (a device call may carry a
# subset: the tree and what it carries must stay under the call's limit).
models=$(ls build-device/*.gguf 2>/dev/null | xargs -r -n1 basename | sed 's/\.gguf$//')
# Shapes-only GGUFs (prepare.sh with STRATA_DEVICE_SYNTHETIC): the weights
# of the seed the CPU logits were made with.
wflag=()
[ -f build-device/SYNTHETIC ] && wflag=(--synthetic-weights "$(cat build-device/SYNTHETIC)")
[ ${#wflag[@]} -gt 0 ] && echo "bundled models: shapes-only GGUFs, ${wflag[*]}" | tee -a "$FILE"
for arch in $models; do
  for prec in bf16 f32; do
    for t in 1 37 100; do
      plan=build-device/$arch.$prec.sm90
      log=$(build-rt/bin/strata-run "$plan" --gguf "build-device/$arch.gguf" "${wflag[@]}" \
        --tokens-file "build-device/tokens-$t.txt" --check --dump-logits "$plan.T$t.gpu.logits" 2>&1)
      rc=$?
      line=$(echo "$log" | grep -m1 '^check:' || echo "check: FAILED: $(echo "$log" | tail -1)")
      cmp=$(python3 test/device/compare_logits.py "$plan.T$t.gpu.logits" \
        "build-device/$arch.cpu-f32.T$t.logits" "$prec" "$t" 2>&1)
      crc=$?
      echo "$arch $prec T=$t: rc=$rc $line; $cmp" | tee -a "$FILE"
      [ $rc -eq 0 ] && [ $crc -eq 0 ] || fail=1
      # Without --check the launches run as one CUDA graph: its logits too.
      glog=$(build-rt/bin/strata-run "$plan" --gguf "build-device/$arch.gguf" "${wflag[@]}" \
        --tokens-file "build-device/tokens-$t.txt" --repeat 2 --dump-logits "$plan.T$t.graph.logits" 2>&1)
      grc=$?
      gline=$(echo "$glog" | grep -m1 '^graph:' || echo "graph: FAILED: $(echo "$glog" | tail -1)")
      gcmp=$(python3 test/device/compare_logits.py "$plan.T$t.graph.logits" \
        "build-device/$arch.cpu-f32.T$t.logits" "$prec" "$t" 2>&1)
      gcrc=$?
      echo "$arch $prec T=$t (graph): rc=$grc $gline; $gcmp" | tee -a "$FILE"
      [ $grc -eq 0 ] && [ $gcrc -eq 0 ] || fail=1
    done
  done
done
# Synthetic weights made on the device by the plan's fill kernel: every
# byte equal to the host fill of the same seed (--verify-synthetic), and a
# --check run with them (the cpu backend fills its own on the host).
for arch in $models; do
  plan=build-device/$arch.bf16.sm90
  log=$(build-rt/bin/strata-run "$plan" --gguf "build-device/$arch.gguf" \
    --tokens-file build-device/tokens-37.txt --synthetic-weights 7 --verify-synthetic --check 2>&1)
  rc=$?
  v=$(echo "$log" | grep -m1 '^synthetic weights:' || echo "synthetic weights: FAILED: $(echo "$log" | tail -1)")
  c=$(echo "$log" | grep -m1 '^check:' || echo "check: FAILED: $(echo "$log" | tail -1)")
  echo "$arch bf16 T=37 synthetic 7: rc=$rc $v; $c" | tee -a "$FILE"
  [ $rc -eq 0 ] || fail=1
done
# The GPU backend's tests on the real driver (GpuRealCuda: hand-written
# PTX, graphs, a tensor map the runtime encodes feeding a TMA copy); CI
# runs the same binary against the fake driver, where these say SKIPPED.
if [ -x build-rt/bin/strata_gpu_tests ]; then
  build-rt/bin/strata_gpu_tests --gtest_filter='GpuRealCuda.*' > build-rt/gpu_tests.log 2>&1
  rc=$?
  echo "gpu backend tests (GpuRealCuda.*): rc=$rc; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' build-rt/gpu_tests.log | tr '\n' ' ')" | tee -a "$FILE"
  [ $rc -eq 0 ] || fail=1
else
  echo "gpu backend tests: SKIPPED (build-rt has no strata_gpu_tests: no gtest here?)" | tee -a "$FILE"
fi
# The wgmma conventions, each against a host product: the shared-memory
# descriptors the sm_90a GEMM tiles use (K-major, no swizzle, 16-byte chunks
# [k / 8][row]); the register A operand with B staged by cp.async.bulk and
# an mbarrier (what a swapped tile, decoded weights as A, would use); the
# MN-major B operand (V as it lies in memory) of attention_wg; which reading
# of the descriptor the 128-byte-swizzled MN-major operand takes (what a TMA
# copy of V would feed; a probe until it has run).
for check in wgmma_desc_check wgmma_rs_bulk_check wgmma_mn_check wgmma_mn_sw128_probe; do
  if ! command -v nvcc > /dev/null 2>&1; then
    echo "$check: SKIPPED (no nvcc here)" | tee -a "$FILE"
  elif nvcc -gencode arch=compute_90a,code=sm_90a -o "build-rt/$check" \
      "test/device/wgmma/$check.cu" > "build-rt/$check.log" 2>&1; then
    "build-rt/$check" | head -1 | tee -a "$FILE"
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
  else
    echo "$check: FAILED to build: $(tail -1 "build-rt/$check.log")" | tee -a "$FILE"
    fail=1
  fi
done
# The differential suite: one line per case x policy x T, and a total.
if [ -d build-diffsuite ]; then
  python3 test/device/diffsuite.py run --bin build-rt/bin --dir build-diffsuite \
    --results "$FILE" > build-diffsuite.log 2>&1 || fail=1
  tail -1 build-diffsuite.log
  grep ': FAIL' build-diffsuite.log | head -20
fi
echo "wrote $FILE"
exit $fail
