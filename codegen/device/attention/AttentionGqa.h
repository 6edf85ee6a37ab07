//===- AttentionGqa.h - attention on the matrix units ---------------------===//
//
// attention_gqa: flash attention on the matrix units (WMMA on gfx1151,
// mma.sync on sm_90) for the query heads of one KV head, with QSA's
// block masks: the portable form, and gfx1151's.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
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
/// chunks that none of the 16 tokens selects are skipped. SPARSE (QSA,
/// KC a multiple of BLOCK): the chunks gather the union of the 16 tokens'
/// selected blocks instead, EPC = KC / BLOCK blocks a chunk in key order,
/// so the block walks that union (a few thousand keys at 16K tokens) and
/// not every chunk up to its last token; each row still masks by its own
/// bitmap. Thread 0 takes a chunk's block ids from the union's words (a
/// cursor in its registers) between two barriers. Dynamic shared
/// memory, in this order: Q [16 NRG][D + 8], K [KC][D + 8], V^T [DV][KC +
/// 8], P [16 NRG][KC + 8] (matrix type), partial max and sum [NSP][16 NRG]
/// (f32), the QSA bitmap [16][NBW], the union [NBW] and a chunk's block ids
/// [EPC] (SPARSE).
template <int NRG, int NSP, int KC, int H, int D, int DV, int HG, bool CAUSAL,
          bool GATED, int BLOCK, int NB, int NBW, bool SPARSE, long QT, long QH,
          long KT, long KH, long VT, long VH, long GT, long GH, class G,
          class Y>
STRATA_FN void attention_gqa(const bf16 *q, const bf16 *k, const bf16 *v,
                             const G *gate, const int32_t *index, Y *y, long T,
                             long TK, float scale) {
  constexpr int NT = 32 * NRG * NSP, R = 16 * NRG;
  constexpr int KCP = KC / NSP, DVW = DV / NSP;
  constexpr int LQ = D + 8, LK = D + 8, LV = KC + 8, LP = KC + 8;
  static_assert(KCP % 16 == 0 && DVW % 16 == 0 && D % 16 == 0, "tiles");
  // The buffers at AttentionLayouts.h's offsets (the host sized the launch's
  // dynamic shared memory by the same function).
  static_assert(sizeof(mma_t) == 2, "gqa_layout: a 2-byte matrix type");
  static_assert(!SPARSE || (BLOCK > 0 && KC % BLOCK == 0), "sparse chunks");
  constexpr int EPC = SPARSE ? KC / BLOCK : 0;
  constexpr gqa_layout L =
      gqa_layout_of(NRG, NSP, KC, D, DV, BLOCK > 0 ? NBW : 0, EPC);
  extern STRATA_SHARED __attribute__((aligned(16))) uint8_t strata_dyn[];
  mma_t *Qs = (mma_t *)(strata_dyn + L.q);
  mma_t *Ks = (mma_t *)(strata_dyn + L.k);
  mma_t *Vt = (mma_t *)(strata_dyn + L.vt);
  mma_t *Ps = (mma_t *)(strata_dyn + L.p);
  float *Mx = (float *)(strata_dyn + L.mx);
  float *Sm = (float *)(strata_dyn + L.sm);
  uint32_t *sel = (uint32_t *)(strata_dyn + L.sel);
  uint32_t *uni = (uint32_t *)(strata_dyn + L.uni);
  int *ids = (int *)(strata_dyn + L.ids);
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
  // SPARSE: the union of the rows' bitmaps, and thread 0's cursor in it
  // (the word and its bits not yet taken).
  int cw = 0;
  uint32_t cb = 0;
  if constexpr (SPARSE) {
    sync_block();
    for (int w = tid_x(); w < NBW; w += NT) {
      uint32_t u = 0;
      for (int r = 0; r < 16; ++r)
        u |= sel[r * NBW + w];
      uni[w] = u;
    }
    sync_block();
    cb = uni[0];
  }
  // SPARSE: key jj of the chunk, its position (-1: none, past the union).
  constexpr int BK = BLOCK > 0 ? BLOCK : 1;
  auto key_at = [&](int jj) __attribute__((always_inline)) -> long {
    const int b = ids[jj / BK];
    return b < 0 ? -1L : (long)b * BK + jj % BK;
  };
  for (long j0 = 0;; j0 += KC) {
    if constexpr (!SPARSE)
      if (j0 > last)
        break;
    sync_block();
    if constexpr (SPARSE) {
      // The chunk's EPC blocks: the union's next ones in key order, none
      // past the tile's last key.
      if (tid_x() == 0)
        for (int e = 0; e < EPC; ++e) {
          while (cb == 0 && cw + 1 < NBW)
            cb = uni[++cw];
          int b = -1;
          if (cb != 0) {
            b = cw * 32 + __builtin_ctz(cb);
            cb &= cb - 1;
          }
          ids[e] = b >= 0 && (long)b * BLOCK <= last ? b : -1;
        }
      sync_block();
      if (ids[0] < 0)
        break;
    } else if constexpr (BLOCK > 0) {
      if (!qsa_chunk_selected<16, KC, BLOCK, NBW, NT>(sel, j0, any))
        continue;
    }
    for (int i = tid_x(); i < KC * (D / 8); i += NT) {
      int jj = i / (D / 8), c8 = (i % (D / 8)) * 8;
      long j = SPARSE ? key_at(jj) : j0 + jj;
      mma_t *dst = Ks + jj * LK + c8;
      if (j >= 0 && j < TK)
        stage8_bf16(dst, kb + j * KT + kh * KH + c8);
      else
        zero8(dst);
    }
    // V transposed: consecutive threads take consecutive keys, so each
    // element store of a wave fills consecutive halves of one V^T row.
    for (int i = tid_x(); i < KC * (DV / 8); i += NT) {
      int jj = i % KC, c8 = (i / KC) * 8;
      long j = SPARSE ? key_at(jj) : j0 + jj;
      __attribute__((aligned(16))) mma_t e8[8];
      if (j >= 0 && j < TK)
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
        const int jj = cp * KCP + n * 16 + c;
        long j = SPARSE ? key_at(jj) : j0 + jj;
        bool ok = t < T && j >= 0 && j < TK && (!CAUSAL || j <= t);
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
