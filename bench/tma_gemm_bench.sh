#!/usr/bin/env bash
# On the GPU machine: builds bench/tma_gemm_bench.cu (with cuBLAS beside it
# when the toolkit has it) and runs it at the dense GEMM shapes of the
# qwen4exp prefill at T = 16,384 (M = 16384; N x K of the delta net's qkv
# and gate projections, ssm_out / attn_output, attn_q), writing
# RESULTS_DIR/tma-gemm-STAMP.txt (GPU, driver, date, every line).
#   bash bench/tma_gemm_bench.sh [RESULTS_DIR]      (default $OUT or .)
# Without nvcc or a GPU: SKIPPED, exit 77.
set -uo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-${OUT:-.}}
command -v nvcc > /dev/null && command -v nvidia-smi > /dev/null ||
  { echo "tma_gemm_bench: SKIPPED (no nvcc or no NVIDIA GPU here)"; exit 77; }
mkdir -p "$DEST" build-rt
BIN=build-rt/tma_gemm_bench
FLAGS=(-gencode arch=compute_90a,code=sm_90a -O3 -o "$BIN" bench/tma_gemm_bench.cu -lcuda)
if ! nvcc "${FLAGS[@]}" -DSTRATA_CUBLAS -lcublas > build-rt/tma_gemm.log 2>&1; then
  nvcc "${FLAGS[@]}" > build-rt/tma_gemm.log 2>&1 ||
    { echo "tma_gemm_bench: FAILED to build: $(tail -3 build-rt/tma_gemm.log)"; exit 1; }
fi
F="$DEST/tma-gemm-$(date -u +%Y%m%dT%H%M%SZ).txt"
{
  echo "# bench/tma_gemm_bench.sh: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(date -u +%FT%TZ)"
  for s in "16384 10240 2560" "16384 6144 2560" "16384 2560 6144" "16384 12288 2560"; do
    timeout 120 "$BIN" $s 10 2>&1
  done
} | tee "$F"
