//===- MmaSplit.h - split-precision matrix products -----------------------===//
//
// f32 operands on the matrix units as hi + lo pairs of matrix-unit
// values (~16 bits each instead of 8): the split, a split accumulator
// tile's store, and lower-triangular products of split operands.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
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
