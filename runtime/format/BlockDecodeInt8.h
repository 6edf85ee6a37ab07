//===- BlockDecodeInt8.h - ggml blocks as int8 bytes and scales -*- C++ -*-===//
//
// The integer forms of BlockDecode.h's decoders, for the decode GEMVs that
// multiply int8 activations (codegen/gemm/GemmDecode.cpp, option
// gemm-decode-int8). Freestanding like BlockDecode.h, included after it:
// host code through BlockDecodeHost.h (the unit tests), generated kernels
// that use it embed it after BlockDecode.h (kernels without it keep their
// source unchanged).
//
//===----------------------------------------------------------------------===//
#ifndef STRATA_RUNTIME_FORMAT_BLOCKDECODEINT8_H
#define STRATA_RUNTIME_FORMAT_BLOCKDECODEINT8_H

#ifndef STRATA_RUNTIME_FORMAT_BLOCKDECODE_H
#error "include BlockDecode.h before BlockDecodeInt8.h"
#endif

// strata_di8_<type>(block, i0, q, d, dm): the eight elements i0..i0+7 (i0 a
// multiple of 8) as int8 bytes, four a word (element i0 + 4w + b in byte b
// of q[w]), and float scales with
//
//   strata_dq8_<type>(...)[k] == d * (float)(int8_t)byte k          (no min)
//   strata_dq8_<type>(...)[k] == d * (float)(int8_t)byte k - dm     (Q4_K,
//                                                                    Q5_K)
//
// bit for bit (the same products in the same order; BlockDecodeTest checks
// every element of random blocks). A GEMV then takes a lane's eight
// products as two 4-way integer dot products against activations
// quantised to int8 (strata_dp4a), one float multiply-add per piece where
// the float decode spent a conversion and a multiply-add per element.
// dm is set only by the types with a min; the others leave it alone.

