//===- Bitmap.h - QSA's per-row block bitmaps -----------------------------===//
//
// The masks the portable attention forms (attention_tile, attention_gqa)
// apply with a QSA index: per query row a bitmap of its selected key
// blocks, and whether any row of a tile selects a key chunk.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
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
