//===- SyntheticWeights.cpp - deterministic random weights ----------------===//
#include "runtime/SyntheticWeights.h"

#include "runtime/ScalarMathCpu.h"
#include "runtime/format/Quants.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace strata::runtime {

namespace {

uint64_t splitmix(uint64_t &s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Uniform in [lo, hi).
float uniform(uint64_t &s, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(splitmix(s) >> 40) /
                  static_cast<float>(1 << 24);
}

void putF16(uint8_t *p, float v) {
  uint16_t h = format::fp32ToFp16(v);
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}

/// The f16 scale(s) of one block: small and finite, sized so values stay
/// within about +-0.1 (the largest quant times scale products of each
/// format).
void fixScales(format::GgmlType type, uint8_t *b, uint64_t &s) {
  using format::GgmlType;
  switch (type) {
  case GgmlType::Q8_0:
  case GgmlType::Q4_0:
  case GgmlType::IQ4_NL:
    putF16(b, uniform(s, 2e-4f, 6e-4f));
    break;
  case GgmlType::Q4_K:
  case GgmlType::Q5_K:
    putF16(b, uniform(s, 2e-5f, 6e-5f));
    putF16(b + 2, uniform(s, 2e-5f, 6e-5f));
    break;
  case GgmlType::Q6_K:
    putF16(b + 208, uniform(s, 1e-5f, 3e-5f));
    break;
  case GgmlType::IQ4_XS:
    putF16(b, uniform(s, 1e-5f, 3e-5f));
    break;
  case GgmlType::IQ3_S:
  case GgmlType::IQ3_XXS:
  case GgmlType::IQ2_XXS:
    putF16(b, uniform(s, 1e-4f, 2e-4f));
    break;
  default:
    break;
  }
}

} // namespace

void syntheticBlocks(uint64_t seed, uint64_t index, format::GgmlType type,
                     const std::vector<uint64_t> &dims, uint64_t first,
                     uint64_t count, uint8_t *out) {
  format::GgmlTypeInfo info = format::ggmlTypeInfo(type);
  const bool rank1 = dims.size() <= 1 || (dims.size() >= 2 && dims[1] == 1);
  for (uint64_t b = 0; b < count; ++b) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull ^
                 (index + 1) * 0xc2b2ae3d27d4eb4full ^
                 (first + b) * 0x165667b19e3779f9ull;
    splitmix(s);
    uint8_t *p = out + b * info.typeSize;
    // Rank-1 weights (norms, biases, per-head constants) around -1: the
    // delta rule's ssm_a holds A = -exp(A_log) < 0, so the log-decay
    // softplus(.) * A stays negative (decay < 1) as in trained models; a
    // norm weight of -1 only flips signs.
    float lo = rank1 ? -1.05f : -0.05f, hi = rank1 ? -0.95f : 0.05f;
    switch (type) {
    case format::GgmlType::F32: {
      float v = uniform(s, lo, hi);
      std::memcpy(p, &v, 4);
      break;
    }
    case format::GgmlType::F16:
      putF16(p, uniform(s, lo, hi));
      break;
    case format::GgmlType::BF16: {
      uint16_t h = scalar::sm_f32_to_bf16(uniform(s, lo, hi));
      p[0] = static_cast<uint8_t>(h);
      p[1] = static_cast<uint8_t>(h >> 8);
      break;
    }
    case format::GgmlType::I32: {
      int32_t v = 0;
      std::memcpy(p, &v, 4);
      break;
    }
    default:
      for (uint32_t i = 0; i < info.typeSize; i += 8) {
        uint64_t r = splitmix(s);
        std::memcpy(p + i, &r, std::min<uint32_t>(8, info.typeSize - i));
      }
      fixScales(type, p, s);
    }
  }
}

void syntheticBlocksParallel(uint64_t seed, uint64_t index,
                             format::GgmlType type,
                             const std::vector<uint64_t> &dims, uint64_t first,
                             uint64_t count, uint8_t *out, int threads) {
  format::GgmlTypeInfo info = format::ggmlTypeInfo(type);
  threads = std::max(1, threads);
  uint64_t per = (count + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    uint64_t a = t * per, e = std::min(count, a + per);
    if (a >= e)
      break;
    pool.emplace_back([=] {
      syntheticBlocks(seed, index, type, dims, first + a, e - a,
                      out + a * info.typeSize);
    });
  }
  for (std::thread &t : pool)
    t.join();
}

void syntheticWeight(uint64_t seed, uint64_t index, format::GgmlType type,
                     const std::vector<uint64_t> &dims, uint8_t *out,
                     int threads) {
  uint64_t n = 1;
  for (uint64_t d : dims)
    n *= d;
  syntheticBlocksParallel(seed, index, type, dims, 0,
                          n / format::ggmlTypeInfo(type).blockSize, out,
                          threads);
}

} // namespace strata::runtime
