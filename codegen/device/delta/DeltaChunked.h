//===- DeltaChunked.h - the gated delta rule on f32 FMA -------------------===//
//
// delta_chunked: the chunked gated delta rule with the state in
// registers (f32 q and k), and the chunk's staged decays every form
// uses.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
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
