// Checks the two conventions a swapped GEMM tile (C^T = W A^T: decoded
// weights as wgmma's A operand straight from registers, activations as its
// B operand) would rely on, before any generator emits them:
//  1. wgmma's register A operand (m64nNk16, A from registers, bf16): warp w
//     of the warpgroup holds rows 16w..16w+15; lane l holds, as four packed
//     bf16 pairs, rows g = l / 4 and g + 8, columns 2(l % 4) + {0, 1} and
//     the same + 8 (the mma.sync m16n8k16 A fragment), for N = 64 and 256.
//  2. B staged by the bulk-copy engine (cp.async.bulk, 16-byte copies, one
//     per (row, k chunk)) into the K-major no-swizzle layout the GEMM tiles
//     use ([k / 8][row] chunks, rows x 8 + 16 elements apart), completion
//     by an mbarrier's transaction count, and read by wgmma with no
//     fence.proxy.async (the copies are async-proxy writes).
// (Conventions only, not speed: a 16-byte bulk copy per lane compiles to a
// per-lane loop, ELECT + R2UR + UBLKCP + BRA.U.ANY, so a real tile would
// stage B by TMA tensor copies, one per box, with the same completion.)
// Fresh random inputs each run, outputs poisoned, compared with a host
// product; exit status 1 on any difference. Build: nvcc -gencode
// arch=compute_90a,code=sm_90a (test/device/run.sh does).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>

#include "WgmmaDevice.h"

constexpr int K = 32;

/// One warpgroup: A (64 x K, row-major in global) into registers, B (N x K,
/// row-major: K-major) into shared memory by bulk copies, C = A B^T.
template <int N>
__global__ void k(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C) {
  constexpr int chunkB = N * 8 + 16; // elements between k chunks
  __shared__ __align__(128) __nv_bfloat16 Bs[(K / 8) * chunkB];
  __shared__ __align__(8) uint64_t bar;
  const int t = threadIdx.x;
  const uint32_t barA = (uint32_t)__cvta_generic_to_shared(&bar);
  if (t == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(barA)
                 : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    // The one arrival, announcing every copy's bytes.
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barA),
        "r"(N * K * 2)
        : "memory");
  }
  __syncthreads();
  for (int i = t; i < N * (K / 8); i += 128) { // (row, k chunk) pieces
    int r = i % N, c = i / N;
    uint32_t dst = (uint32_t)__cvta_generic_to_shared(Bs + c * chunkB + r * 8);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
                 "bytes [%0], [%1], 16, [%2];" ::"r"(dst),
                 "l"(B + r * K + c * 8), "r"(barA)
                 : "memory");
  }
  // Phase 0 completes when every copy's bytes have landed.
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 "
                 "p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(barA)
                 : "memory");
  // A's fragments for both k16 slices, straight from global memory.
  wgProductK32<N, 0>(
      A, [&](int s) { return wgDesc(Bs + s * 2 * chunkB, chunkB * 2, 128); },
      C);
}

template <int N> int check(unsigned seed) {
  return checkProduct<N>(K, seed,
                         [](const __nv_bfloat16 *a, const __nv_bfloat16 *b,
                            float *c) { k<N><<<1, 128>>>(a, b, c); });
}

int main() {
  unsigned seed = (unsigned)time(nullptr); // fresh inputs each run
  printf("wgmma A from registers + B by cp.async.bulk/mbarrier: ");
  int bad = check<64>(seed);
  bad += check<256>(seed + 1);
  printf("%s (seed %u)\n", bad ? "FAIL" : "PASS", seed);
  return bad ? 1 : 0;
}
