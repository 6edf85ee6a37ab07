//===- AttentionTile.h - attention on f32 FMA -----------------------------===//
//
// attention_tile: flash-style attention of BQ query rows of one head
// with f32 FMA (the f32 policy's form on every target), causal, GQA,
// the optional output gate and QSA's block masks.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
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
  // The host sized the form by AttentionLayouts.h: the same bytes.
  static_assert(sizeof(Qs) + sizeof(Ks) + sizeof(Vs) + sizeof(Ps) +
                        sizeof(sel) + sizeof(any) ==
                    attention_tile_shared(BQ, KC, D, DV, BLOCK > 0 ? NBW : 0,
                                          sizeof(Q), sizeof(K), sizeof(V)),
                "attention_tile_shared");
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
