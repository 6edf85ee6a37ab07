//===- KvQuant.h - the int8 KV cache's quantisation, written once ---------===//
//
// A row of an i8 state (strata-compile --kv int8; format::stateBytes) is D
// int8 values q then one f32 scale s; element i reads q[i] * s. Symmetric
// absmax: s = max |x| / 127 over the row (one (slot, position, kv head)
// row), q = x / s rounded to nearest even. Shared by the CPU backend
// (ScalarMathCpu.h) and the state family's device kernels (embedded in the
// sources that read or write an i8 state), so both store the same bytes
// and strata-run --check compares like with like: the max is exact in any
// order and the division IEEE on both sides (no fast-math on the devices).
//
// Freestanding like ScalarMath.h: the includer defines STRATA_FN and int8_t.
//
//===----------------------------------------------------------------------===//
#ifndef STRATA_KV_QUANT_H
#define STRATA_KV_QUANT_H

/// The scale of a row whose largest magnitude is \p amax (NaNs are skipped
/// by the callers' max: `a > m ? a : m`).
STRATA_FN float kv_scale(float amax) { return amax / 127.0f; }

/// \p x stored with scale \p s: x / s rounded to nearest even, clamped to
/// -127 .. 127 (a NaN to -127); 0 where s is 0 or NaN (a zero row).
STRATA_FN int8_t kv_quant(float x, float s) {
  float q = s > 0.0f ? __builtin_rintf(x / s) : 0.0f;
  q = q >= -127.0f ? q : -127.0f;
  q = q <= 127.0f ? q : 127.0f;
  return (int8_t)q;
}

/// The value of \p q under scale \p s.
STRATA_FN float kv_dequant(int8_t q, float s) { return (float)q * s; }

/// Values \p i .. \p i + 3 of the int8 row \p q under scale \p s into \p o.
STRATA_FN void kv_dequant4(const int8_t *q, long i, float s, float *o) {
  for (int u = 0; u < 4; ++u)
    o[u] = kv_dequant(q[i + u], s);
}

/// The scale of the int8 row \p q of \p d values (stored after them).
STRATA_FN float kv_row_scale(const int8_t *q, long d) {
  return *(const float *)(q + d);
}

#endif // STRATA_KV_QUANT_H
