//===- Prelude_gfx1151.h - device prelude of emitted gfx1151 kernels ------===//
//
// What an emitted kernel needs from the target, compiled with clang -x hip
// --offload-arch=gfx1151 -nogpulib -nogpuinc (no vendor headers): integer
// types, qualifiers, thread/block ids, barriers, wave shuffles, math
// primitives and the matrix-unit tile op. Everything after the prelude is
// target-independent.
//
//===----------------------------------------------------------------------===//
#define STRATA_TARGET_GFX1151 1
/// Weight blocks sit at the alignment GGUF gives them (BlockDecode.h).
#define STRATA_ALIGNED_LOADS 1
typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned short uint16_t;
typedef short int16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long uint64_t;
typedef long int64_t;

#define STRATA_FN                                                              \
  static __attribute__((device)) inline __attribute__((always_inline))
#define STRATA_TABLE static __attribute__((constant)) const
#define STRATA_SHARED __attribute__((shared))
/// A kernel entry point of at most N threads per block (the register
/// allocator sizes for N, not the default 1024).
#define STRATA_KERNEL(N)                                                       \
  extern "C" __attribute__((global))                                           \
  __attribute__((amdgpu_flat_work_group_size(1, N)))
/// STRATA_KERNEL with a wish of B resident blocks: not passed on here (the
/// gfx1151 VGPR budget per wave is not what limits these tiles).
#define STRATA_KERNEL_MIN(N, B) STRATA_KERNEL(N)
#define STRATA_WAVE 32
/// cp.async's interface as plain copies (no asynchronous global -> LDS copy
/// is used here): done at once, so commit and wait have nothing to do.
STRATA_FN void cp_async16(void *lds, const void *g) {
  typedef unsigned int u4 __attribute__((ext_vector_type(4)));
  *(u4 *)lds = *(const u4 *)g;
}
STRATA_FN void cp_async_commit() {}
STRATA_FN void cp_async_wait_one() {}
STRATA_FN void cp_async_wait_all() {}

STRATA_FN int tid_x() { return __builtin_amdgcn_workitem_id_x(); }
STRATA_FN int bid_x() { return __builtin_amdgcn_workgroup_id_x(); }
STRATA_FN int bid_y() { return __builtin_amdgcn_workgroup_id_y(); }
STRATA_FN int bid_z() { return __builtin_amdgcn_workgroup_id_z(); }
STRATA_FN int lane_id() { return tid_x() & 31; }
/// Block barrier with workgroup-scope release/acquire (what HIP's
/// __syncthreads does): global and LDS writes before it are visible after.
STRATA_FN void sync_block() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
/// sm_90's programmatic dependent launch has no HIP counterpart: kernels
/// follow each other on the stream.
STRATA_FN void grid_dependency_wait() {}
/// The wave's LDS accesses ordered around it (its lanes run in lock step;
/// the fences keep the compiler and the LDS queue in order).
STRATA_FN void sync_wave() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
STRATA_FN int shfl_i(int v, int src) {
  return __builtin_amdgcn_ds_bpermute(src << 2, v);
}
STRATA_FN float shfl_f(float v, int src) {
  return __builtin_bit_cast(float, shfl_i(__builtin_bit_cast(int, v), src));
}
STRATA_FN float shfl_xor_f(float v, int m) { return shfl_f(v, lane_id() ^ m); }
STRATA_FN int shfl_xor_i(int v, int m) { return shfl_i(v, lane_id() ^ m); }
/// The lanes of the wave whose \p v equals this lane's (bit l = lane l):
/// no match instruction on RDNA, so one shuffle per lane.
STRATA_FN uint32_t wave_match(int v) {
  uint32_t m = 0;
  for (int l = 0; l < 32; ++l)
    m |= (uint32_t)(shfl_i(v, l) == v) << l;
  return m;
}

// Math primitives (no ocml): these lower to v_exp_f32/v_log_f32/v_sqrt_f32
// with range handling; tanh has no libcall, so it is built from exp.
#define strata_exp(x) __builtin_expf(x)
#define strata_log(x) __builtin_logf(x)
#define strata_sqrt(x) __builtin_sqrtf(x)
/// f16 bits -> f32 by the hardware conversion (exact), for BlockDecode.h.
#define STRATA_HW_F16_TO_F32(h)                                                \
  ((float)__builtin_bit_cast(_Float16, (uint16_t)(h)))
STRATA_FN float strata_log1p(float x) { return __builtin_logf(1.0f + x); }
STRATA_FN float strata_tanh(float x) {
  float e = __builtin_expf(-2.0f * __builtin_fabsf(x));
  float t = (1.0f - e) / (1.0f + e);
  return x < 0 ? -t : t;
}
/// sin and cos of x (radians) after reducing x to [-pi, pi]; v_sin/v_cos
/// take revolutions.
STRATA_FN void strata_sincos(float x, float *s, float *c) {
  float r = x * 0.15915494309189535f;
  r = r - __builtin_rintf(r);
  *s = __builtin_amdgcn_sinf(r);
  *c = __builtin_amdgcn_cosf(r);
}

