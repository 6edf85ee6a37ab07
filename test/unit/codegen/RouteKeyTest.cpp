//===- RouteKeyTest.cpp - moe_route's 64-bit keys against its order -------===//
//
// The device library's route_key (codegen/device/sort/RouteOrder.h) is
// compiled here for the host: for every pair of candidates, route_key
// orders them as route_better does (NaN last, the larger value, ties to the
// lower id, none below all), and route_key_value / route_key_id give the
// candidate back. Specials (NaN, both zeros, infinities, denormals) and
// random pairs drawn fresh, with ties made on purpose.
//
//===----------------------------------------------------------------------===//
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/ScalarMathCpu.h"

// RouteOrder.h beside the CPU's scalar math (strata::scalar: sm_bits,
// sm_isnan, ...), as the device library includes it after ScalarMath.h.
namespace strata::scalar {
#define STRATA_FN inline
/// One lane: a shuffle returns the lane's own value (route_key_max_xor is
/// then the identity, as for a wave whose lanes all hold the same key).
inline int shfl_xor_i(int v, int) { return v; }
#include "codegen/device/sort/RouteOrder.h"
#undef STRATA_FN
} // namespace strata::scalar

namespace {

using namespace strata::scalar;

float fromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

std::vector<float> specials() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f,
          -0.0f,
          1.0f,
          -1.0f,
          0.5f,
          0.25f,
          -2.0f,
          inf,
          -inf,
          std::numeric_limits<float>::quiet_NaN(),
          fromBits(0xffc00001u), // a negative NaN with a payload
          fromBits(0x7f800001u), // a signalling NaN
          fromBits(0x00000001u), // the smallest denormal
          fromBits(0x80000001u),
          std::numeric_limits<float>::max(),
          std::numeric_limits<float>::lowest(),
          std::numeric_limits<float>::min()};
}

void expectSameOrder(float v, int i, float bv, int bi) {
  const bool better = route_better(v, i, bv, bi);
  const bool byKey = route_key(v, i) > route_key(bv, bi);
  EXPECT_EQ(better, byKey) << "(" << v << ", " << i << ") against (" << bv
                           << ", " << bi << ")";
}

TEST(RouteKey, OrdersSpecialsAsRouteBetter) {
  const std::vector<float> s = specials();
  for (float v : s)
    for (float bv : s)
      for (int i : {-1, 0, 3, 511})
        for (int bi : {-1, 0, 3, 511})
          expectSameOrder(v, i, bv, bi);
}

TEST(RouteKey, OrdersRandomPairsAsRouteBetter) {
  std::random_device rd;
  std::mt19937 rng(rd());
  std::uniform_real_distribution<float> prob(0.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_int_distribution<int> id(-1, 1023);
  for (int n = 0; n < 200000; ++n) {
    // Probabilities (what moe_route ranks), any bit pattern, and ties.
    const float v = n % 3 == 0 ? fromBits(bits(rng)) : prob(rng);
    const float bv = n % 5 == 0   ? v
                     : n % 3 == 1 ? fromBits(bits(rng))
                                  : prob(rng);
    expectSameOrder(v, id(rng), bv, id(rng));
  }
}

TEST(RouteKey, GivesTheCandidateBack) {
  EXPECT_EQ(route_key(0.5f, -1), 0u);
  EXPECT_EQ(route_key_id(0), -1);
  EXPECT_EQ(route_key_value(0), 0.0f);
  for (float v : specials())
    for (int i : {0, 7, 511, 1 << 20}) {
      const uint64_t k = route_key(v, i);
      EXPECT_NE(k, 0u);
      EXPECT_EQ(route_key_id(k), i);
      const float back = route_key_value(k);
      if (std::isnan(v))
        EXPECT_TRUE(std::isnan(back));
      else
        EXPECT_EQ(back, v); // -0 comes back as +0, equal as numbers
    }
  EXPECT_EQ(route_key_max_xor(route_key(0.25f, 4), 1), route_key(0.25f, 4));
}

} // namespace
