//===- DeviceLib.h - target-independent device code of emitted kernels ----===//
//
// Included (as text) after a target prelude, ScalarMath.h and BlockDecode.h
// in every emitted source: typed loads/stores, block reductions and the
// building blocks the emitter specialises with compile-time constants (row
// normalisations, routing, top-k, the GEMM tile, attention, the gated delta
// rule). Everything here uses only the prelude's primitives, so it builds
// for every target.
//
//===----------------------------------------------------------------------===//
#ifdef STRATA_TARGET_SM90
/// Matrix-unit operands by the hardware conversion (cvt.rn.bf16.f32):
/// round to nearest even like sm_f32_to_bf16, in one instruction; a NaN
/// stays a NaN (staged operands are never stored, so its payload is moot).
STRATA_FN mma_t to_mma(float x) {
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
STRATA_FN float from_mma(mma_t x) { return sm_bf16_to_f32(x); }
/// Two values as one word of matrix-unit elements (lo in bits 0-15) by one
/// cvt.rn.bf16x2.f32 (its first source goes to the high half).
STRATA_FN uint32_t mma_pack2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/// x0, x1 split as mma_split does, as packed words (x0 in bits 0-15) of the
/// hi and the lo parts: two conversions for the pair instead of four.
STRATA_FN void mma_split_pack2(float x0, float x1, uint32_t *hi, uint32_t *lo) {
  uint32_t h = mma_pack2(x0, x1);
  *hi = h;
  *lo = mma_pack2(x0 - __builtin_bit_cast(float, h << 16),
                  x1 - __builtin_bit_cast(float, h & 0xffff0000u));
}
#else
STRATA_FN uint32_t mma_pack2(float lo, float hi) {
  return (uint32_t)__builtin_bit_cast(uint16_t, to_mma(lo)) |
         (uint32_t)__builtin_bit_cast(uint16_t, to_mma(hi)) << 16;
}
#endif

/// Eight f32 values x = hi + lo + lo2, each term exact in bf16 (hi =
/// bf16(x), lo = bf16(x - hi), lo2 = bf16(x - hi - lo)), reduced to term
/// \p part (0, 1, 2) up to the rounding pack8_mma does when it stores them.
/// Each difference is exact (its operands are within a factor of two), so
/// the terms hold x to about 2^-24 relative: f32 weights on the matrix
/// units with bf16 activations, every product exact, the sum in f32.
STRATA_FN void strata_split_bf16(float *v, int part) {
  if (part == 0)
    return; // pack8_mma rounds x to hi
  for (int u = 0; u < 4; ++u) {
    float x0 = v[2 * u], x1 = v[2 * u + 1];
    uint32_t h = mma_pack2(x0, x1);
    x0 -= __builtin_bit_cast(float, h << 16);
    x1 -= __builtin_bit_cast(float, h & 0xffff0000u);
    if (part == 2) {
      uint32_t l = mma_pack2(x0, x1);
      x0 -= __builtin_bit_cast(float, l << 16);
      x1 -= __builtin_bit_cast(float, l & 0xffff0000u);
    }
    v[2 * u] = x0;
    v[2 * u + 1] = x1;
  }
}

/// A bf16 activation element (stored bits).
struct bf16 {
  uint16_t v;
};
/// An f16 element (stored bits): f16 weights and f16 activations.
struct f16 {
  uint16_t v;
};

STRATA_FN float ld(const float *p, int64_t i) { return p[i]; }
STRATA_FN float ld(const bf16 *p, int64_t i) { return sm_bf16_to_f32(p[i].v); }
STRATA_FN float ld(const f16 *p, int64_t i) {
  return strata_f16_to_f32(p[i].v);
}
STRATA_FN float ld(const int32_t *p, int64_t i) { return (float)p[i]; }
STRATA_FN float ld(const uint16_t *p, int64_t i) {
  return sm_bf16_to_f32(p[i]);
}
STRATA_FN void st(float *p, int64_t i, float v) { p[i] = v; }
STRATA_FN void st(bf16 *p, int64_t i, float v) { p[i].v = sm_f32_to_bf16(v); }
STRATA_FN void st(f16 *p, int64_t i, float v) { p[i].v = strata_f32_to_f16(v); }
STRATA_FN void st(int32_t *p, int64_t i, float v) { p[i] = (int32_t)v; }

// Four adjacent elements at a 16-byte (f32) or 8-byte (bf16) aligned index:
// one vector access instead of four.
typedef float strata_f4 __attribute__((ext_vector_type(4)));
typedef uint16_t strata_h4 __attribute__((ext_vector_type(4)));
STRATA_FN void ld4(const float *p, int64_t i, float *o) {
  strata_f4 v = *(const strata_f4 *)(p + i);
  o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
}
STRATA_FN void ld4(const bf16 *p, int64_t i, float *o) {
  strata_h4 v = *(const strata_h4 *)(p + i);
  o[0] = sm_bf16_to_f32(v.x), o[1] = sm_bf16_to_f32(v.y);
  o[2] = sm_bf16_to_f32(v.z), o[3] = sm_bf16_to_f32(v.w);
}
template <class P> STRATA_FN void ld4(const P *p, int64_t i, float *o) {
  for (int u = 0; u < 4; ++u)
    o[u] = ld(p, i + u);
}
// Eight adjacent 16-bit elements at a 16-byte aligned index: one load.
STRATA_FN void ld8(const f16 *p, int64_t i, float *o) {
  strata_u4 w = *(const strata_u4 *)(p + i);
  for (int u = 0; u < 4; ++u) {
    o[2 * u] = strata_f16_to_f32((uint16_t)(w[u] & 0xffffu));
    o[2 * u + 1] = strata_f16_to_f32((uint16_t)(w[u] >> 16));
  }
}
STRATA_FN void ld8(const bf16 *p, int64_t i, float *o) {
  strata_u4 w = *(const strata_u4 *)(p + i);
  for (int u = 0; u < 4; ++u) {
    o[2 * u] = sm_bf16_to_f32((uint16_t)(w[u] & 0xffffu));
    o[2 * u + 1] = sm_bf16_to_f32((uint16_t)(w[u] >> 16));
  }
}
// Eight adjacent f32 at a 32-byte aligned index: two 16-byte loads.
STRATA_FN void ld8(const float *p, int64_t i, float *o) {
  ld4(p, i, o);
  ld4(p, i + 4, o + 4);
}
template <class P> STRATA_FN void ld8(const P *p, int64_t i, float *o) {
  for (int u = 0; u < 8; ++u)
    o[u] = ld(p, i + u);
}
STRATA_FN void st4(float *p, int64_t i, const float *v) {
  strata_f4 x = {v[0], v[1], v[2], v[3]};
  *(strata_f4 *)(p + i) = x;
}
STRATA_FN void st4(bf16 *p, int64_t i, const float *v) {
  strata_h4 x = {sm_f32_to_bf16(v[0]), sm_f32_to_bf16(v[1]),
                 sm_f32_to_bf16(v[2]), sm_f32_to_bf16(v[3])};
  *(strata_h4 *)(p + i) = x;
}
template <class P> STRATA_FN void st4(P *p, int64_t i, const float *v) {
  for (int u = 0; u < 4; ++u)
    st(p, i + u, v[u]);
}

/// Bytes [src, src + n) of global memory to shared memory at dst, whose
/// address equals src's modulo 16, by the lanes of one wave: the 16-byte
/// aligned interior by cp_async16 (a lane's copies all in flight at once;
/// a decode form's few pieces a warp, loaded 4 or 8 bytes a lane where
/// each is decoded, left the H200's memory pipe idle), the two ends a byte
/// a lane. Complete after cp_async_wait_all() and sync_wave().
STRATA_FN void wave_copy_bytes(uint8_t *dst, const uint8_t *src, long n,
                               int lane) {
  const uint64_t a = (uint64_t)src, end = a + (uint64_t)n;
  const uint64_t a0 = (a + 15) & ~(uint64_t)15, a1 = end & ~(uint64_t)15;
  const uint64_t h = a0 < end ? a0 : end;
  if ((uint64_t)lane < h - a)
    dst[lane] = src[lane];
  if (a1 > a0) {
    for (uint64_t x = a0 + 16 * (uint64_t)lane; x < a1; x += 16 * 32)
      cp_async16(dst + (x - a), (const void *)x);
  }
  const uint64_t t = a1 > h ? a1 : h;
  if ((uint64_t)lane < end - t)
    dst[t - a + lane] = src[t - a + lane];
}

STRATA_FN float warp_sum(float v) {
  for (int m = 16; m >= 1; m >>= 1)
    v += shfl_xor_f(v, m);
  return v;
}
STRATA_FN float warp_max(float v) {
  for (int m = 16; m >= 1; m >>= 1) {
    float o = shfl_xor_f(v, m);
    v = o > v ? o : v;
  }
  return v;
}
/// Sum of \p v over the block's NT threads, returned to all of them. \p red
/// is 32 floats of shared memory (reused: the leading barrier protects it).
template <int NT> STRATA_FN float block_sum(float v, float *red) {
  v = warp_sum(v);
  if (NT <= 32)
    return v;
  sync_block();
  if (lane_id() == 0)
    red[tid_x() >> 5] = v;
  sync_block();
  v = lane_id() < NT / 32 ? red[lane_id()] : 0.0f;
  return warp_sum(v);
}
/// Exclusive prefix sum of \p v over the block's NT threads (in thread
/// order) by wave shuffles and the waves' totals in \p tmp (NT / 32 ints);
/// \p total gets the block's sum. Ends with a barrier (tmp reusable after).
template <int NT>
STRATA_FN int block_exclusive_scan(int v, int *tmp, int *total) {
  const int lane = lane_id(), w = tid_x() >> 5;
  int x = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    int y = shfl_i(x, lane >= d ? lane - d : lane);
    x += lane >= d ? y : 0;
  }
  if (lane == 31)
    tmp[w] = x;
  sync_block();
  int before = 0, all = 0;
  for (int i = 0; i < NT / 32; ++i) {
    before += i < w ? tmp[i] : 0;
    all += tmp[i];
  }
  *total = all;
  sync_block();
  return before + x - v;
}

template <int NT> STRATA_FN float block_max(float v, float *red) {
  v = warp_max(v);
  if (NT <= 32)
    return v;
  sync_block();
  if (lane_id() == 0)
    red[tid_x() >> 5] = v;
  sync_block();
  v = lane_id() < NT / 32 ? red[lane_id()] : -__builtin_inff();
  return warp_max(v);
}

/// hc_write then the per-stream RMS norm of its result (hyper-connection
/// K1), the row held in registers: R' = R + lam[s] F (stored to \p ro), then
/// y = R' / sqrt(mean_s(R'^2) + eps) [* w[i % WN]] per stream s of D
/// elements. R is read once and R' never re-read (row_rms_norm after
/// hc_write reads it twice more). Every load of a phase is issued before its
/// first store: R and RO may be one buffer (K1 updates R in place), so the
/// compiler may not move a load of r past a store to ro, and loads
/// interleaved with stores left one load in flight per thread (measured
/// 81 % of the copy rate on the H200). \p red holds NT / 32 * S floats.
template <int S, int D, int NT, int WN, class R, class F, class L, class W,
          class RO, class Y>
STRATA_FN void row_hc_write_norm(const R *r, const F *f, const L *lam,
                                 const W *w, RO *ro, Y *y, float eps,
                                 float *red) {
  constexpr int N = S * D, P = N / (NT * 4);
  static_assert(N % (NT * 4) == 0 && D % 4 == 0 && NT / 32 * S <= 32,
                "row_hc_write_norm: row shape");
  float v[P][4], fv[P][4], lv[S], ss[S];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int i0 = tid_x() * 4 + p * NT * 4;
    ld4(r, i0, v[p]);
    ld4(f, i0 % D, fv[p]);
  }
#pragma unroll
  for (int t = 0; t < S; ++t) {
    lv[t] = ld(lam, t);
    ss[t] = 0.0f;
  }
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int i0 = tid_x() * 4 + p * NT * 4, s = i0 / D;
    // Selects, not lv[s] / ss[s]: a lane-dependent index would put them in
    // memory.
    float l = lv[0];
#pragma unroll
    for (int t = 1; t < S; ++t)
      l = t == s ? lv[t] : l;
    float q = 0.0f;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      v[p][u] = v[p][u] + l * fv[p][u];
      q += v[p][u] * v[p][u];
    }
    st4(ro, i0, v[p]);
#pragma unroll
    for (int t = 0; t < S; ++t)
      ss[t] += t == s ? q : 0.0f;
  }
  // The norm weights' loads (fv's registers, free now) overlap the reduction.
  if constexpr (WN > 0) {
#pragma unroll
    for (int p = 0; p < P; ++p)
      ld4(w, (tid_x() * 4 + p * NT * 4) % WN, fv[p]);
  }
#pragma unroll
  for (int t = 0; t < S; ++t) {
    float a = warp_sum(ss[t]);
    if (lane_id() == 0)
      red[(tid_x() >> 5) * S + t] = a;
  }
  sync_block();
  float scale[S];
#pragma unroll
  for (int t = 0; t < S; ++t) {
    float a = 0.0f;
    for (int q = 0; q < NT / 32; ++q)
      a += red[q * S + t];
    scale[t] = 1.0f / strata_sqrt(a / D + eps);
  }
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int i0 = tid_x() * 4 + p * NT * 4, s = i0 / D;
    float sc = scale[0];
#pragma unroll
    for (int t = 1; t < S; ++t)
      sc = t == s ? scale[t] : sc;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      v[p][u] *= sc;
      if constexpr (WN > 0)
        v[p][u] *= fv[p][u];
    }
    st4(y, i0, v[p]);
  }
}

/// RMS normalisation of one row of N elements in groups of GS (rms_norm,
/// hc_norm): y = x * 1/sqrt(mean(x^2) + eps) [* w[i % WN]]. Groups of at
/// most 1024 elements go one per wave; larger ones take the whole block.
template <int N, int GS, int NT, int WN, class X, class W, class Y>
STRATA_FN void row_rms_norm(const X *x, const W *w, Y *y, float eps,
                            float *red) {
  constexpr int G = N / GS;
  if constexpr (GS % 128 == 0 && (WN == 0 || WN % 4 == 0)) {
    // A wave per group, 4 adjacent elements per lane (vector accesses).
    for (int g = tid_x() >> 5; g < G; g += NT / 32) {
      float s = 0;
      for (int i0 = lane_id() * 4; i0 < GS; i0 += 128) {
        float v[4];
        ld4(x, g * GS + i0, v);
#pragma unroll
        for (int u = 0; u < 4; ++u)
          s += v[u] * v[u];
      }
      float scale = 1.0f / strata_sqrt(warp_sum(s) / GS + eps);
      for (int i0 = lane_id() * 4; i0 < GS; i0 += 128) {
        int j = g * GS + i0;
        float v[4], wv[4];
        ld4(x, j, v);
        if constexpr (WN > 0)
          ld4(w, j % WN, wv);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          v[u] *= scale;
          if constexpr (WN > 0)
            v[u] *= wv[u];
        }
        st4(y, j, v);
      }
    }
  } else if constexpr (GS <= 1024 && G >= NT / 32) {
    for (int g = tid_x() >> 5; g < G; g += NT / 32) {
      float s = 0;
      for (int i = lane_id(); i < GS; i += 32) {
        float v = ld(x, g * GS + i);
        s += v * v;
      }
      float scale = 1.0f / strata_sqrt(warp_sum(s) / GS + eps);
      for (int i = lane_id(); i < GS; i += 32) {
        int j = g * GS + i;
        float v = ld(x, j) * scale;
        if constexpr (WN > 0)
          v *= ld(w, j % WN);
        st(y, j, v);
      }
    }
  } else {
    for (int g = 0; g < G; ++g) {
      float s = 0;
      for (int i = tid_x(); i < GS; i += NT) {
        float v = ld(x, g * GS + i);
        s += v * v;
      }
      float scale = 1.0f / strata_sqrt(block_sum<NT>(s, red) / GS + eps);
      for (int i = tid_x(); i < GS; i += NT) {
        int j = g * GS + i;
        float v = ld(x, j) * scale;
        if constexpr (WN > 0)
          v *= ld(w, j % WN);
        st(y, j, v);
      }
    }
  }
}

/// l2_norm of one row in groups of GS: form "max" x / max(|x|, eps), "add"
/// x * rsqrt(sum x^2 + eps). One wave per group.
template <int N, int GS, int NT, bool ADD, class X, class Y>
STRATA_FN void row_l2_norm(const X *x, Y *y, float eps) {
  for (int g = tid_x() >> 5; g < N / GS; g += NT / 32) {
    float s = 0;
    for (int i = lane_id(); i < GS; i += 32) {
      float v = ld(x, g * GS + i);
      s += v * v;
    }
    s = warp_sum(s);
    float r = strata_sqrt(s);
    float scale =
        ADD ? 1.0f / strata_sqrt(s + eps) : 1.0f / (r > eps ? r : eps);
    for (int i = lane_id(); i < GS; i += 32)
      st(y, g * GS + i, ld(x, g * GS + i) * scale);
  }
}

/// softmax over groups of GS of one row (max subtracted). One wave per
/// group.
template <int N, int GS, int NT, class X, class Y>
STRATA_FN void row_softmax(const X *x, Y *y) {
  for (int g = tid_x() >> 5; g < N / GS; g += NT / 32) {
    float m = -__builtin_inff();
    for (int i = lane_id(); i < GS; i += 32) {
      float v = ld(x, g * GS + i);
      m = v > m ? v : m;
    }
    m = warp_max(m);
    float s = 0;
    for (int i = lane_id(); i < GS; i += 32)
      s += strata_exp(ld(x, g * GS + i) - m);
    s = warp_sum(s);
    for (int i = lane_id(); i < GS; i += 32)
      st(y, g * GS + i, strata_exp(ld(x, g * GS + i) - m) / s);
  }
}

/// sinkhorn over the [n, n] matrices of one row: exp(x - max), then `iters`
/// rounds of row then column normalisation; one thread per matrix.
template <int N, int NN, int NT, class X, class Y>
STRATA_FN void row_sinkhorn(const X *x, Y *y, int iters) {
  for (int m = tid_x(); m < N / (NN * NN); m += NT) {
    float a[NN * NN];
    float mx = -__builtin_inff();
    for (int i = 0; i < NN * NN; ++i) {
      a[i] = ld(x, m * NN * NN + i);
      mx = a[i] > mx ? a[i] : mx;
    }
    for (int i = 0; i < NN * NN; ++i)
      a[i] = strata_exp(a[i] - mx);
    for (int it = 0; it < iters; ++it) {
      for (int i = 0; i < NN; ++i) {
        float s = 0;
        for (int j = 0; j < NN; ++j)
          s += a[i * NN + j];
        for (int j = 0; j < NN; ++j)
          a[i * NN + j] /= s;
      }
      for (int j = 0; j < NN; ++j) {
        float s = 0;
        for (int i = 0; i < NN; ++i)
          s += a[i * NN + j];
        for (int i = 0; i < NN; ++i)
          a[i * NN + j] /= s;
      }
    }
    for (int i = 0; i < NN * NN; ++i)
      st(y, m * NN * NN + i, a[i]);
  }
}

