// Checks the convention of wgmma's MN-major (transposed) B operand that the
// sm_90a attention kernel (attention_wg: O += P V, V staged as it lies in
// memory, value columns contiguous) relies on, before it is trusted:
// register A (the P fragments), B = V [K x N] with N contiguous, no
// swizzle, imm-trans-b = 1. The layout: element (k, n) at
//   (n / 8) * SBO + (k / 8) * LBO + (k % 8) * 16 bytes + (n % 8) * 2 bytes
// i.e. core matrices of 8 k-rows x 16 bytes along N, the stride byte offset
// between groups of 8 columns, the leading byte offset between groups of 8
// k. The other assignment (offsets swapped) is run too and reported; the
// check passes when the convention above is exact and the swapped one is
// not. Fresh inputs each run, outputs poisoned, a host product; exit status
// 1 on any difference. Build: nvcc -gencode arch=compute_90a,code=sm_90a.
#include <cstdint>
#include <cstdio>
#include <ctime>

#include "WgmmaDevice.h"

constexpr int K = 32;

/// One warpgroup: C (64 x N) = A (64 x K) * B^T, B given N x K row-major
/// and staged MN-major: column group n / 8 at groupStride bytes (padded by
/// 16 so the groups' stores spread over banks), k-row k at 16 k bytes.
/// swap: the descriptor names the offsets the other way round.
template <int N>
__global__ void k(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C,
                  int swap) {
  constexpr int groupStride = K * 16 + 16;
  __shared__ __align__(128) uint8_t Bs[(N / 8) * groupStride];
  const int t = threadIdx.x;
  for (int i = t; i < N * K; i += 128) {
    int n = i / K, kk = i % K;
    *(__nv_bfloat16 *)(Bs + (n / 8) * groupStride + kk * 16 + (n % 8) * 2) =
        B[n * K + kk];
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  // k-rows 16 s.. : two groups of 8 k-rows, 128 bytes apart.
  wgProductK32<N, 1>(
      A,
      [&](int s) {
        const uint8_t *base = Bs + s * 256;
        return swap ? wgDesc(base, groupStride, 128)
                    : wgDesc(base, 128, groupStride);
      },
      C);
}

template <int N> int check(unsigned seed, int swap) {
  return checkProduct<N>(K, seed,
                         [swap](const __nv_bfloat16 *a, const __nv_bfloat16 *b,
                                float *c) { k<N><<<1, 128>>>(a, b, c, swap); });
}

int main() {
  unsigned seed = (unsigned)time(nullptr); // fresh inputs each run
  printf("wgmma MN-major B (LBO = k-group stride, SBO = column-group "
         "stride): ");
  int bad = check<64>(seed, 0);
  bad += check<256>(seed + 1, 0);
  printf("%s; offsets swapped: ", bad ? "FAIL" : "PASS");
  int badSwap = check<64>(seed, 1);
  badSwap += check<256>(seed + 1, 1);
  bool ok = bad == 0 && badSwap != 0;
  printf("%s; %s (seed %u)\n", badSwap ? "differs" : "also exact",
         ok ? "PASS" : "FAIL", seed);
  return ok ? 0 : 1;
}
