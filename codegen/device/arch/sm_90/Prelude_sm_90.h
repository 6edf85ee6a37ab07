//===- Prelude_sm_90.h - device prelude of emitted sm_90 kernels ----------===//
//
// What an emitted kernel needs from the target, compiled with clang -x cuda
// --cuda-gpu-arch=sm_90 -nocudainc -nocudalib (no CUDA headers, no
// libdevice): integer types, qualifiers, thread/block ids, barriers, warp
// shuffles, math primitives and the matrix-unit tile op (mma.sync).
//
//===----------------------------------------------------------------------===//
#define STRATA_TARGET_SM90 1
/// Weight blocks sit at the alignment GGUF gives them (BlockDecode.h).
#define STRATA_ALIGNED_LOADS 1
typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned short uint16_t;
typedef short int16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;

#define STRATA_FN                                                              \
  static __attribute__((device)) inline __attribute__((always_inline))
#define STRATA_TABLE static __attribute__((device))
#define STRATA_SHARED __attribute__((shared))
#define STRATA_KERNEL(N)                                                       \
  extern "C" __attribute__((global)) __attribute__((launch_bounds(N)))
/// A kernel of at most N threads per block of which B blocks must fit one
/// SM: registers capped at 65536 / (N B) per thread (the GEMM tiles, whose
/// occupancy halves at 129 registers for 256 threads).
#define STRATA_KERNEL_MIN(N, B)                                                \
  extern "C" __attribute__((global)) __attribute__((launch_bounds(N, B)))
#define STRATA_WAVE 32

STRATA_FN int tid_x() { return __nvvm_read_ptx_sreg_tid_x(); }
STRATA_FN int bid_x() { return __nvvm_read_ptx_sreg_ctaid_x(); }
STRATA_FN int bid_y() { return __nvvm_read_ptx_sreg_ctaid_y(); }
STRATA_FN int bid_z() { return __nvvm_read_ptx_sreg_ctaid_z(); }
STRATA_FN int lane_id() { return tid_x() & 31; }
/// bar.sync 0: also orders shared and global memory within the block.
STRATA_FN void sync_block() { __syncthreads(); }
/// First in every generated kernel: lets the next kernel of the stream be
/// scheduled (griddepcontrol.launch_dependents), then waits until the
/// kernel before this one has finished and its writes are visible
/// (griddepcontrol.wait). Plans say so (option grid_dependency_wait) and
/// the runtime then launches their kernels with programmatic stream
/// serialisation: a kernel's launch and block start-up overlap the tail of
/// the one before it instead of following its end (a decode step runs
/// about 1,500 short kernels). Without that launch attribute both are
/// no-ops.
STRATA_FN void grid_dependency_wait() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
/// Asks L2 for \p bytes at \p g (both multiples of 16) through the SM's
/// bulk copy unit (cp.async.bulk.prefetch.L2): one instruction a piece, no
/// registers, nothing to wait for; a hint, never a fault of the kernel's.
STRATA_FN void prefetch_l2_bulk(const void *g, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(g), "r"(bytes)
               : "memory");
}
/// bar.warp.sync: orders the wave's shared memory accesses around it.
STRATA_FN void sync_wave() { __nvvm_bar_warp_sync(0xffffffffu); }
STRATA_FN int shfl_i(int v, int src) {
  return __nvvm_shfl_sync_idx_i32(0xffffffffu, v, src, 0x1f);
}
STRATA_FN float shfl_f(float v, int src) {
  return __nvvm_shfl_sync_idx_f32(0xffffffffu, v, src, 0x1f);
}
STRATA_FN float shfl_xor_f(float v, int m) {
  return __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, m, 0x1f);
}
/// The lanes of the wave whose \p v equals this lane's (bit l = lane l).
STRATA_FN uint32_t wave_match(int v) {
  uint32_t m;
  asm volatile("match.any.sync.b32 %0, %1, 0xffffffff;" : "=r"(m) : "r"(v));
  return m;
}
/// 16 bytes global -> shared without registers (cp.async.cg: L2 only);
/// both addresses 16-byte aligned. Complete after cp_async_wait_* and a
/// barrier.
STRATA_FN void cp_async16(void *lds, const void *g) {
  uint32_t s =
      (uint32_t)(uint64_t)(__attribute__((address_space(3))) void *)lds;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g)
               : "memory");
}
/// cp_async16 through L1 (cp.async.ca): a wave's 16-byte pieces of one
/// 512-byte row reach L2 as whole-line requests.
STRATA_FN void cp_async16_ca(void *lds, const void *g) {
  uint32_t s =
      (uint32_t)(uint64_t)(__attribute__((address_space(3))) void *)lds;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g)
               : "memory");
}
/// Closes the group of copies issued since the last commit.
STRATA_FN void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
/// Waits for all but the newest committed group (for all of them).
STRATA_FN void cp_async_wait_one() {
  asm volatile("cp.async.wait_group 1;" ::: "memory");
}
STRATA_FN void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}
STRATA_FN int shfl_xor_i(int v, int m) {
  return __nvvm_shfl_sync_bfly_i32(0xffffffffu, v, m, 0x1f);
}