/// rope of one token's H heads of HD dims (n rotated dims), angle
/// theta_i = pos * base^(-2i/n) by repeated products, as the CPU does.
template <int H, int HD, int NR, bool NEOX, int NT, class X, class Y>
STRATA_FN void row_rope(const X *x, Y *y, int pos, float theta_scale) {
  for (int j = tid_x(); j < H * (HD - NR / 2); j += NT) {
    int h = j / (HD - NR / 2), i = j % (HD - NR / 2);
    if (i < NR / 2) {
      float theta = (float)pos;
      for (int r = 0; r < i; ++r)
        theta *= theta_scale;
      float s, c;
      strata_sincos(theta, &s, &c);
      int ia = NEOX ? i : 2 * i, ib = NEOX ? i + NR / 2 : 2 * i + 1;
      float a = ld(x, h * HD + ia), b = ld(x, h * HD + ib);
      st(y, h * HD + ia, a * c - b * s);
      st(y, h * HD + ib, a * s + b * c);
    } else {
      int c = NR + (i - NR / 2);
      st(y, h * HD + c, ld(x, h * HD + c));
    }
  }
}

/// moe_route's order: candidate (v, i) beats the best so far (bv, bi): any
/// number beats NaN, then the larger value, then the lower id; bi < 0 is
/// "none yet".
STRATA_FN bool route_better(float v, int i, float bv, int bi) {
  if (i < 0)
    return false;
  if (bi < 0)
    return true;
  if (sm_isnan(v) != sm_isnan(bv))
    return sm_isnan(bv);
  return v > bv || (v == bv && i < bi) || (sm_isnan(v) && i < bi);
}

/// conv1d_causal (y[t][c] = sum_j w[c][j] x[t - (KW - 1 - j) DIL][c], x and
/// y [T][C]) with an optional silu, over RT rows from bid_y() RT and four
/// channels per thread from (bid_x() NT + tid_x()) 4: the block's weights
/// are loaded once, then each row's taps by vector loads (earlier rows hit
/// L1) and one vector store. One block a row re-read all C x KW weights for
/// every row (160 KB a row at the seed's 10,240 channels) and staged the
/// row in LDS.
template <int C, int KW, int DIL, int RT, int NT, bool SILU, class X, class W,
          class Y>
STRATA_FN void conv1d_rows(const X *x, const W *w, Y *y, long T) {
  static_assert(C % 4 == 0, "four channels per thread");
  const long i0 = ((long)bid_x() * NT + tid_x()) * 4;
  if (i0 >= C)
    return;
  float wv[4][KW];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    if constexpr (KW == 4)
      ld4(w, (i0 + u) * 4, wv[u]);
    else
#pragma unroll
      for (int j = 0; j < KW; ++j)
        wv[u][j] = ld(w, (i0 + u) * KW + j);
  }
  const long r0 = (long)bid_y() * RT;
#pragma unroll 4
  for (int rr = 0; rr < RT; ++rr) {
    const long r = r0 + rr;
    if (r >= T)
      break;
    float s[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < KW; ++j) {
      const long src = r - (long)(KW - 1 - j) * DIL;
      if (src < 0)
        continue;
      float xv[4];
      ld4(x, src * C + i0, xv);
#pragma unroll
      for (int u = 0; u < 4; ++u)
        s[u] += wv[u][j] * xv[u];
    }
    if (SILU)
#pragma unroll
      for (int u = 0; u < 4; ++u)
        s[u] = sm_silu(s[u]);
    st4(y, r * C + i0, s);
  }
}

/// moe_route of one token by one wave (kernels of several tokens per block,
/// no block barrier): lane l holds probabilities l, l + 32, ... in
/// registers (softmax by wave reductions, or sigmoid), then the top K
/// (descending, ties to the lower id, NaN never before a number, as
/// row_moe_route) by K rounds of a wave argmax over each lane's best
/// untaken candidate; only the winning lane looks for its next best. A
/// block-wide round (row_moe_route) made 8 waves repeat every reduction: the
/// kernel was instruction-bound (ncu: IPC 3.1) at 0.6 ms a layer.
template <int E, int K, bool SOFTMAX, bool NORM, class X, class W>
STRATA_FN void wave_moe_route(const X *x, W *w, int32_t *ids) {
  constexpr int PL = (E + 31) / 32;
  static_assert(PL <= 32, "one taken bit per register");
  static_assert(K <= 32, "a lane per round's winner");
  const int lane = lane_id();
  float p[PL];
  uint32_t taken = 0; // bit i: expert lane + 32 i taken (or past E)
#pragma unroll
  for (int i = 0; i < PL; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? ld(x, e) : 0.0f;
    taken |= e < E ? 0u : 1u << i;
  }
  if (SOFTMAX) {
    float m = -__builtin_inff();
#pragma unroll
    for (int i = 0; i < PL; ++i)
      m = !(taken >> i & 1u) && p[i] > m ? p[i] : m;
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) {
      float o = shfl_xor_f(m, d);
      m = o > m ? o : m;
    }
    float sum = 0;
#pragma unroll
    for (int i = 0; i < PL; ++i) {
      p[i] = strata_exp(p[i] - m);
      sum += taken >> i & 1u ? 0.0f : p[i];
    }
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1)
      sum += shfl_xor_f(sum, d);
#pragma unroll
    for (int i = 0; i < PL; ++i)
      p[i] /= sum;
  } else {
#pragma unroll
    for (int i = 0; i < PL; ++i)
      p[i] = sm_sigmoid(p[i]);
  }
  auto best = [&](float &bv, int &bi) {
    bv = 0;
    bi = -1;
#pragma unroll
    for (int i = 0; i < PL; ++i)
      if (!(taken >> i & 1u) && route_better(p[i], lane + 32 * i, bv, bi))
        bv = p[i], bi = lane + 32 * i;
  };
  float lv;
  int li;
  best(lv, li);
  // Round s's winner is kept by lane s. The rounds stay a loop: unrolled,
  // the kernel's code (K rounds of the rescan) took longer to fetch than
  // to run at one token (18.8 us a layer on the H200).
  float mv = 0;
  int mi = -1;
#pragma unroll 1
  for (int s = 0; s < K; ++s) {
    float bv = lv;
    int bi = li;
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) {
      float ov = shfl_xor_f(bv, d);
      int oi = shfl_xor_i(bi, d);
      if (route_better(ov, oi, bv, bi))
        bv = ov, bi = oi;
    }
    if (lane == s)
      mv = bv, mi = bi;
    if (bi >= 0 && (bi & 31) == lane) {
      taken |= 1u << (bi >> 5);
      best(lv, li);
    }
  }
  // The rounds' values summed in order (as row_moe_route does).
  float sum = 0;
  if (NORM) {
#pragma unroll 1
    for (int s = 0; s < K; ++s)
      sum += shfl_f(mv, s);
  }
  if (lane < K) {
    ids[lane] = mi;
    st(w, lane, NORM ? mv / sum : mv);
  }
}

/// moe_route of one token: probabilities (softmax or sigmoid) of E logits
/// into shared \p p, then the top K (descending, ties to the lower id, NaN
/// never before a number) by K rounds of a block argmax.
template <int E, int K, int NT, bool SOFTMAX, bool NORM, class X, class W>
STRATA_FN void row_moe_route(const X *x, W *w, int32_t *ids, float *p,
                             float *red, int *redi) {
  if (SOFTMAX) {
    float m = -__builtin_inff();
    for (int i = tid_x(); i < E; i += NT) {
      float v = ld(x, i);
      m = v > m ? v : m;
    }
    m = block_max<NT>(m, red);
    float s = 0;
    for (int i = tid_x(); i < E; i += NT) {
      p[i] = strata_exp(ld(x, i) - m);
      s += p[i];
    }
    s = block_sum<NT>(s, red);
    for (int i = tid_x(); i < E; i += NT)
      p[i] /= s;
  } else {
    for (int i = tid_x(); i < E; i += NT)
      p[i] = sm_sigmoid(ld(x, i));
  }
  sync_block();
  float sum = 0;
  // The picks, in shared memory (a register array indexed by the round
  // would go to scratch).
  STRATA_SHARED float chosen[K];
  STRATA_SHARED int chosenId[K];
  // One barrier per round: the wave bests go to red/redi by the round's
  // parity (so a slow wave still reading last round's never sees them
  // overwritten), every thread reduces them to the block best itself, and
  // the thread that holds the winner marks it (no other thread reads it).
  STRATA_SHARED float redv[2][NT / 32];
  STRATA_SHARED int redn[2][NT / 32];
  for (int s = 0; s < K; ++s) {
    // Best (number before NaN, larger value, lower id) per thread, wave,
    // block; taken experts hold the bit pattern 0xffffffff and are skipped.
    float bv = 0;
    int bi = -1;
    for (int i = tid_x(); i < E; i += NT) {
      float v = p[i];
      if (sm_bits(v) != 0xffffffffu && route_better(v, i, bv, bi))
        bv = v, bi = i;
    }
    for (int m = 16; m >= 1; m >>= 1) {
      float ov = shfl_xor_f(bv, m);
      int oi = shfl_xor_i(bi, m);
      if (route_better(ov, oi, bv, bi))
        bv = ov, bi = oi;
    }
    if (lane_id() == 0) {
      redv[s & 1][tid_x() >> 5] = bv;
      redn[s & 1][tid_x() >> 5] = bi;
    }
    sync_block();
    bv = redv[s & 1][0], bi = redn[s & 1][0];
    for (int j = 1; j < NT / 32; ++j)
      if (route_better(redv[s & 1][j], redn[s & 1][j], bv, bi))
        bv = redv[s & 1][j], bi = redn[s & 1][j];
    if (bi % NT == tid_x())
      p[bi] = sm_from_bits(0xffffffffu);
    if (tid_x() == 0) {
      chosen[s] = bv;
      chosenId[s] = bi;
    }
  }
  sync_block();
  if (tid_x() == 0)
    for (int s = 0; s < K; ++s)
      sum += chosen[s];
  if (tid_x() == 0)
    for (int s = 0; s < K; ++s) {
      ids[s] = chosenId[s];
      st(w, s, NORM ? chosen[s] / sum : chosen[s]);
    }
}

/// Sorts \p score / \p id (shared, \p p a power of two) in place by a
/// bitonic network: "before" = larger score, then lower id.
template <int NT> STRATA_FN void qsa_bitonic(float *score, int *id, int p) {
  for (int size = 2; size <= p; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid_x(); i < p / 2; i += NT) {
        int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        bool down = (lo & size) != 0;
        bool before = score[hi] > score[lo] ||
                      (score[hi] == score[lo] && id[hi] < id[lo]);
        if (before != down) {
          float ts = score[lo];
          score[lo] = score[hi];
          score[hi] = ts;
          int ti = id[lo];
          id[lo] = id[hi];
          id[hi] = ti;
        }
      }
      sync_block();
    }
}

/// A qsa_select score (-inf or >= 0, zeros of either sign equal) as an
/// unsigned key of the same order: -inf 0, zero 1, x > 0 its bits + 1.
STRATA_FN uint32_t qsa_key(float s) {
  return s == -__builtin_inff() ? 0u : s == 0.0f ? 1u : sm_bits(s) + 1u;
}

/// The TOP best of the n scores (n > TOP; block b's id is b, read from \p id
/// unless IMPLICIT, where \p id may be shorter than n) in qsa_select's
/// order into y (then the tail block n, as qsa_select writes): the TOP-th
/// largest key by a radix select (four 8-bit digits, a shared histogram and
/// a block scan each), the blocks above it and the lowest ids at it
/// compacted in block order, then a bitonic sort of only those. Sorting all
/// n (up to 4,096 at T = 16,384) by the network kept the kernel LDS-bound.
template <int TOP, int NT, bool IMPLICIT = false>
STRATA_FN void qsa_top_select(const float *score, const int *id, int n,
                              int32_t *y) {
  constexpr int PT = TOP <= 1 ? 1 : 2 << (31 - __builtin_clz(TOP - 1));
  static_assert(NT == 256, "one histogram digit per thread");
  STRATA_SHARED int hist[256];
  STRATA_SHARED int tmp[NT / 32];
  STRATA_SHARED uint32_t pick[2];
  STRATA_SHARED float cs[PT];
  STRATA_SHARED int ci[PT];
  uint32_t prefix = 0, mask = 0;
  int k = TOP; // the rank (from 1) of the key sought among those at prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[tid_x()] = 0;
    sync_block();
    for (int b = tid_x(); b < n; b += NT) {
      uint32_t u = qsa_key(score[b]);
      if ((u & mask) == prefix)
        __atomic_fetch_add(&hist[(u >> shift) & 255u], 1, __ATOMIC_RELAXED);
    }
    sync_block();
    // Thread i owns digit 255 - i: keys of larger digits come first.
    const int d = 255 - tid_x(), c = hist[d];
    int total;
    int above = block_exclusive_scan<NT>(c, tmp, &total);
    if (above < k && k <= above + c) {
      pick[0] = prefix | (uint32_t)d << shift;
      pick[1] = (uint32_t)(k - above);
    }
    sync_block();
    prefix = pick[0];
    k = (int)pick[1];
    mask |= 255u << shift;
  }
  // Selected: key > prefix, or key == prefix among the first k in block
  // order. Thread i scans the contiguous blocks [i R, i R + R).
  const int R = (n + NT - 1) / NT, b0 = tid_x() * R;
  const int b1 = b0 + R < n ? b0 + R : n;
  int eq = 0;
  for (int b = b0; b < b1; ++b)
    eq += qsa_key(score[b]) == prefix;
  int total;
  int eqBefore = block_exclusive_scan<NT>(eq, tmp, &total);
  int mine = 0;
  for (int b = b0, e = eqBefore; b < b1; ++b) {
    uint32_t u = qsa_key(score[b]);
    mine += u > prefix || (u == prefix && e++ < k);
  }
  int at = block_exclusive_scan<NT>(mine, tmp, &total);
  for (int b = b0, e = eqBefore; b < b1; ++b) {
    uint32_t u = qsa_key(score[b]);
    if (u > prefix || (u == prefix && e++ < k)) {
      cs[at] = score[b];
      ci[at] = IMPLICIT ? b : id[b];
      ++at;
    }
  }
  for (int i = TOP + tid_x(); i < PT; i += NT) {
    cs[i] = -__builtin_inff();
    ci[i] = 0x7fffffff;
  }
  sync_block();
  qsa_bitonic<NT>(cs, ci, PT);
  for (int i = tid_x(); i <= TOP; i += NT)
    y[i] = i < TOP ? ci[i] : n;
}

/// qsa_select of query row t: the scores of the visible complete blocks
/// b < (t+1)/BLOCK (sum over indexer heads of relu(q_h . kb_b), times
/// \p inv; NaN ranks as -inf), the TOP best (descending, ties to the lower
/// block) by a bitonic sort in shared memory (P = a power of two >= the
/// block count), then the tail block, then -1 padding. IDS < P (rows too
/// long for P ids in LDS): \p id holds IDS entries, written only for rows
/// the bitonic sort takes (their P is at most IDS: IDS is the top's power
/// of two, so longer rows have more visible blocks than the top and go to
/// the radix select, which knows a block by its index).
template <int HI, int DI, int BLOCK, int TOP, int NT, int P, int IDS = P,
          class Q, class K, class Y>
STRATA_FN void row_qsa_select(const Q *q, const K *kb, Y *y, long t, long T,
                              float inv, float *score, int *id, float *qs) {
  int nc = (int)((t + 1) / BLOCK);
  // This row's sort size: the smallest power of two holding its visible
  // blocks (early rows sort a few, not P).
  int p = 1;
  while (p < nc)
    p <<= 1;
  // The query row once into LDS (every thread reads all of it), then each
  // thread's blocks with 4-element vector loads of kb, every head's dot
  // product from one pass over the key (kb is read once, not once a head).
  for (int i = tid_x(); i < HI * DI; i += NT)
    qs[i] = ld(q, i);
  sync_block();
  for (int b = tid_x(); b < p; b += NT) {
    float s = -__builtin_inff();
    if (b < nc) {
      float d[HI];
#pragma unroll
      for (int h = 0; h < HI; ++h)
        d[h] = 0;
      if constexpr (DI % 4 == 0) {
        // Unrolled 8 steps, not fully: fully unrolled, ptxas spills.
#pragma unroll 8
        for (int c = 0; c < DI; c += 4) {
          float kv[4];
          ld4(kb, (long)b * DI + c, kv);
#pragma unroll
          for (int h = 0; h < HI; ++h)
            d[h] += qs[h * DI + c] * kv[0] + qs[h * DI + c + 1] * kv[1] +
                    qs[h * DI + c + 2] * kv[2] + qs[h * DI + c + 3] * kv[3];
        }
      } else {
        for (int c = 0; c < DI; ++c) {
          float kv = ld(kb, (long)b * DI + c);
#pragma unroll
          for (int h = 0; h < HI; ++h)
            d[h] += qs[h * DI + c] * kv;
        }
      }
      s = 0;
#pragma unroll
      for (int h = 0; h < HI; ++h)
        s += d[h] < 0 ? 0.0f : d[h];
      s *= inv;
      if (sm_isnan(s))
        s = -__builtin_inff();
    }
    score[b] = s;
    if (IDS == P || p <= IDS)
      id[b] = b < nc ? b : 0x7fffffff;
  }
  sync_block();
  static_assert(IDS == P || (NT == 256 && TOP > 0 && IDS >= TOP),
                "row_qsa_select: compact ids need the radix select");
  if constexpr (NT == 256 && TOP > 0) {
    if (nc > TOP) {
      qsa_top_select<TOP, NT, (IDS < P)>(score, id, nc, y);
      return;
    }
  }
  qsa_bitonic<NT>(score, id, p);
  int chosen = TOP < nc ? TOP : nc;
  for (int k = tid_x(); k <= TOP; k += NT)
    y[k] = k < chosen ? id[k] : (k == chosen ? nc : -1);
}

