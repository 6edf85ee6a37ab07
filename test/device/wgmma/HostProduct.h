// Host side shared by the wgmma checks: inputs exact in bf16, the reference
// product, one run on the device with the output poisoned first, and the
// comparison.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cuda_bf16.h>
#include <vector>

/// Fresh inputs from \p seed, A (M x K) and B (N x K) row-major: small
/// multiples of 1/4 and 1/2, exact in bf16, so every product and sum is
/// exact too. C = A B^T on the host and by launch(dA, dB, dC) on the device
/// (C poisoned first: NaN unless written). Returns how many elements of C
/// differ, or -1 where the device run failed (\p err says why).
template <class Launch>
int runProduct(int M, int N, int K, unsigned seed, Launch launch,
               cudaError_t *err) {
  std::vector<__nv_bfloat16> hA(M * K), hB(N * K);
  std::vector<float> fA(M * K), fB(N * K), ref(M * N), out(M * N);
  srand(seed);
  for (int i = 0; i < M * K; ++i) {
    hA[i] = __float2bfloat16((rand() % 17 - 8) / 4.0f);
    fA[i] = __bfloat162float(hA[i]);
  }
  for (int i = 0; i < N * K; ++i) {
    hB[i] = __float2bfloat16((rand() % 13 - 6) / 2.0f);
    fB[i] = __bfloat162float(hB[i]);
  }
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float s = 0;
      for (int k = 0; k < K; ++k)
        s += fA[m * K + k] * fB[n * K + k];
      ref[m * N + n] = s;
    }
  __nv_bfloat16 *dA, *dB;
  float *dC;
  cudaMalloc(&dA, hA.size() * sizeof hA[0]);
  cudaMalloc(&dB, hB.size() * sizeof hB[0]);
  cudaMalloc(&dC, out.size() * sizeof out[0]);
  cudaMemcpy(dA, hA.data(), hA.size() * sizeof hA[0], cudaMemcpyHostToDevice);
  cudaMemcpy(dB, hB.data(), hB.size() * sizeof hB[0], cudaMemcpyHostToDevice);
  cudaMemset(dC, 0xff, out.size() * sizeof out[0]);
  launch(dA, dB, dC);
  *err = cudaMemcpy(out.data(), dC, out.size() * sizeof out[0],
                    cudaMemcpyDeviceToHost);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  if (*err != cudaSuccess)
    return -1;
  int bad = 0;
  for (int i = 0; i < M * N; ++i)
    bad += !(fabsf(out[i] - ref[i]) <= 1e-3f);
  return bad;
}
