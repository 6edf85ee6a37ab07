//===- SplitBf16.h - f32 weights as matrix-unit terms ---------------------===//
//
// The GEMM tiles' f32 weights on the matrix units (bf16 activations): each
// weight as the sum of up to three terms of the matrix type, K walked once
// per term, so every product is exact. sm_90's own form takes bf16 terms
// as they are (strata_split_bf16); the portable form (gfx1151's f16, sm_90
// under portable-forms) scales each term into the type's normal range
// (strata_split_terms) and the tile rescales its accumulators between
// terms.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
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

/// The factor between successive terms of strata_split_terms: 2 to the
/// significand bits of the matrix type (bf16 8, f16 11), so each term's
/// remainder (below half an ulp of the term) is scaled back to the
/// magnitude of the weight and never becomes an f16 subnormal.
#ifdef STRATA_TARGET_SM90
#define STRATA_MMA_TERM_SCALE 256.0f
#else
#define STRATA_MMA_TERM_SCALE 2048.0f
#endif

/// Eight f32 values x = t0 + t1 / S + t2 / S^2 (S = STRATA_MMA_TERM_SCALE),
/// each term exact in the matrix type, reduced to term \p part (0, 1, 2)
/// times S^part, up to the rounding pack8_mma does when it stores them.
/// Each remainder is exact in f32 (x minus x rounded to fewer bits), and
/// the scalings are powers of two, so a tile that multiplies its
/// accumulators by S before each later term and by S^-(terms - 1) at the
/// end (Horner) sums A x = A t0 + (A t1) / S + (A t2) / S^2 with every
/// product exact: f32 weights to about 2^-24 relative on f16 units, whose
/// range alone would lose the small terms.
STRATA_FN void strata_split_terms(float *v, int part) {
  if (part == 0)
    return; // pack8_mma rounds x to t0
  for (int u = 0; u < 8; ++u) {
    float r = v[u], s = 1.0f;
    for (int p = 0; p < part; ++p) {
      r -= from_mma(to_mma(r * s)) / s;
      s *= STRATA_MMA_TERM_SCALE;
    }
    v[u] = r * s;
  }
}