/// ngram_hash of token t: the last N tokens (EOS history before the start
/// and after an EOS), per order 2..N the XOR of token * multiplier, then per
/// head (mixed mod size) + offset. One thread.
template <int N, int HEADS>
STRATA_FN void ngram_hash_row(const int32_t *tok, long t, long eos,
                              const long *mults, const long *sizes,
                              const long *offs, int32_t *y) {
  long back[N];
  bool ended = false;
  for (int s = 0; s < N; ++s) {
    long p = t - s;
    back[s] = p < 0 || ended ? eos : (long)tok[p];
    ended = ended || (s > 0 && back[s] == eos);
  }
  for (int order = 2; order <= N; ++order) {
    long mixed = 0;
    for (int s = 0; s < order; ++s)
      mixed ^= back[s] * mults[s];
    for (int j = 0; j < HEADS; ++j) {
      int hh = (order - 2) * HEADS + j;
      y[hh] = (int32_t)(mixed % sizes[hh] + offs[hh]);
    }
  }
}

/// QSA: the per-row bitmap of selected key blocks for the BQ query rows
/// from t0 (index [T, NB] of block ids, -1 padding; NBW 32-bit words a row).
template <int BQ, int NB, int NBW, int NT>
STRATA_FN void qsa_bitmap(const int32_t *index, long t0, long T,
                          uint32_t *sel) {
  for (int i = tid_x(); i < BQ * NBW; i += NT)
    sel[i] = 0;
  sync_block();
  for (int i = tid_x(); i < BQ * NB; i += NT) {
    long tt = t0 + i / NB;
    int b = tt < T ? index[tt * NB + i % NB] : -1;
    if (b >= 0 && b < NBW * 32)
      __atomic_fetch_or(&sel[(i / NB) * NBW + b / 32], 1u << (b % 32),
                        __ATOMIC_RELAXED);
  }
}

/// QSA: whether any of the BQ rows selects a block overlapping the key
/// chunk [j0, j0 + KC) (a block-wide answer; \p any is one shared int).
template <int BQ, int KC, int BLOCK, int NBW, int NT>
STRATA_FN bool qsa_chunk_selected(const uint32_t *sel, long j0, int *any) {
  if (tid_x() == 0)
    any[0] = 0;
  sync_block();
  for (int i = tid_x(); i < BQ * (KC / BLOCK + 2); i += NT) {
    int rr = i / (KC / BLOCK + 2);
    long b = j0 / BLOCK + i % (KC / BLOCK + 2);
    if (b < NBW * 32 && (sel[rr * NBW + b / 32] >> (b % 32) & 1u))
      any[0] = 1;
  }
  sync_block();
  return any[0] != 0;
}

/// Flash-style attention for BQ query rows of one head (f32 FMA; keys and
/// values staged through shared memory 32 at a time, online softmax, no
/// T x T matrix). Element (t, h, c) of q is q[t*QT + h*QH + c], likewise
/// k, v, gate. Causal: key j <= t. With an index (QSA), key j counts only
/// if block j / BLOCK is among row t's NB selected blocks (entries >= 0);
/// key chunks that no row of the tile selects are skipped. A row that sees
/// no key stays 0, as on the CPU.
template <int BQ, int KC, int H, int D, int DV, int HG, bool CAUSAL, bool GATED,
          int BLOCK, int NB, int NBW, int NT, long QT, long QH, long KT,
          long KH, long VT, long VH, long GT, long GH, class Q, class K,
          class V, class G, class Y>
STRATA_FN void attention_tile(const Q *q, const K *k, const V *v, const G *gate,
                              const int32_t *index, Y *y, long T, long TK,
                              float scale) {
  constexpr int TPR = NT / BQ;  // threads per query row
  constexpr int CPT = DV / TPR; // output columns per thread
  // Staged in the inputs' own type (bf16 halves the LDS of the bf16 policy).
  STRATA_SHARED Q Qs[BQ * D];
  STRATA_SHARED K Ks[KC * (D + 1)];
  STRATA_SHARED V Vs[KC * DV];
  STRATA_SHARED float Ps[BQ * KC];
  STRATA_SHARED uint32_t sel[BLOCK > 0 ? BQ * NBW : 1];
  STRATA_SHARED int any[1];
  const long t0 = (long)bid_x() * BQ;
  const int h = bid_y(), kh = h / HG;
  const int r = tid_x() / TPR, x = tid_x() % TPR;
  const long t = t0 + r;
  for (int i = tid_x(); i < BQ * D; i += NT) {
    long tt = t0 + i / D;
    st(Qs, i, tt < T ? ld(q, tt * QT + h * QH + i % D) : 0.0f);
  }
  if constexpr (BLOCK > 0)
    qsa_bitmap<BQ, NB, NBW, NT>(index, t0, T, sel);
  float o[CPT];
#pragma unroll
  for (int c = 0; c < CPT; ++c)
    o[c] = 0;
  float mrow = -__builtin_inff(), lrow = 0;
  long last = CAUSAL ? (t0 + BQ - 1 < T ? t0 + BQ - 1 : T - 1) : TK - 1;
  for (long j0 = 0; j0 <= last; j0 += KC) {
    sync_block();
    if constexpr (BLOCK > 0)
      if (!qsa_chunk_selected<BQ, KC, BLOCK, NBW, NT>(sel, j0, any))
        continue;
    for (int i = tid_x(); i < KC * D; i += NT) {
      long j = j0 + i / D;
      st(Ks, (i / D) * (D + 1) + i % D,
         j < TK ? ld(k, j * KT + kh * KH + i % D) : 0.0f);
    }
    for (int i = tid_x(); i < KC * DV; i += NT) {
      long j = j0 + i / DV;
      st(Vs, i, j < TK ? ld(v, j * VT + kh * VH + i % DV) : 0.0f);
    }
    sync_block();
    // Scores: thread x of row r takes keys x, x + TPR, ...
    float cmax = -__builtin_inff();
    for (int jj = x; jj < KC; jj += TPR) {
      long j = j0 + jj;
      bool ok = t < T && j < TK && (!CAUSAL || j <= t);
      if (BLOCK > 0 && ok) {
        long b = j / BLOCK;
        ok = b < NBW * 32 && (sel[r * NBW + b / 32] >> (b % 32) & 1u);
      }
      float s = -__builtin_inff();
      if (ok) {
        s = 0;
        for (int c = 0; c < D; ++c)
          s += ld(Qs, r * D + c) * ld(Ks, jj * (D + 1) + c);
        s *= scale;
      }
      Ps[r * KC + jj] = s;
      cmax = s > cmax ? s : cmax;
    }
    for (int m = TPR / 2; m >= 1; m >>= 1) {
      float oth = shfl_xor_f(cmax, m);
      cmax = oth > cmax ? oth : cmax;
    }
    float mnew = cmax > mrow ? cmax : mrow;
    float corr = mnew == -__builtin_inff() ? 1.0f : strata_exp(mrow - mnew);
    sync_block();
    float psum = 0;
    for (int jj = x; jj < KC; jj += TPR) {
      float s = Ps[r * KC + jj];
      float p = s == -__builtin_inff() ? 0.0f : strata_exp(s - mnew);
      Ps[r * KC + jj] = p;
      psum += p;
    }
    for (int m = TPR / 2; m >= 1; m >>= 1)
      psum += shfl_xor_f(psum, m);
    lrow = lrow * corr + psum;
    mrow = mnew;
    sync_block();
#pragma unroll
    for (int c = 0; c < CPT; ++c) {
      float a = o[c] * corr;
      for (int jj = 0; jj < KC; ++jj)
        a += Ps[r * KC + jj] * ld(Vs, jj * DV + x + c * TPR);
      o[c] = a;
    }
  }
  if (t >= T)
    return;
#pragma unroll
  for (int c = 0; c < CPT; ++c) {
    int col = x + c * TPR;
    float val = lrow > 0 ? o[c] / lrow : 0.0f;
    if (GATED)
      val *= sm_sigmoid(ld(gate, t * GT + h * GH + col));
    st(y, (t * H + h) * DV + col, val);
  }
}

/// moe_sort across blocks, first launch: block b counts each expert among
/// the slots [b SL, (b + 1) SL) (shared atomics) into counts[b][E] (the
/// kernel's workspace; blocks past S write zeros).
template <int E, int NT, int SL>
STRATA_FN void moe_sort_count(const int32_t *ids, int32_t *counts, long S) {
  STRATA_SHARED int count[E];
  for (int e = tid_x(); e < E; e += NT)
    count[e] = 0;
  sync_block();
  const long s0 = (long)bid_x() * SL, s1 = s0 + SL < S ? s0 + SL : S;
  for (long s = s0 + tid_x(); s < s1; s += NT)
    __atomic_fetch_add(&count[ids[s]], 1, __ATOMIC_RELAXED);
  sync_block();
  for (int e = tid_x(); e < E; e += NT)
    counts[(long)bid_x() * E + e] = count[e];
}

/// moe_sort across blocks, second launch: block b takes every block's
/// counts (S / SL + 1 blocks, as the grid), the offsets off[e] (an exclusive
/// scan of the totals; block 0 stores them, off[E] = S) and its own bases
/// off[e] + the counts of e in earlier blocks, then the stable permutation of
/// its slots in rounds of NT (rank inside a wave by the wave's match mask,
/// across waves by per-wave counts) and each slot's row.
template <int E, int NT, int SL>
STRATA_FN void moe_sort_scatter(const int32_t *ids, const int32_t *counts,
                                int32_t *off, int32_t *perm, int32_t *rows,
                                long S) {
  constexpr int NW = NT / 32, PER = (E + NT - 1) / NT;
  STRATA_SHARED int base[E];
  STRATA_SHARED int tot[E];
  STRATA_SHARED int wc[NW * E];
  STRATA_SHARED int tmp[NW];
  const int b = bid_x(), nb = (int)(S / SL) + 1;
  for (int e = tid_x(); e < E; e += NT) {
    int before = 0, all = 0;
    for (int x = 0; x < nb; ++x) {
      int c = counts[(long)x * E + e];
      before += x < b ? c : 0;
      all += c;
    }
    base[e] = before;
    tot[e] = all;
  }
  for (int i = tid_x(); i < NW * E; i += NT)
    wc[i] = 0;
  sync_block();
  // Thread i owns experts [i PER, i PER + PER): their totals' scan.
  const int e0 = tid_x() * PER;
  int mine = 0;
  for (int e = e0; e < e0 + PER && e < E; ++e)
    mine += tot[e];
  int total;
  int run = block_exclusive_scan<NT>(mine, tmp, &total);
  for (int e = e0; e < e0 + PER && e < E; ++e) {
    if (b == 0)
      off[e] = run;
    base[e] += run;
    run += tot[e];
  }
  if (b == 0 && tid_x() == 0)
    off[E] = total;
  sync_block();
  const int w = tid_x() >> 5, lane = lane_id();
  const long s1 = ((long)b + 1) * SL < S ? ((long)b + 1) * SL : S;
  for (long r0 = (long)b * SL; r0 < s1; r0 += NT) {
    long s = r0 + tid_x();
    int e = s < s1 ? ids[s] : -1;
    const uint32_t same = wave_match(e);
    const int cnt = __builtin_popcount(same);
    const int rank = __builtin_popcount(same & ((1u << lane) - 1u));
    const bool first = rank == 0;
    if (e >= 0 && first)
      wc[w * E + e] = cnt;
    sync_block();
    int before = 0, all = 0;
    if (e >= 0) {
      for (int x = 0; x < NW; ++x) {
        int c = wc[x * E + e];
        if (x < w)
          before += c;
        all += c;
      }
      int at = base[e] + before + rank;
      perm[at] = (int32_t)s;
      if (rows)
        rows[s] = at;
    }
    sync_block();
    // The wave's first holder of e clears its count; the round's last
    // holder (last wave with e, last lane) advances the base.
    if (e >= 0) {
      bool lastWave = true;
      for (int x = w + 1; x < NW; ++x)
        lastWave = lastWave && wc[x * E + e] == 0;
      if (lastWave && rank == cnt - 1)
        base[e] += all;
    }
    sync_block();
    if (e >= 0 && first)
      wc[w * E + e] = 0;
    sync_block();
  }
}

/// Eight values as matrix-unit elements, packed two per 32-bit word (one
/// 16-byte LDS store for a staged piece).
STRATA_FN strata_u4 pack8_mma(const float *v) {
  strata_u4 r;
#pragma unroll
  for (int u = 0; u < 4; ++u)
    r[u] = mma_pack2(v[2 * u], v[2 * u + 1]);
  return r;
}

/// Stores a per-row statistic of a 16x16 accumulator tile (\p v: one value
/// per accumulator, equal along each row, as mma_row_max leaves it) to
/// dst[row]: the holders of column 0 write, so every row exactly once.
STRATA_FN void mma_rows_store(float *dst, const float *v) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int r, c;
    mma_acc_coord(i, &r, &c);
    if (c == 0)
      dst[r] = v[i];
  }
}

/// Sixteen zero bytes (eight matrix-unit elements) at a 16-byte aligned
/// address.
STRATA_FN void zero8(mma_t *dst) {
  strata_u4 z = {0, 0, 0, 0};
  *(strata_u4 *)dst = z;
}

/// Flash attention on the matrix units for query heads that share one KV
/// head (GQA). Block (x, y) takes the 16 query tokens from t0 = 16 x and the
/// NRG heads from h0 = NRG y (NRG divides HG: one KV head), so every staged
/// chunk of KC keys and values serves 16 NRG query rows instead of 16.
/// Wave w is row group rg = w / NSP (head h0 + rg, the 16 tokens) and part
/// cp = w % NSP: it computes S for keys [cp KCP, (cp + 1) KCP) of the chunk
/// and O for value columns [cp DVW, (cp + 1) DVW), so no wave holds more
/// than DVW / 16 accumulator tiles (no spills at DV = 256) and no S is
/// computed twice. The online softmax keeps each row's max and sum in
/// registers per accumulator (mma_row_max / mma_row_sum of the prelude);
/// the NSP parts of a row exchange partial maxima and sums through LDS; P
/// goes through LDS as the A operand of O += P V. Q, K and V are staged 16
/// bytes at a time (inputs bf16, rows and strides multiples of 8 elements).
/// Masks as in attention_tile (causal, QSA per-row block bitmaps); key
/// chunks that none of the 16 tokens selects are skipped. Dynamic shared
/// memory, in this order: Q [16 NRG][D + 8], K [KC][D + 8], V^T [DV][KC +
/// 8], P [16 NRG][KC + 8] (matrix type), partial max and sum [NSP][16 NRG]
/// (f32), the QSA bitmap [16][NBW].
template <int NRG, int NSP, int KC, int H, int D, int DV, int HG, bool CAUSAL,
          bool GATED, int BLOCK, int NB, int NBW, long QT, long QH, long KT,
          long KH, long VT, long VH, long GT, long GH, class G, class Y>
STRATA_FN void attention_gqa(const bf16 *q, const bf16 *k, const bf16 *v,
                             const G *gate, const int32_t *index, Y *y, long T,
                             long TK, float scale) {
  constexpr int NT = 32 * NRG * NSP, R = 16 * NRG;
  constexpr int KCP = KC / NSP, DVW = DV / NSP;
  constexpr int LQ = D + 8, LK = D + 8, LV = KC + 8, LP = KC + 8;
  static_assert(KCP % 16 == 0 && DVW % 16 == 0 && D % 16 == 0, "tiles");
  extern STRATA_SHARED __attribute__((aligned(16))) uint8_t strata_dyn[];
  mma_t *Qs = (mma_t *)strata_dyn;
  mma_t *Ks = Qs + R * LQ;
  mma_t *Vt = Ks + KC * LK;
  mma_t *Ps = Vt + DV * LV;
  float *Mx = (float *)(Ps + R * LP);
  float *Sm = Mx + NSP * R;
  uint32_t *sel = (uint32_t *)(Sm + NSP * R);
  STRATA_SHARED int any[1];
  const long t0 = (long)bid_x() * 16;
  const int h0 = bid_y() * NRG, kh = h0 / HG;
  const int w = tid_x() >> 5, rg = w / NSP, cp = w % NSP;
  const uint16_t *qb = (const uint16_t *)q, *kb = (const uint16_t *)k,
                 *vb = (const uint16_t *)v;
  for (int i = tid_x(); i < R * (D / 8); i += NT) {
    int row = i / (D / 8), c8 = (i % (D / 8)) * 8;
    long tt = t0 + row % 16;
    mma_t *dst = Qs + row * LQ + c8;
    if (tt < T)
      stage8_bf16(dst, qb + tt * QT + (h0 + row / 16) * QH + c8);
    else
      zero8(dst);
  }
  if constexpr (BLOCK > 0)
    qsa_bitmap<16, NB, NBW, NT>(index, t0, T, sel);
  float o[DVW / 16][8];
  float mrow[8], lrow[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    mrow[i] = -__builtin_inff();
    lrow[i] = 0;
#pragma unroll
    for (int c = 0; c < DVW / 16; ++c)
      o[c][i] = 0;
  }
  const long last = CAUSAL ? (t0 + 15 < T ? t0 + 15 : T - 1) : TK - 1;
  for (long j0 = 0; j0 <= last; j0 += KC) {
    sync_block();
    if constexpr (BLOCK > 0)
      if (!qsa_chunk_selected<16, KC, BLOCK, NBW, NT>(sel, j0, any))
        continue;
    for (int i = tid_x(); i < KC * (D / 8); i += NT) {
      int jj = i / (D / 8), c8 = (i % (D / 8)) * 8;
      long j = j0 + jj;
      mma_t *dst = Ks + jj * LK + c8;
      if (j < TK)
        stage8_bf16(dst, kb + j * KT + kh * KH + c8);
      else
        zero8(dst);
    }
    // V transposed: consecutive threads take consecutive keys, so each
    // element store of a wave fills consecutive halves of one V^T row.
    for (int i = tid_x(); i < KC * (DV / 8); i += NT) {
      int jj = i % KC, c8 = (i / KC) * 8;
      long j = j0 + jj;
      __attribute__((aligned(16))) mma_t e8[8];
      if (j < TK)
        stage8_bf16(e8, vb + j * VT + kh * VH + c8);
      else
        zero8(e8);
#pragma unroll
      for (int u = 0; u < 8; ++u)
        Vt[(c8 + u) * LV + jj] = e8[u];
    }
    sync_block();
    float s[KCP / 16][8];
#pragma unroll
    for (int n = 0; n < KCP / 16; ++n)
#pragma unroll
      for (int i = 0; i < 8; ++i)
        s[n][i] = 0;
    // Not unrolled: fully unrolled, the fragment loads of every step are
    // hoisted and the gfx1151 build spills.
#pragma unroll 1
    for (int dk = 0; dk < D; dk += 16) {
      // The query fragment once per 16 k, for every key tile.
      const mma_fa qa = mma_load_a(Qs + rg * 16 * LQ + dk, LQ);
#pragma unroll
      for (int n = 0; n < KCP / 16; ++n)
        mma_16x16x16_f(s[n], qa,
                       mma_load_b(Ks + (cp * KCP + n * 16) * LK + dk, LK));
    }
    float mx[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      int r, c;
      mma_acc_coord(i, &r, &c);
      mx[i] = -__builtin_inff();
      const long t = t0 + r;
#pragma unroll
      for (int n = 0; n < KCP / 16; ++n) {
        long j = j0 + cp * KCP + n * 16 + c;
        bool ok = t < T && j < TK && (!CAUSAL || j <= t);
        if (BLOCK > 0 && ok) {
          long b = j / BLOCK;
          ok = b < NBW * 32 && (sel[r * NBW + b / 32] >> (b % 32) & 1u);
        }
        s[n][i] = ok ? s[n][i] * scale : -__builtin_inff();
        mx[i] = __builtin_fmaxf(mx[i], s[n][i]);
      }
    }
    mma_row_max(mx);
    if constexpr (NSP > 1) {
      mma_rows_store(Mx + cp * R + rg * 16, mx);
      sync_block();
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int r, c;
        mma_acc_coord(i, &r, &c);
        float m = Mx[rg * 16 + r];
#pragma unroll
        for (int p = 1; p < NSP; ++p)
          m = __builtin_fmaxf(m, Mx[p * R + rg * 16 + r]);
        mx[i] = m;
      }
    }
    float corr[8], sum[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      int r, c;
      mma_acc_coord(i, &r, &c);
      float mnew = __builtin_fmaxf(mrow[i], mx[i]);
      corr[i] = mnew == -__builtin_inff() ? 1.0f : strata_exp(mrow[i] - mnew);
      mrow[i] = mnew;
      sum[i] = 0;
#pragma unroll
      for (int n = 0; n < KCP / 16; ++n) {
        float p =
            s[n][i] == -__builtin_inff() ? 0.0f : strata_exp(s[n][i] - mnew);
        sum[i] += p;
        Ps[(rg * 16 + r) * LP + cp * KCP + n * 16 + c] = to_mma(p);
      }
    }
    mma_row_sum(sum);
    if constexpr (NSP > 1)
      mma_rows_store(Sm + cp * R + rg * 16, sum);
    sync_block();
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if constexpr (NSP > 1) {
        int r, c;
        mma_acc_coord(i, &r, &c);
        sum[i] = 0;
#pragma unroll
        for (int p = 0; p < NSP; ++p)
          sum[i] += Sm[p * R + rg * 16 + r];
      }
      lrow[i] = lrow[i] * corr[i] + sum[i];
#pragma unroll
      for (int c = 0; c < DVW / 16; ++c)
        o[c][i] *= corr[i];
    }
