//===- SyntheticBlock.h - a synthetic weight block --------------*- C++ -*-===//
//
// The generator behind `strata-run --synthetic-weights SEED`, shared by the
// host fill (SyntheticWeights.cpp: the cpu backend, and GPU plans compiled
// before the device fill existed) and the device fill kernel every GPU plan
// carries (codegen embeds this file's text): sharing the text is what makes
// the two fills bit-identical.
//
// Counter-based: block b of weight w comes from a splitmix64 stream seeded
// with (seed, w, b) alone, so any split over threads, chunks or GPU threads
// gets the same bytes. Valid blocks: every f16 scale is finite and small,
// quants are random bits; float weights are uniform in +-0.05 (rank-1 ones,
// norms, biases and the delta rule's A, in -1 +- 0.05: A must be negative).
//
// Freestanding: no #include. The includer defines STRATA_FN and uint8_t,
// uint16_t, uint32_t, uint64_t, and includes ScalarMath.h (sm_f32_to_bf16)
// and BlockDecode.h (strata_f32_to_f16) first.
//
//===----------------------------------------------------------------------===//
#ifndef STRATA_SYNTHETIC_BLOCK_H
#define STRATA_SYNTHETIC_BLOCK_H

/// The ggml type ids the generator distinguishes (GgmlType's values;
/// SyntheticWeights.cpp checks them against the enum).
enum StrataSynthType : uint32_t {
  kSynthF32 = 0,
  kSynthF16 = 1,
  kSynthQ4_0 = 2,
  kSynthQ8_0 = 8,
  kSynthQ4_K = 12,
  kSynthQ5_K = 13,
  kSynthQ6_K = 14,
  kSynthIQ2_XXS = 16,
  kSynthIQ3_XXS = 18,
  kSynthIQ4_NL = 20,
  kSynthIQ3_S = 21,
  kSynthIQ4_XS = 23,
  kSynthI32 = 26,
  kSynthBF16 = 30,
};

STRATA_FN uint64_t strata_splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Uniform in [lo, hi): 24 random bits scaled by 2^-24 (exact, so a fused
/// multiply-add gives the same float as separate operations).
STRATA_FN float strata_uniform(uint64_t *s, float lo, float hi) {
  return lo +
         (hi - lo) * static_cast<float>(strata_splitmix(s) >> 40) * 0x1p-24f;
}

/// \p n little-endian bytes of \p v at \p p.
STRATA_FN void strata_put_bytes(uint8_t *p, uint64_t v, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}

STRATA_FN void strata_put_f16(uint8_t *p, float v) {
  strata_put_bytes(p, strata_f32_to_f16(v), 2);
}

/// The f16 scale(s) of one block: small and finite, sized so values stay
/// within about +-0.1 (the largest quant times scale products of each
/// format).
STRATA_FN void strata_synthetic_scales(uint32_t type, uint8_t *b, uint64_t *s) {
  switch (type) {
  case kSynthQ8_0:
  case kSynthQ4_0:
  case kSynthIQ4_NL:
    strata_put_f16(b, strata_uniform(s, 2e-4f, 6e-4f));
    break;
  case kSynthQ4_K:
  case kSynthQ5_K: {
    // Zero-mean sub-blocks, as a quantiser makes of zero-mean weights:
    // each sub-block's min m equals its scale sc, and dmin = d times the
    // mean quant (7.5 of 0..15, 15.5 of 0..31), so d sc q - dmin m is
    // d sc (q - mean). (Independent random mins left every sub-block
    // offset by ~0.65 of the weights' rms: a dot product then cancels,
    // and the int8 decode forms' activation rounding, 4-7e-5 NMSE a
    // kernel against float activations on such rows, crossed --check's
    // 1e-4 over a few layers; the GGUF's quantised data gave 1e-5.)
    const float d = strata_uniform(s, 2e-5f, 6e-5f);
    strata_put_f16(b, d);
    strata_put_f16(b + 2, d * (type == kSynthQ4_K ? 7.5f : 15.5f));
    // The 6-bit (sc, m) pairs of get_scale_min_k4's packing: sub-blocks
    // 0-3 in bytes 4-11's low six bits, 4-7 in bytes 12-15's nibbles with
    // bytes 4-11's top two bits; every m set to its sc.
    uint8_t *q = b + 4;
    for (int j = 4; j < 8; ++j)
      q[j] = static_cast<uint8_t>((q[j] & 63) | (q[j - 4] & 0xc0));
    for (int j = 0; j < 4; ++j)
      q[j + 4] = static_cast<uint8_t>((q[j + 4] & 0xc0) | (q[j] & 63));
    for (int j = 8; j < 12; ++j)
      q[j] = static_cast<uint8_t>((q[j] & 0x0f) | (q[j] << 4));
    break;
  }
  case kSynthQ6_K:
    strata_put_f16(b + 208, strata_uniform(s, 1e-5f, 3e-5f));
    break;
  case kSynthIQ4_XS:
    strata_put_f16(b, strata_uniform(s, 1e-5f, 3e-5f));
    break;
  case kSynthIQ3_S:
  case kSynthIQ3_XXS:
  case kSynthIQ2_XXS:
    strata_put_f16(b, strata_uniform(s, 1e-4f, 2e-4f));
    break;
  default:
    break;
  }
}

/// Writes block \p block of weight \p index (ggml \p type, \p typeSize bytes
/// a block; a float type's block is one element) for \p seed at \p p.
/// \p rank1: a rank-1 weight (norms, biases, per-head constants), centred
/// on -1: the delta rule's ssm_a holds A = -exp(A_log) < 0, so the
/// log-decay softplus(.) * A stays negative (decay < 1) as in trained
/// models; a norm weight of -1 only flips signs.
STRATA_FN void strata_synthetic_block(uint64_t seed, uint64_t index,
                                      uint64_t block, uint32_t type,
                                      uint32_t typeSize, bool rank1,
                                      uint8_t *p) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull ^
               (index + 1) * 0xc2b2ae3d27d4eb4full ^
               block * 0x165667b19e3779f9ull;
  strata_splitmix(&s);
  float lo = rank1 ? -1.05f : -0.05f, hi = rank1 ? -0.95f : 0.05f;
  switch (type) {
  case kSynthF32:
    strata_put_bytes(
        p, __builtin_bit_cast(uint32_t, strata_uniform(&s, lo, hi)), 4);
    break;
  case kSynthF16:
    strata_put_f16(p, strata_uniform(&s, lo, hi));
    break;
  case kSynthBF16:
    strata_put_bytes(p, sm_f32_to_bf16(strata_uniform(&s, lo, hi)), 2);
    break;
  case kSynthI32:
    strata_put_bytes(p, 0, 4);
    break;
  default:
    for (uint32_t i = 0; i < typeSize; i += 8)
      strata_put_bytes(p + i, strata_splitmix(&s),
                       typeSize - i < 8 ? typeSize - i : 8);
    strata_synthetic_scales(type, p, &s);
  }
}

#endif // STRATA_SYNTHETIC_BLOCK_H