// The targets' 4-way int8 dot products, chosen by the macro the device
// prelude defines (kept here, not in the preludes, so that kernels without
// the integer forms keep their source byte for byte).
#if defined(STRATA_TARGET_SM90) && !defined(STRATA_DP4A)
STRATA_FN int strata_hw_dp4a(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
#define STRATA_DP4A(a, b, c) strata_hw_dp4a(a, b, c)
#elif defined(STRATA_TARGET_GFX1151) && !defined(STRATA_DP4A)
#define STRATA_DP4A(a, b, c)                                                   \
  __builtin_amdgcn_sudot4(true, (int)(a), true, (int)(b), (c), false)
#endif

/// c + the sum of the four products of the int8 bytes of \p a and \p b:
/// dp4a.s32.s32 on sm_90, v_dot4_i32_iu8 on gfx1151 (STRATA_DP4A);
/// elsewhere computed here.
STRATA_FN int strata_dp4a(uint32_t a, uint32_t b, int c) {
#ifdef STRATA_DP4A
  return STRATA_DP4A(a, b, c);
#else
  for (int k = 0; k < 4; ++k)
    c += static_cast<int>(static_cast<int8_t>(a >> (8 * k))) *
         static_cast<int>(static_cast<int8_t>(b >> (8 * k)));
  return c;
#endif
}

/// The eight bytes at \p p (as strata_load8) as two little-endian words.
template <bool A8> STRATA_FN void strata_load8w(const uint8_t *p, uint32_t *w) {
#ifdef STRATA_ALIGNED_LOADS
  if (A8) {
    uint64_t v = *reinterpret_cast<const uint64_t *>(p);
    w[0] = static_cast<uint32_t>(v);
    w[1] = static_cast<uint32_t>(v >> 32);
    return;
  }
  const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
  w[0] = static_cast<uint32_t>(h[0]) | static_cast<uint32_t>(h[1]) << 16;
  w[1] = static_cast<uint32_t>(h[2]) | static_cast<uint32_t>(h[3]) << 16;
#else
  w[0] = strata_load_u32(p);
  w[1] = strata_load_u32(p + 4);
#endif
}

/// Four IQ4_NL codes (the nibbles of \p w at \p shift, one a byte) as their
/// kvalues_iq4nl int8 bytes, by two prmt lookups.
STRATA_FN uint32_t strata_iq4nl_word(uint32_t w, int shift) {
  uint32_t v = (w >> shift) & 0x0f0f0f0fu; // four codes, one a byte
  // The codes as the selector's four nibbles (bytes 0 and 2 of v | v >> 4).
  uint32_t sel = strata_byte_perm(v | (v >> 4), 0, 0x20) & 0x7777;
  uint32_t lo = strata_byte_perm(STRATA_IQ4NL_W0, STRATA_IQ4NL_W1, sel);
  uint32_t hi = strata_byte_perm(STRATA_IQ4NL_W2, STRATA_IQ4NL_W3, sel);
  uint32_t upper = ((v >> 3) & 0x01010101u) * 0xffu; // codes 8-15
  return (lo & ~upper) | (hi & upper);
}

/// Eight activations as int8 bytes (two words, as the weights' integer
/// forms) with a[k] ~ *s * byte k, *s = max |a| / 127 (each a[k] / *s
/// rounded to nearest), and the bytes' sum in \p sum (the K-quants' min
/// term). Eight a scale: the quantisation error is that of the lane's own
/// values, not of a wider group's largest.
STRATA_FN void strata_qa8(const float *a, uint32_t *q, float *s, int *sum) {
  float amax = 0.0f;
  for (int k = 0; k < 8; ++k)
    amax = __builtin_fmaxf(amax, __builtin_fabsf(a[k]));
  float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  *s = amax * (1.0f / 127.0f);
  int t = 0;
  for (int w = 0; w < 2; ++w) {
    uint32_t word = 0;
    for (int b = 0; b < 4; ++b) {
      int v = static_cast<int>(__builtin_rintf(a[4 * w + b] * inv));
      t += v;
      word |= static_cast<uint32_t>(v & 0xff) << (8 * b);
    }
    q[w] = word;
  }
  *sum = t;
}

/// Q8_0 (see strata_dq8_q8_0).
STRATA_FN void strata_di8_q8_0(const uint8_t *block, int i0, uint32_t *q,
                               float *d, float *) {
  *d = strata_f16_to_f32(strata_load_u16_a2(block));
  strata_load8w<false>(block + 2 + i0, q);
}

/// Sub-block \p j's scale (d * sc) and min (dmin * m) of a Q4_K/Q5_K block,
/// as strata_dq8_q4_k/q5_k compute them.
STRATA_FN void strata_k4_scales(const uint8_t *block, int j, float *d,
                                float *dm) {
  int sc, m;
  strata_scale_min_k4(j, block + 4, &sc, &m);
  uint32_t dd = strata_load_u32_a4(block);
  *d = strata_f16_to_f32(static_cast<uint16_t>(dd)) * static_cast<float>(sc);
  *dm = strata_f16_to_f32(static_cast<uint16_t>(dd >> 16)) *
        static_cast<float>(m);
}

/// Q4_K (see strata_dq8_q4_k): the nibbles unsigned, the min in \p dm.
STRATA_FN void strata_di8_q4_k(const uint8_t *block, int i0, uint32_t *q,
                               float *d, float *dm) {
  int j = i0 >> 5;
  strata_k4_scales(block, j, d, dm);
  uint32_t w[2];
  strata_load8w<true>(block + 16 + 32 * (j >> 1) + (i0 & 31), w);
  int shift = 4 * (j & 1);
  q[0] = (w[0] >> shift) & 0x0f0f0f0fu;
  q[1] = (w[1] >> shift) & 0x0f0f0f0fu;
}

/// The sixteen bytes at \p p as four little-endian words: one 16-byte load
/// where the includer's loads may be wide (STRATA_ALIGNED_LOADS; \p p then
/// 16-byte aligned), else four word reads.
STRATA_FN void strata_load16w(const uint8_t *p, uint32_t *w) {
#ifdef STRATA_ALIGNED_LOADS
  typedef uint32_t strata_u4 __attribute__((ext_vector_type(4)));
  strata_u4 v = *reinterpret_cast<const strata_u4 *>(p);
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
#else
  for (int k = 0; k < 4; ++k)
    w[k] = strata_load_u32(p + 4 * k);
#endif
}

/// Q4_K's wide integer form (the decode GEMVs' gemm-decode-wide): the 32
/// elements of one lane, i0 = 64 g + 16 h (g < 4, h < 2): elements i0 ..
/// i0 + 15 of sub-block 2 g in lo (four a word, as strata_di8_q4_k) and
/// i0 + 32 .. i0 + 47 of sub-block 2 g + 1 in hi, both the nibbles of the
/// same 16 quant bytes, with d[0], dm[0] and d[1], dm[1] their scales and
/// mins, bit for bit those of strata_di8_q4_k. Two 16-byte loads (the
/// header, the quants) where the eight-element form takes five narrow ones
/// a piece; super-blocks of 144 bytes in 32-byte aligned rows start 16-byte
/// aligned.
STRATA_FN void strata_di8w_q4_k(const uint8_t *block, int i0, uint32_t *lo,
                                uint32_t *hi, float *d, float *dm) {
  uint32_t hd[4], qs[4];
  strata_load16w(block, hd);
  strata_load16w(block + 16 + 32 * (i0 >> 6) + (i0 & 31), qs);
  const float dd = strata_f16_to_f32(static_cast<uint16_t>(hd[0]));
  const float dmin = strata_f16_to_f32(static_cast<uint16_t>(hd[0] >> 16));
  for (int s = 0; s < 2; ++s) {
    // strata_scale_min_k4 on the header's words: scale byte i (block + 4 +
    // i) is byte i % 4 of hd[1 + i / 4]; both cases computed and one
    // selected (the lanes of a warp differ in j; a byte array indexed by j
    // would live in local memory).
    const int j = 2 * (i0 >> 6) + s;
    const uint32_t lo4 = (hd[1] >> (8 * (j & 3))) & 0xffu; // byte j % 4
    const uint32_t mid = (hd[2] >> (8 * (j & 3))) & 0xffu; // byte j % 4 + 4
    const uint32_t top = (hd[3] >> (8 * (j & 3))) & 0xffu; // byte j % 4 + 8
    // j < 4: sc = byte j & 63, m = byte j + 4 & 63; else (j - 4 = j % 4):
    // sc = byte j + 4 & 15 | (byte j - 4 >> 6) << 4, m = byte j + 4 >> 4 |
    // (byte j >> 6) << 4.
    const int sc = j < 4 ? static_cast<int>(lo4 & 63)
                         : static_cast<int>((top & 0xf) | ((lo4 >> 6) << 4));
    const int m = j < 4 ? static_cast<int>(mid & 63)
                        : static_cast<int>((top >> 4) | ((mid >> 6) << 4));
    d[s] = dd * static_cast<float>(sc);
    dm[s] = dmin * static_cast<float>(m);
  }
  for (int k = 0; k < 4; ++k) {
    lo[k] = qs[k] & 0x0f0f0f0fu;
    hi[k] = (qs[k] >> 4) & 0x0f0f0f0fu;
  }
}

/// The sixteen bytes at \p p, 2-byte aligned, as four little-endian words:
/// where the includer's loads may be wide (STRATA_ALIGNED_LOADS), the five
/// aligned words from p rounded down to 4 joined by funnel shifts, else
/// four word reads. The words may reach 2 bytes before \p p and 4 past its
/// 16: strata_di8w_q6_k's runs end at least 14 bytes before their block's
/// end, and start 2 bytes past a word only where a block (not the tensor,
/// whose start is aligned) lies before them.
STRATA_FN void strata_load16w_a2(const uint8_t *p, uint32_t *w) {
#ifdef STRATA_ALIGNED_LOADS
  const int off = static_cast<int>(reinterpret_cast<uint64_t>(p) & 3);
  const uint8_t *a4 = p - off;
  const uint32_t sh = static_cast<uint32_t>(off) * 8; // 0 or 16
  uint32_t v[5];
  for (int k = 0; k < 5; ++k)
    v[k] = *reinterpret_cast<const uint32_t *>(a4 + 4 * k);
  for (int k = 0; k < 4; ++k)
    w[k] = static_cast<uint32_t>(
        ((static_cast<uint64_t>(v[k + 1]) << 32) | v[k]) >> sh);
#else
  for (int k = 0; k < 4; ++k)
    w[k] = strata_load_u32(p + 4 * k);
#endif
}

/// Q6_K's wide integer form (gemm-decode-wide=2): the 32 elements of one
/// lane, i0 = 128 h + 32 p + 16 l (h, p, l < 2): elements i0 .. i0 + 15 in
/// lo (four a word, q - 32 as strata_di8_q6_k) and i0 + 64 .. i0 + 79 in hi,
/// the low and high nibbles of the same 16 ql bytes with their two bits of
/// the same 16 qh bytes, with d[0] and d[1] their scales, bit for bit those
/// of strata_di8_q6_k (no min: \p dm is left alone). Two 16-byte runs read
/// as aligned words (blocks of 210 bytes start 2-byte aligned) and three
/// narrow loads, where the eight-element form takes ten a piece.
STRATA_FN void strata_di8w_q6_k(const uint8_t *block, int i0, uint32_t *lo,
                                uint32_t *hi, float *d, float *) {
  const int h = i0 >> 7, p = (i0 >> 5) & 1, l = i0 & 31;
  uint32_t ql[4], qh[4];
  strata_load16w_a2(block + 64 * h + 32 * p + l, ql);
  strata_load16w_a2(block + 128 + 32 * h + l, qh);
  const float dd = strata_f16_to_f32(strata_load_u16_a2(block + 208));
  d[0] = dd * static_cast<float>(static_cast<int8_t>(block[192 + (i0 >> 4)]));
  d[1] =
      dd * static_cast<float>(static_cast<int8_t>(block[192 + (i0 >> 4) + 4]));
  for (int k = 0; k < 4; ++k) {
    const uint32_t a =
        (ql[k] & 0x0f0f0f0fu) | (((qh[k] >> (2 * p)) & 0x03030303u) << 4);
    const uint32_t b = ((ql[k] >> 4) & 0x0f0f0f0fu) |
                       (((qh[k] >> (2 * p + 4)) & 0x03030303u) << 4);
    // Bytes 0..63 minus 32 without borrows between bytes (as di8_q6_k).
    lo[k] = ((a | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
    hi[k] = ((b | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
  }
}

/// Q5_K (see strata_dq8_q5_k): 5-bit values unsigned, the min in \p dm.
STRATA_FN void strata_di8_q5_k(const uint8_t *block, int i0, uint32_t *q,
                               float *d, float *dm) {
  int j = i0 >> 5;
  strata_k4_scales(block, j, d, dm);
  uint32_t h[2], w[2];
  strata_load8w<true>(block + 16 + (i0 & 31), h);
  strata_load8w<true>(block + 48 + 32 * (j >> 1) + (i0 & 31), w);
  int shift = 4 * (j & 1);
  for (int k = 0; k < 2; ++k)
    q[k] = ((w[k] >> shift) & 0x0f0f0f0fu) | (((h[k] >> j) & 0x01010101u) << 4);
}

/// Q6_K (see strata_dq8_q6_k): q - 32 as int8 bytes.
STRATA_FN void strata_di8_q6_k(const uint8_t *block, int i0, uint32_t *q,
                               float *d, float *) {
  int h = i0 >> 7, r = (i0 >> 5) & 3, l = i0 & 31;
  *d = strata_f16_to_f32(strata_load_u16_a2(block + 208)) *
       static_cast<float>(static_cast<int8_t>(block[192 + (i0 >> 4)]));
  uint32_t lo[2], hi[2];
  strata_load8w<false>(block + 64 * h + 32 * (r & 1) + l, lo);
  strata_load8w<false>(block + 128 + 32 * h + l, hi);
  int shift = 4 * (r >> 1);
  for (int k = 0; k < 2; ++k) {
    uint32_t v = ((lo[k] >> shift) & 0x0f0f0f0fu) |
                 (((hi[k] >> (2 * r)) & 0x03030303u) << 4);
    // Bytes 0..63 minus 32 without borrows between bytes: bit 7 set first.
    q[k] = ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
  }
}

/// IQ4_NL (see strata_dq8_iq4_nl).
STRATA_FN void strata_di8_iq4_nl(const uint8_t *block, int i0, uint32_t *q,
                                 float *d, float *) {
  *d = strata_f16_to_f32(strata_load_u16_a2(block));
  uint32_t w[2];
  strata_load8w<false>(block + 2 + (i0 & 15), w);
  q[0] = strata_iq4nl_word(w[0], i0 & 16 ? 4 : 0);
  q[1] = strata_iq4nl_word(w[1], i0 & 16 ? 4 : 0);
}

/// IQ4_XS (see strata_dq8_iq4_xs).
STRATA_FN void strata_di8_iq4_xs(const uint8_t *block, int i0, uint32_t *q,
                                 float *d, float *) {
  int ib = i0 >> 5;
  uint16_t scalesH = strata_load_u16_a2(block + 2);
  int ls = ((block[4 + (ib >> 1)] >> (4 * (ib & 1))) & 0xf) |
           (((scalesH >> (2 * ib)) & 3) << 4);
  *d = strata_f16_to_f32(strata_load_u16_a2(block)) *
       static_cast<float>(ls - 32);
  uint32_t w[2];
  strata_load8w<true>(block + 8 + 16 * ib + (i0 & 15), w);
  q[0] = strata_iq4nl_word(w[0], i0 & 16 ? 4 : 0);
  q[1] = strata_iq4nl_word(w[1], i0 & 16 ? 4 : 0);
}

/// Four sign bits (bit b for byte b) as bytes 0xff (set) or 0.
STRATA_FN uint32_t strata_sign_mask4(uint32_t bits) {
  return (((bits & 0xfu) * 0x00204081u) & 0x01010101u) * 0xffu;
}

/// IQ3_S (see strata_dq8_iq3_s_grid): the grid magnitudes (1..15) negated
/// where the sign bit is set, as (m ^ s) + 1 per byte (no carries: m >= 1).
STRATA_FN void strata_di8_iq3_s_grid(const uint8_t *block, int i0, uint32_t *q,
                                     float *d, float *, const uint32_t *grid) {
  int g = i0 >> 3, ib = i0 >> 5;
  int s = (block[106 + (ib >> 1)] >> (4 * (ib & 1))) & 0xf;
  *d = strata_f16_to_f32(strata_load_u16_a2(block)) *
       static_cast<float>(1 + 2 * s);
  int qh = block[66 + ib] >> (2 * (g & 3));
  uint16_t idx = strata_load_u16_a2(block + 2 + 2 * g);
  uint32_t lo = grid[(idx & 0xff) | ((qh & 1) << 8)];
  uint32_t hi = grid[(idx >> 8) | ((qh & 2) << 7)];
  uint32_t signs = block[74 + g];
  uint32_t m0 = strata_sign_mask4(signs), m1 = strata_sign_mask4(signs >> 4);
  q[0] = (lo ^ m0) + (m0 & 0x01010101u);
  q[1] = (hi ^ m1) + (m1 & 0x01010101u);
}
STRATA_FN void strata_di8_iq3_s(const uint8_t *block, int i0, uint32_t *q,
                                float *d, float *dm) {
  strata_di8_iq3_s_grid(block, i0, q, d, dm, strata_iq3s_grid);
}

#endif // STRATA_RUNTIME_FORMAT_BLOCKDECODEINT8_H