#pragma unroll 1
    for (int kk = 0; kk < KC; kk += 16) {
      const mma_fa pa = mma_load_a(Ps + rg * 16 * LP + kk, LP);
#pragma unroll
      for (int c = 0; c < DVW / 16; ++c)
        mma_16x16x16_f(o[c], pa,
                       mma_load_b(Vt + (cp * DVW + c * 16) * LV + kk, LV));
    }
  }
  const int h = h0 + rg;
#pragma unroll
  for (int c = 0; c < DVW / 16; ++c)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      int r, cc;
      mma_acc_coord(i, &r, &cc);
      long t = t0 + r;
      if (t >= T)
        continue;
      int col = cp * DVW + c * 16 + cc;
      float val = lrow[i] > 0 ? o[c][i] / lrow[i] : 0.0f;
      if (GATED)
        val *= sm_sigmoid(ld(gate, t * GT + h * GH + col));
      st(y, (t * H + h) * DV + col, val);
    }
}

#ifdef STRATA_TARGET_SM90
/// Elements i and i + 1 (i even, the pair 4-byte aligned): one 32-bit
/// access for bf16, else two.
STRATA_FN void ld2(const bf16 *p, int64_t i, float *a, float *b) {
  const uint32_t w = *(const uint32_t *)(p + i);
  *a = sm_bf16_to_f32((uint16_t)w);
  *b = sm_bf16_to_f32((uint16_t)(w >> 16));
}
template <class T>
STRATA_FN void ld2(const T *p, int64_t i, float *a, float *b) {
  *a = ld(p, i);
  *b = ld(p, i + 1);
}
STRATA_FN void st2(bf16 *p, int64_t i, float a, float b) {
  *(uint32_t *)(p + i) =
      (uint32_t)sm_f32_to_bf16(a) | (uint32_t)sm_f32_to_bf16(b) << 16;
}
template <class T> STRATA_FN void st2(T *p, int64_t i, float a, float b) {
  st(p, i, a);
  st(p, i + 1, b);
}
/// QSA's union of a tile's selections (attention_wg's sparse form and
/// attention_ws), in shared memory in this order: the row bitmaps
/// [BQ][NBW] (not when COMPACT), the union's words and their exclusive bit
/// counts [NBW] each, the masks [NCW][BQ] (bit e of chunk c and token r: r
/// chose the union's block EPC c + e), each token's count of visible union
/// keys [BQ], the union's size, and the union [NCW EPC] as 16-bit block ids
/// in key order. With the row bitmaps NCW covers every block (NBW 32 / EPC
/// chunks); COMPACT tables are bounded by the selections instead (a union
/// of BQ tokens' NB blocks: NCW = BQ NB / EPC chunks at most), so they fit
/// plans of any length qsa_select serves.
struct QsaUnion {
  uint32_t *sel, *uni;
  int *pre;
  uint32_t *msk;
  int *vis, *size;
  uint16_t *list;
};
template <int BQ, int NBW, int NCW, bool COMPACT>
STRATA_FN QsaUnion qsa_union_at(uint32_t *base) {
  QsaUnion u;
  u.sel = COMPACT ? nullptr : base;
  u.uni = COMPACT ? base : base + BQ * NBW;
  u.pre = (int *)(u.uni + NBW);
  u.msk = (uint32_t *)(u.pre + NBW);
  u.vis = (int *)(u.msk + NCW * BQ);
  u.size = u.vis + BQ;
  u.list = (uint16_t *)(u.size + 1);
  return u;
}
/// Builds the union tables of the BQ tokens from t0 (all NT threads; ends
/// with a barrier) and returns its chunks of KC = 64 keys (EPC = 64 / BLOCK
/// union blocks each). With the row bitmaps, a token's chunk mask tests its
/// row for each of the chunk's blocks; COMPACT sets each selection's bit at
/// the block's rank in the union (an atomic OR a selection).
template <int BQ, int NB, int NBW, int NCW, bool COMPACT, int BLOCK, int NT>
STRATA_FN int qsa_union_build(const int32_t *index, long t0, long T,
                              const QsaUnion &qu) {
  constexpr int EPC = 64 / BLOCK;
  // block_exclusive_scan's scratch is the masks.
  static_assert(NCW * BQ >= NT / 32, "qsa_union_build: scan scratch");
  const int tid = tid_x();
  // Token r's selection i (-1: none, a padding row past T or a block past
  // the tables).
  auto selected = [&](int i) __attribute__((always_inline)) {
    const long tt = t0 + i / NB;
    const int b = tt < T ? index[tt * NB + i % NB] : -1;
    return b >= 0 && b < NBW * 32 ? b : -1;
  };
  if constexpr (COMPACT) {
    for (int i = tid; i < NBW; i += NT)
      qu.uni[i] = 0;
    sync_block();
    for (int i = tid; i < BQ * NB; i += NT)
      if (const int b = selected(i); b >= 0)
        __atomic_fetch_or(&qu.uni[b / 32], 1u << (b % 32), __ATOMIC_RELAXED);
  } else {
    qsa_bitmap<BQ, NB, NBW, NT>(index, t0, T, qu.sel);
  }
  sync_block();
  // The union's blocks in key order, by an exclusive scan of its words'
  // bit counts.
  int base = 0;
  for (int w0 = 0; w0 < NBW; w0 += NT) {
    const int wi = w0 + tid;
    uint32_t u = 0;
    if (wi < NBW) {
      if constexpr (COMPACT)
        u = qu.uni[wi];
      else
        for (int r = 0; r < BQ; ++r)
          u |= qu.sel[r * NBW + wi];
    }
    int total;
    int at = base + block_exclusive_scan<NT>(__builtin_popcount(u),
                                             (int *)qu.msk, &total);
    if (wi < NBW) {
      qu.uni[wi] = u;
      qu.pre[wi] = at;
      for (; u; u &= u - 1)
        qu.list[at++] = (uint16_t)(wi * 32 + __builtin_ctz(u));
    }
    base += total;
  }
  // The last chunk's missing entries read block 0 (finite, masked).
  for (int i = base + tid; i < (base + EPC - 1) / EPC * EPC; i += NT)
    qu.list[i] = 0;
  if (tid == 0)
    *qu.size = base;
  sync_block();
  const int nch = (base + EPC - 1) / EPC;
  if constexpr (COMPACT) {
    for (int i = tid; i < nch * BQ; i += NT)
      qu.msk[i] = 0;
    sync_block();
    for (int i = tid; i < BQ * NB; i += NT)
      if (const int b = selected(i); b >= 0) {
        // The block's rank: its place in the list.
        const int at =
            qu.pre[b / 32] +
            __builtin_popcount(qu.uni[b / 32] & ((1u << (b % 32)) - 1u));
        __atomic_fetch_or(&qu.msk[(at / EPC) * BQ + i / NB], 1u << (at % EPC),
                          __ATOMIC_RELAXED);
      }
  } else {
    for (int i = tid; i < nch * BQ; i += NT) {
      const int c = i / BQ, r = i % BQ;
      uint32_t m = 0;
#pragma unroll 4
      for (int e = 0; e < EPC; ++e) {
        const int b = qu.list[c * EPC + e];
        m |= (c * EPC + e < base && (qu.sel[r * NBW + b / 32] >> (b % 32) & 1u))
                 ? 1u << e
                 : 0u;
      }
      qu.msk[i] = m;
    }
  }
  // Token t sees the union keys up to t: all of the union's blocks before
  // t / BLOCK and t % BLOCK + 1 keys of block t / BLOCK if it is one.
  for (int r = tid; r < BQ; r += NT) {
    const long t = t0 + r, tb = t / BLOCK;
    int n = 0;
    if (tb < NBW * 32) {
      const uint32_t u = qu.uni[tb / 32];
      n = BLOCK * (qu.pre[tb / 32] +
                   __builtin_popcount(u & ((1u << (tb % 32)) - 1u))) +
          ((u >> (tb % 32) & 1u) ? (int)(t % BLOCK) + 1 : 0);
    }
    qu.vis[r] = n;
  }
  sync_block();
  return nch;
}
/// O += P V over one KC-key chunk: KC / 16 wgmma with P from registers (the
/// accumulator layout of S) and V MN-major in buffer \p vbuf (VSZ elements
/// each) from descriptor \p dv0 (buffer 0), stepped by 32-bit adds from a
/// value made opaque (see strata_opaque); one commit group.
template <int DV, int KC, int VSZ>
STRATA_FN void wg_issue_pv(float *o, const uint32_t (*pp)[4], wg_desc dv0,
                           int vbuf) {
  const uint32_t vhi = (uint32_t)(dv0 >> 32);
  const uint32_t vlo = strata_opaque((uint32_t)dv0) + vbuf * (VSZ * 2 / 16);
#pragma unroll
  for (int kk = 0; kk < KC / 16; ++kk)
    wgmma_rs_mn<DV>(o, pp[kk], wg_desc_make(vlo + kk * 16, vhi));
  wg_commit();
}
/// Waits for every product in flight and ties all of O to the wait.
template <int DV> STRATA_FN void wg_wait_pv(float *o) {
  wg_wait_all(o);
#pragma unroll
  for (int i = 32; i < DV / 2; i += 32)
    wg_pin32(o + i);
}
/// Zeroes a P register set (the first step's P V multiplies it).
template <int KC> STRATA_FN void wg_zero_p(uint32_t (*p)[4]) {
#pragma unroll
  for (int kk = 0; kk < KC / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      p[kk][r] = 0;
}
/// O's rows A and B times their corrections once the product in flight has
/// landed; a wave skips the DV / 2 multiplies when none of its rows' maxima
/// moved (most steps, once they settle).
template <int DV> STRATA_FN void wg_rescale_o(float *o, float cA, float cB) {
  if (__nvvm_vote_any_sync(0xffffffffu, cA != 1.0f || cB != 1.0f)) {
#pragma unroll
    for (int i = 0; i < DV / 2; ++i)
      o[i] *= (i & 2) ? cB : cA;
  }
}
/// Runs \p step(pp, pc) while \p more(), the two P register sets taking
/// turns (unrolled by two, so no copy joins them and the P being written
/// never shares a register with the P an in-flight P V reads); returns
/// whether the last step's P is in \p pB.
template <class Step, class More>
STRATA_FN bool wg_steps_alternating(uint32_t (*pA)[4], uint32_t (*pB)[4],
                                    Step &&step, More &&more) {
  bool lastInB = false;
  while (more()) {
    step(pA, pB);
    lastInB = true;
    if (!more())
      break;
    step(pB, pA);
    lastInB = false;
  }
  return lastInB;
}
/// attention_wg's online softmax of one 64-key chunk on S's accumulators
/// (rows g and g + 8 of this wave: A and B): the masks (columns past each
/// row's last visible one; with QSA the blocks its bits do not select), the
/// rows' new maxima (log2 units, the scale folded in), P as bf16 pairs into
/// \p pc (the register A operand of P V), the sums \p l0, \p l1 and the
/// corrections \p cA, \p cB for O.
/// SMX (A/B bits, STRATA_ATTN_SMX): 1 folds the scale into the exponent's
/// FFMA (the maxima taken on the raw products: scaling by a positive
/// number keeps their order); 2 reduces the maxima and sums by trees (4
/// dependent steps a row, not 16); 4 keeps a row's maximum until a chunk
/// exceeds it by more than 2^8 (P then up to 256: bf16 and the fp32 sums
/// hold it), so the O rescale runs only on such a jump, not on every new
/// maximum.
template <int BLOCK, int KC, int SMX = 0>
STRATA_FN void wg_softmax_chunk(float *s, uint32_t (*pc)[4], int limA, int limB,
                                uint32_t bitsA, uint32_t bitsB, float sc2,
                                float &m0, float &m1, float &l0, float &l1,
                                float &cA, float &cB) {
  constexpr bool FOLD = SMX & 1, TREE = SMX & 2, LAZY = SMX & 4;
  const int qd = tid_x() & 3;
  float mxA = -__builtin_inff(), mxB = -__builtin_inff();
  float ra[16], rb[16];
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int col = 8 * (i >> 2) + 2 * qd + (i & 1);
    bool ok = col <= ((i & 2) ? limB : limA);
    if constexpr (BLOCK > 0)
      ok = ok &&
           ((((i & 2) ? bitsB : bitsA) >> (BLOCK < KC ? col / BLOCK : 0)) & 1u);
    s[i] = ok ? (FOLD ? s[i] : s[i] * sc2) : -__builtin_inff();
    if constexpr (TREE) {
      if (i & 2)
        rb[(i >> 2) * 2 + (i & 1)] = s[i];
      else
        ra[(i >> 2) * 2 + (i & 1)] = s[i];
    } else if (i & 2) {
      mxB = __builtin_fmaxf(mxB, s[i]);
    } else {
      mxA = __builtin_fmaxf(mxA, s[i]);
    }
  }
  if constexpr (TREE) {
#pragma unroll
    for (int w = 8; w >= 1; w >>= 1)
#pragma unroll
      for (int j = 0; j < w; ++j) {
        ra[j] = __builtin_fmaxf(ra[j], ra[j + w]);
        rb[j] = __builtin_fmaxf(rb[j], rb[j + w]);
      }
    mxA = ra[0], mxB = rb[0];
  }
  mxA = __builtin_fmaxf(mxA, shfl_xor_f(mxA, 1));
  mxA = __builtin_fmaxf(mxA, shfl_xor_f(mxA, 2));
  mxB = __builtin_fmaxf(mxB, shfl_xor_f(mxB, 1));
  mxB = __builtin_fmaxf(mxB, shfl_xor_f(mxB, 2));
  if constexpr (FOLD)
    mxA *= sc2, mxB *= sc2;
  float nA = __builtin_fmaxf(m0, mxA), nB = __builtin_fmaxf(m1, mxB);
  if constexpr (LAZY) {
    // -inf + 8 is -inf: a row's first visible key always sets its maximum.
    if (!(mxA > m0 + 8.0f))
      nA = m0;
    if (!(mxB > m1 + 8.0f))
      nB = m1;
  }
  // A row with no key yet subtracts 0: its p and correction are 0.
  const float uA = nA == -__builtin_inff() ? 0.0f : nA;
  const float uB = nB == -__builtin_inff() ? 0.0f : nB;
  // ex2.approx.ftz: no denormal fix-up around each of the 34 (a p below
  // 2^-126 is 0 beside a row sum of at least 1).
  cA = __nvvm_ex2_approx_ftz_f(m0 - uA);
  cB = __nvvm_ex2_approx_ftz_f(m1 - uB);
  m0 = nA, m1 = nB;
  float sA = 0, sB = 0;
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const float u = (i & 2) ? uB : uA;
    const float p0 = __nvvm_ex2_approx_ftz_f(
                    FOLD ? __builtin_fmaf(s[i], sc2, -u) : s[i] - u),
                p1 = __nvvm_ex2_approx_ftz_f(
                    FOLD ? __builtin_fmaf(s[i + 1], sc2, -u) : s[i + 1] - u);
    if constexpr (TREE) {
      if (i & 2)
        rb[(i >> 2)] = p0 + p1;
      else
        ra[(i >> 2)] = p0 + p1;
    } else if (i & 2) {
      sB += p0 + p1;
    } else {
      sA += p0 + p1;
    }
    pc[i / 8][(i % 8) / 2] = mma_pack2(p0, p1);
  }
  if constexpr (TREE) {
#pragma unroll
    for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
      for (int j = 0; j < w; ++j) {
        ra[j] += ra[j + w];
        rb[j] += rb[j + w];
      }
    sA = ra[0], sB = rb[0];
  }
  l0 = l0 * cA + sA;
  l1 = l1 * cB + sB;
}
/// attention_wg's epilogue for this thread's rows A and B (tokens tA, tB,
/// heads hA, hB; okA/okB false for padding rows): O / l, times the gate's
/// sigmoid when GATED, stored by element pairs (each lane holds column
/// pairs (2 qd, 2 qd + 1): one 2-element access each for the gate and the
/// output; the emitter keeps both 4-byte aligned).
template <int H, int DV, bool GATED, long GT, long GH, class G, class Y>
STRATA_FN void wg_attention_store(const float *o, float l0, float l1, long tA,
                                  long tB, int hA, int hB, bool okA, bool okB,
                                  long T, const G *gate, Y *y) {
  const int qd = tid_x() & 3;
  l0 += shfl_xor_f(l0, 1);
  l0 += shfl_xor_f(l0, 2);
  l1 += shfl_xor_f(l1, 1);
  l1 += shfl_xor_f(l1, 2);
  const float rA = l0 > 0 ? 1.0f / l0 : 0.0f, rB = l1 > 0 ? 1.0f / l1 : 0.0f;
#pragma unroll
  for (int i = 0; i < DV / 2; i += 2) {
    const long t = (i & 2) ? tB : tA;
    const int h = (i & 2) ? hB : hA, col = 8 * (i >> 2) + 2 * qd;
    if (t >= T || !((i & 2) ? okB : okA))
      continue;
    const float r = (i & 2) ? rB : rA;
    float v0 = o[i] * r, v1 = o[i + 1] * r;
    if (GATED) {
      float g0, g1;
      ld2(gate, t * GT + h * GH + col, &g0, &g1);
      v0 *= sm_sigmoid(g0);
      v1 *= sm_sigmoid(g1);
    }
    st2(y, (t * H + h) * DV + col, v0, v1);
  }
}
/// Flash attention on the warpgroup matrix units (sm_90a) for query heads
/// that share a KV head. Block (x, y): 8 waves, two warpgroups of 64 rows;
/// wave w takes head h0 + w % NHB (h0 = NHB y; NHB divides HG) and the 16
/// tokens from t0 + 16 (w / NHB) (t0 = BQ (grid x - 1 - x), BQ = 128 /
/// NHB: the longest tiles first), so each
/// staged chunk of 64 keys and values serves 128 query rows. Per chunk and
/// warpgroup: S = Q K^T by wgmma with both operands in shared memory
/// (K-major), the online softmax on S's accumulators (each row's 64 values
/// over the 4 lanes of a quad: 2 shuffles for the max; sums stay per lane
/// until the end), and O += P V with P straight from the accumulators as
/// the register A operand (its layout is the accumulator's) and V MN-major,
/// as it lies in memory. Software-pipelined by one chunk: step j issues
/// S_j and then O += P_{j-1} V_{j-1}, so the matrix units run the P V
/// product while the waves do step j's softmax; the O rescale waits for it.
/// Hence K runs one chunk ahead of V: step j copies (cp.async) K_{j+1} and
/// V_j, each into the buffer its chunk two steps back has left, and waits
/// for K_j and V_{j-1} (copied a step earlier) before the proxy fence, which
/// then has nothing in flight to drain. Keys past TK read key TK - 1
/// (finite, masked). Masks as attention_gqa's; with QSA, the chunks none of
/// the BQ tokens selects are skipped (a bitmap of chunks). Dynamic shared
/// memory: Q [2][D / 8][64 x 8 + 8], then two buffers of K [D / 8][64 x 8 +
/// 8] and V [DV / 8][64 x 8 + 8] (bf16), the QSA row bitmaps [BQ][NBW] and
/// the chunk bitmap [NCW].
///
/// SPARSE (QSA, causal): a block takes all HG heads of one KV head for BQ =
/// 128 / HG tokens (row r: token r / HG, head r % HG; rows past BQ HG are
/// padding), and its keys are the union of those tokens' selected blocks,
/// compacted in key order: chunk c holds the keys of union blocks [EPC c,
/// EPC c + EPC) (EPC = 64 / BLOCK), gathered row by row. Selections of
/// nearby tokens overlap, so with few tokens a tile the union is much
/// smaller than the causal prefix (bench/qsa_union.py: 10 tokens visit
/// ~0.6 of the dense-causal keys on the synthetic qwen4exp, 32 tokens in
/// 64-key chunks all of them). Each row's mask in chunk c: EPC bits (which
/// union blocks its token selected) and its last visible column (the union
/// keys up to its token, counted once per token). Shared memory after V:
/// the union's tables (QsaUnion; COMPACT: without the row bitmaps, for
/// plans whose row bitmaps do not fit).
template <int NHB, int H, int D, int DV, int HG, bool CAUSAL, bool GATED,
          int BLOCK, int NB, int NBW, int NCW, bool SPARSE, bool COMPACT,
          long QT, long QH, long KT, long KH, long VT, long VH, long GT,
          long GH, class G, class Y>
