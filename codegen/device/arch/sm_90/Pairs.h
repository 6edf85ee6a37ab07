//===- Pairs.h - two adjacent elements by one access ----------------------===//
//
// ld2 / st2: elements i and i + 1 by one 32-bit access for bf16 (the
// accumulator layout's column pairs: attention_wg's epilogue, the TMA
// GEMM tiles' stores).
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// Elements i and i + 1 (i even, the pair 4-byte aligned): one 32-bit
/// access for bf16, else two.
STRATA_FN void ld2(const bf16 *p, int64_t i, float *a, float *b) {
  const uint32_t w = *(const uint32_t *)(p + i);
  *a = sm_bf16_to_f32((uint16_t)w);
  *b = sm_bf16_to_f32((uint16_t)(w >> 16));
}
template <class T>
STRATA_FN void ld2(const T *p, int64_t i, float *a, float *b) {
  *a = ld(p, i);
  *b = ld(p, i + 1);
}
STRATA_FN void st2(bf16 *p, int64_t i, float a, float b) {
  *(uint32_t *)(p + i) =
      (uint32_t)sm_f32_to_bf16(a) | (uint32_t)sm_f32_to_bf16(b) << 16;
}
template <class T> STRATA_FN void st2(T *p, int64_t i, float a, float b) {
  st(p, i, a);
  st(p, i + 1, b);
}
