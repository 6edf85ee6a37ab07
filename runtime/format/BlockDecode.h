//===- BlockDecode.h - freestanding ggml block decoders ---------*- C++ -*-===//
//
// The one definition of how ggml weight blocks become float32, shared by the
// CPU reference (Quants.cpp dequantises rows through it) and by generated GPU
// kernels (which decode 8 elements per thread inside their tiles). Sharing the
// text is what keeps the two bit-identical; the formulas and their operation
// order are those of gguf-py's numpy dequantisers (the test oracle, see
// shared/reference/gguf-and-quants.md section 2).
//
// Freestanding: this header includes nothing, so that it compiles unchanged as
// host C++, as HIP device code (clang -x hip --offload-arch=gfx1151
// --cuda-device-only -nogpulib -nogpuinc) and as CUDA device code (clang -x
// cuda --cuda-gpu-arch=sm_90 --cuda-device-only -nocudainc -nocudalib).
//
// Contract: before including it, the includer defines
//
//   STRATA_FN     qualifiers of every function below.
//                   host:    inline __attribute__((always_inline))
//                            (so that, inlined with a constant i0, a row
//                            loop decodes as fast as a whole-block loop)
//                   device:  static inline __attribute__((device))
//                            __attribute__((always_inline))
//   STRATA_TABLE  qualifiers that start the definition of a constant lookup
//                 table (it is followed by the element type, the name and the
//                 initialiser). Checked by test/unit/format/
//                 block_decode_device_check.sh:
//                   host:    inline constexpr  (one copy across translation
//                            units)
//                   gfx1151: static __attribute__((constant)) const
//                            (address space 4 data in the code object's
//                            .rodata; uniform indices load with s_load,
//                            divergent ones with global_load)
//                   sm_90:   static __attribute__((device))
//                            (a .global array read with ld.global.nc, also
//                            `static __device__` under NVRTC; clang puts a
//                            *const* __device__ or a __constant__ array in
//                            the .const bank instead, whose reads serialise
//                            when a warp's threads index it differently, as
//                            grid lookups do: on an H200, IQ3_S, IQ4_XS and
//                            IQ2_XXS decoded 3 to 5 times slower from there)
//   uint8_t, int8_t, uint16_t, uint32_t, uint64_t
//                 the fixed-width integer types (the host includes
//                 <cstdint>; a device prelude typedefs unsigned char, ...;
//                 int32_t is customary there too but not needed here).
//
// runtime/format/BlockDecodeHost.h is the host includer. Every name declared
// here is a plain global prefixed `strata_`, so C-style generated kernel
// sources can include it next to their own names without a namespace.
//
// Blocks are little-endian byte streams (as stored in GGUF files), so every
// multi-byte field is assembled from bytes, except where the includer
// defines STRATA_ALIGNED_LOADS (the device preludes): then the fields whose
// alignment GGUF's layout guarantees are read by wide loads (see "Loads at
// addresses ..." below; BlockDecodeAlignedTest checks both ways agree).
//
// Floating point: values are computed in float32 in the oracle's order, e.g.
// (d * scale) * q. With finite f16 scales every product here is exact: d's
// significand has 11 bits and the integer it is multiplied by (scale times
// quant or grid magnitude, halves and quarters aside) is below 2^13 in every
// format, so each product fits float32's 24 bits, and no value leaves the
// normal range. The only rounding is Q4_K/Q5_K's final `- dmin*m`, so a
// compiler that contracts it into a fused multiply-add, reorders the products
// or flushes denormals gives the same bits: includers need no -ffp-contract
// or --fmad setting (BlockDecodeTest checks the K-quant case against fma).
//
//===----------------------------------------------------------------------===//
#ifndef STRATA_RUNTIME_FORMAT_BLOCKDECODE_H
#define STRATA_RUNTIME_FORMAT_BLOCKDECODE_H

#ifndef STRATA_FN
#error "define STRATA_FN (function qualifiers) before including BlockDecode.h"
#endif
#ifndef STRATA_TABLE
#error "define STRATA_TABLE (table qualifiers) before including BlockDecode.h"
#endif

// iq3s_grid, iq3xxs_grid, iq2xxs_grid, ksigns_iq2xs and kvalues_iq4nl as
// strata_* tables, generated from gguf-py by scripts/gen_iq_grids.py.
#include "runtime/format/IqGrids.inc"

//===----------------------------------------------------------------------===//
// Scalars
//===----------------------------------------------------------------------===//

