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
#include <cstdlib>
#include <ctime>
#include <cuda_bf16.h>

#include "HostProduct.h"

constexpr int K = 32;

__device__ uint64_t desc(const void *p, uint32_t lbo, uint32_t sbo) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  return (uint64_t)((a & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
         ((uint64_t)(sbo >> 4) << 32);
}

#define R4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define R16(i) R4(i), R4(i + 4), R4(i + 8), R4(i + 12)
#define R32(i) R16(i), R16(i + 16)

/// d[64 x 64] += A (registers a[4]) * B (descriptor)^T.
__device__ void wgRs64(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  // scale-d is a predicate (1: accumulate); then scale-a, scale-b, trans-b.
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,"
               "%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
               " {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}"
               : R32(0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1)
               : "memory");
}

/// d[64 x 256] += A (registers a[4]) * B (descriptor)^T: 128 accumulators.
__device__ void wgRs256(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"
      "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
      "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"
      "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"
      "%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,"
      "%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,"
      "%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,"
      "%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127},"
      " {%128,%129,%130,%131}, %132, p, 1, 1, 0;\n}"
      : R32(0), R32(32), R32(64), R32(96)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1)
      : "memory");
}

__device__ uint32_t pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return (uint32_t)__bfloat16_as_ushort(lo) | (uint32_t)__bfloat16_as_ushort(hi)
                                                  << 16;
}

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
  // A's fragments for both k16 slices, straight from global memory.
  const int w = t / 32, l = t % 32, g = l / 4, q = l % 4;
  uint32_t a[2][4];
  for (int s = 0; s < 2; ++s) {
    const __nv_bfloat16 *r0 = A + (16 * w + g) * K + 16 * s + 2 * q,
                        *r1 = r0 + 8 * K;
    a[s][0] = pack(r0[0], r0[1]);
    a[s][1] = pack(r1[0], r1[1]);
    a[s][2] = pack(r0[8], r0[9]);
    a[s][3] = pack(r1[8], r1[9]);
  }
  // Phase 0 completes when every copy's bytes have landed.
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 "
                 "p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(barA)
                 : "memory");
  float d[N / 2] = {};
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  for (int s = 0; s < 2; ++s) {
    uint64_t db = desc(Bs + s * 2 * chunkB, chunkB * 2, 128);
    if constexpr (N == 64)
      wgRs64(d, a[s], db);
    else
      wgRs256(d, a[s], db);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n"
               "wgmma.wait_group.sync.aligned 0;" ::
                   : "memory");
  for (int j = 0; j < N / 2; ++j) {
    int i = j / 4, h = (j / 2) % 2, b = j % 2;
    int row = 16 * w + g + 8 * h, col = 8 * i + 2 * q + b;
    C[row * N + col] = d[j];
  }
}

template <int N> int check(unsigned seed) {
  cudaError_t e;
  int bad = runProduct(
      64, N, K, seed,
      [](const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *c) {
        k<N><<<1, 128>>>(a, b, c);
      },
      &e);
  if (bad < 0) {
    printf("n%d: %s; ", N, cudaGetErrorString(e));
    return 64 * N;
  }
  printf("n%d %d of %d wrong; ", N, bad, 64 * N);
  return bad;
}

int main() {
  unsigned seed = (unsigned)time(nullptr); // fresh inputs each run
  printf("wgmma A from registers + B by cp.async.bulk/mbarrier: ");
  int bad = check<64>(seed);
  bad += check<256>(seed + 1);
  printf("%s (seed %u)\n", bad ? "FAIL" : "PASS", seed);
  return bad ? 1 : 0;
}