// Math primitives without libdevice: ex2/lg2.approx (exp(x) = 2^(x log2 e)),
// sqrt.rn, tanh.approx.
STRATA_FN float strata_exp(float x) {
  return __nvvm_ex2_approx_f(x * 1.4426950408889634f);
}
STRATA_FN float strata_log(float x) {
  return __nvvm_lg2_approx_f(x) * 0.6931471805599453f;
}
STRATA_FN float strata_log1p(float x) { return strata_log(1.0f + x); }
#define strata_sqrt(x) __builtin_sqrtf(x)
/// f16 bits -> f32 by cvt.f32.f16 (exact), for BlockDecode.h.
STRATA_FN float strata_hw_f16_to_f32(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
#define STRATA_HW_F16_TO_F32(h) strata_hw_f16_to_f32(h)
/// prmt.b32 for the block decoders' codebook lookups (strata_byte_perm).
STRATA_FN uint32_t strata_hw_prmt(uint32_t a, uint32_t b, uint32_t s) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
  return d;
}
#define STRATA_BYTE_PERM(a, b, s) strata_hw_prmt(a, b, s)
STRATA_FN float strata_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
/// sin and cos of x (radians): reduced to [-pi, pi] in two steps (2 pi =
/// hi + lo) so the approximate units see a small argument.
STRATA_FN void strata_sincos(float x, float *s, float *c) {
  float k = __builtin_rintf(x * 0.15915494309189535f);
  float r = (x - k * 6.28125f) - k * 1.9353071795864769e-3f;
  *s = __nvvm_sin_approx_f(r);
  *c = __nvvm_cos_approx_f(r);
}