#ifdef STRATA_HW_F16_TO_F32
/// Converts IEEE binary16 bits to float32 by the target's conversion
/// instruction (exact: every f16 value, subnormals included, is an f32
/// value); the includer defines STRATA_HW_F16_TO_F32(bits). Branch-free,
/// where the bit manipulation below loops for subnormals.
STRATA_FN float strata_f16_to_f32(uint16_t h) {
  return STRATA_HW_F16_TO_F32(h);
}
#else
/// Converts IEEE binary16 bits to float32 exactly, by bit manipulation only
/// (no float arithmetic, so no target's denormal or NaN handling can differ).
/// Subnormals become normal floats; Inf keeps its sign; NaN keeps its sign and
/// payload (shifted up by 13 bits, never quietened) as numpy's float16 ->
/// float32 cast (the oracle) does.
STRATA_FN float strata_f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) { // Inf or NaN
    bits = sign | 0x7f800000 | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half, mant * 2^-24: move the leading 1 up to the implicit
    // bit 10, lowering the exponent with each step (1 to 10 steps). A loop
    // rather than a count-leading-zeros builtin, which NVRTC lacks.
    uint32_t e = 113;
    do {
      mant <<= 1;
      --e;
    } while (!(mant & 0x400));
    bits = sign | (e << 23) | ((mant & 0x3ff) << 13);
  }
  return __builtin_bit_cast(float, bits);
}
#endif

/// Converts float32 to IEEE binary16 bits, round to nearest even, by integer
/// arithmetic only (the CPU's f16 stores and the GPU's are this one
/// function): overflow rounds to Inf, subnormal halves are exact, NaN stays
/// NaN (top payload bits kept, never collapsing into Inf).
STRATA_FN uint16_t strata_f32_to_f16(float f) {
  uint32_t x = __builtin_bit_cast(uint32_t, f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t absX = x & 0x7fffffff;
  if (absX > 0x7f800000) {
    // NaN: keep the top payload bits; never let it collapse into Inf.
    uint16_t h = static_cast<uint16_t>(0x7c00 | ((absX & 0x7fffff) >> 13));
    if ((h & 0x3ff) == 0)
      h |= 1;
    return sign | h;
  }
  // 65520 is the midpoint between 65504 (odd mantissa) and 2^16, so it and
  // everything above rounds to Inf.
  if (absX >= 0x477ff000)
    return sign | 0x7c00;
  if (absX >= 0x38800000) { // Normal half range, >= 2^-14.
    uint32_t h = (absX - 0x38000000) >> 13;
    uint32_t rem = absX & 0x1fff;
    // A mantissa carry correctly bumps the exponent.
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
      ++h;
    return sign | static_cast<uint16_t>(h);
  }
  // 2^-25 ties between 0 and the smallest subnormal and rounds to even (0).
  if (absX <= 0x33000000)
    return sign;
  // Subnormal half: value in units of 2^-24 is m * 2^(e - 126).
  uint32_t e = absX >> 23;
  uint32_t m = (absX & 0x7fffff) | 0x800000;
  uint32_t shift = 126 - e; // 14..24
  uint32_t h = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1)))
    ++h;
  return sign | static_cast<uint16_t>(h);
}

/// Converts bfloat16 bits to float32 exactly (the bits shifted up by 16).
STRATA_FN float strata_bf16_to_f32(uint16_t b) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(b) << 16);
}

