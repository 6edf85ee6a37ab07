// Device side shared by the wgmma checks (and bench/tma_gemm_bench.cu's
// operand lists): shared-memory descriptors, wgmma with A from registers
// (m64n64 and m64n256, B K-major or MN-major), the A fragments of a
// row-major matrix, the accumulators' layout, and a check's host side
// (runProduct on a 64-row A, the per-N report).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>

#include "HostProduct.h"

/// A descriptor of the operand at \p p: leading and stride byte offsets,
/// \p layout in bits 62-63 (0: no swizzle, 1: 128-byte swizzle).
__device__ inline uint64_t wgDesc(const void *p, uint32_t lbo, uint32_t sbo,
                                  uint64_t layout = 0) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  return (uint64_t)((a & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
         ((uint64_t)(sbo >> 4) << 32) | layout << 62;
}

// The accumulators d[i..] as asm operands, 4, 16 and 32 at a time.
#define WG_R4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_R16(i) WG_R4(i), WG_R4(i + 4), WG_R4(i + 8), WG_R4(i + 12)
#define WG_R32(i) WG_R16(i), WG_R16(i + 16)
/// The asm operand list of 128 accumulators (%0..%127) and its comma, for
/// m64n256.
#define WG_D128                                                                \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"        \
  "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"       \
  "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"       \
  "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"       \
  "%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,"       \
  "%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,"        \
  "%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,"          \
  "%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127},"

/// d[64 x N] += A (registers a[4]) * B (descriptor); B K-major (TB = 0) or
/// MN-major (TB = 1); N = 64 or 256.
template <int N, int TB>
__device__ void wgRs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
  static_assert(N == 64 || N == 256, "wgRs: N");
  // scale-d is a predicate (1: accumulate); then scale-a, scale-b, trans-b.
  if constexpr (N == 64)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,"
                 "%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
                 " {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}"
                 : WG_R32(0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1),
                   "n"(TB)
                 : "memory");
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WG_D128
        " {%128,%129,%130,%131}, %132, p, 1, 1, %134;\n}"
        : WG_R32(0), WG_R32(32), WG_R32(64), WG_R32(96)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB)
        : "memory");
}

/// Lane \p l of wave \p w: its register A fragment for k16 slice \p s of a
/// row-major 64 x K matrix (rows 16 w + l / 4 and + 8, columns 16 s + 2 (l
/// % 4) + {0, 1} and + 8, as four packed pairs).
__device__ inline void wgLoadA(const __nv_bfloat16 *A, int K, int s, int w,
                               int l, uint32_t (&a)[4]) {
  auto pack = [](__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) |
           (uint32_t)__bfloat16_as_ushort(hi) << 16;
  };
  const __nv_bfloat16 *r0 = A + (16 * w + l / 4) * K + 16 * s + 2 * (l % 4),
                      *r1 = r0 + 8 * K;
  a[0] = pack(r0[0], r0[1]);
  a[1] = pack(r1[0], r1[1]);
  a[2] = pack(r0[8], r0[9]);
  a[3] = pack(r1[8], r1[9]);
}

/// Stores a warpgroup's 64 x N accumulators (thread \p t of 128) to
/// row-major C.
template <int N>
__device__ void wgStore(const float (&d)[N / 2], int t, float *C) {
  const int w = t / 32, l = t % 32;
  for (int j = 0; j < N / 2; ++j) {
    int i = j / 4, h = (j / 2) % 2, b = j % 2;
    C[(16 * w + l / 4 + 8 * h) * N + 8 * i + 2 * (l % 4) + b] = d[j];
  }
}

/// One warpgroup (128 threads): C (64 x N) = A (64 x 32, row-major in
/// global, as register fragments) times the B operand whose k16 slice s
/// (s = 0, 1) the descriptor \p desc(s) names; B K-major (TB = 0) or
/// MN-major (TB = 1).
template <int N, int TB, class Desc>
__device__ void wgProductK32(const __nv_bfloat16 *A, Desc desc, float *C) {
  const int t = threadIdx.x;
  uint32_t a[2][4];
  for (int s = 0; s < 2; ++s)
    wgLoadA(A, 32, s, t / 32, t % 32, a[s]);
  float d[N / 2] = {};
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  for (int s = 0; s < 2; ++s)
    wgRs<N, TB>(d, a[s], desc(s));
  asm volatile("wgmma.commit_group.sync.aligned;\n"
               "wgmma.wait_group.sync.aligned 0;" ::
                   : "memory");
  wgStore<N>(d, t, C);
}

/// One check of a 64 x N product by \p launch (see runProduct): prints
/// "n<N> <wrong> of <all> wrong; " and returns how many are wrong (all of
/// them where the run failed).
template <int N, class Launch>
int checkProduct(int K, unsigned seed, Launch launch) {
  cudaError_t e;
  int bad = runProduct(64, N, K, seed, launch, &e);
  if (bad < 0) {
    printf("n%d: %s; ", N, cudaGetErrorString(e));
    return 64 * N;
  }
  printf("n%d %d of %d wrong; ", N, bad, 64 * N);
  return bad;
}