// Matrix unit: mma.sync.m16n8k16 bf16 -> f32, twice for a 16x16x16 tile.
typedef uint16_t mma_t; // bf16 bits
STRATA_FN mma_t to_mma(float x);
STRATA_FN float from_mma(mma_t x);
/// Register fragments of a 16x16 A tile and of a 16x16 B tile (B stored as
/// rows of k), the m16n8k16 layout: four 32-bit registers each.
typedef uint32_t mma_fa __attribute__((ext_vector_type(4)));
typedef uint32_t mma_fb __attribute__((ext_vector_type(4)));
/// Four 8x8 b16 matrices from shared memory by one ldmatrix.x4: lane l
/// gives the address of row l % 8 of matrix l / 8. Volatile with a memory
/// clobber: it reads the tile other waves stored before the barrier.
STRATA_FN mma_fa ldmatrix_x4(const mma_t *row) {
  // The address-space cast lets the compiler keep 32-bit shared offsets
  // (no generic 64-bit arithmetic and cvta per load).
  uint32_t s =
      (uint32_t)(uint64_t)(const __attribute__((address_space(3))) mma_t *)row;
  mma_fa f;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3])
               : "r"(s)
               : "memory");
  return f;
}
/// ldmatrix_x4 with .trans: each lane gets the transposed 8x8 matrices' pieces
/// (the fragment of a B stored as rows of n, i.e. [k][n]).
STRATA_FN mma_fa ldmatrix_x4_trans(const mma_t *row) {
  uint32_t s =
      (uint32_t)(uint64_t)(const __attribute__((address_space(3))) mma_t *)row;
  mma_fa f;
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
      : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3])
      : "r"(s)
      : "memory");
  return f;
}
/// A's fragment of the 16x16 tile at \p a (shared memory, stride lda, rows
/// 16-byte aligned): matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15),
/// (8-15, 8-15) are a0..a3.
STRATA_FN mma_fa mma_load_a(const mma_t *a, int lda) {
  int l = lane_id();
  return ldmatrix_x4(a + (l & 15) * lda + (l >> 4) * 8);
}
/// B's fragment of the 16 columns at \p b (rows of k, stride ldb, rows
/// 16-byte aligned): b0, b1 of columns 0-7, then of columns 8-15.
STRATA_FN mma_fb mma_load_b(const mma_t *b, int ldb) {
  int l = lane_id();
  return ldmatrix_x4(b + ((l >> 4) * 8 + (l & 7)) * ldb + ((l >> 3) & 1) * 8);
}
/// B's fragment of the 16 columns at \p b stored as [k][n] (16 rows of k,
/// stride ldb, 16-byte aligned): mma_load_b of the transpose, by
/// ldmatrix.trans (matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
/// (n 8-15, k 8-15), each from 8 rows of k).
STRATA_FN mma_fb mma_load_b_trans(const mma_t *b, int ldb) {
  int l = lane_id(), m = l >> 3;
  return ldmatrix_x4_trans(b + ((m & 1) * 8 + (l & 7)) * ldb + (m >> 1) * 8);
}
/// A's fragment of the 16x16 tile at \p a stored as [k][m] (16 rows of k,
/// stride lda, 16-byte aligned): mma_load_a of the transpose, by
/// ldmatrix.trans (matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15),
/// (m 8-15, k 8-15), each from 8 rows of k).
STRATA_FN mma_fa mma_load_a_trans(const mma_t *a, int lda) {
  int l = lane_id(), m = l >> 3;
  return ldmatrix_x4_trans(a + ((m >> 1) * 8 + (l & 7)) * lda + (m & 1) * 8);
}
/// acc += A * B^T from loaded fragments (mma_16x16x16's result).
STRATA_FN void mma_16x16x16_f(float *acc, mma_fa a, mma_fb b) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float *c = acc + 4 * h;
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[2 * h]),
          "r"(b[2 * h + 1]));
  }
}
/// acc += A[16x16] * B^T (A row-major, stride lda; B as rows of k, stride
/// ldb), both in shared memory with 16-byte aligned rows: fragments by
/// ldmatrix.x4 (one instruction per operand, not four 32-bit loads).
STRATA_FN void mma_16x16x16(float *acc, const mma_t *a, int lda, const mma_t *b,
                            int ldb) {
  mma_16x16x16_f(acc, mma_load_a(a, lda), mma_load_b(b, ldb));
}
/// The (row, col) of the 16x16 tile that accumulator \p i of this lane
/// holds (c0..c3 of the n = 0..7 half, then of the n = 8..15 half).
STRATA_FN void mma_acc_coord(int i, int *row, int *col) {
  int g = lane_id() >> 2, t = lane_id() & 3, j = i & 3;
  *row = g + 8 * (j >> 1);
  *col = 8 * (i >> 2) + 2 * t + (j & 1);
}
/// Each of this lane's 8 accumulators of a 16x16 tile becomes the max (or
/// sum) over its row of the tile: values 0, 1, 4, 5 hold row g and 2, 3, 6,
/// 7 row g + 8; the 4 lanes of a quad hold the rest of those rows.
STRATA_FN void mma_row_max(float *v) {
  float a =
      __builtin_fmaxf(__builtin_fmaxf(v[0], v[1]), __builtin_fmaxf(v[4], v[5]));
  float b =
      __builtin_fmaxf(__builtin_fmaxf(v[2], v[3]), __builtin_fmaxf(v[6], v[7]));
  a = __builtin_fmaxf(a, shfl_xor_f(a, 1));
  a = __builtin_fmaxf(a, shfl_xor_f(a, 2));
  b = __builtin_fmaxf(b, shfl_xor_f(b, 1));
  b = __builtin_fmaxf(b, shfl_xor_f(b, 2));
  v[0] = v[1] = v[4] = v[5] = a;
  v[2] = v[3] = v[6] = v[7] = b;
}
STRATA_FN void mma_row_sum(float *v) {
  float a = (v[0] + v[1]) + (v[4] + v[5]), b = (v[2] + v[3]) + (v[6] + v[7]);
  a += shfl_xor_f(a, 1);
  a += shfl_xor_f(a, 2);
  b += shfl_xor_f(b, 1);
  b += shfl_xor_f(b, 2);
  v[0] = v[1] = v[4] = v[5] = a;
  v[2] = v[3] = v[6] = v[7] = b;
}
/// Eight bf16 activations (16 bytes at a 16-byte aligned address) into
/// eight matrix-unit elements (bf16 here: a copy).
typedef uint32_t strata_u4 __attribute__((ext_vector_type(4)));
STRATA_FN void stage8_bf16(mma_t *dst, const uint16_t *src) {
  *(strata_u4 *)dst = *(const strata_u4 *)src;
}
/// stage8_bf16 by cp.async (mma_t is bf16 here: a raw copy); complete after
/// cp_async_wait_* and a barrier.
STRATA_FN void stage8_bf16_async(mma_t *dst, const uint16_t *src) {
  cp_async16(dst, src);
}
/// Eight bf16 values (packed bits) as eight matrix-unit elements.
STRATA_FN strata_u4 mma_from_bf16x8(strata_u4 bits) { return bits; }