STRATA_FN void attention_wg(const bf16 *q, const bf16 *k, const bf16 *v,
                            const G *gate, const int32_t *index, Y *y, long T,
                            long TK, float scale) {
  constexpr int NT = 256, BQ = SPARSE ? 128 / HG : 128 / NHB, KC = 64,
                LC = KC * 8 + 8;
  constexpr int QSZ = (D / 8) * LC, KSZ = (D / 8) * LC, VSZ = (DV / 8) * LC;
  static_assert(D % 16 == 0 && DV % 64 == 0 && DV <= 256, "attention_wg");
  static_assert(BLOCK == 0 || (KC % BLOCK == 0 && KC / BLOCK <= 32) ||
                    BLOCK % KC == 0,
                "attention_wg: QSA block");
  static_assert(!SPARSE || (CAUSAL && NHB == HG && HG <= 128 && BLOCK >= 2 &&
                            KC % BLOCK == 0 && NBW * 32 <= 65536),
                "attention_wg: sparse form");
  constexpr int EPC = SPARSE ? KC / BLOCK : 1; // union blocks a chunk
  extern STRATA_SHARED __attribute__((aligned(128))) uint8_t strata_dyn[];
  mma_t *Qs = (mma_t *)strata_dyn;
  mma_t *Ks = Qs + 2 * QSZ;
  mma_t *Vs = Ks + 2 * KSZ;
  uint32_t *sel = (uint32_t *)(Vs + 2 * VSZ);
  uint32_t *csel = sel + BQ * NBW;
  // The sparse form's tables (see above).
  const QsaUnion qu = qsa_union_at<BQ, NBW, NCW, COMPACT>(sel);
  const uint32_t *msk = qu.msk;
  const int *vis = qu.vis;
  const uint16_t *ulist = qu.list;
  // The last tokens' tiles (the longest: causal) first, so the short ones
  // fill in behind them at the end of the grid; a tile past T (the grid
  // rounds up) leaves at once.
  const long t0 = (long)(grid_x() - 1 - bid_x()) * BQ;
  if (t0 >= T)
    return;
  const int h0 = bid_y() * NHB, kh = h0 / HG;
  const int tid = tid_x(), w = tid >> 5, wg = w >> 2, g = (tid & 31) >> 2;
  const uint16_t *qb = (const uint16_t *)q, *kb = (const uint16_t *)k,
                 *vb = (const uint16_t *)v;
  // Row R of the block's 128 (warpgroup R / 64, wave R / 16): its token
  // (local; BQ and past for padding rows) and its head within the group.
  auto rowTok = [](int row) __attribute__((always_inline)) {
    return SPARSE ? row / HG : 16 * ((row >> 4) / NHB) + (row & 15);
  };
  auto rowHead = [](int row) __attribute__((always_inline)) {
    return SPARSE ? row % HG : (row >> 4) % NHB;
  };
  for (int i = tid; i < 128 * (D / 8); i += NT) {
    int row = i / (D / 8), c8 = i % (D / 8);
    long tt = t0 + rowTok(row);
    if (tt >= T)
      tt = T - 1; // computed, never stored
    cp_async16(Qs + (row >> 6) * QSZ + c8 * LC + (row & 63) * 8,
               qb + tt * QT + (h0 + rowHead(row)) * QH + c8 * 8);
  }
  const long last = CAUSAL ? (t0 + BQ - 1 < T ? t0 + BQ - 1 : T - 1) : TK - 1;
  int nch = (int)(last / KC) + 1;
  if constexpr (SPARSE) {
    nch =
        qsa_union_build<BQ, NB, NBW, NCW, COMPACT, BLOCK, NT>(index, t0, T, qu);
  } else if constexpr (BLOCK > 0) {
    qsa_bitmap<BQ, NB, NBW, NT>(index, t0, T, sel);
    for (int i = tid; i < NCW; i += NT)
      csel[i] = 0;
    sync_block();
    // Chunk c is needed when any row selects a block overlapping it.
    for (int c = tid; c < nch; c += NT) {
      long b0 = (long)c * KC / BLOCK;
      constexpr int NBC = BLOCK < KC ? KC / BLOCK : 1;
      uint32_t any = 0;
      if (b0 < NBW * 32)
        for (int r = 0; r < BQ; ++r)
          any |= sel[r * NBW + b0 / 32] >> (b0 % 32);
      if (any & (NBC == 32 ? 0xffffffffu : (1u << NBC) - 1u))
        __atomic_fetch_or(&csel[c / 32], 1u << (c % 32), __ATOMIC_RELAXED);
    }
    sync_block();
  }
  // The next needed chunk after c (nch when none).
  auto next = [&](int c) __attribute__((always_inline)) {
    if constexpr (BLOCK == 0 || SPARSE) {
      return c + 1;
    } else {
      for (int n = c + 1; n < nch;) {
        uint32_t word = csel[n / 32] >> (n % 32);
        if (word)
          return n + __builtin_ctz(word) < nch ? n + __builtin_ctz(word) : nch;
        n = (n / 32 + 1) * 32;
      }
      return nch;
    }
  };
  float o[DV / 2];
#pragma unroll
  for (int i = 0; i < DV / 2; ++i)
    o[i] = 0;
  // A chunk's rows of X (K or V: W values a row, rows XT apart) into
  // buffer dst ([W / 8][64 x 8 + 8]). Whole chunks (the common case) by
  // fixed offsets from one source and one destination pointer a thread;
  // the chunk past TK reads key TK - 1 instead. Sparse: row jj is key
  // jj % BLOCK of the chunk's union block jj / BLOCK.
  auto loadX = [&]<int W, long XT, long XH>(
                   const uint16_t *x, mma_t *dst,
                   int c) __attribute__((always_inline)) {
    const long j0 = (long)c * KC;
    if constexpr (SPARSE) {
      constexpr int RP = NT / (W / 8); // rows a pass
      if constexpr (NT % (W / 8) == 0 && KC % RP == 0 && RP % BLOCK == 0) {
        // A thread's rows are key jj % BLOCK of every (RP / BLOCK)-th
        // union block from jj / BLOCK. The thread index made opaque, so
        // ptxas recomputes these addresses each step rather than keep
        // them live through the loop (where they spilled).
        const int to = (int)strata_opaque((uint32_t)tid);
        const int jj = to / (W / 8), c8 = to % (W / 8);
        const uint16_t *ub = ulist + c * EPC + jj / BLOCK;
        const uint16_t *src = x + kh * XH + c8 * 8;
        mma_t *d = dst + c8 * LC + jj * 8;
#pragma unroll 1
        for (int n = 0; n < KC / RP; ++n) {
          // 32-bit key arithmetic: the loop runs at the register limit.
          const int j = (int)ub[n * (RP / BLOCK)] * BLOCK + jj % BLOCK;
          cp_async16_ca(d + n * RP * 8,
                        src + (long)(j < (int)TK ? j : (int)TK - 1) * XT);
        }
        return;
      }
      for (int i = tid; i < KC * (W / 8); i += NT) {
        int jj = i / (W / 8), c8 = i % (W / 8);
        long j = (long)ulist[c * EPC + jj / BLOCK] * BLOCK + jj % BLOCK;
        if (j >= TK)
          j = TK - 1;
        cp_async16_ca(dst + c8 * LC + jj * 8, x + j * XT + kh * XH + c8 * 8);
      }
      return;
    }
    if constexpr (NT % (W / 8) == 0 && KC % (NT / (W / 8)) == 0) {
      constexpr int RP = NT / (W / 8); // rows a pass
      if (j0 + KC <= TK) {
        const int jj = tid / (W / 8), c8 = tid % (W / 8);
        const uint16_t *src = x + (j0 + jj) * XT + kh * XH + c8 * 8;
        mma_t *d = dst + c8 * LC + jj * 8;
#pragma unroll
        for (int n = 0; n < KC / RP; ++n)
          cp_async16_ca(d + n * RP * 8, src + n * RP * XT);
        return;
      }
    }
    for (int i = tid; i < KC * (W / 8); i += NT) {
      int jj = i / (W / 8), c8 = i % (W / 8);
      long j = j0 + jj;
      if (j >= TK)
        j = TK - 1;
      cp_async16_ca(dst + c8 * LC + jj * 8, x + j * XT + kh * XH + c8 * 8);
    }
  };
  auto loadK = [&](int c, int buf) __attribute__((always_inline)) {
    loadX.template operator()<D, KT, KH>(kb, Ks + buf * KSZ, c);
  };
  auto loadV = [&](int c, int buf) __attribute__((always_inline)) {
    loadX.template operator()<DV, VT, VH>(vb, Vs + buf * VSZ, c);
  };
  // O += P V for the chunk whose V is in buffer vbuf (P from registers).
  // Descriptor words: Q (this warpgroup's), K and V buffer 0, stepped by
  // 32-bit adds from values made opaque each step (see strata_opaque).
  const wg_desc dq = wg_desc_of(Qs + wg * QSZ, LC * 2),
                dk0 = wg_desc_of(Ks, LC * 2), dv0 = wg_desc_mn(Vs, 128, LC * 2);
  const uint32_t khi = (uint32_t)(dk0 >> 32);
  auto issuePV = [&](const uint32_t(*pp)[4], int vbuf)
                     __attribute__((always_inline)) {
                       wg_issue_pv<DV, KC, VSZ>(o, pp, dv0, vbuf);
                     };
  auto waitPV = [&]() __attribute__((always_inline)) { wg_wait_pv<DV>(o); };
  // Rows g and g + 8 of this wave: their tokens (local to the block).
  const int tl0 = rowTok(16 * w + g), tl1 = rowTok(16 * w + g + 8);
  const float sc2 = scale * 1.4426950408889634f; // exp(x) = 2^(x log2 e)
  float m0 = -__builtin_inff(), m1 = -__builtin_inff(), l0 = 0, l1 = 0;
  // P of the previous step's chunk and this step's: two register sets used
  // in turn (steps unrolled by two), so no copy joins them and the P being
  // written never shares a register with the P an in-flight P V reads.
  uint32_t pA[KC / 16][4], pB[KC / 16][4];
  wg_zero_p<KC>(pA);
  for (int i = tid; i < VSZ / 8; i += NT)
    zero8(Vs + VSZ + i * 8);
  int c = next(-1), step = 0;
  if (c < nch)
    loadK(c, 0);
  cp_async_commit();
  // One step: chunk c; P V of the previous chunk from pp; this P into pc.
  auto stepFn = [&](const uint32_t(*pp)[4],
                    uint32_t(*pc)[4]) __attribute__((always_inline)) {
    const int cn = next(c), b = step & 1;
    cp_async_wait_all();
    fence_proxy_async();
    sync_block();
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i)
      s[i] = 0;
    const uint32_t qlo = strata_opaque((uint32_t)dq),
                   klo = strata_opaque((uint32_t)dk0) + b * (KSZ * 2 / 16);
    wg_fence();
#pragma unroll
    for (int dk = 0; dk < D; dk += 16)
      wgmma_m64n64(s, wg_desc_make(qlo + (dk / 8) * (LC * 2 / 16), khi),
                   wg_desc_make(klo + (dk / 8) * (LC * 2 / 16), khi));
    wg_commit();
    // Step 0's P is 0 and its V buffer zeros: one uniform path, so no
    // accumulator is read on a path the compiler could not prove waited.
    wg_fence();
    issuePV(pp, b ^ 1);
    // The copies after the products are issued (they only touch buffers
    // those do not read), so the matrix units start at once and the copies'
    // address work (the sparse form's union lookups) overlaps them.
    if (cn < nch)
      loadK(cn, b ^ 1);
    loadV(c, b);
    cp_async_commit();
    wg_wait_but_one(s);
    // Masks (causal, past TK, QSA) and each row's maximum, in log2 units.
    const long j0 = (long)c * KC;
    // Each row's last visible column of the chunk (-1: none), so the masks
    // are 32-bit compares against compile-time columns.
    auto lastCol = [&](int tl) __attribute__((always_inline)) {
      if constexpr (SPARSE) {
        const int lim = (tl < BQ ? vis[tl] : 0) - 1 - c * KC;
        return lim < -1 ? -1 : lim > KC ? KC : lim;
      }
      long lim = (CAUSAL && t0 + tl < TK ? t0 + tl : TK - 1) - j0;
      return (int)(lim < -1 ? -1 : lim > KC ? KC : lim);
    };
    const int limA = lastCol(tl0), limB = lastCol(tl1);
    uint32_t bitsA = 0xffffffffu, bitsB = 0xffffffffu;
    if constexpr (SPARSE) {
      bitsA = tl0 < BQ ? msk[c * BQ + tl0] : 0;
      bitsB = tl1 < BQ ? msk[c * BQ + tl1] : 0;
    } else if constexpr (BLOCK > 0) {
      long b0 = j0 / BLOCK;
      bitsA = b0 < NBW * 32 ? sel[tl0 * NBW + b0 / 32] >> (b0 % 32) : 0;
      bitsB = b0 < NBW * 32 ? sel[tl1 * NBW + b0 / 32] >> (b0 % 32) : 0;
    }
    float cA, cB;
    wg_softmax_chunk<BLOCK, KC>(s, pc, limA, limB, bitsA, bitsB, sc2, m0, m1,
                                l0, l1, cA, cB);
    // O holds the chunks before this one (scale m before it): rescale once
    // the P V in flight has landed.
    waitPV();
    wg_rescale_o<DV>(o, cA, cB);
    c = cn;
    ++step;
  };
  const bool lastInB = wg_steps_alternating(
      pA, pB, stepFn, [&]() __attribute__((always_inline)) { return c < nch; });
  // The last chunk's P V (its V was copied by the last step).
  if (step > 0) {
    cp_async_wait_all();
    fence_proxy_async();
    sync_block();
    wg_fence();
    if (lastInB)
      issuePV(pB, (step - 1) & 1);
    else
      issuePV(pA, (step - 1) & 1);
    waitPV();
  }
  cp_async_wait_all();
  wg_attention_store<H, DV, GATED, GT, GH>(
      o, l0, l1, t0 + tl0, t0 + tl1, h0 + rowHead(16 * w + g),
      h0 + rowHead(16 * w + g + 8), tl0 < BQ, tl1 < BQ, T, gate, y);
}
/// QSA attention, warp-specialised (sm_90a): attention_wg's sparse form
/// (all HG heads of KV head y for BQ = 128 / HG tokens, the union of their
/// selected blocks compacted in key order) in three warpgroups. Warpgroup
/// 0 produces: its first two warps gather the union's K rows, its last two
/// the V rows, by cp.async into two stages each, and complete each stage's
/// full barrier by cp.async.mbarrier.arrive, at 24 registers (setmaxnreg).
/// Warpgroups 1 and 2 consume 64 rows each at 240 registers: per chunk c they
/// wait for K_c (and V_{c-1}), issue S_c = Q K_c^T and O += P_{c-1} V_{c-1},
/// release K_c's stage once S_c has landed, run the online softmax, and release
/// V_{c-1}'s once that product has landed. No block barrier per chunk: the
/// two consumers run on their own, and the copies run as far ahead as the
/// stages allow. Shared memory: attention_wg's Q, K and V tiles, the eight
/// mbarriers (K full, K empty, V full, V empty; two stages each), then the
/// union tables (qsa_union_at).
/// PINGPONG: the consumers take turns to issue (FA3's ping-pong); EXPFIRST
/// keeps each step's wait for P V after the exponentials; SMX: the
/// softmax's variants (wg_softmax_chunk); ROLLED: the consumers' step as
/// one copy, P copied between steps (else unrolled by two, the two P
/// register sets taking turns).
/// TRACE (STRATA_ATTN_TRACE=1, a diagnostic): block (0, 0) (the last
/// tokens' tile) prints, per warp, the cycles each phase of the chunk loop
/// took in all (consumers: waiting for the stages, for the other
/// warpgroup's turn, issuing the products, waiting for S, the softmax,
/// waiting for P V, the rescale; the producer: waiting for free stages,
/// issuing the copies) and the loop's total. Its printf is a call, across
/// which ptxas serialises every wgmma (C7510): it times a slower kernel.
template <int H, int D, int DV, int HG, bool GATED, int BLOCK, int NB, int NBW,
          int NCW, bool COMPACT, bool PINGPONG, bool EXPFIRST, int SMX, long QT,
          long QH, long KT, long KH, long VT, long VH, long GT, long GH,
          bool TRACE = false, bool ROLLED = false, class G, class Y>
