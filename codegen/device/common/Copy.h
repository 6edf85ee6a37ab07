//===- Copy.h - a wave's copy of bytes into shared memory -----------------===//
//
// wave_copy_bytes: global bytes to shared memory by the lanes of one
// wave, the 16-byte aligned interior by cp_async16 (the decode forms'
// staged variant).
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// Bytes [src, src + n) of global memory to shared memory at dst, whose
/// address equals src's modulo 16, by the lanes of one wave: the 16-byte
/// aligned interior by cp_async16 (a lane's copies all in flight at once;
/// a decode form's few pieces a warp, loaded 4 or 8 bytes a lane where
/// each is decoded, left the H200's memory pipe idle), the two ends a byte
/// a lane. Complete after cp_async_wait_all() and sync_wave().
STRATA_FN void wave_copy_bytes(uint8_t *dst, const uint8_t *src, long n,
                               int lane) {
  const uint64_t a = (uint64_t)src, end = a + (uint64_t)n;
  const uint64_t a0 = (a + 15) & ~(uint64_t)15, a1 = end & ~(uint64_t)15;
  const uint64_t h = a0 < end ? a0 : end;
  if ((uint64_t)lane < h - a)
    dst[lane] = src[lane];
  if (a1 > a0) {
    for (uint64_t x = a0 + 16 * (uint64_t)lane; x < a1; x += 16 * 32)
      cp_async16(dst + (x - a), (const void *)x);
  }
  const uint64_t t = a1 > h ? a1 : h;
  if ((uint64_t)lane < end - t)
    dst[t - a + lane] = src[t - a + lane];
}
