//===- MmaPack.h - two matrix-unit values as one word ---------------------===//
//
// mma_pack2 from the prelude's to_mma, for targets without a packed
// conversion instruction (sm_90 has one: arch/sm_90/MmaConvert.h).
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
STRATA_FN uint32_t mma_pack2(float lo, float hi) {
  return (uint32_t)__builtin_bit_cast(uint16_t, to_mma(lo)) |
         (uint32_t)__builtin_bit_cast(uint16_t, to_mma(hi)) << 16;
}