STRATA_FN void attention_ws(const bf16 *q, const bf16 *k, const bf16 *v,
                            const G *gate, const int32_t *index, Y *y, long T,
                            long TK, float scale) {
  constexpr int NT = 384, BQ = 128 / HG, KC = 64, LC = KC * 8 + 8,
                EPC = KC / BLOCK;
  constexpr int QSZ = (D / 8) * LC, KSZ = (D / 8) * LC, VSZ = (DV / 8) * LC;
  static_assert(D % 16 == 0 && DV % 64 == 0 && DV <= 256 && HG <= 128 &&
                    BLOCK >= 2 && KC % BLOCK == 0 && NBW * 32 <= 65536,
                "attention_ws");
  extern STRATA_SHARED __attribute__((aligned(128))) uint8_t strata_dyn[];
  mma_t *Qs = (mma_t *)strata_dyn;
  mma_t *Ks = Qs + 2 * QSZ;
  mma_t *Vs = Ks + 2 * KSZ;
  uint64_t *kfull = (uint64_t *)(Vs + 2 * VSZ), *kempty = kfull + 2,
           *vfull = kfull + 4, *vempty = kfull + 6;
  const QsaUnion qu =
      qsa_union_at<BQ, NBW, NCW, COMPACT>((uint32_t *)(kfull + 8));
  // The last tokens' tiles (the longest) first; a tile past T leaves.
  const long t0 = (long)(grid_x() - 1 - bid_x()) * BQ;
  if (t0 >= T)
    return;
  const int kh = bid_y(), h0 = kh * HG, tid = tid_x();
  const uint16_t *qb = (const uint16_t *)q;
  // Q: row R (warpgroup R / 64 of the consumers) is token R / HG, head
  // R % HG; rows past BQ HG repeat a token (computed, never stored).
  for (int i = tid; i < 128 * (D / 8); i += NT) {
    int row = i / (D / 8), c8 = i % (D / 8);
    long tt = t0 + row / HG;
    if (tt >= T)
      tt = T - 1;
    cp_async16(Qs + (row >> 6) * QSZ + c8 * LC + (row & 63) * 8,
               qb + tt * QT + (h0 + row % HG) * QH + c8 * 8);
  }
  cp_async_commit();
  if (tid == 0) {
    for (int s = 0; s < 2; ++s) {
      mbar_init(&kfull[s], 64);
      mbar_init(&vfull[s], 64);
      mbar_init(&kempty[s], 256);
      mbar_init(&vempty[s], 256);
    }
    mbar_init_fence();
  }
  // V's second stage holds zeros for the first step's P V (P = 0 there).
  for (int i = tid; i < VSZ / 8; i += NT)
    zero8(Vs + VSZ + i * 8);
  const int nch =
      qsa_union_build<BQ, NB, NBW, NCW, COMPACT, BLOCK, NT>(index, t0, T, qu);
  cp_async_wait_all();
  fence_proxy_async();
  sync_block();
  // The warpgroup's role (0 produces, 1 and 2 consume) from lane 0's thread
  // index, so ptxas knows the branches on it are warp-uniform: branching on
  // tid_x() itself, it took the consumers' code for a divergent path and
  // serialised every wgmma (C7520: each waited for the one before to land,
  // 20 waits a chunk a warpgroup instead of 2).
  const int role = shfl_i(tid >> 7, 0);
  if (role == 0) {
    // The producer: warps 0-1 gather K, warps 2-3 V, each pair on its own
    // stages' barriers, so V's copies never wait behind K's (in one loop,
    // V_{c-1} waited for K_c's stage to drain: ncu had the consumers
    // waiting for V at ~16 % of their time).
    wg_regs_dec<24>();
    const int half = shfl_i(tid >> 6, 0), pt = tid & 63, lane = tid & 31;
    auto gather =
        [&]<int W, long XT, long XH>(const bf16 *x, mma_t *dst,
                                     int c) __attribute__((always_inline)) {
          const uint16_t *xb = (const uint16_t *)x + kh * XH;
          // Lane e holds the chunk's e-th union block (EPC <= 32): one shared
          // load a chunk, then shuffles that do not wait on each other (a
          // load per row put its latency before every copy).
          const int blk = qu.list[c * EPC + lane % EPC];
          // A compile-time trip count (8 W / 64, W a multiple of 16): LLVM
          // unrolls no loop around a shuffle that would need a remainder.
          constexpr int IT = KC * (W / 8) / 64;
#pragma unroll 4
          for (int it = 0; it < IT; ++it) {
            const int i = pt + 64 * it, jj = i / (W / 8), c8 = i % (W / 8);
            int j = shfl_i(blk, jj / BLOCK) * BLOCK + jj % BLOCK;
            j = j < (int)TK ? j : (int)TK - 1;
            cp_async16_ca(dst + c8 * LC + jj * 8, xb + (long)j * XT + c8 * 8);
          }
        };
    long long tw = 0, tg = 0, t = TRACE ? clock_cycles() : 0;
    const long long t0c = t;
    auto lap = [&](long long &acc) __attribute__((always_inline)) {
      if constexpr (TRACE) {
        const long long n = clock_cycles();
        acc += n - t;
        t = n;
      }
    };
    uint64_t *full = half ? vfull : kfull, *empty = half ? vempty : kempty;
    for (int c = 0; c < nch; ++c) {
      // A stage's n-th fill waits for its (n-1)-th release (parity of n - 1;
      // the first passes on the fresh barrier). V's stage 1 first holds the
      // zeros the first step's P V reads: its release is V_1's wait.
      mbar_wait(&empty[c & 1], ((c >> 1) & 1) ^ (half && (c & 1) ? 0 : 1));
      lap(tw);
      if (half)
        gather.template operator()<DV, VT, VH>(v, Vs + (c & 1) * VSZ, c);
      else
        gather.template operator()<D, KT, KH>(k, Ks + (c & 1) * KSZ, c);
      cp_async_mbar_arrive(&full[c & 1]);
      lap(tg);
    }
    cp_async_wait_all();
    if constexpr (TRACE)
      if (bid_x() == 0 && bid_y() == 0 && (tid & 31) == 0)
        printf("attention_ws trace: producer warp %d (%c): chunks %d, cycles "
               "%lld: waiting for free stages %lld, issuing copies %lld\n",
               tid >> 5, half ? 'V' : 'K', nch, t - t0c, tw, tg);
    return;
  }
  wg_regs_inc<240>();
  // One copy of the consumer per warpgroup: its Q tile's address is then a
  // compile-time offset, so ptxas keeps the S product's descriptors in
  // uniform registers (computed from the warpgroup index they took 32
  // vector registers and spilled at 240).
  auto consume = [&]<int wg>() __attribute__((always_inline)) {
    const int ct = tid - 128, w = ct >> 5, g = (ct & 31) >> 2;
    const int tl0 = (16 * w + g) / HG, tl1 = (16 * w + g + 8) / HG;
    float o[DV / 2];
#pragma unroll
    for (int i = 0; i < DV / 2; ++i)
      o[i] = 0;
    const wg_desc dq = wg_desc_of(Qs + wg * QSZ, LC * 2),
                  dk0 = wg_desc_of(Ks, LC * 2),
                  dv0 = wg_desc_mn(Vs, 128, LC * 2);
    const uint32_t khi = (uint32_t)(dk0 >> 32);
    auto issuePV = [&](const uint32_t(*pp)[4], int vbuf)
                       __attribute__((always_inline)) {
                         wg_issue_pv<DV, KC, VSZ>(o, pp, dv0, vbuf);
                       };
    auto waitPV = [&]() __attribute__((always_inline)) { wg_wait_pv<DV>(o); };
    const float sc2 = scale * 1.4426950408889634f; // exp(x) = 2^(x log2 e)
    float m0 = -__builtin_inff(), m1 = -__builtin_inff(), l0 = 0, l1 = 0;
    uint32_t pA[KC / 16][4], pB[KC / 16][4];
    wg_zero_p<KC>(pA);
    int c = 0;
    // TRACE's phase counters (cycles): stages, turn, issue, S, softmax,
    // P V, rescale.
    long long ph[7] = {0, 0, 0, 0, 0, 0, 0}, t = TRACE ? clock_cycles() : 0;
    const long long t0c = t;
    auto lap = [&](int i) __attribute__((always_inline)) {
      if constexpr (TRACE) {
        const long long n = clock_cycles();
        ph[i] += n - t;
        t = n;
      }
    };
    if constexpr (PINGPONG)
      if (wg == 1)
        arrive_named(1, 256); // warpgroup 0 goes first
    // Chunk c: P V of the previous chunk from pp (zeros over zeros at c = 0);
    // this chunk's P into pc.
    auto stepFn = [&](const uint32_t(*pp)[4],
                      uint32_t(*pc)[4]) __attribute__((always_inline)) {
      const int b = c & 1;
      mbar_wait(&kfull[b], (c >> 1) & 1);
      if (c > 0)
        mbar_wait(&vfull[b ^ 1], ((c - 1) >> 1) & 1);
      // The copies wrote through the generic proxy; wgmma reads through the
      // async one.
      fence_proxy_async();
      lap(0);
      float s[32];
#pragma unroll
      for (int i = 0; i < 32; ++i)
        s[i] = 0;
      // Ping-pong: this warpgroup issues its products once the other has
      // issued its own (named barrier 1 + wg), so one's softmax runs under
      // the other's products instead of both at once.
      if constexpr (PINGPONG)
        sync_named(1 + wg, 256);
      lap(1);
      const uint32_t qlo = strata_opaque((uint32_t)dq),
                     klo = strata_opaque((uint32_t)dk0) + b * (KSZ * 2 / 16);
      wg_fence();
      // Descriptors stepped by 32-bit adds from opaque values, so LLVM does
      // not keep all 32 words live (ptxas still computes them ahead: what
      // keeps them out of the 240 vector registers is the Q tile's
      // compile-time address, see consume below).
      uint32_t ql = qlo, kl = klo;
#pragma unroll
      for (int dk = 0; dk < D; dk += 16) {
        wgmma_m64n64(s, wg_desc_make(ql, khi), wg_desc_make(kl, khi));
        ql = strata_opaque(ql + 2 * (LC * 2 / 16));
        kl = strata_opaque(kl + 2 * (LC * 2 / 16));
      }
      wg_commit();
      wg_fence();
      issuePV(pp, b ^ 1);
      // The other warpgroup's turn (warpgroup 1 skips its last: warpgroup 0
      // waits nch times and got one arrival ahead of the loop).
      if constexpr (PINGPONG)
        if (wg == 0 || c + 1 < nch)
          arrive_named(2 - wg, 256);
      lap(2);
      wg_wait_but_one(s);
      mbar_arrive(&kempty[b]);
      lap(3);
      auto lastCol = [&](int tl) __attribute__((always_inline)) {
        const int lim = (tl < BQ ? qu.vis[tl] : 0) - 1 - c * KC;
        return lim < -1 ? -1 : lim > KC ? KC : lim;
      };
      const uint32_t bitsA = tl0 < BQ ? qu.msk[c * BQ + tl0] : 0,
                     bitsB = tl1 < BQ ? qu.msk[c * BQ + tl1] : 0;
      float cA, cB;
      wg_softmax_chunk<BLOCK, KC, SMX>(s, pc, lastCol(tl0), lastCol(tl1), bitsA,
                                       bitsB, sc2, m0, m1, l0, l1, cA, cB);
      // EXPFIRST: nothing orders the wait for P V after the softmax, and
      // ptxas puts it before the exponentials (after the masks and maxima),
      // so this warpgroup's P V overlaps only part of its softmax. A branch
      // on the rows' sums (which are never negative: never taken) keeps the
      // wait after them.
      if constexpr (EXPFIRST)
        if (l0 == -1.0f && l1 == -1.0f)
          asm volatile("nanosleep.u32 0;" ::: "memory");
      lap(4);
      waitPV();
      // At c = 0 this releases the zeros (V_1 goes there next).
      mbar_arrive(&vempty[b ^ 1]);
      lap(5);
      wg_rescale_o<DV>(o, cA, cB);
      lap(6);
      ++c;
    };
    bool lastInB = false;
    if constexpr (ROLLED) {
      // One copy of the step (half the loop's code: instruction fetch was
      // ~15 % of the consumers' stall samples), P copied back once its
      // P V has landed, by volatile moves: left to LLVM the copies sank
      // into the loop's latch, where ptxas took them for writes to a
      // wgmma's inputs inside its pipeline stage and serialised (C7513).
      while (c < nch) {
        stepFn(pA, pB);
#pragma unroll
        for (int i = 0; i < KC / 16; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            asm volatile("mov.b32 %0, %1;" : "=r"(pA[i][j]) : "r"(pB[i][j]));
      }
    } else {
      lastInB = wg_steps_alternating(
          pA, pB, stepFn,
          [&]() __attribute__((always_inline)) { return c < nch; });
    }
    // The last chunk's P V.
    if (nch > 0) {
      mbar_wait(&vfull[(nch - 1) & 1], ((nch - 1) >> 1) & 1);
      fence_proxy_async();
      wg_fence();
      if (lastInB)
        issuePV(pB, (nch - 1) & 1);
      else
        issuePV(pA, (nch - 1) & 1);
      waitPV();
    }
    if constexpr (TRACE)
      if (bid_x() == 0 && bid_y() == 0 && (ct & 31) == 0)
        printf("attention_ws trace: consumer warpgroup %d warp %d: chunks "
               "%d, cycles %lld: stages %lld, turn %lld, issue %lld, S %lld, "
               "softmax %lld, P V %lld, rescale %lld\n",
               wg, w, nch, t - t0c, ph[0], ph[1], ph[2], ph[3], ph[4], ph[5],
               ph[6]);
    wg_attention_store<H, DV, GATED, GT, GH>(
        o, l0, l1, t0 + tl0, t0 + tl1, h0 + (16 * w + g) % HG,
        h0 + (16 * w + g + 8) % HG, tl0 < BQ, tl1 < BQ, T, gate, y);
  };
  if (role == 1)
    consume.template operator()<0>();
  else
    consume.template operator()<1>();
}
#endif

/// One wave stages a delta-rule chunk's cumulative log decays (an inclusive
/// scan over the wave) and betas of head \p h from token t0; past T: decay
/// 0 (G stays), beta 0, so those tokens change nothing.
template <int H, int C, class G, class B>
STRATA_FN void delta_stage_decays(const G *g, const B *beta, long t0, long T,
                                  int h, float *Gs, float *Bs) {
  const int t = lane_id();
  const bool in = t < C && t0 + t < T;
  float run = in ? ld(g, (t0 + t) * H + h) : 0.0f;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    float o = shfl_f(run, t >= d ? t - d : 0);
    run += t >= d ? o : 0.0f;
  }
  if (t < C) {
    Gs[t] = run;
    Bs[t] = in ? ld(beta, (t0 + t) * H + h) : 0.0f;
  }
}

/// The gated delta rule in chunked form: block (x, y) = value head h and
/// NCOL state columns (columns evolve independently, so a head splits over
/// blocks). Per chunk of C tokens with cumulative log decay G (gamma_t =
/// exp(G_t)) and state S0 at its start:
///   u_t = beta_t (v_t - gamma_t S0^T k_t) - sum_{j<t} A[t][j] u_j,
///         A[t][j] = beta_t exp(G_t - G_j) (k_t . k_j)
///   o_t = scale (gamma_t S0^T q_t + sum_{j<=t} exp(G_t - G_j) (q_t . k_j) u_j)
///   S   = gamma_C S0 + sum_t exp(G_C - G_t) k_t u_t^T
/// which is the recurrence S_t = d_t S_{t-1} + k_t beta_t (v_t - d_t
/// S_{t-1}^T k_t) unrolled (equal within f32 rounding). Thread (column c,
/// part p) holds rows [p R, p R + R) of column c in registers; partial dot
/// products over rows join by shuffles; u and the q terms of a chunk live in
/// LDS. Barriers: 5 per chunk, not 2 per token.
template <int H, int HK, int DK, int DV, bool TILED, int C, int NCOL, int SPLIT,
          long QT, long QH, long KT, long KH, long VT, long VH, class Q,
          class K, class V, class G, class B, class Y>
