//===- MmaConvert.h - sm_90's matrix-unit conversions ---------------------===//
//
// Matrix-unit elements (bf16 on sm_90) from f32 by the hardware's
// conversions (cvt.rn.bf16.f32, cvt.rn.bf16x2.f32): one instruction for a
// value or a pair. Targets without them take common/MmaPack.h.
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// Matrix-unit operands by the hardware conversion (cvt.rn.bf16.f32):
/// round to nearest even like sm_f32_to_bf16, in one instruction; a NaN
/// stays a NaN (staged operands are never stored, so its payload is moot).
STRATA_FN mma_t to_mma(float x) {
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
STRATA_FN float from_mma(mma_t x) { return sm_bf16_to_f32(x); }
/// Two values as one word of matrix-unit elements (lo in bits 0-15) by one
/// cvt.rn.bf16x2.f32 (its first source goes to the high half).
STRATA_FN uint32_t mma_pack2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/// x0, x1 split as mma_split does, as packed words (x0 in bits 0-15) of the
/// hi and the lo parts: two conversions for the pair instead of four.
STRATA_FN void mma_split_pack2(float x0, float x1, uint32_t *hi, uint32_t *lo) {
  uint32_t h = mma_pack2(x0, x1);
  *hi = h;
  *lo = mma_pack2(x0 - __builtin_bit_cast(float, h << 16),
                  x1 - __builtin_bit_cast(float, h & 0xffff0000u));
}
