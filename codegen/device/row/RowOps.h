//===- RowOps.h - the row family's per-row operations ---------------------===//
//
// What the row family (one block per row) specialises: hc_write with the
// per-stream RMS norm (hyper-connection K1), rms_norm / hc_norm, l2_norm,
// softmax, sinkhorn and rope of one row.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
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

/// moe_scatter + add + rms_norm of one row in one pass (fuse-rows' kernel
/// after the routed experts; option row-scatter-norm): the K slots' expert
/// rows of \p x (rows \p slots[j], weights \p wt[j]) summed in slot order
/// as moe_scatter sums them, plus the residual \p h, stored to \p ro (f32:
/// the norm reads the values stored), then y = ro * 1/sqrt(mean(ro^2) +
/// eps) [* w[i % WN]] as row_rms_norm's block form computes it, from
/// registers. The residual and the slots load after one wait, the expert
/// rows as soon as their indices arrive; no shared temporary, no re-read.
/// Threads past N / 4 (rows shorter than NT x 4) hold zeros.
template <int K, int N, int NT, int WN, class X, class WT, class H, class W,
          class Y>
STRATA_FN void row_scatter_add_norm(const X *x, const int32_t *slots,
                                    const WT *wt, const H *h, const W *w,
                                    float *ro, Y *y, float eps, float *red) {
  constexpr int P = (N + NT * 4 - 1) / (NT * 4);
  static_assert(N % 4 == 0 && P <= 8, "row_scatter_add_norm: row shape");
  long r[K];
  float wk[K];
#pragma unroll
  for (int j = 0; j < K; ++j) {
    r[j] = slots[j];
    wk[j] = ld(wt, j);
  }
  float a[P][4], hv[P][4];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int i0 = (p * NT + tid_x()) * 4;
#pragma unroll
    for (int u = 0; u < 4; ++u)
      a[p][u] = hv[p][u] = 0.0f;
    if (N % (NT * 4) == 0 || i0 < N)
      ld4(h, i0, hv[p]);
  }
#pragma unroll
  for (int j = 0; j < K; ++j)
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int i0 = (p * NT + tid_x()) * 4;
      if (N % (NT * 4) == 0 || i0 < N) {
        float v[4];
        ld4(x, r[j] * N + i0, v);
#pragma unroll
        for (int u = 0; u < 4; ++u)
          a[p][u] += wk[j] * v[u];
      }
    }
  float s = 0.0f;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int i0 = (p * NT + tid_x()) * 4;
    if (N % (NT * 4) == 0 || i0 < N) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        a[p][u] = hv[p][u] + a[p][u]; // sm_add(h, f), as the add does
        s += a[p][u] * a[p][u];
      }
      st4(ro, i0, a[p]);
    }
  }
  // The norm weights' loads (hv's registers, free now) overlap the sum.
  if constexpr (WN > 0) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int i0 = (p * NT + tid_x()) * 4;
      if (N % (NT * 4) == 0 || i0 < N)
        ld4(w, i0 % WN, hv[p]);
    }
  }
  const float scale = 1.0f / strata_sqrt(block_sum<NT>(s, red) / N + eps);
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int i0 = (p * NT + tid_x()) * 4;
    if (N % (NT * 4) == 0 || i0 < N) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        a[p][u] *= scale;
        if constexpr (WN > 0)
          a[p][u] *= hv[p][u];
      }
      st4(y, i0, a[p]);
    }
  }
}

/// RMS normalisation of one row of N elements in groups of GS (rms_norm,
/// hc_norm): y = x * 1/sqrt(mean(x^2) + eps) [* w[i % WN]]. Groups of at
/// most 1024 elements go one per wave; larger ones take the whole block.
/// CL: vector loads a lane issues at a time in the wave form (option
/// row-loads). BLK (option row-norm-block; the emitter sets it only where
/// the groups are fewer than the block's waves and a group is whole vectors
/// of every thread, at most 8): each group takes the whole block, its
/// elements in registers: one round of loads, a block sum, the stores (the
/// wave form left a row of 2,048 to one wave of eight: two rounds of
/// loads, twice).
template <int N, int GS, int NT, int WN, int CL = 1, bool BLK = false, class X,
          class W, class Y>
