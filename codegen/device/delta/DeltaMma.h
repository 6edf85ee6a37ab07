//===- DeltaMma.h - the gated delta rule on the matrix units --------------===//
//
// The chunked gated delta rule on the matrix units (bf16 q and k):
// delta_mma (one launch), delta_prep (the chunk-parallel records) and
// delta_seq (the recurrence over them).
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
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
