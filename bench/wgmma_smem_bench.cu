// Microbenchmark: does the shared-memory layout of wgmma's operands limit
// its rate? Every SM runs one block of two warpgroups; each warpgroup issues
// m64n64k16 (both operands in shared memory, bf16, K = 256 per batch, the
// attention S = Q K^T shape) or m64n256k16 with A from registers and B
// MN-major (the P V shape), ITER batches, and the achieved TFLOP/s is
// printed per layout:
//   pad   - no swizzle, 16-byte chunks [k / 8][row], chunk stride rows x 16
//           + 16 bytes (what the emitted tiles use: conflict-free stores)
//   nopad - no swizzle, chunk stride rows x 16 bytes
//   sw128 - 128-byte swizzle (8 rows x 128 bytes atoms, 16-byte chunk c of
//           row r at c ^ (r % 8)), SBO 1024
// Each layout's product is checked first against a host product (exit 1 on
// a difference). Build: nvcc -gencode arch=compute_90a,code=sm_90a -O2.
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <cuda_bf16.h>

#include "../test/device/wgmma/HostProduct.h"

constexpr int K = 256, R = 64, ITER = 2048;
enum Layout { kPad, kNoPad, kSw128 };

__host__ __device__ constexpr int chunkBytes(Layout l) {
  return l == kPad ? R * 16 + 16 : R * 16;
}
/// Byte offset of element (r, k) of a 64 x 256 K-major operand.
__device__ int off(Layout l, int r, int k) {
  if (l == kSw128)
    return (k / 64) * (R * 128) + (r / 8) * 1024 + (r % 8) * 128 +
           (((k % 64) / 8) ^ (r % 8)) * 16 + (k % 8) * 2;
  return (k / 8) * chunkBytes(l) + r * 16 + (k % 8) * 2;
}
__device__ uint64_t desc(Layout l, const uint8_t *base, int s) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(base);
  if (l == kSw128) {
    a += (s / 4) * (R * 128) + (s % 4) * 32;
    return (uint64_t)((a & 0x3ffff) >> 4) | (1ull << 16) |
           ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
  }
  a += s * 2 * chunkBytes(l);
  return (uint64_t)((a & 0x3ffff) >> 4) |
         ((uint64_t)(chunkBytes(l) >> 4) << 16) | ((uint64_t)(128 >> 4) << 32);
}

#define R4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define R16(i) R4(i), R4(i + 4), R4(i + 8), R4(i + 12)
#define R32(i) R16(i), R16(i + 16)
__device__ void wg64(float *d, uint64_t da, uint64_t db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,"
               "%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
               " %32, %33, p, 1, 1, 0, 0;\n}"
               : R32(0)
               : "l"(da), "l"(db), "r"(1)
               : "memory");
}

/// Block: As [2][64 x 256] (one per warpgroup), Bs [64 x 256] in layout L.
/// check: one batch, C = A B^T of warpgroup 0 stored; else ITER batches.
template <Layout L>
__global__ void k(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C,
                  int check) {
  extern __shared__ __align__(1024) uint8_t sm[];
  uint8_t *As = sm, *Bs = sm + 2 * 36864;
  const int t = threadIdx.x, wgi = t / 128;
  for (int i = t; i < 2 * R * K; i += 256) {
    int w = i / (R * K), r = (i / K) % R, kk = i % K;
    *(__nv_bfloat16 *)(As + w * 36864 + off(L, r, kk)) = A[(r % R) * K + kk];
  }
  for (int i = t; i < R * K; i += 256)
    *(__nv_bfloat16 *)(Bs + off(L, i / K, i % K)) = B[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  float d[32] = {};
  const int n = check ? 1 : ITER;
  for (int it = 0; it < n; ++it) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int s = 0; s < K / 16; ++s)
      wg64(d, desc(L, As + wgi * 36864, s), desc(L, Bs, s));
    asm volatile("wgmma.commit_group.sync.aligned;\n"
                 "wgmma.wait_group.sync.aligned 0;" ::
                     : "memory");
  }
  if (wgi == 0 && (check || blockIdx.x == 0)) {
    int w = t / 32, l = t % 32;
    for (int j = 0; j < 32; ++j) {
      int i = j / 4, h = (j / 2) % 2, b = j % 2;
      C[(16 * w + l / 4 + 8 * h) * 64 + 8 * i + 2 * (l % 4) + b] = d[j];
    }
  }
}

template <Layout L> int run(const char *name, unsigned seed) {
  cudaFuncSetAttribute(k<L>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       3 * 36864);
  cudaError_t e;
  int bad = runProduct(
      R, 64, K, seed,
      [](const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *c) {
        k<L><<<1, 256, 3 * 36864>>>(a, b, c, 1);
      },
      &e);
  if (bad != 0) {
    printf("%-6s: product %s\n", name,
           bad < 0 ? cudaGetErrorString(e) : "WRONG");
    return 1;
  }
  __nv_bfloat16 *dA, *dB;
  float *dC;
  cudaMalloc(&dA, R * K * 2);
  cudaMalloc(&dB, R * K * 2);
  cudaMalloc(&dC, R * 64 * 4);
  cudaMemset(dA, 0, R * K * 2);
  cudaMemset(dB, 0, R * K * 2);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  k<L><<<sms, 256, 3 * 36864>>>(dA, dB, dC, 0); // warm-up
  cudaEventRecord(a);
  k<L><<<sms, 256, 3 * 36864>>>(dA, dB, dC, 0);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  double flop = 2.0 * sms * 2 * ITER * 64.0 * 64 * K;
  printf("%-6s: product exact; m64n64k16 SS x %d: %.3f ms, %.1f TFLOP/s\n",
         name, ITER * 16, ms, flop / ms / 1e9);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  return 0;
}

int main() {
  unsigned seed = (unsigned)time(nullptr);
  int bad = run<kPad>("pad", seed);
  bad += run<kNoPad>("nopad", seed + 1);
  bad += run<kSw128>("sw128", seed + 2);
  printf("%s (seed %u)\n", bad ? "FAIL" : "PASS", seed);
  return bad ? 1 : 0;
}
