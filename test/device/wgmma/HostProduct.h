// Host side shared by the wgmma checks: inputs exact in bf16, the reference
// product, and one run on the device with the output poisoned first.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cuda_bf16.h>

/// \p n values (rand() % span - span / 2) / div into \p h (bf16) and \p f
/// (the same values as float): small multiples of 1/div, exact in bf16, so
/// every product and sum below is exact too.
inline void fillExact(__nv_bfloat16 *h, float *f, int n, int span, float div) {
  for (int i = 0; i < n; ++i) {
    h[i] = __float2bfloat16((rand() % span - span / 2) / div);
    f[i] = __bfloat162float(h[i]);
  }
}

/// C[m][n] = sum over k of A[m][k] * B[n][k] (A: M x K, B: N x K, row-major).
inline void productABt(const float *A, const float *B, float *C, int M, int N,
                       int K) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float s = 0;
      for (int k = 0; k < K; ++k)
        s += A[m * K + k] * B[n * K + k];
      C[m * N + n] = s;
    }
}

/// Copies A and B to the device, poisons C (NaN unless written), runs
/// launch(dA, dB, dC) and copies C back into \p out.
template <class Launch>
cudaError_t runOnDevice(const __nv_bfloat16 *hA, size_t aBytes,
                        const __nv_bfloat16 *hB, size_t bBytes, float *out,
                        size_t cBytes, Launch launch) {
  __nv_bfloat16 *dA, *dB;
  float *dC;
  cudaMalloc(&dA, aBytes);
  cudaMalloc(&dB, bBytes);
  cudaMalloc(&dC, cBytes);
  cudaMemcpy(dA, hA, aBytes, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, hB, bBytes, cudaMemcpyHostToDevice);
  cudaMemset(dC, 0xff, cBytes);
  launch(dA, dB, dC);
  cudaError_t e = cudaMemcpy(out, dC, cBytes, cudaMemcpyDeviceToHost);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  return e;
}