// Warpgroup matrix unit (wgmma, sm_90a): a warpgroup of four waves computes
// a 64 x N tile from A and B in shared memory, asynchronously. Operands are
// K-major bf16 without swizzle, stored as 16-byte chunks [k / 8][row] (8
// elements of one row each), so each 8 x 8 core matrix is 128 contiguous
// bytes: the leading byte offset (next 8 k) is the chunks' stride (rows *
// 16 or more), the stride byte offset (next 8 rows) 128
// (test/device/wgmma/wgmma_desc_check.cu checks the convention on the H200).
typedef unsigned long long wg_desc;
/// The descriptor of the operand at \p p (16-byte aligned) whose k chunks
/// are \p lbo bytes apart.
STRATA_FN wg_desc wg_desc_of(const mma_t *p, uint32_t lbo) {
  uint32_t s =
      (uint32_t)(uint64_t)(const __attribute__((address_space(3))) mma_t *)p;
  return (wg_desc)((s & 0x3ffff) >> 4) | (wg_desc)(lbo >> 4) << 16 |
         (wg_desc)(128 >> 4) << 32;
}
/// Shared-memory stores by this thread become visible to the asynchronous
/// proxy (wgmma's operand reads); before the barrier that publishes them.
STRATA_FN void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/// Orders register accesses to the accumulators before the wgmma that
/// follow (required before the first wgmma of a batch).
STRATA_FN void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
/// Closes the batch of wgmma issued since the last commit.
STRATA_FN void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
#define STRATA_WG4(d, i)                                                       \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define STRATA_WG16(d, i)                                                      \
  STRATA_WG4(d, i), STRATA_WG4(d, i + 4), STRATA_WG4(d, i + 8),                \
      STRATA_WG4(d, i + 12)
