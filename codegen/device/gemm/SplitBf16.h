//===- SplitBf16.h - f32 weights as bf16 terms ----------------------------===//
//
// The GEMM tiles' f32 weights on the matrix units (sm_90, bf16
// activations): each weight as the sum of up to three bf16 terms, K
// walked once per term, so every product is exact.
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
