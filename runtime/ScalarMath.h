//===- ScalarMath.h - the scalar math of elementwise ops, written once ----===//
//
// The formulas of every elementwise op of the op table (Ops.def), shared by
// the CPU backend (runtime/cpu) and the generated GPU kernels (codegen embeds
// this file's text in every emitted source), so the two cannot drift.
//
// Freestanding: no #include. The includer defines, before including it,
//   STRATA_FN            qualifiers of a function (`inline` on the CPU,
//                        `static __attribute__((device)) inline` on devices)
//   strata_exp(x), strata_log(x), strata_log1p(x), strata_sqrt(x),
//   strata_tanh(x)       the primitives: std:: functions on the CPU, the
//                        target's builtins in a device prelude (approximate
//                        there: the differential suite's bars absorb it)
//   uint16_t, uint32_t   integer types
// and may use every `sm_*` function below.
//
//===----------------------------------------------------------------------===//
#ifndef STRATA_SCALAR_MATH_H
#define STRATA_SCALAR_MATH_H

/// The float's bits, without <cstring> or <bit> (memcpy-free on devices).
STRATA_FN uint32_t sm_bits(float x) { return __builtin_bit_cast(uint32_t, x); }
/// The float with these bits.
STRATA_FN float sm_from_bits(uint32_t b) {
  return __builtin_bit_cast(float, b);
}
/// NaN test that survives -ffast-math-like device flags (bit test).
STRATA_FN bool sm_isnan(float x) {
  return (sm_bits(x) & 0x7fffffffu) > 0x7f800000u;
}

/// bf16 -> f32 (exact).
STRATA_FN float sm_bf16_to_f32(uint16_t b) {
  return sm_from_bits(static_cast<uint32_t>(b) << 16);
}
/// f32 -> bf16, round to nearest even; NaN stays a quiet NaN (the CPU's and
/// the GPU's bf16 stores are this one function).
STRATA_FN uint16_t sm_f32_to_bf16(float f) {
  uint32_t x = sm_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 64);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

STRATA_FN float sm_sigmoid(float x) { return 1.0f / (1.0f + strata_exp(-x)); }

// One function per elementwise op, named after its mnemonic.
STRATA_FN float sm_neg(float x) { return -x; }
STRATA_FN float sm_exp(float x) { return strata_exp(x); }
STRATA_FN float sm_log(float x) { return strata_log(x); }
STRATA_FN float sm_sqrt(float x) { return strata_sqrt(x); }
STRATA_FN float sm_rsqrt(float x) { return 1.0f / strata_sqrt(x); }
STRATA_FN float sm_abs(float x) {
  return sm_from_bits(sm_bits(x) & 0x7fffffffu);
}
STRATA_FN float sm_square(float x) { return x * x; }
// NaN passes through (x < 0 is false for it).
STRATA_FN float sm_relu(float x) { return x < 0 ? 0.0f : x; }
STRATA_FN float sm_silu(float x) { return x * sm_sigmoid(x); }
STRATA_FN float sm_softplus(float x) {
  return x > 20.0f ? x : strata_log1p(strata_exp(x));
}
STRATA_FN float sm_gelu(float x) {
  // sqrtf(2 / (float)pi) as the CPU computed it before (0x1.988452p-1).
  const float c = 0x1.988452p-1f;
  return 0.5f * x * (1.0f + strata_tanh(c * (x + 0.044715f * x * x * x)));
}
STRATA_FN float sm_tanh(float x) { return strata_tanh(x); }
// 0 and NaN pass through, as torch.sign does.
STRATA_FN float sm_sign(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : x); }
// NaN passes through (both comparisons are false for it).
STRATA_FN float sm_clamp(float x, float lo, float hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}
STRATA_FN float sm_scale(float x, float s, float b) { return x * s + b; }
STRATA_FN float sm_add(float a, float b) { return a + b; }
STRATA_FN float sm_sub(float a, float b) { return a - b; }
STRATA_FN float sm_mul(float a, float b) { return a * b; }
STRATA_FN float sm_div(float a, float b) { return a / b; }
// NaN propagates, as numpy.maximum does.
STRATA_FN float sm_maximum(float a, float b) {
  return sm_isnan(a) || sm_isnan(b) ? sm_from_bits(0x7fc00000u)
                                    : (a > b ? a : b);
}
STRATA_FN float sm_minimum(float a, float b) {
  return sm_isnan(a) || sm_isnan(b) ? sm_from_bits(0x7fc00000u)
                                    : (a < b ? a : b);
}

#endif // STRATA_SCALAR_MATH_H