/// Waits for every committed batch; \p d (32 accumulators) is read after
/// this, never before (the empty asm ties the registers to the wait).
STRATA_FN void wg_wait_all(float *d) {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  asm volatile("" : STRATA_WG16(d, 0), STRATA_WG16(d, 16)::"memory");
}
/// Waits for every committed batch but the newest (batches complete in
/// order); \p d (32 accumulators of an older batch) is read after this.
STRATA_FN void wg_wait_but_one(float *d) {
  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
  asm volatile("" : STRATA_WG16(d, 0), STRATA_WG16(d, 16)::"memory");
}
/// Ties 32 more accumulators to a preceding wg_wait_all.
STRATA_FN void wg_pin32(float *d) {
  asm volatile("" : STRATA_WG16(d, 0), STRATA_WG16(d, 16)::"memory");
}
/// d[64 x 64] += A[64 x 16] * B[64 x 16]^T: 32 accumulators a thread, in
/// mma_acc_coord's layout per 16 x 16 tile j (d + 8 j), rows of wave w of the
/// warpgroup at 16 w.
STRATA_FN void wgmma_m64n64(float *d, wg_desc a, wg_desc b) {
  // scale-d is a predicate: set from a register (1: accumulate).
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,"
               "%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
               " %32, %33, p, 1, 1, 0, 0;\n}"
               : STRATA_WG16(d, 0), STRATA_WG16(d, 16)
               : "l"(a), "l"(b), "r"(1)
               : "memory");
}
/// wgmma over 128 columns whose halves are two operands' tiles (gate and
/// up): columns 0-63 accumulate into \p d0, 64-127 into \p d1.
STRATA_FN void wgmma_m64n128_pair(float *d0, float *d1, wg_desc a, wg_desc b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,"
      "%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"
      " %64, %65, p, 1, 1, 0, 0;\n}"
      : STRATA_WG16(d0, 0), STRATA_WG16(d0, 16), STRATA_WG16(d1, 0),
        STRATA_WG16(d1, 16)
      : "l"(a), "l"(b), "r"(1)
      : "memory");
}
/// wgmma_m64n64 over 128 columns (64 accumulators a thread).
STRATA_FN void wgmma_m64n128(float *d, wg_desc a, wg_desc b) {
  wgmma_m64n128_pair(d, d + 32, a, b);
}
/// The descriptor of an MN-major operand at \p p: groups of 8 k-rows
/// (16 bytes each, 8 columns) \p lbo bytes apart, groups of 8 columns \p sbo
/// apart (test/device/wgmma/wgmma_mn_check.cu checks it on the H200).
STRATA_FN wg_desc wg_desc_mn(const mma_t *p, uint32_t lbo, uint32_t sbo) {
  uint32_t s =
      (uint32_t)(uint64_t)(const __attribute__((address_space(3))) mma_t *)p;
  return (wg_desc)((s & 0x3ffff) >> 4) | (wg_desc)(lbo >> 4) << 16 |
         (wg_desc)(sbo >> 4) << 32;
}
/// A descriptor from its two words; the low word (start address >> 4 in
/// bits 0-13, LBO in 16-29) advances by bytes >> 4 within shared memory
/// without carrying into the LBO, so loops step it with one 32-bit add.
STRATA_FN wg_desc wg_desc_make(uint32_t lo, uint32_t hi) {
  return (wg_desc)hi << 32 | lo;
}
/// \p x, opaque to the optimiser: values derived from it after this are
/// not hoisted out of the loop it sits in (keeps per-step descriptors from
/// being precomputed into dozens of live registers).
STRATA_FN uint32_t strata_opaque(uint32_t x) {
  asm volatile("" : "+r"(x));
  return x;
}
#define STRATA_WG32(d, i) STRATA_WG16(d, i), STRATA_WG16(d, i + 16)
/// d[64 x N] += A[64 x 16] (registers: the mma.sync m16n8k16 A fragment of
/// wave w's rows 16 w..) * B[16 x N], B MN-major (wg_desc_mn): N / 2
/// accumulators a thread in wgmma_m64n64's layout, for N = 64, 128, 256.
template <int N>
STRATA_FN void wgmma_rs_mn(float *d, const uint32_t *a, wg_desc b) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma_rs_mn: N");
  if constexpr (N == 64)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,"
                 "%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
                 " {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}"
                 : STRATA_WG32(d, 0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1)
                 : "memory");
  else if constexpr (N == 128)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"
        "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
        "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"
        "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"
        " {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}"
        : STRATA_WG32(d, 0), STRATA_WG32(d, 32)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1)
        : "memory");
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"
        "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
        "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"
        "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"
        "%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,"
        "%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,"
        "%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,"
        "%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127},"
        " {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}"
        : STRATA_WG32(d, 0), STRATA_WG32(d, 32), STRATA_WG32(d, 64),
          STRATA_WG32(d, 96)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1)
        : "memory");
}

