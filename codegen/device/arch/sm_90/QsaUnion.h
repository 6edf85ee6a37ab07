//===- QsaUnion.h - QSA's union of a tile's selections --------------------===//
//
// The tables of the union of a tile's selected key blocks, compacted in
// key order, that the sparse attention forms on sm_90 (attention_wg's
// sparse form, attention_ws) gather keys by.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
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
