//===- Mma.h - matrix-unit tile helpers -----------------------------------===//
//
// Packing eight values for a 16-byte shared-memory store, a per-row
// statistic of an accumulator tile, sixteen zero bytes.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
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