/// d[64 x N] += A[64 x 16] * B[N x 16]^T, both operands in shared memory
/// (descriptors of any layout: wg_desc_of, wg_desc_sw128): N / 2
/// accumulators a thread in wgmma_m64n64's layout, N = 64, 128, 160, 176,
/// 192 or 256.
template <int N> STRATA_FN void wgmma_ss(float *d, wg_desc a, wg_desc b) {
  static_assert(N == 64 || N == 128 || N == 160 || N == 176 || N == 192 ||
                    N == 256,
                "wgmma_ss: N");
  if constexpr (N == 64)
    wgmma_m64n64(d, a, b);
  else if constexpr (N == 128)
    wgmma_m64n128(d, a, b);
  else if constexpr (N == 160)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"
        "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
        "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"
        "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"
        "%70,%71,%72,%73,%74,%75,%76,%77,%78,%79},"
        " %80, %81, p, 1, 1, 0, 0;\n}"
        : STRATA_WG32(d, 0), STRATA_WG32(d, 32), STRATA_WG16(d, 64)
        : "l"(a), "l"(b), "r"(1)
        : "memory");
  else if constexpr (N == 176)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"
        "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
        "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"
        "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"
        "%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,"
        "%87},"
        " %88, %89, p, 1, 1, 0, 0;\n}"
        : STRATA_WG32(d, 0), STRATA_WG32(d, 32), STRATA_WG16(d, 64),
          STRATA_WG4(d, 80), STRATA_WG4(d, 84)
        : "l"(a), "l"(b), "r"(1)
        : "memory");
  else if constexpr (N == 192)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"
        "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
        "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"
        "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"
        "%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,"
        "%87,%88,%89,%90,%91,%92,%93,%94,%95},"
        " %96, %97, p, 1, 1, 0, 0;\n}"
        : STRATA_WG32(d, 0), STRATA_WG32(d, 32), STRATA_WG32(d, 64)
        : "l"(a), "l"(b), "r"(1)
        : "memory");
  else if constexpr (N == 256)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,"
        "%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,"
        "%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,"
        "%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,"
        "%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,"
        "%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,"
        "%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,"
        "%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127},"
        " %128, %129, p, 1, 1, 0, 0;\n}"
        : STRATA_WG32(d, 0), STRATA_WG32(d, 32), STRATA_WG32(d, 64),
          STRATA_WG32(d, 96)
        : "l"(a), "l"(b), "r"(1)
        : "memory");
}
/// K-major operand copied by the TMA with the 128-byte swizzle: rows of 64
/// bf16 (128 bytes) in 8-row atoms 1024 bytes apart, the atom at \p p
/// (1024-byte aligned; a k16 step within the row starts 32 bytes further).
STRATA_FN wg_desc wg_desc_sw128(const void *p) {
  uint32_t s =
      (uint32_t)(uint64_t)(const __attribute__((address_space(3))) void *)p;
  return (wg_desc)((s & 0x3ffff) >> 4) | (wg_desc)1 << 16 |
         (wg_desc)(1024 >> 4) << 32 | (wg_desc)1 << 62;
}

// The TMA (cp.async.bulk.tensor) and mbarriers: a producer thread copies
// tiles described by tensor maps (plan code.tensor_maps, encoded by the
// runtime, passed by value as `tmap:N` arguments) into shared memory; the
// copies complete on an mbarrier with the bytes they carry; consumers wait
// on its phase. The TMA writes through the async proxy wgmma reads: no
// proxy fence between a copy and the wgmma that reads it.
/// A tensor map argument: 128 opaque bytes (cuda.h's CUtensorMap).
struct __attribute__((aligned(128))) strata_tmap {
  unsigned long long w[16];
};
/// The generic address of kernel parameter \p pname (its PTX name, e.g.
/// "sym_param_3") into \p out. clang ignores grid_constant and would copy
/// a by-value parameter whose address C takes to local memory; naming it
/// in PTX keeps it in the parameter space (what nvcc's __grid_constant__
/// lowers to).
#define STRATA_PARAM_ADDR(out, pname)                                          \
  asm("mov.b64 %0, " pname ";\n\tcvta.param.u64 %0, %0;" : "=l"(out))