// Matrix unit: v_wmma_f32_16x16x16_f16 (wave32). One wave multiplies a
// 16x16 f16 tile of A (row-major in LDS) by a 16x16 tile of B (stored as
// [n][k]) into 8 f32 accumulators per lane.
typedef _Float16 mma_t;
typedef _Float16 v16h __attribute__((ext_vector_type(16)));
typedef float v8f __attribute__((ext_vector_type(8)));
STRATA_FN mma_t to_mma(float x) { return (mma_t)x; }
STRATA_FN float from_mma(mma_t x) { return (float)x; }
/// Register fragments of a 16x16 A tile and of a 16x16 B tile (B stored as
/// rows of k): lane l holds row (column) l % 16, all 16 k.
typedef v16h mma_fa;
typedef v16h mma_fb;
/// 16 f16 values at a 16-byte aligned address: two 16-byte loads (a v16h
/// load would assume 32-byte alignment).
STRATA_FN v16h mma_load_row16(const mma_t *p) {
  struct Pair {
    uint32_t w[8];
  } q;
  typedef uint32_t u4 __attribute__((ext_vector_type(4)));
  u4 lo = ((const u4 *)p)[0], hi = ((const u4 *)p)[1];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    q.w[i] = lo[i], q.w[4 + i] = hi[i];
  return __builtin_bit_cast(v16h, q);
}
/// A's fragment of the 16x16 tile at \p a (stride lda, rows 16-byte
/// aligned).
STRATA_FN mma_fa mma_load_a(const mma_t *a, int lda) {
  return mma_load_row16(a + (lane_id() & 15) * lda);
}
/// B's fragment of the 16 columns at \p b (rows of k, stride ldb).
STRATA_FN mma_fb mma_load_b(const mma_t *b, int ldb) {
  return mma_load_row16(b + (lane_id() & 15) * ldb);
}
/// B's fragment of the 16 columns at \p b stored as [k][n] (stride ldb):
/// lane l gathers column l % 16 over the 16 rows of k.
STRATA_FN mma_fb mma_load_b_trans(const mma_t *b, int ldb) {
  mma_fb f;
  const mma_t *p = b + (lane_id() & 15);
#pragma unroll
  for (int k = 0; k < 16; ++k)
    f[k] = p[k * ldb];
  return f;
}
/// A's fragment of the 16x16 tile at \p a stored as [k][m] (stride lda):
/// lane l gathers row l % 16 over the 16 rows of k.
STRATA_FN mma_fa mma_load_a_trans(const mma_t *a, int lda) {
  mma_fa f;
  const mma_t *p = a + (lane_id() & 15);
#pragma unroll
  for (int k = 0; k < 16; ++k)
    f[k] = p[k * lda];
  return f;
}
/// acc += A * B^T from loaded fragments (mma_16x16x16's result).
STRATA_FN void mma_16x16x16_f(float *acc, mma_fa a, mma_fb b) {
  v8f c;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    c[i] = acc[i];
  c = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c);
#pragma unroll
  for (int i = 0; i < 8; ++i)
    acc[i] = c[i];
}
/// acc += A[16x16] * B^T where \p a points at A's row 0 (stride lda) and \p b
/// at B's column 0 stored as rows of k (stride ldb), rows 16-byte aligned.
/// Lane l holds A row l%16 and B column l%16, all 16 k (both half-waves
/// hold the same).
STRATA_FN void mma_16x16x16(float *acc, const mma_t *a, int lda, const mma_t *b,
                            int ldb) {
  mma_16x16x16_f(acc, mma_load_a(a, lda), mma_load_b(b, ldb));
}
/// The (row, col) of the 16x16 tile that accumulator \p i of this lane
/// holds: rows 2i and 2i+1 split over the half-waves, the column is the lane.
STRATA_FN void mma_acc_coord(int i, int *row, int *col) {
  *row = 2 * i + (lane_id() >> 4);
  *col = lane_id() & 15;
}
/// Each of this lane's 8 accumulators of a 16x16 tile becomes the max (or
/// sum) over its row of the tile: value i is row 2 i + lane / 16, and the
/// 16 lanes of a half-wave hold that row's 16 columns.
STRATA_FN void mma_row_max(float *v) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int m = 1; m < 16; m <<= 1)
      v[i] = __builtin_fmaxf(v[i], shfl_xor_f(v[i], m));
}
STRATA_FN void mma_row_sum(float *v) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int m = 1; m < 16; m <<= 1)
      v[i] += shfl_xor_f(v[i], m);
}
typedef uint32_t strata_u4 __attribute__((ext_vector_type(4)));
/// Eight bf16 values (packed bits) as eight matrix-unit elements (f16).
STRATA_FN strata_u4 mma_from_bf16x8(strata_u4 w) {
  typedef _Float16 v8h __attribute__((ext_vector_type(8)));
  v8h o;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    o[2 * u] = (_Float16)__builtin_bit_cast(float, w[u] << 16);
    o[2 * u + 1] = (_Float16)__builtin_bit_cast(float, w[u] & 0xffff0000u);
  }
  return __builtin_bit_cast(strata_u4, o);
}
/// Eight bf16 activations (16 bytes at a 16-byte aligned address) into
/// eight matrix-unit elements.
STRATA_FN void stage8_bf16(mma_t *dst, const uint16_t *src) {
  *(strata_u4 *)dst = mma_from_bf16x8(*(const strata_u4 *)src);
}
/// stage8_bf16 where sm_90 copies asynchronously: a conversion is needed
/// here (f16 matrix type), so at once.
STRATA_FN void stage8_bf16_async(mma_t *dst, const uint16_t *src) {
  stage8_bf16(dst, src);
}