STRATA_FN void delta_chunked(const Q *q, const K *k, const V *v, const G *g,
                             const B *beta, Y *y, long T, float scale) {
  constexpr int R = DK / SPLIT, NT = NCOL * SPLIT;
  static_assert(C <= 32, "the decay scan runs over one wave");
  // Rows padded by one 32-bit word: the A and QK products read key j's row
  // in lane j, which unpadded (DK a multiple of 64 halves) puts all 32
  // lanes in one bank; likewise the C x C tiles, read by rows of t.
  constexpr int LK = DK + 4 / (int)sizeof(K), LQ = DK + 4 / (int)sizeof(Q);
  constexpr int LC = C + 1;
  STRATA_SHARED K Ks[C * LK];
  STRATA_SHARED Q Qs[C * LQ];
  STRATA_SHARED float Gs[C];
  STRATA_SHARED float Bs[C];
  STRATA_SHARED float A[C * LC];
  STRATA_SHARED float QK[C * LC];
  STRATA_SHARED float U[C * NCOL];
  STRATA_SHARED float W[C * NCOL];
  STRATA_SHARED float Vs[C * NCOL];
  const int h = bid_x(), c = tid_x() / SPLIT, col = bid_y() * NCOL + c;
  const int part = tid_x() % SPLIT;
  const int kh = TILED ? h % HK : h / (H / HK);
  const bool live = col < DV;
  float s[R];
#pragma unroll
  for (int i = 0; i < R; ++i)
    s[i] = 0;
  for (long t0 = 0; t0 < T; t0 += C) {
    sync_block();
    for (int i = tid_x(); i < C * DK; i += NT) {
      long t = t0 + i / DK;
      st(Ks, (i / DK) * LK + i % DK,
         t < T ? ld(k, t * KT + kh * KH + i % DK) : 0.0f);
      st(Qs, (i / DK) * LQ + i % DK,
         t < T ? ld(q, t * QT + kh * QH + i % DK) : 0.0f);
    }
    // The chunk's values of this block's columns, and its decays (an
    // inclusive scan over one wave) and betas: loaded in parallel, not one
    // dependent global load per token. Past T: decay 1, beta 0, v 0, so
    // those tokens change nothing.
    for (int i = tid_x(); i < C * NCOL; i += NT) {
      long t = t0 + i / NCOL;
      int cc = bid_y() * NCOL + i % NCOL;
      Vs[i] = t < T && cc < DV ? ld(v, t * VT + h * VH + cc) : 0.0f;
    }
    if (tid_x() < 32)
      delta_stage_decays<H, C>(g, beta, t0, T, h, Gs, Bs);
    sync_block();
    for (int e = tid_x(); e < C * C; e += NT) {
      int t = e / C, j = e % C;
      float kk = 0, qk = 0;
      if (j <= t)
        for (int i = 0; i < DK; ++i) {
          float kj = ld(Ks, j * LK + i);
          kk += ld(Ks, t * LK + i) * kj;
          qk += ld(Qs, t * LQ + i) * kj;
        }
      float decay = j <= t ? strata_exp(Gs[t] - Gs[j]) : 0.0f;
      A[t * LC + j] = j < t ? Bs[t] * decay * kk : 0.0f;
      QK[t * LC + j] = decay * qk;
    }
    // S0^T k_t and S0^T q_t for this column, every t of the chunk (state
    // rows in registers; the per-t values go to LDS, so no register array
    // is indexed by t).
    for (int t = 0; t < C; ++t) {
      float wk = 0, wq = 0;
#pragma unroll
      for (int i = 0; i < R; ++i) {
        wk += s[i] * ld(Ks, t * LK + part * R + i);
        wq += s[i] * ld(Qs, t * LQ + part * R + i);
      }
#pragma unroll
      for (int m = 1; m < SPLIT; m <<= 1) {
        wk += shfl_xor_f(wk, m);
        wq += shfl_xor_f(wq, m);
      }
      if (part == 0) {
        float vt = Vs[t * NCOL + c];
        float gam = strata_exp(Gs[t]);
        U[t * NCOL + c] = Bs[t] * (vt - gam * wk);
        W[t * NCOL + c] = gam * wq;
      }
    }
    sync_block();
    // Forward substitution down the column.
    if (part == 0)
      for (int t = 1; t < C; ++t) {
        float ut = U[t * NCOL + c];
        for (int j = 0; j < t; ++j)
          ut -= A[t * LC + j] * U[j * NCOL + c];
        U[t * NCOL + c] = ut;
      }
    sync_block();
    for (int t = part; t < C; t += SPLIT) {
      float o = W[t * NCOL + c];
      for (int j = 0; j <= t; ++j)
        o += QK[t * LC + j] * U[j * NCOL + c];
      if (live && t0 + t < T)
        st(y, ((t0 + t) * H + h) * DV + col, scale * o);
    }
    // The state at the chunk's end.
    float gl = Gs[C - 1], gall = strata_exp(gl);
#pragma unroll
    for (int i = 0; i < R; ++i)
      s[i] *= gall;
    for (int t = 0; t < C; ++t) {
      float ew = strata_exp(gl - Gs[t]) * U[t * NCOL + c];
#pragma unroll
      for (int i = 0; i < R; ++i)
        s[i] += ld(Ks, t * LK + part * R + i) * ew;
    }
  }
}

/// \p x as two matrix-unit values, hi = x rounded and lo = the rest rounded:
/// a product over split operands (hi hi + hi lo + lo hi) keeps ~16 bits of
/// each f32 operand instead of the matrix type's 8 (bf16) or 11 (f16).
STRATA_FN void mma_split(float x, mma_t *hi, mma_t *lo) {
  mma_t h = to_mma(x);
  *hi = h;
  *lo = to_mma(x - from_mma(h));
}

/// The 16x16 accumulator tile \p acc (mma_acc_coord's layout) split hi/lo
/// (mma_split) into row-major tiles at \p hi and \p lo (stride ld, even;
/// 4-byte aligned). sm_90 lanes hold pairs of adjacent columns: one packed
/// conversion pair and one 32-bit store per pair and part.
STRATA_FN void mma_store_split(const float *acc, mma_t *hi, mma_t *lo, int ld) {
#ifdef STRATA_TARGET_SM90
#pragma unroll
  for (int i = 0; i < 8; i += 2) {
    int r, c;
    mma_acc_coord(i, &r, &c);
    uint32_t h, l;
    mma_split_pack2(acc[i], acc[i + 1], &h, &l);
    *(uint32_t *)(hi + r * ld + c) = h;
    *(uint32_t *)(lo + r * ld + c) = l;
  }
#else
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int r, c;
    mma_acc_coord(i, &r, &c);
    mma_split(acc[i], hi + r * ld + c, lo + r * ld + c);
  }
#endif
}

/// mma_lower_split with B stored as [k][n] (stride LDB; fragments by
/// transposed loads): acc += A B over the k tiles 0..rt, A's rows at \p ah /
/// \p al (stride LDA), B's k rows from \p bh / \p bl.
template <int CT, int LDA, int LDB>
STRATA_FN void mma_lower_split_bt(float *acc, const mma_t *ah, const mma_t *al,
                                  const mma_t *bh, const mma_t *bl, int rt) {
#pragma unroll
  for (int kt = 0; kt < CT; ++kt) {
    if (kt > rt)
      break;
    mma_fa a_h = mma_load_a(ah + kt * 16, LDA),
           a_l = mma_load_a(al + kt * 16, LDA);
    mma_fb b_h = mma_load_b_trans(bh + kt * 16 * LDB, LDB);
    mma_fb b_l = mma_load_b_trans(bl + kt * 16 * LDB, LDB);
    mma_16x16x16_f(acc, a_h, b_h);
    mma_16x16x16_f(acc, a_h, b_l);
    mma_16x16x16_f(acc, a_l, b_h);
  }
}

/// acc += A B^T over the k tiles 0..rt (A lower block-triangular), both
/// operands split (hi hi + hi lo + lo hi): A's rows at \p ah / \p al, B's
/// (B^T stored as rows of k) at \p bh / \p bl, stride LD, 16-wide tiles.
template <int CT, int LD>
STRATA_FN void mma_lower_split(float *acc, const mma_t *ah, const mma_t *al,
                               const mma_t *bh, const mma_t *bl, int rt) {
#pragma unroll
  for (int kt = 0; kt < CT; ++kt) {
    if (kt > rt)
      break;
    mma_16x16x16(acc, ah + kt * 16, LD, bh + kt * 16, LD);
    mma_16x16x16(acc, ah + kt * 16, LD, bl + kt * 16, LD);
    mma_16x16x16(acc, al + kt * 16, LD, bh + kt * 16, LD);
  }
}

/// The gated delta rule's intra-chunk products (delta_mma, delta_prep): wave
/// w < CT (CT + 1) / 2 takes lower-triangular 16x16 tile w of K K^T and
/// Q K^T (exact bf16 inputs, rows of K and Q at stride LK) into A = strictly
/// lower (beta decay K K^T) (f32, stride LF) and P = decay-masked Q K^T,
/// split hi/lo (stride LP).
template <int CT, int DK, int LK, int LF, int LP>
STRATA_FN void delta_chunk_products(const mma_t *Ks, const mma_t *Qs,
                                    const float *Gs, const float *Bs, float *Af,
                                    mma_t *Ph, mma_t *Pl, int w) {
  if (w >= CT * (CT + 1) / 2)
    return;
  const int ta = w == 0 ? 0 : (CT == 2 && w < 3 ? 1 : 0);
  const int tb = w == 2 ? 1 : 0;
  float kk2[8] = {0, 0, 0, 0, 0, 0, 0, 0}, qk[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll 2
  for (int kk = 0; kk < DK; kk += 16) {
    const mma_t *kb2 = Ks + tb * 16 * LK + kk;
    mma_16x16x16(kk2, Ks + ta * 16 * LK + kk, LK, kb2, LK);
    mma_16x16x16(qk, Qs + ta * 16 * LK + kk, LK, kb2, LK);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int r, c;
    mma_acc_coord(i, &r, &c);
    int t = ta * 16 + r, j = tb * 16 + c;
    float decay = j <= t ? strata_exp(Gs[t] - Gs[j]) : 0.0f;
    Af[t * LF + j] = j < t ? Bs[t] * decay * kk2[i] : 0.0f;
    mma_split(decay * qk[i], Ph + t * LP + j, Pl + t * LP + j);
  }
}

/// T = (I + A)^-1 of a chunk of C tokens (A strictly lower, f32 at stride
/// LF): its 16x16 diagonal blocks by substitution (thread (block, column
/// j) solves column j in registers), and for C = 32 T10 = -T11 (A10 T00)
/// through X = A10 T00 [16][17] (two barriers inside). T in f32 at Tf and
/// split hi/lo at Th / Tl (stride LT); with BETA each column j of the split
/// copy is scaled by beta_j (T diag(beta), delta_prep's record).
template <int C, int NT, int LF, int LT, bool BETA>
STRATA_FN void delta_chunk_inverse(const float *Af, float *Tf, float *Xf,
                                   const float *Bs, mma_t *Th, mma_t *Tl) {
  if (tid_x() < C) {
    const int bb = tid_x() / 16, j = tid_x() % 16;
    const float *Ab = Af + bb * 16 * LF + bb * 16;
    const float bj = BETA ? Bs[bb * 16 + j] : 1.0f;
    float x[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float acc = r == j ? 1.0f : 0.0f;
#pragma unroll
      for (int m = 0; m < r; ++m)
        acc -= Ab[r * LF + m] * x[m];
      x[r] = acc;
    }
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      int t = bb * 16 + r, jj = bb * 16 + j;
      Tf[t * LF + jj] = x[r];
      mma_split(BETA ? x[r] * bj : x[r], Th + t * LT + jj, Tl + t * LT + jj);
    }
  }
  if constexpr (C == 32) {
    sync_block();
    for (int e = tid_x(); e < 256; e += NT) {
      int r = e / 16, j = e % 16;
      float acc = 0;
#pragma unroll
      for (int m = 0; m < 16; ++m)
        acc += Af[(16 + r) * LF + m] * Tf[m * LF + j];
      Xf[r * 17 + j] = acc;
    }
    sync_block();
    for (int e = tid_x(); e < 256; e += NT) {
      int r = e / 16, j = e % 16;
      float acc = 0;
#pragma unroll
      for (int m = 0; m < 16; ++m)
        acc -= Tf[(16 + r) * LF + 16 + m] * Xf[m * 17 + j];
      mma_split(BETA ? acc * Bs[j] : acc, Th + (16 + r) * LT + j,
                Tl + (16 + r) * LT + j);
    }
  }
}

/// The gated delta rule in chunked form on the matrix units (bf16 q and k,
/// the GPU policy). Same algebra as delta_chunked, as matrix products per
/// chunk of C tokens (C = 16 or 32) and block (head h, NCOL = 32 state
/// columns), four waves:
///   B  = beta (V - gamma K S0)             K S0, Q S0: mma, S0 split hi/lo
///   A  = strictly lower (beta decay K K^T) K K^T, Q K^T: mma (exact inputs)
///   T  = (I + A)^-1                        16x16 diagonal blocks by
///                                          substitution, T10 = -T11 A10 T00
///   U  = T B                               mma, both operands split
///   O  = gamma Q S0 + (decay Q K^T) U      mma, both split
///   S  = gamma_C S0 + K^T (exp(G_C - G) U) mma, U split
/// The state lives in registers as accumulator tiles of S^T (NCOL x DK:
/// DK / 32 tiles per wave) and, split, in LDS as the B operand of the next
/// chunk. Every f32 operand is split, so the products carry ~16 bits where
/// the matrix type has 8; K and Q are exact (bf16). Wave w owns output tile
/// (w / 2, w % 2) of the chunk's C x NCOL outputs and the lower-triangular
/// tile w of K K^T / Q K^T. Dynamic shared memory, in this order (matrix
/// type, rows padded by 8): K, Q [C][DK + 8], K^T [DK][C + 8], S^T hi/lo
/// [NCOL][DK + 8], T hi/lo and P hi/lo [C][C + 8], B^T, U^T, W^T hi/lo
/// [NCOL][C + 8]; then f32: A, T [C][C + 1], X [16][17], G, beta [C].
template <int H, int HK, int DK, int DV, bool TILED, int C, long QT, long QH,
          long KT, long KH, long VT, long VH, class V, class G, class B,
          class Y>
STRATA_FN void delta_mma(const bf16 *q, const bf16 *k, const V *v, const G *g,
                         const B *beta, Y *y, long T, float scale) {
  constexpr int NCOL = 32, NT = 128, CT = C / 16, NST = DK / 32;
  constexpr int LK = DK + 8, LC = C + 8, LF = C + 1;
  static_assert((C == 16 || C == 32) && DK % 32 == 0 && DK <= 128, "tiles");
  extern STRATA_SHARED __attribute__((aligned(16))) uint8_t strata_dyn[];
  mma_t *Ks = (mma_t *)strata_dyn;
  mma_t *Qs = Ks + C * LK;
  mma_t *Kt = Qs + C * LK;
  mma_t *Sh = Kt + DK * LC, *Sl = Sh + NCOL * LK;
  mma_t *Th = Sl + NCOL * LK, *Tl = Th + C * LC;
  mma_t *Ph = Tl + C * LC, *Pl = Ph + C * LC;
  mma_t *Bh = Pl + C * LC, *Bl = Bh + NCOL * LC;
  mma_t *Uh = Bl + NCOL * LC, *Ul = Uh + NCOL * LC;
  mma_t *Wh = Ul + NCOL * LC, *Wl = Wh + NCOL * LC;
  float *Af = (float *)(Wl + NCOL * LC);
  float *Tf = Af + C * LF;
  float *Xf = Tf + C * LF;
  float *Gs = Xf + 16 * 17;
  float *Bs = Gs + C;
  const int h = bid_x(), kh = TILED ? h % HK : h / (H / HK);
  const int w = tid_x() >> 5, c0 = bid_y() * NCOL;
  const uint16_t *qb = (const uint16_t *)q, *kb = (const uint16_t *)k;
  // This wave's output tile (rows rt, columns ct of the chunk's C x NCOL);
  // delta_chunk_products gives it a lower-triangular tile of the C x C
  // products.
  const bool out = w < CT * (NCOL / 16);
  const int rt = w / (NCOL / 16), ct = w % (NCOL / 16);
  float s[NST][8];
#pragma unroll
  for (int m = 0; m < NST; ++m)
#pragma unroll
    for (int i = 0; i < 8; ++i)
      s[m][i] = 0;
  for (int i = tid_x(); i < NCOL * LK; i += NT)
    Sh[i] = Sl[i] = to_mma(0.0f);
  for (long t0 = 0; t0 < T; t0 += C) {
    sync_block();
    // Stage K and Q (16 bytes at a time), K^T (consecutive threads take
    // consecutive tokens, so a wave's element stores fill one K^T row), the
    // decays (an inclusive scan over one wave) and betas. Past T: zero
    // keys, decay 1, beta 0, so those tokens change nothing.
    for (int i = tid_x(); i < C * (DK / 8); i += NT) {
      int tt = i / (DK / 8), c8 = (i % (DK / 8)) * 8;
      long t = t0 + tt;
      if (t < T) {
        stage8_bf16(Ks + tt * LK + c8, kb + t * KT + kh * KH + c8);
        stage8_bf16(Qs + tt * LK + c8, qb + t * QT + kh * QH + c8);
      } else {
        zero8(Ks + tt * LK + c8);
        zero8(Qs + tt * LK + c8);
      }
    }
    for (int i = tid_x(); i < C * (DK / 8); i += NT) {
      int tt = i % C, c8 = (i / C) * 8;
      long t = t0 + tt;
      __attribute__((aligned(16))) mma_t e8[8];
      if (t < T)
        stage8_bf16(e8, kb + t * KT + kh * KH + c8);
      else
        zero8(e8);
#pragma unroll
      for (int u = 0; u < 8; ++u)
        Kt[(c8 + u) * LC + tt] = e8[u];
    }
    if (w == 0)
      delta_stage_decays<H, C>(g, beta, t0, T, h, Gs, Bs);
    sync_block();
    // K S0 and Q S0 of this wave's output tile (S0 split), K K^T and Q K^T
    // of its triangular tile.
    float o[8];
    if (out) {
      float ks[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int i = 0; i < 8; ++i)
        o[i] = 0;
#pragma unroll 2
      for (int kk = 0; kk < DK; kk += 16) {
        const mma_t *ka = Ks + rt * 16 * LK + kk, *qa = Qs + rt * 16 * LK + kk;
        const mma_t *sh = Sh + ct * 16 * LK + kk, *sl = Sl + ct * 16 * LK + kk;
        mma_16x16x16(ks, ka, LK, sh, LK);
        mma_16x16x16(ks, ka, LK, sl, LK);
        mma_16x16x16(o, qa, LK, sh, LK);
        mma_16x16x16(o, qa, LK, sl, LK);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int r, c;
        mma_acc_coord(i, &r, &c);
        int t = rt * 16 + r, cc = ct * 16 + c;
        float gam = strata_exp(Gs[t]);
        float vt = t0 + t < T && c0 + cc < DV
                       ? ld(v, (t0 + t) * VT + h * VH + c0 + cc)
                       : 0.0f;
        mma_split(Bs[t] * (vt - gam * ks[i]), Bh + cc * LC + t,
                  Bl + cc * LC + t);
        o[i] *= gam;
      }
    }
    delta_chunk_products<CT, DK, LK, LF, LC>(Ks, Qs, Gs, Bs, Af, Ph, Pl, w);
    sync_block();
    delta_chunk_inverse<C, NT, LF, LC, false>(Af, Tf, Xf, Bs, Th, Tl);
    sync_block();
    // U = T B (T lower block-triangular: k tiles up to the row tile); U^T
    // and the decayed W^T = (exp(G_C - G_t) u_t)^T for the state update.
    const float gl = Gs[C - 1];
    if (out) {
      float u[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      mma_lower_split<CT, LC>(u, Th + rt * 16 * LC, Tl + rt * 16 * LC,
                              Bh + ct * 16 * LC, Bl + ct * 16 * LC, rt);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int r, c;
        mma_acc_coord(i, &r, &c);
        int t = rt * 16 + r, cc = ct * 16 + c;
        mma_split(u[i], Uh + cc * LC + t, Ul + cc * LC + t);
        mma_split(strata_exp(gl - Gs[t]) * u[i], Wh + cc * LC + t,
                  Wl + cc * LC + t);
      }
    }
    sync_block();
    // O = gamma Q S0 + P U, stored; then the state at the chunk's end.
    if (out) {
      mma_lower_split<CT, LC>(o, Ph + rt * 16 * LC, Pl + rt * 16 * LC,
                              Uh + ct * 16 * LC, Ul + ct * 16 * LC, rt);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int r, c;
        mma_acc_coord(i, &r, &c);
        long t = t0 + rt * 16 + r;
        int col = c0 + ct * 16 + c;
        if (t < T && col < DV)
          st(y, (t * H + h) * DV + col, scale * o[i]);
      }
    }
    const float gall = strata_exp(gl);
#pragma unroll
    for (int m = 0; m < NST; ++m) {
      const int st_ = w + 4 * m, a = st_ / (DK / 16), b = st_ % (DK / 16);
#pragma unroll
      for (int i = 0; i < 8; ++i)
        s[m][i] *= gall;
#pragma unroll
      for (int kt = 0; kt < CT; ++kt) {
        const mma_t *kt_ = Kt + b * 16 * LC + kt * 16;
        mma_16x16x16(s[m], Wh + a * 16 * LC + kt * 16, LC, kt_, LC);
        mma_16x16x16(s[m], Wl + a * 16 * LC + kt * 16, LC, kt_, LC);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int r, c;
        mma_acc_coord(i, &r, &c);
        int idx = (a * 16 + r) * LK + b * 16 + c;
        mma_split(s[m][i], Sh + idx, Sl + idx);
      }
    }
  }
}

