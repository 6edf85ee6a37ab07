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

/// d[64 x 64] += A (registers) * B (descriptor, MN-major).
__device__ void wgT64(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,"
               "%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
               " {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}"
               : R32(0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1)
               : "memory");
}

/// d[64 x 256] += A (registers) * B (descriptor, MN-major).
__device__ void wgT256(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
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
      " {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}"
      : R32(0), R32(32), R32(64), R32(96)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1)
      : "memory");
}

__device__ uint32_t pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return (uint32_t)__bfloat16_as_ushort(lo) | (uint32_t)__bfloat16_as_ushort(hi)
                                                  << 16;
}

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
  float d[N / 2] = {};
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  for (int s = 0; s < 2; ++s) {
    // k-rows 16 s.. : two groups of 8 k-rows, 128 bytes apart.
    const uint8_t *base = Bs + s * 256;
    uint64_t db =
        swap ? desc(base, groupStride, 128) : desc(base, 128, groupStride);
    if constexpr (N == 64)
      wgT64(d, a[s], db);
    else
      wgT256(d, a[s], db);
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

template <int N> int check(unsigned seed, int swap) {
  cudaError_t e;
  int bad = runProduct(
      64, N, K, seed,
      [swap](const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *c) {
        k<N><<<1, 128>>>(a, b, c, swap);
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
