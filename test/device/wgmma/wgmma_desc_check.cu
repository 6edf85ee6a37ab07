// Checks the wgmma shared-memory descriptor convention that the sm_90a GEMM
// tiles rely on: K-major bf16 operands without swizzle, stored as 16-byte
// chunks [k / 8][row] (a column of 8-element pieces per k chunk), so a core
// matrix (8 rows x 16 bytes) is 128 contiguous bytes; LBO = the distance
// between k chunks, SBO = 128 (the next 8 rows). Runs m64n64k16 over K = 32
// from a 128-row A tile (both warpgroups) on fresh random inputs and compares
// with a host product; exit status 1 on any difference. Build: nvcc -gencode
// arch=compute_90a,code=sm_90a (test/device/run.sh does).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cuda_bf16.h>

#include "HostProduct.h"

__device__ uint64_t desc(const void *p, uint32_t lbo, uint32_t sbo) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  return (uint64_t)((a & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
         ((uint64_t)(sbo >> 4) << 32);
}

template <int N>
__device__ void wg(float (&d)[N / 2], uint64_t da, uint64_t db, int acc);
template <>
__device__ void wg<64>(float (&d)[32], uint64_t da, uint64_t db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,"
               "%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, "
               "%33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]),
                 "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),
                 "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                 "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                 "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                 "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
                 "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                 "+f"(d[30]), "+f"(d[31])
               : "l"(da), "l"(db), "r"(acc));
}

// A: 128 x 32 (two warpgroups of 64 rows), B: 64 x 32; C = A B^T (128 x 64).
// The generated tiles' k chunks are rows * 8 + 16 elements apart (32 bytes
// past a multiple of 128: conflict-free 16-byte stores); so are these.
constexpr int kChunkA = 128 * 8 + 16, kChunkB = 64 * 8 + 16;
__global__ void k(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C) {
  __shared__ __align__(128) __nv_bfloat16 As[4 * kChunkA], Bs[4 * kChunkB];
  int t = threadIdx.x;
  for (int i = t; i < 128 * 4; i += 256) { // (row, chunk) pieces
    int r = i % 128, c = i / 128;
    for (int j = 0; j < 8; ++j)
      As[c * kChunkA + r * 8 + j] = A[r * 32 + c * 8 + j];
  }
  for (int i = t; i < 64 * 4; i += 256) {
    int r = i % 64, c = i / 64;
    for (int j = 0; j < 8; ++j)
      Bs[c * kChunkB + r * 8 + j] = B[r * 32 + c * 8 + j];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float d[32] = {};
  int wgi = t / 128;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  for (int kk = 0; kk < 2; ++kk) {
    uint64_t da = desc(As + kk * 2 * kChunkA + wgi * 64 * 8, kChunkA * 2, 128);
    uint64_t db = desc(Bs + kk * 2 * kChunkB, kChunkB * 2, 128);
    wg<64>(d, da, db, 1);
  }
  asm volatile(
      "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::
          : "memory");
  int w = (t % 128) / 32, lane = t % 32;
  for (int q = 0; q < 32; ++q) {
    int i = q / 4, h = (q / 2) % 2, b = q % 2;
    int row = wgi * 64 + w * 16 + lane / 4 + 8 * h,
        col = 8 * i + (lane % 4) * 2 + b;
    C[row * 64 + col] = d[q];
  }
}

int main() {
  const int M = 128, N = 64, K = 32;
  unsigned seed = (unsigned)time(nullptr); // fresh inputs each run
  cudaError_t e;
  int bad = runProduct(
      M, N, K, seed,
      [](const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *c) {
        k<<<1, 256>>>(a, b, c);
      },
      &e);
  if (bad < 0) {
    printf("wgmma desc: FAIL (%s)\n", cudaGetErrorString(e));
    return 1;
  }
  printf("wgmma desc (K-major, no swizzle, LBO = k-chunk stride, SBO = 128): "
         "%s (%d of %d wrong, seed %u)\n",
         bad ? "FAIL" : "PASS", bad, M * N, seed);
  return bad ? 1 : 0;
}