/// Bytes of one delta_prep record (one chunk of C tokens, one value head):
/// (T diag(beta)) hi, lo and the decayed Q K^T hi, lo as [C][C] matrix-unit
/// elements, then the chunk's cumulative log decays G [C] (f32).
template <int C> constexpr long delta_rec_bytes() {
  return 4L * C * C * (long)sizeof(mma_t) + 4L * C;
}

/// The gated delta rule's chunk-parallel pre-pass (block (chunk, value
/// head)): everything of a chunk that does not depend on the state, so the
/// recurrence (delta_seq) keeps only state products. With A = strictly
/// lower (beta decay K K^T) and T = (I + A)^-1 as in delta_mma, the record at
/// ws + (chunk H + h) delta_rec_bytes holds T diag(beta) (so U = T diag(beta)
/// (V - gamma K S0)), P = decay-masked Q K^T, both split hi/lo, and G. K K^T
/// and Q K^T on the matrix units from exact bf16 inputs; T's 16x16 diagonal
/// blocks by substitution, T10 = -T11 A10 T00. The record is assembled in
/// LDS and stored by 16-byte pieces. Dynamic shared memory: K, Q [C][DK + 8],
/// the record, then f32 A, T [C][C + 1], X [16][17], beta [C].
template <int H, int HK, int DK, bool TILED, int C, long QT, long QH, long KT,
          long KH, class G, class B>
STRATA_FN void delta_prep(const bf16 *q, const bf16 *k, const G *g,
                          const B *beta, uint8_t *ws, long T) {
  constexpr int NT = 128, CT = C / 16, LK = DK + 8, LF = C + 1;
  constexpr long RB = delta_rec_bytes<C>();
  static_assert((C == 16 || C == 32) && DK % 32 == 0 && DK <= 128, "tiles");
  static_assert(RB % 16 == 0, "records of 16-byte pieces");
  extern STRATA_SHARED __attribute__((aligned(16))) uint8_t strata_dyn[];
  mma_t *Ks = (mma_t *)strata_dyn;
  mma_t *Qs = Ks + C * LK;
  mma_t *Th = Qs + C * LK, *Tl = Th + C * C;
  mma_t *Ph = Tl + C * C, *Pl = Ph + C * C;
  float *Gs = (float *)(Pl + C * C);
  float *Af = Gs + C;
  float *Tf = Af + C * LF;
  float *Xf = Tf + C * LF;
  float *Bs = Xf + 16 * 17;
  const long chunk = bid_x(), t0 = chunk * C;
  const int h = bid_y(), kh = TILED ? h % HK : h / (H / HK);
  if (t0 >= T)
    return;
  const int w = tid_x() >> 5;
  const uint16_t *qb = (const uint16_t *)q, *kb = (const uint16_t *)k;
  for (int i = tid_x(); i < C * (DK / 8); i += NT) {
    int tt = i / (DK / 8), c8 = (i % (DK / 8)) * 8;
    long t = t0 + tt;
    if (t < T) {
      stage8_bf16(Ks + tt * LK + c8, kb + t * KT + kh * KH + c8);
      stage8_bf16(Qs + tt * LK + c8, qb + t * QT + kh * QH + c8);
    } else {
      zero8(Ks + tt * LK + c8);
      zero8(Qs + tt * LK + c8);
    }
  }
  // The upper tiles of T and P are never read (delta_seq's products stop
  // at the diagonal tile); zeroed so a record is fully defined.
  for (int i = tid_x(); i < 4 * C * C / 8; i += NT)
    zero8(Th + 8 * i);
  if (w == 0)
    delta_stage_decays<H, C>(g, beta, t0, T, h, Gs, Bs);
  sync_block();
  delta_chunk_products<CT, DK, LK, LF, C>(Ks, Qs, Gs, Bs, Af, Ph, Pl, w);
  sync_block();
  delta_chunk_inverse<C, NT, LF, C, true>(Af, Tf, Xf, Bs, Th, Tl);
  sync_block();
  const strata_u4 *src = (const strata_u4 *)Th;
  strata_u4 *dst = (strata_u4 *)(ws + (chunk * H + h) * RB);
  for (int i = tid_x(); i < RB / 16; i += NT)
    dst[i] = src[i];
}

/// The gated delta rule's recurrence over delta_prep's records (bf16 q and
/// k, the GPU policy): block (value head h, NCOL = 32 state columns), four
/// waves, per chunk of C tokens with state S0 at its start:
///   B' = V - gamma K S0              K S0, Q S0: mma, S0 split hi/lo
///   U  = (T diag(beta)) B'           mma, both operands split
///   O  = gamma Q S0 + P U            mma, both split
///   S  = gamma_C S0 + K^T (exp(G_C - G) U)  mma, U split, K^T by
///                                    transposed fragment loads of K
/// Three barriers a chunk and no global load on its path: chunk c + 1's K,
/// Q, V columns and record are copied (cp.async) into the other of NBUF = 2
/// buffers while chunk c computes (NBUF = 1 where LDS is short: copied after
/// the chunk). State as in delta_mma: accumulator tiles of S^T in registers,
/// split in LDS as the next chunk's B operand. Dynamic shared memory: NBUF
/// buffers of K, Q [C][DK + 8], T hi/lo, P hi/lo [C][C + 8] (matrix type),
/// V [C][NCOL] (V's type), G [C] (f32); then S^T hi/lo [NCOL][DK + 8] and
/// B', U, W hi/lo [C][NCOL + 8], row-major as the accumulators hold them
/// (pairs of columns by 32-bit stores; the products read them by transposed
/// fragment loads).
template <int H, int HK, int DK, int DV, bool TILED, int C, int NBUF, long QT,
          long QH, long KT, long KH, long VT, long VH, class V, class Y>
STRATA_FN void delta_seq(const bf16 *q, const bf16 *k, const V *v,
                         const uint8_t *ws, Y *y, long T, float scale) {
  constexpr int NCOL = 32, NT = 128, CT = C / 16, NST = DK / 32;
  constexpr int LK = DK + 8, LC = C + 8, LN = NCOL + 8;
  constexpr int VP = NCOL * (int)sizeof(V) / 16; // 16-byte pieces of a V row
  constexpr long RB = delta_rec_bytes<C>();
  constexpr int BUFB = (2 * C * LK + 4 * C * LC) * (int)sizeof(mma_t) +
                       C * NCOL * (int)sizeof(V) + 4 * C;
  static_assert((C == 16 || C == 32) && DK % 32 == 0 && DK <= 128, "tiles");
  static_assert(DV % NCOL == 0 && BUFB % 16 == 0 && NBUF >= 1 && NBUF <= 2,
                "buffers of 16-byte pieces");
  extern STRATA_SHARED __attribute__((aligned(16))) uint8_t strata_dyn[];
  mma_t *Sh = (mma_t *)(strata_dyn + NBUF * BUFB), *Sl = Sh + NCOL * LK;
  mma_t *Bh = Sl + NCOL * LK, *Bl = Bh + C * LN;
  mma_t *Uh = Bl + C * LN, *Ul = Uh + C * LN;
  mma_t *Wh = Ul + C * LN, *Wl = Wh + C * LN;
  const int h = bid_x(), kh = TILED ? h % HK : h / (H / HK);
  const int w = tid_x() >> 5, c0 = bid_y() * NCOL;
  const uint16_t *qb = (const uint16_t *)q, *kb = (const uint16_t *)k;
  const bool out = w < CT * (NCOL / 16);
  const int rt = w / (NCOL / 16), ct = w % (NCOL / 16);
  // Chunk cn's inputs into buffer b, as one group of asynchronous copies
  // (rows past T zeroed by plain stores).
  auto prefetch = [&](long cn, int b) {
    uint8_t *base = strata_dyn + b * BUFB;
    mma_t *Kb = (mma_t *)base, *Qb = Kb + C * LK, *Rb = Qb + C * LK;
    uint8_t *Vb = (uint8_t *)(Rb + 4 * C * LC);
    float *Gb = (float *)(Vb + C * NCOL * sizeof(V));
    const long t0 = cn * C;
    for (int i = tid_x(); i < C * (DK / 8); i += NT) {
      int tt = i / (DK / 8), c8 = (i % (DK / 8)) * 8;
      long t = t0 + tt;
      if (t < T) {
        stage8_bf16_async(Kb + tt * LK + c8, kb + t * KT + kh * KH + c8);
        stage8_bf16_async(Qb + tt * LK + c8, qb + t * QT + kh * QH + c8);
      } else {
        zero8(Kb + tt * LK + c8);
        zero8(Qb + tt * LK + c8);
      }
    }
    const uint8_t *rec = ws + (cn * H + h) * RB;
    for (int i = tid_x(); i < 4 * C * (C / 8); i += NT) {
      int r = i / (C / 8), p = i % (C / 8);
      cp_async16(Rb + r * LC + p * 8, rec + (r * C + p * 8) * 2);
    }
    if (tid_x() < C / 4)
      cp_async16(Gb + tid_x() * 4, rec + 8L * C * C + tid_x() * 16);
    for (int i = tid_x(); i < C * VP; i += NT) {
      int tt = i / VP, p = i % VP;
      long t = t0 + tt;
      uint8_t *d = Vb + (tt * NCOL) * sizeof(V) + p * 16;
      if (t < T)
        cp_async16(d, (const uint8_t *)(v + t * VT + h * VH + c0) + p * 16);
      else
        zero8((mma_t *)d);
    }
    cp_async_commit();
  };
  float s[NST][8];
#pragma unroll
  for (int m = 0; m < NST; ++m)
#pragma unroll
    for (int i = 0; i < 8; ++i)
      s[m][i] = 0;
  for (int i = tid_x(); i < NCOL * LK; i += NT)
    Sh[i] = Sl[i] = to_mma(0.0f);
  const long nc = (T + C - 1) / C;
  prefetch(0, 0);
  for (long cn = 0; cn < nc; ++cn) {
    const int b = NBUF == 2 ? (int)(cn & 1) : 0;
    cp_async_wait_all();
    sync_block();
    if (NBUF == 2 && cn + 1 < nc)
      prefetch(cn + 1, b ^ 1);
    uint8_t *base = strata_dyn + b * BUFB;
    const mma_t *Ks = (const mma_t *)base, *Qs = Ks + C * LK;
    const mma_t *Th = Qs + C * LK, *Tl = Th + C * LC;
    const mma_t *Ph = Tl + C * LC, *Pl = Ph + C * LC;
    const V *Vs = (const V *)(Pl + C * LC);
    const float *Gs = (const float *)(Vs + C * NCOL);
    const long t0 = cn * C;
    // K S0 and Q S0 of this wave's output tile (S0 split), two
    // accumulators each (half the dependent chain), then B' = V - gamma K S0.
    float o[8];
    if (out) {
      float ks[8], ks2[8], o2[8];
#pragma unroll
      for (int i = 0; i < 8; ++i)
        ks[i] = ks2[i] = o[i] = o2[i] = 0;
#pragma unroll
      for (int kk = 0; kk < DK; kk += 32) {
        const mma_t *ka = Ks + rt * 16 * LK + kk, *qa = Qs + rt * 16 * LK + kk;
        const mma_t *sh = Sh + ct * 16 * LK + kk, *sl = Sl + ct * 16 * LK + kk;
        mma_fa k0 = mma_load_a(ka, LK), k1 = mma_load_a(ka + 16, LK);
        mma_fa q0 = mma_load_a(qa, LK), q1 = mma_load_a(qa + 16, LK);
        mma_fb h0 = mma_load_b(sh, LK), h1 = mma_load_b(sh + 16, LK);
        mma_fb l0 = mma_load_b(sl, LK), l1 = mma_load_b(sl + 16, LK);
        mma_16x16x16_f(ks, k0, h0);
        mma_16x16x16_f(ks2, k1, h1);
        mma_16x16x16_f(o, q0, h0);
        mma_16x16x16_f(o2, q1, h1);
        mma_16x16x16_f(ks, k0, l0);
        mma_16x16x16_f(ks2, k1, l1);
        mma_16x16x16_f(o, q0, l0);
        mma_16x16x16_f(o2, q1, l1);
      }
      float bv[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int r, c;
        mma_acc_coord(i, &r, &c);
        int t = rt * 16 + r, cc = ct * 16 + c;
        float gam = strata_exp(Gs[t]);
        bv[i] = ld(Vs, t * NCOL + cc) - gam * (ks[i] + ks2[i]);
        o[i] = gam * (o[i] + o2[i]);
      }
      const int tile = rt * 16 * LN + ct * 16;
      mma_store_split(bv, Bh + tile, Bl + tile, LN);
    }
    sync_block();
    // U = (T diag(beta)) B' (lower block-triangular: k tiles up to the row
    // tile); U^T and the decayed W^T = (exp(G_C - G_t) u_t)^T.
    const float gl = Gs[C - 1];
    if (out) {
      float u[8] = {0, 0, 0, 0, 0, 0, 0, 0}, wv[8];
      mma_lower_split_bt<CT, LC, LN>(u, Th + rt * 16 * LC, Tl + rt * 16 * LC,
                                     Bh + ct * 16, Bl + ct * 16, rt);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int r, c;
        mma_acc_coord(i, &r, &c);
        wv[i] = strata_exp(gl - Gs[rt * 16 + r]) * u[i];
      }
      const int tile = rt * 16 * LN + ct * 16;
      mma_store_split(u, Uh + tile, Ul + tile, LN);
      mma_store_split(wv, Wh + tile, Wl + tile, LN);
    }
    sync_block();
    // O = gamma Q S0 + P U, stored; then the state at the chunk's end.
    if (out) {
      mma_lower_split_bt<CT, LC, LN>(o, Ph + rt * 16 * LC, Pl + rt * 16 * LC,
                                     Uh + ct * 16, Ul + ct * 16, rt);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int r, c;
        mma_acc_coord(i, &r, &c);
        long t = t0 + rt * 16 + r;
        if (t < T)
          st(y, (t * H + h) * DV + c0 + ct * 16 + c, scale * o[i]);
      }
    }
    const float gall = strata_exp(gl);
#pragma unroll
    for (int m = 0; m < NST; ++m) {
      const int st_ = w + 4 * m, a = st_ / (DK / 16), bt = st_ % (DK / 16);
#pragma unroll
      for (int i = 0; i < 8; ++i)
        s[m][i] *= gall;
#pragma unroll
      for (int kt = 0; kt < CT; ++kt) {
        mma_fb kf = mma_load_b_trans(Ks + kt * 16 * LK + bt * 16, LK);
        const int wt = kt * 16 * LN + a * 16;
        mma_16x16x16_f(s[m], mma_load_a_trans(Wh + wt, LN), kf);
        mma_16x16x16_f(s[m], mma_load_a_trans(Wl + wt, LN), kf);
      }
      const int tile = a * 16 * LK + bt * 16;
      mma_store_split(s[m], Sh + tile, Sl + tile, LK);
    }
    if (NBUF == 1 && cn + 1 < nc) {
      sync_block();
      prefetch(cn + 1, 0);
    }
  }
}