/// The little-endian u16 at \p p (any alignment).
STRATA_FN uint16_t strata_load_u16(const uint8_t *p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

/// The little-endian u32 at \p p (any alignment).
STRATA_FN uint32_t strata_load_u32(const uint8_t *p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

/// The binary16 at \p p (any alignment) as float32.
STRATA_FN float strata_load_f16(const uint8_t *p) {
  return strata_f16_to_f32(strata_load_u16(p));
}

// Loads at addresses whose alignment the block format guarantees: GGUF data
// starts 32-byte aligned (GPU copies 256), rows are whole blocks and every
// block size is even, so block starts are 2-byte aligned; super-blocks of
// 136, 144 and 176 bytes start 8-byte aligned. Where the includer defines
// STRATA_ALIGNED_LOADS (the device preludes) these are single wide loads
// (one memory instruction for 8 quants instead of 8); elsewhere byte loads.
// The values are the same either way (little-endian on every target).

/// The u16 at \p p, 2-byte aligned.
STRATA_FN uint16_t strata_load_u16_a2(const uint8_t *p) {
#ifdef STRATA_ALIGNED_LOADS
  return *reinterpret_cast<const uint16_t *>(p);
#else
  return strata_load_u16(p);
#endif
}

/// The u32 at \p p, 4-byte aligned.
STRATA_FN uint32_t strata_load_u32_a4(const uint8_t *p) {
#ifdef STRATA_ALIGNED_LOADS
  return *reinterpret_cast<const uint32_t *>(p);
#else
  return strata_load_u32(p);
#endif
}

/// The eight bytes at \p p (2-byte aligned, or 8-byte aligned when \p A8)
/// into q[0..7].
template <bool A8> STRATA_FN void strata_load8(const uint8_t *p, uint8_t *q) {
#ifdef STRATA_ALIGNED_LOADS
  if (A8) {
    uint64_t w = *reinterpret_cast<const uint64_t *>(p);
    for (int k = 0; k < 8; ++k)
      q[k] = static_cast<uint8_t>(w >> (8 * k));
    return;
  }
  for (int k = 0; k < 4; ++k) {
    uint16_t w = reinterpret_cast<const uint16_t *>(p)[k];
    q[2 * k] = static_cast<uint8_t>(w);
    q[2 * k + 1] = static_cast<uint8_t>(w >> 8);
  }
#else
  for (int k = 0; k < 8; ++k)
    q[k] = p[k];
#endif
}

/// +1 or -1 for a sign bit: the oracle multiplies by the sign rather than
/// negating (identical for finite values, kept literal for NaN).
STRATA_FN float strata_sign(uint32_t bit) { return bit ? -1.0f : 1.0f; }

/// The 6-bit (scale, min) pair of sub-block \p j (0..7) of a Q4_K/Q5_K block
/// from its 12 packed scale bytes; reads only the bytes that hold them.
STRATA_FN void strata_scale_min_k4(int j, const uint8_t *scales, int *sc,
                                   int *m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0xf) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

//===----------------------------------------------------------------------===//
// 8-element decoders
//
// strata_dq8_<type>(block, i0, out) writes elements i0 .. i0+7 of the block at
// \p block to out[0..7], bit-identical to dequantising the whole block. \p i0
// is a multiple of 8 below the block size. Each decoder reads only the block's
// scales and the bytes holding its 8 quants, so a GPU thread that owns 8
// elements loads nothing else. A group of 8 never straddles a sub-block, so
// each group has one scale.
//===----------------------------------------------------------------------===//

/// F32 "blocks" are single elements: reads elements i0..i0+7 of the
/// little-endian float32 array at \p p (any alignment; any i0 >= 0).
STRATA_FN void strata_dq8_f32(const uint8_t *p, int i0, float *out) {
  for (int k = 0; k < 8; ++k)
    out[k] = __builtin_bit_cast(float, strata_load_u32(p + 4 * (i0 + k)));
}

/// Elements i0..i0+7 of the binary16 array at \p p (any alignment).
STRATA_FN void strata_dq8_f16(const uint8_t *p, int i0, float *out) {
  for (int k = 0; k < 8; ++k)
    out[k] = strata_load_f16(p + 2 * (i0 + k));
}

/// Elements i0..i0+7 of the bfloat16 array at \p p (any alignment).
STRATA_FN void strata_dq8_bf16(const uint8_t *p, int i0, float *out) {
  for (int k = 0; k < 8; ++k)
    out[k] = strata_bf16_to_f32(strata_load_u16(p + 2 * (i0 + k)));
}

/// Q8_0, 32 elements in 34 bytes: d (f16) @0, qs[32] (int8) @2.
/// y[e] = qs[e] * d.
STRATA_FN void strata_dq8_q8_0(const uint8_t *block, int i0, float *out) {
  float d = strata_f16_to_f32(strata_load_u16_a2(block));
  uint8_t qs[8];
  strata_load8<false>(block + 2 + i0, qs);
  for (int k = 0; k < 8; ++k)
    out[k] = static_cast<float>(static_cast<int8_t>(qs[k])) * d;
}

/// Q4_0, 32 elements in 18 bytes: d (f16) @0, qs[16] @2. Element e < 16 is
/// the low nibble of qs[e], e >= 16 the high nibble of qs[e - 16].
/// y = d * (nibble - 8).
STRATA_FN void strata_dq8_q4_0(const uint8_t *block, int i0, float *out) {
  float d = strata_f16_to_f32(strata_load_u16_a2(block));
  uint8_t qs[8];
  strata_load8<false>(block + 2 + (i0 & 15), qs);
  int shift = i0 & 16 ? 4 : 0;
  for (int k = 0; k < 8; ++k)
    out[k] = d * static_cast<float>(((qs[k] >> shift) & 0xf) - 8);
}

/// Q4_K, 256 elements in 144 bytes: d @0, dmin @2 (f16), scales[12] @4,
/// qs[128] @16. Sub-block j = e/32 has 6-bit (sc, m); element e is nibble
/// (j & 1) of qs[32 * (j/2) + e % 32]. y = (d*sc) * q - dmin*m.
STRATA_FN void strata_dq8_q4_k(const uint8_t *block, int i0, float *out) {
  int j = i0 >> 5;
  int sc, m;
  strata_scale_min_k4(j, block + 4, &sc, &m);
  uint32_t dm = strata_load_u32_a4(block);
  float d =
      strata_f16_to_f32(static_cast<uint16_t>(dm)) * static_cast<float>(sc);
  float mf = strata_f16_to_f32(static_cast<uint16_t>(dm >> 16)) *
             static_cast<float>(m);
  uint8_t qs[8];
  strata_load8<true>(block + 16 + 32 * (j >> 1) + (i0 & 31), qs);
  int shift = 4 * (j & 1);
  for (int k = 0; k < 8; ++k)
    out[k] = d * static_cast<float>((qs[k] >> shift) & 0xf) - mf;
}

/// Q5_K, 256 elements in 176 bytes: d @0, dmin @2, scales[12] @4 (as Q4_K),
/// qh[32] @16, qs[128] @48. Element e of sub-block j = e/32 is Q4_K's nibble
/// plus 16 * bit j of qh[e % 32]. y = (d*sc) * q - dmin*m.
STRATA_FN void strata_dq8_q5_k(const uint8_t *block, int i0, float *out) {
  int j = i0 >> 5;
  int sc, m;
  strata_scale_min_k4(j, block + 4, &sc, &m);
  uint32_t dm = strata_load_u32_a4(block);
  float d =
      strata_f16_to_f32(static_cast<uint16_t>(dm)) * static_cast<float>(sc);
  float mf = strata_f16_to_f32(static_cast<uint16_t>(dm >> 16)) *
             static_cast<float>(m);
  uint8_t qh[8], qs[8];
  strata_load8<true>(block + 16 + (i0 & 31), qh);
  strata_load8<true>(block + 48 + 32 * (j >> 1) + (i0 & 31), qs);
  int shift = 4 * (j & 1);
  for (int k = 0; k < 8; ++k) {
    int q = ((qs[k] >> shift) & 0xf) | (((qh[k] >> j) & 1) << 4);
    out[k] = d * static_cast<float>(q) - mf;
  }
}

/// Q6_K, 256 elements in 210 bytes: ql[128] @0 (low 4 bits), qh[64] @128
/// (high 2 bits), scales[16] (int8) @192, d (f16) @208. Element e = 128h + 32r
/// + l (half h, quarter r, l < 32) takes the nibble (r >> 1) of
/// ql[64h + 32(r & 1) + l] and bits 2r..2r+1 of qh[32h + l];
/// y = (d * scales[e/16]) * (q - 32).
STRATA_FN void strata_dq8_q6_k(const uint8_t *block, int i0, float *out) {
  int h = i0 >> 7, r = (i0 >> 5) & 3, l = i0 & 31;
  float d = strata_f16_to_f32(strata_load_u16_a2(block + 208));
  float sc = static_cast<float>(static_cast<int8_t>(block[192 + (i0 >> 4)]));
  uint8_t ql[8], qh[8];
  strata_load8<false>(block + 64 * h + 32 * (r & 1) + l, ql);
  strata_load8<false>(block + 128 + 32 * h + l, qh);
  int shift = 4 * (r >> 1);
  for (int k = 0; k < 8; ++k) {
    int q = ((ql[k] >> shift) & 0xf) | (((qh[k] >> (2 * r)) & 3) << 4);
    out[k] = d * sc * static_cast<float>(q - 32);
  }
}

/// PTX's prmt.b32 (default mode): byte i of the result is byte (s >> 4i) & 7
/// of the eight bytes b:a (a the low four), or, where bit 3 of that nibble
/// is set, that byte's sign bit replicated. Targets with the instruction
/// define STRATA_BYTE_PERM(a, b, s); elsewhere it is computed here.
STRATA_FN uint32_t strata_byte_perm(uint32_t a, uint32_t b, uint32_t s) {
#ifdef STRATA_BYTE_PERM
  return STRATA_BYTE_PERM(a, b, s);
#else
  uint64_t ab = static_cast<uint64_t>(b) << 32 | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    uint32_t n = (s >> (4 * i)) & 0xf;
    uint32_t byte = static_cast<uint32_t>(ab >> (8 * (n & 7))) & 0xff;
    if (n & 8)
      byte = byte & 0x80 ? 0xff : 0;
    r |= byte << (8 * i);
  }
  return r;
#endif
}

/// kvalues_iq4nl as four little-endian words of int8 bytes (codes 0-3, 4-7,
/// 8-11, 12-15; BlockDecodeTest checks them against the table).
#define STRATA_IQ4NL_W0 0xbfad9881u
#define STRATA_IQ4NL_W1 0xf6eaddcfu
#define STRATA_IQ4NL_W2 0x26190d01u
#define STRATA_IQ4NL_W3 0x71594535u

/// out[k] = scale * kvalues_iq4nl[(q[k] >> shift) & 0xf] for k < 8: four
/// codebook lookups per pair of byte permutes over the codebook in
/// registers (on the GPU no memory access per element; the table reads
/// were one L1 access each).
STRATA_FN void strata_iq4nl8(const uint8_t *q, int shift, float scale,
                             float *out) {
  for (int h = 0; h < 2; ++h) {
    uint32_t w = static_cast<uint32_t>(q[4 * h]) |
                 static_cast<uint32_t>(q[4 * h + 1]) << 8 |
                 static_cast<uint32_t>(q[4 * h + 2]) << 16 |
                 static_cast<uint32_t>(q[4 * h + 3]) << 24;
    uint32_t v = (w >> shift) & 0x0f0f0f0fu; // four codes, one a byte
    // The codes as the selector's four nibbles (bytes 0 and 2 of v | v >> 4).
    uint32_t sel = strata_byte_perm(v | (v >> 4), 0, 0x20) & 0x7777;
    uint32_t lo = strata_byte_perm(STRATA_IQ4NL_W0, STRATA_IQ4NL_W1, sel);
    uint32_t hi = strata_byte_perm(STRATA_IQ4NL_W2, STRATA_IQ4NL_W3, sel);
    uint32_t upper = ((v >> 3) & 0x01010101u) * 0xffu; // codes 8-15
    uint32_t r = (lo & ~upper) | (hi & upper);
    for (int k = 0; k < 4; ++k)
      out[4 * h + k] =
          scale * static_cast<float>(static_cast<int8_t>(r >> (8 * k)));
  }
}

/// IQ4_NL, 32 elements in 18 bytes: d (f16) @0, qs[16] @2, nibbles laid out
/// as Q4_0's. y = d * kvalues_iq4nl[nibble].
STRATA_FN void strata_dq8_iq4_nl(const uint8_t *block, int i0, float *out) {
  float d = strata_f16_to_f32(strata_load_u16_a2(block));
  uint8_t qs[8];
  strata_load8<false>(block + 2 + (i0 & 15), qs);
  strata_iq4nl8(qs, i0 & 16 ? 4 : 0, d, out);
}

/// IQ4_XS, 256 elements in 136 bytes: d (f16) @0, scales_h (u16) @2,
/// scales_l[4] @4, qs[128] @8. Sub-block ib = e/32 has the 6-bit scale
/// ls = nibble (ib & 1) of scales_l[ib/2] | bits 2ib..2ib+1 of scales_h << 4,
/// and IQ4_NL's nibble layout in qs[16ib..16ib+15].
/// y = (d * (ls - 32)) * kvalues_iq4nl[nibble].
STRATA_FN void strata_dq8_iq4_xs(const uint8_t *block, int i0, float *out) {
  int ib = i0 >> 5;
  uint16_t scalesH = strata_load_u16_a2(block + 2);
  int ls = ((block[4 + (ib >> 1)] >> (4 * (ib & 1))) & 0xf) |
           (((scalesH >> (2 * ib)) & 3) << 4);
  float dl = strata_f16_to_f32(strata_load_u16_a2(block)) *
             static_cast<float>(ls - 32);
  uint8_t qs[8];
  strata_load8<true>(block + 8 + 16 * ib + (i0 & 15), qs);
  strata_iq4nl8(qs, i0 & 16 ? 4 : 0, dl, out);
}

/// IQ3_S, 256 elements in 110 bytes: d (f16) @0, qs[64] @2, qh[8] @66,
/// signs[32] @74, scales[4] @106. Group g = e/8 (sub-block ib = g/4) holds two
/// 9-bit grid indices qs[2g + t] | bit (2g + t) % 8 of qh[ib] << 8 (t = 0, 1;
/// 4 magnitudes each) and the sign byte signs[g].
/// y = (d * (1 + 2 * scale nibble ib)) * magnitude * sign.
/// strata_dq8_iq3_s with the grid at \p grid: strata_iq3s_grid or a copy
/// of it (GPU GEMMs stage one in LDS: a wave's 32 lookups hit up to 16
/// cache lines of the global table).
STRATA_FN void strata_dq8_iq3_s_grid(const uint8_t *block, int i0, float *out,
                                     const uint32_t *grid) {
  int g = i0 >> 3, ib = i0 >> 5;
  int s = (block[106 + (ib >> 1)] >> (4 * (ib & 1))) & 0xf;
  float db = strata_f16_to_f32(strata_load_u16_a2(block)) *
             static_cast<float>(1 + 2 * s);
  int qh = block[66 + ib] >> (2 * (g & 3));
  uint16_t idx = strata_load_u16_a2(block + 2 + 2 * g);
  uint32_t lo = grid[(idx & 0xff) | ((qh & 1) << 8)];
  uint32_t hi = grid[(idx >> 8) | ((qh & 2) << 7)];
  uint32_t signs = block[74 + g];
  for (int k = 0; k < 8; ++k) {
    uint32_t grid = k < 4 ? lo : hi;
    float mag = static_cast<float>((grid >> (8 * (k & 3))) & 0xff);
    out[k] = db * mag * strata_sign((signs >> k) & 1);
  }
}
STRATA_FN void strata_dq8_iq3_s(const uint8_t *block, int i0, float *out) {
  strata_dq8_iq3_s_grid(block, i0, out, strata_iq3s_grid);
}

/// IQ3_XXS, 256 elements in 98 bytes: d (f16) @0, qs[64] @2 (8-bit grid
/// indices, two per group of 8), then one u32 per sub-block ib @66 + 4ib:
/// bits 28..31 the scale, bits 7l..7l+6 the sign index of group l.
/// y = (d * (0.5 + scale) * 0.5) * magnitude * sign.
STRATA_FN void strata_dq8_iq3_xxs(const uint8_t *block, int i0, float *out) {
  int g = i0 >> 3, ib = i0 >> 5;
  uint32_t a = strata_load_u32(block + 66 + 4 * ib);
  float db =
      strata_load_f16(block) * (0.5f + static_cast<float>(a >> 28)) * 0.5f;
  uint32_t signs = strata_ksigns_iq2xs[(a >> (7 * (g & 3))) & 127];
  uint32_t lo = strata_iq3xxs_grid[block[2 + 2 * g]];
  uint32_t hi = strata_iq3xxs_grid[block[3 + 2 * g]];
  for (int k = 0; k < 8; ++k) {
    uint32_t grid = k < 4 ? lo : hi;
    float mag = static_cast<float>((grid >> (8 * (k & 3))) & 0xff);
    out[k] = db * mag * strata_sign((signs >> k) & 1);
  }
}

/// IQ2_XXS, 256 elements in 66 bytes: d (f16) @0, then 8 bytes per sub-block
/// ib @2 + 8ib: four 8-bit grid indices (one per group of 8) and a u32 with
/// the scale in bits 28..31 and the sign index of group l in bits 7l..7l+6.
/// y = (d * (0.5 + scale) * 0.25) * magnitude * sign.
STRATA_FN void strata_dq8_iq2_xxs(const uint8_t *block, int i0, float *out) {
  int g = i0 >> 3, ib = i0 >> 5;
  const uint8_t *sub = block + 2 + 8 * ib;
  uint32_t a = strata_load_u32(sub + 4);
  float db =
      strata_load_f16(block) * (0.5f + static_cast<float>(a >> 28)) * 0.25f;
  uint32_t signs = strata_ksigns_iq2xs[(a >> (7 * (g & 3))) & 127];
  uint64_t grid = strata_iq2xxs_grid[sub[g & 3]];
  for (int k = 0; k < 8; ++k) {
    float mag = static_cast<float>((grid >> (8 * k)) & 0xff);
    out[k] = db * mag * strata_sign((signs >> k) & 1);
  }
}

#endif // STRATA_RUNTIME_FORMAT_BLOCKDECODE_H
