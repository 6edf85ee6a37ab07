//===- Access.h - element types, typed loads and stores -------------------===//
//
// The activation element types (bf16, f16 as stored bits) and the
// loads and stores every family uses: one element (ld, st) and four or
// eight adjacent ones by one vector access (ld4, ld8, st4).
//
// A piece of the device library: DeviceLib.h includes it at its place in
// the emitted translation unit, and codegen/EmbedText.cmake inlines it
// there without this banner, so the emitted text is the library's.
//
//===----------------------------------------------------------------------===//
/// A bf16 activation element (stored bits).
struct bf16 {
  uint16_t v;
};
/// An f16 element (stored bits): f16 weights and f16 activations.
struct f16 {
  uint16_t v;
};

STRATA_FN float ld(const float *p, int64_t i) { return p[i]; }
STRATA_FN float ld(const bf16 *p, int64_t i) { return sm_bf16_to_f32(p[i].v); }
STRATA_FN float ld(const f16 *p, int64_t i) {
  return strata_f16_to_f32(p[i].v);
}
STRATA_FN float ld(const int32_t *p, int64_t i) { return (float)p[i]; }
STRATA_FN float ld(const uint16_t *p, int64_t i) {
  return sm_bf16_to_f32(p[i]);
}
STRATA_FN void st(float *p, int64_t i, float v) { p[i] = v; }
STRATA_FN void st(bf16 *p, int64_t i, float v) { p[i].v = sm_f32_to_bf16(v); }
STRATA_FN void st(f16 *p, int64_t i, float v) { p[i].v = strata_f32_to_f16(v); }
STRATA_FN void st(int32_t *p, int64_t i, float v) { p[i] = (int32_t)v; }

// Four adjacent elements at a 16-byte (f32) or 8-byte (bf16) aligned index:
// one vector access instead of four.
typedef float strata_f4 __attribute__((ext_vector_type(4)));
typedef uint16_t strata_h4 __attribute__((ext_vector_type(4)));
STRATA_FN void ld4(const float *p, int64_t i, float *o) {
  strata_f4 v = *(const strata_f4 *)(p + i);
  o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
}
STRATA_FN void ld4(const bf16 *p, int64_t i, float *o) {
  strata_h4 v = *(const strata_h4 *)(p + i);
  o[0] = sm_bf16_to_f32(v.x), o[1] = sm_bf16_to_f32(v.y);
  o[2] = sm_bf16_to_f32(v.z), o[3] = sm_bf16_to_f32(v.w);
}
template <class P> STRATA_FN void ld4(const P *p, int64_t i, float *o) {
  for (int u = 0; u < 4; ++u)
    o[u] = ld(p, i + u);
}
// Eight adjacent 16-bit elements at a 16-byte aligned index: one load.
STRATA_FN void ld8(const f16 *p, int64_t i, float *o) {
  strata_u4 w = *(const strata_u4 *)(p + i);
  for (int u = 0; u < 4; ++u) {
    o[2 * u] = strata_f16_to_f32((uint16_t)(w[u] & 0xffffu));
    o[2 * u + 1] = strata_f16_to_f32((uint16_t)(w[u] >> 16));
  }
}
STRATA_FN void ld8(const bf16 *p, int64_t i, float *o) {
  strata_u4 w = *(const strata_u4 *)(p + i);
  for (int u = 0; u < 4; ++u) {
    o[2 * u] = sm_bf16_to_f32((uint16_t)(w[u] & 0xffffu));
    o[2 * u + 1] = sm_bf16_to_f32((uint16_t)(w[u] >> 16));
  }
}
// Eight adjacent f32 at a 32-byte aligned index: two 16-byte loads.
STRATA_FN void ld8(const float *p, int64_t i, float *o) {
  ld4(p, i, o);
  ld4(p, i + 4, o + 4);
}
template <class P> STRATA_FN void ld8(const P *p, int64_t i, float *o) {
  for (int u = 0; u < 8; ++u)
    o[u] = ld(p, i + u);
}
STRATA_FN void st4(float *p, int64_t i, const float *v) {
  strata_f4 x = {v[0], v[1], v[2], v[3]};
  *(strata_f4 *)(p + i) = x;
}
STRATA_FN void st4(bf16 *p, int64_t i, const float *v) {
  strata_h4 x = {sm_f32_to_bf16(v[0]), sm_f32_to_bf16(v[1]),
                 sm_f32_to_bf16(v[2]), sm_f32_to_bf16(v[3])};
  *(strata_h4 *)(p + i) = x;
}
template <class P> STRATA_FN void st4(P *p, int64_t i, const float *v) {
  for (int u = 0; u < 4; ++u)
    st(p, i + u, v[u]);
}