STRATA_FN uint32_t smem_addr(const void *p) {
  return (uint32_t)(uint64_t)(const __attribute__((address_space(3))) void *)p;
}
/// Initialises the mbarrier at \p b for \p count arrivals (one thread).
STRATA_FN void mbar_init(uint64_t *b, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)),
               "r"(count)
               : "memory");
}
/// Makes mbar_init's writes visible to the async proxy and other threads
/// (before the barrier that publishes them).
STRATA_FN void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/// Arrives on \p b expecting \p bytes more from copies in flight.
STRATA_FN void mbar_expect_tx(uint64_t *b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   smem_addr(b)),
               "r"(bytes)
               : "memory");
}
STRATA_FN void mbar_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b))
               : "memory");
}
/// Waits until the phase of parity \p parity of \p b has completed (a
/// fresh barrier's phase of parity 1 reads as completed).
STRATA_FN void mbar_wait(uint64_t *b, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 "
                 "p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(smem_addr(b)), "r"(parity)
                 : "memory");
}
/// One arrival on \p b once every cp.async this thread issued before has
/// landed (.noinc: the arrival is counted in \p b's initial count).
STRATA_FN void cp_async_mbar_arrive(uint64_t *b) {
  asm volatile(
      "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(b))
      : "memory");
}
/// A warpgroup's registers a thread raised (consumers) or lowered
/// (producers) to N (setmaxnreg; every warp of the warpgroup runs it).
template <int N> STRATA_FN void wg_regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> STRATA_FN void wg_regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
/// The 2-D box of the tensor map at generic address \p map whose first
/// element is (c0 innermost, c1) into \p dst, completing on \p bar.
STRATA_FN void tma_load_2d(void *dst, uint64_t map, int c0, int c1,
                           uint64_t *bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
      "complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_addr(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
/// The 3-D box at (c0 innermost, c1, c2) likewise.
STRATA_FN void tma_load_3d(void *dst, uint64_t map, int c0, int c1, int c2,
                           uint64_t *bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::"
               "complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
                   smem_addr(dst)),
               "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
               : "memory");
}
/// Named barrier \p id over \p n threads (a warpgroup's own sync).
STRATA_FN void sync_named(int id, int n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
/// The SM's cycle counter (a kernel's trace knobs time their phases by it).
STRATA_FN long long clock_cycles() {
  return (long long)__nvvm_read_ptx_sreg_clock64();
}
/// Device printf (clang lowers it to the driver's vprintf), for trace knobs
/// only: the driver prints the buffer at the next synchronisation.
extern "C" __attribute__((device)) int printf(const char *, ...);
/// Arrives on named barrier \p id (of \p n threads) without waiting.
STRATA_FN void arrive_named(int id, int n) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}
STRATA_FN int grid_x() { return __nvvm_read_ptx_sreg_nctaid_x(); }
/// The consumer side of a TMA-fed GEMM tile (GemmEmitter's TMA tile):
/// warpgroup \p wg (0 or 1) computes rows 64 wg.. of the block's 128 x N
/// tile over \p kt K steps of 64, from a ring of STAGES stages of SB bytes
/// (A: 128 rows x 128 bytes, then W: N rows x 128 bytes, both 128-byte
/// swizzled by the copies); full[s] completes when stage s landed,
/// empty[s] takes one arrival per warpgroup once its wgmma of the stage
/// retired, so the producer refills it. One batch of wgmma stays in
/// flight: the stage before it is released while this one computes.
/// Persistent blocks (a loop over tiles) count their K steps from \p it0
/// (the ring's position) and \p release the last stage too.
template <int N, int STAGES, int SB>
STRATA_FN void tma_gemm_consume(float *d, uint8_t *ring, uint64_t *full,
                                uint64_t *empty, int kt, int wg, int it0 = 0,
                                bool release = false) {
  for (int k = 0; k < kt; ++k) {
    const uint32_t g = uint32_t(it0 + k), s = g % STAGES;
    mbar_wait(&full[s], (int)((g / STAGES) & 1));
    const uint8_t *a = ring + s * SB + wg * 64 * 128;
    const uint8_t *w = ring + s * SB + 128 * 128;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_ss<N>(d, wg_desc_sw128(a + kk * 32), wg_desc_sw128(w + kk * 32));
    wg_commit();
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    if (k > 0 && (tid_x() & 127) == 0)
      mbar_arrive(&empty[(g - 1) % STAGES]);
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  if (release && (tid_x() & 127) == 0)
    mbar_arrive(&empty[uint32_t(it0 + kt - 1) % STAGES]);
#pragma unroll
  for (int i = 0; i + 32 <= N / 2; i += 32)
    wg_pin32(d + i);
#pragma unroll
  for (int i = N / 2 / 32 * 32; i < N / 2; i += 4)
    asm volatile("" : STRATA_WG4(d, i)::"memory");
}
