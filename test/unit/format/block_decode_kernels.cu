//===- block_decode_kernels.cu - BlockDecode.h in device code -------------===//
//
// One kernel per strata_dq8_* decoder, compiled by block_decode_device_check.sh
// as HIP for gfx1151 and as CUDA for sm_90 with no SDK headers, the way the
// code generator compiles its kernels. Thread g decodes elements 8g..8g+7 of
// the packed blocks at src into dst[8g..8g+7].
//
//===----------------------------------------------------------------------===//

// The device prelude: BlockDecode.h's contract (see its header comment).
typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;

#define STRATA_FN                                                              \
  static inline __attribute__((device)) __attribute__((always_inline))
#if defined(__AMDGCN__)
#define STRATA_TABLE static __attribute__((constant)) const
#elif defined(__NVPTX__)
#define STRATA_TABLE static __attribute__((device))
#else
#error "compile for gfx1151 (-x hip) or sm_90 (-x cuda), device side only"
#endif

#include "runtime/format/BlockDecode.h"

/// The global thread index, for 256-thread workgroups.
static inline __attribute__((device)) __attribute__((always_inline)) int
threadIndex() {
#if defined(__AMDGCN__)
  return static_cast<int>(__builtin_amdgcn_workgroup_id_x() * 256 +
                          __builtin_amdgcn_workitem_id_x());
#else
  return static_cast<int>(__nvvm_read_ptx_sreg_ctaid_x() * 256 +
                          __nvvm_read_ptx_sreg_tid_x());
#endif
}

// BLOCK elements in BYTES bytes per block; the scalar types use BLOCK = 8.
#define STRATA_DQ8_KERNEL(TYPE, BLOCK, BYTES)                                  \
  extern "C" __attribute__((global)) void dq8_##TYPE(                          \
      const uint8_t *src, float *dst, int groups) {                            \
    int g = threadIndex();                                                     \
    if (g >= groups)                                                           \
      return;                                                                  \
    int b = g / ((BLOCK) / 8), i0 = g % ((BLOCK) / 8) * 8;                     \
    float out[8];                                                              \
    strata_dq8_##TYPE(src + static_cast<long long>(b) * (BYTES), i0, out);     \
    for (int k = 0; k < 8; ++k)                                                \
      dst[8 * static_cast<long long>(g) + k] = out[k];                         \
  }

STRATA_DQ8_KERNEL(f32, 8, 32)
STRATA_DQ8_KERNEL(f16, 8, 16)
STRATA_DQ8_KERNEL(bf16, 8, 16)
STRATA_DQ8_KERNEL(q8_0, 32, 34)
STRATA_DQ8_KERNEL(q4_0, 32, 18)
STRATA_DQ8_KERNEL(q4_k, 256, 144)
STRATA_DQ8_KERNEL(q5_k, 256, 176)
STRATA_DQ8_KERNEL(q6_k, 256, 210)
STRATA_DQ8_KERNEL(iq4_nl, 32, 18)
STRATA_DQ8_KERNEL(iq4_xs, 256, 136)
STRATA_DQ8_KERNEL(iq3_s, 256, 110)
STRATA_DQ8_KERNEL(iq3_xxs, 256, 98)
STRATA_DQ8_KERNEL(iq2_xxs, 256, 66)
