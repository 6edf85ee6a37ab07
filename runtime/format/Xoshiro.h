//===- Xoshiro.h - the project's one pseudo-random generator ----*- C++ -*-===//
//
// xoshiro256** (Blackman and Vigna, 2018) seeded with four SplitMix64
// outputs: the synthetic weights (strata-gguf synth) and the sampler draw
// from it, so files and generated text are the same on every platform for a
// seed (no std:: distribution, whose results are implementation-defined).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstdint>

namespace strata::format {

/// SplitMix64's step: advances \p state by the golden-ratio increment and
/// returns the mixed value.
inline uint64_t splitMix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// xoshiro256**, seeded through SplitMix64.
class Xoshiro256 {
public:
  /// The four state words are SplitMix64 outputs started at \p seed: never
  /// all zero (xoshiro's one bad state).
  explicit Xoshiro256(uint64_t seed) {
    for (uint64_t &w : s_)
      w = splitMix64(seed);
  }
  /// A generator in the given state (for tests; not all zero).
  static Xoshiro256 fromState(const std::array<uint64_t, 4> &state) {
    Xoshiro256 g(0);
    g.s_ = state;
    return g;
  }
  /// SplitMix64's step (as the free function).
  static uint64_t splitMix64(uint64_t &state) {
    return format::splitMix64(state);
  }

  /// The next 64 random bits.
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  /// A double uniform in [0, 1): the top 53 bits of next() times 2^-53.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> s_;
};

} // namespace strata::format