STRATA_FN void row_rms_norm(const X *x, const W *w, Y *y, float eps,
                            float *red) {
  constexpr int G = N / GS;
  constexpr int BP = GS / (NT * 4);
  if constexpr (BLK) {
    static_assert(G < NT / 32 && GS % (NT * 4) == 0 && BP >= 1 && BP <= 8 &&
                      (WN == 0 || WN % 4 == 0),
                  "row_rms_norm: the block form's shape");
    for (int g = 0; g < G; ++g) {
      float v[BP][4], s = 0.0f;
#pragma unroll
      for (int p = 0; p < BP; ++p)
        ld4(x, g * GS + (p * NT + tid_x()) * 4, v[p]);
#pragma unroll
      for (int p = 0; p < BP; ++p)
#pragma unroll
        for (int u = 0; u < 4; ++u)
          s += v[p][u] * v[p][u];
      const float scale = 1.0f / strata_sqrt(block_sum<NT>(s, red) / GS + eps);
#pragma unroll
      for (int p = 0; p < BP; ++p) {
        const int j = g * GS + (p * NT + tid_x()) * 4;
        float wv[4];
        if constexpr (WN > 0)
          ld4(w, j % WN, wv);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          v[p][u] *= scale;
          if constexpr (WN > 0)
            v[p][u] *= wv[u];
        }
        st4(y, j, v[p]);
      }
    }
  } else if constexpr (GS % 128 == 0 && (WN == 0 || WN % 4 == 0)) {
    // A wave per group, 4 adjacent elements per lane (vector accesses),
    // a lane's loads issued CL at a time before any of their sums: C of a
    // group's PER, and where a group has fewer than CL, the same loads of
    // GB groups (the wave's g, g + NW, ...) at once. A load per loop turn
    // waits a memory latency per 128 elements (the PTX's loop at CL = 1:
    // an hc_norm of 4 x 2,560 at one row took ~15 us on the H100, twenty
    // latencies a pass). Each group's sum keeps its order (k, then u) at
    // any CL. The chunks stay a loop: unrolled, a lane held every load of
    // its group (126 registers for 2,560).
    constexpr int PER = GS / 128, C = PER < CL ? PER : CL;
    constexpr int GB = PER < CL ? CL / PER : 1, NW = NT / 32;
    const int lane4 = lane_id() * 4;
    for (int g0 = tid_x() >> 5; g0 < G; g0 += NW * GB) {
      float s[GB];
#pragma unroll
      for (int b = 0; b < GB; ++b)
        s[b] = 0.0f;
#pragma unroll 1
      for (int k0 = 0; k0 < PER; k0 += C) {
        float v[GB][C][4];
#pragma unroll
        for (int b = 0; b < GB; ++b)
#pragma unroll
          for (int c = 0; c < C; ++c)
            if (g0 + NW * b < G && k0 + c < PER)
              ld4(x, (g0 + NW * b) * GS + (k0 + c) * 128 + lane4, v[b][c]);
#pragma unroll
        for (int b = 0; b < GB; ++b)
#pragma unroll
          for (int c = 0; c < C; ++c)
            if (g0 + NW * b < G && k0 + c < PER) {
#pragma unroll
              for (int u = 0; u < 4; ++u)
                s[b] += v[b][c][u] * v[b][c][u];
            }
      }
      float scale[GB];
#pragma unroll
      for (int b = 0; b < GB; ++b)
        scale[b] = 1.0f / strata_sqrt(warp_sum(s[b]) / GS + eps);
#pragma unroll 1
      for (int k0 = 0; k0 < PER; k0 += C) {
        float v[GB][C][4], wv[GB][C][4];
#pragma unroll
        for (int b = 0; b < GB; ++b)
#pragma unroll
          for (int c = 0; c < C; ++c)
            if (g0 + NW * b < G && k0 + c < PER) {
              const int j = (g0 + NW * b) * GS + (k0 + c) * 128 + lane4;
              ld4(x, j, v[b][c]);
              if constexpr (WN > 0)
                ld4(w, j % WN, wv[b][c]);
            }
#pragma unroll
        for (int b = 0; b < GB; ++b)
#pragma unroll
          for (int c = 0; c < C; ++c)
            if (g0 + NW * b < G && k0 + c < PER) {
#pragma unroll
              for (int u = 0; u < 4; ++u) {
                v[b][c][u] *= scale[b];
                if constexpr (WN > 0)
                  v[b][c][u] *= wv[b][c][u];
              }
              st4(y, (g0 + NW * b) * GS + (k0 + c) * 128 + lane4, v[b][c]);
            }
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

/// The better of two (value, index) candidates of an argmax: the larger
/// value, the lower index on ties (index INT_MAX: no candidate yet).
STRATA_FN void argmax_pick(float &v, int &i, float ov, int oi) {
  const bool take = ov > v || (ov == v && oi < i);
  v = take ? ov : v;
  i = take ? oi : i;
}

/// One thread's part of an argmax over x[0..N): the values first, first +
/// step, ... (4 adjacent ones a load from first = 4 * k with step = 4 * m
/// when N % 4 == 0), in increasing index, keeping the first best; \p bad
/// is set by a NaN or +inf.
template <int N, int U = 4, class X>
STRATA_FN void argmax_part(const X *x, int first, int step, float &best,
                           int &bi, int &bad) {
  auto take = [&](float v, int i) {
    bad |= !(v < __builtin_inff());
    const bool better = v > best;
    best = better ? v : best;
    bi = better ? i : bi;
  };
  if constexpr (N % 4 == 0 && U > 4) {
    // U vector loads issued before any is compared (option row-loads: a
    // logits row in one block is a long chain of turns), then taken in
    // increasing index as below.
    for (int b0 = first * 4; b0 < N; b0 += step * 4 * U) {
      float v[U][4];
#pragma unroll
      for (int c = 0; c < U; ++c)
        if (b0 + c * step * 4 < N)
          ld4(x, b0 + c * step * 4, v[c]);
#pragma unroll
      for (int c = 0; c < U; ++c)
        if (b0 + c * step * 4 < N) {
#pragma unroll
          for (int u = 0; u < 4; ++u)
            take(v[c][u], b0 + c * step * 4 + u);
        }
    }
  } else if constexpr (N % 4 == 0) {
#pragma unroll 4
    for (int i0 = first * 4; i0 < N; i0 += step * 4) {
      float v[4];
      ld4(x, i0, v);
#pragma unroll
      for (int u = 0; u < 4; ++u)
        take(v[u], i0 + u);
    }
  } else {
    for (int i = first; i < N; i += step)
      take(ld(x, i), i);
  }
}

/// The wave's best (value, index) and bad flag, in every lane.
STRATA_FN void argmax_wave(float &best, int &bi, int &bad) {
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1) {
    const float ov = shfl_xor_f(best, m);
    const int oi = shfl_xor_i(bi, m);
    argmax_pick(best, bi, ov, oi);
    bad |= shfl_xor_i(bad, m);
  }
}

/// argmax of each of the R rows of N values of a block's row into y[0..R):
/// the first index of the largest, -1 when a value is NaN or +inf or every
/// value is -inf (the CPU's rule, runtime/cpu/Reductions.cpp). Each thread
/// keeps its first best over its values (in increasing index), then the
/// wave, then the block picks by value and index, so the result does not
/// depend on the reduction's order. One row (a logits row): the whole
/// block; several: a wave a row. \p red and \p redi hold NT / 32.
template <int R, int N, int NT, int U = 4, class X>
STRATA_FN void row_argmax(const X *x, int32_t *y, float *red, int *redi) {
  constexpr int kNone = 0x7fffffff;
  if constexpr (R > 1) {
    for (int r = tid_x() >> 5; r < R; r += NT / 32) {
      float best = -__builtin_inff();
      int bi = kNone, bad = 0;
      argmax_part<N, U>(x + (long)r * N, lane_id(), 32, best, bi, bad);
      argmax_wave(best, bi, bad);
      if (lane_id() == 0)
        y[r] = bad || bi == kNone ? -1 : bi;
    }
    return;
  }
  float best = -__builtin_inff();
  int bi = kNone, bad = 0;
  argmax_part<N, U>(x, tid_x(), NT, best, bi, bad);
  // -inf everywhere leaves bi = kNone: no candidate, whatever its value.
  argmax_wave(best, bi, bad);
  if (lane_id() == 0) {
    red[tid_x() >> 5] = best;
    redi[tid_x() >> 5] = bad ? -1 : bi;
  }
  sync_block();
  if (tid_x() == 0) {
    float v = red[0];
    int i = redi[0];
    bool anyBad = i == -1;
    for (int w = 1; w < NT / 32; ++w) {
      anyBad = anyBad || redi[w] == -1;
      if (redi[w] != -1)
        argmax_pick(v, i, red[w], redi[w]);
    }
    *y = anyBad || i == kNone ? -1 : i;
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
/// TBL (option row-rope-table): each pair's sine and cosine computed once
/// for every head, in shared memory (the same values: H heads took H times
/// the products and sincos, a thread's items one after another).
template <int H, int HD, int NR, bool NEOX, int NT, bool TBL = false, class X,
          class Y>
STRATA_FN void row_rope(const X *x, Y *y, int pos, float theta_scale) {
  STRATA_SHARED float rope_sc[TBL ? NR : 1];
  if constexpr (TBL) {
    for (int i = tid_x(); i < NR / 2; i += NT) {
      float theta = (float)pos;
      for (int r = 0; r < i; ++r)
        theta *= theta_scale;
      strata_sincos(theta, &rope_sc[2 * i], &rope_sc[2 * i + 1]);
    }
    sync_block();
  }
  for (int j = tid_x(); j < H * (HD - NR / 2); j += NT) {
    int h = j / (HD - NR / 2), i = j % (HD - NR / 2);
    if (i < NR / 2) {
      float s, c;
      if constexpr (TBL) {
        s = rope_sc[2 * i];
        c = rope_sc[2 * i + 1];
      } else {
        float theta = (float)pos;
        for (int r = 0; r < i; ++r)
          theta *= theta_scale;
        strata_sincos(theta, &s, &c);
      }
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
