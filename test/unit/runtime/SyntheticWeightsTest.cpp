//===- SyntheticWeightsTest.cpp - --synthetic-weights blocks --------------===//
#include "runtime/SyntheticWeights.h"
#include "runtime/format/BlockDecodeHost.h"
#include "runtime/format/Quants.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

using namespace strata;
using format::GgmlType;

namespace {

/// Every type strata loads, with a row of 512 elements (two 256-blocks).
std::vector<GgmlType> loadableTypes() {
  std::vector<GgmlType> out;
  for (GgmlType t :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
        GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
        GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::IQ3_S, GgmlType::IQ3_XXS,
        GgmlType::IQ2_XXS})
    if (format::canDequantize(t))
      out.push_back(t);
  return out;
}

std::vector<uint8_t> whole(GgmlType t, const std::vector<uint64_t> &dims,
                           uint64_t seed, uint64_t index, int threads) {
  format::GgmlTypeInfo info = format::ggmlTypeInfo(t);
  uint64_t n = 1;
  for (uint64_t d : dims)
    n *= d;
  std::vector<uint8_t> out(n / info.blockSize * info.typeSize);
  runtime::syntheticWeight(seed, index, t, dims, out.data(), threads);
  return out;
}

} // namespace

// The bytes depend on (seed, weight, type, dims) only: any thread count and
// any split into block ranges give the same bytes (what makes every backend
// see the same weights); another seed or weight index gives others.
TEST(SyntheticWeights, DeterministicAcrossSplits) {
  const std::vector<uint64_t> dims{512, 24};
  for (GgmlType t : loadableTypes()) {
    std::vector<uint8_t> a = whole(t, dims, 5, 3, 1);
    EXPECT_EQ(a, whole(t, dims, 5, 3, 7)) << format::ggmlTypeInfo(t).name;
    format::GgmlTypeInfo info = format::ggmlTypeInfo(t);
    uint64_t blocks = a.size() / info.typeSize;
    std::vector<uint8_t> b(a.size());
    for (uint64_t first = 0; first < blocks; first += 5)
      runtime::syntheticBlocks(5, 3, t, dims, first,
                               std::min<uint64_t>(5, blocks - first),
                               b.data() + first * info.typeSize);
    EXPECT_EQ(a, b) << format::ggmlTypeInfo(t).name;
    EXPECT_NE(a, whole(t, dims, 6, 3, 1)) << format::ggmlTypeInfo(t).name;
    EXPECT_NE(a, whole(t, dims, 5, 4, 1)) << format::ggmlTypeInfo(t).name;
  }
}

// Valid blocks: every value dequantises finite and trained-like (|w| < 0.2
// for matrices); rank-1 weights sit around -1 (the delta rule's A < 0).
TEST(SyntheticWeights, ValidTrainedLikeValues) {
  for (GgmlType t : loadableTypes()) {
    const std::vector<uint64_t> dims{512, 16};
    std::vector<uint8_t> w = whole(t, dims, 11, 0, 2);
    std::vector<float> v(512);
    double sum = 0;
    for (uint64_t r = 0; r < 16; ++r) {
      uint64_t rowBytes = w.size() / 16;
      ASSERT_TRUE(
          format::dequantizeRow(t, w.data() + r * rowBytes, v.data(), 512));
      for (float x : v) {
        ASSERT_TRUE(std::isfinite(x)) << format::ggmlTypeInfo(t).name;
        EXPECT_LT(std::fabs(x), 0.2f) << format::ggmlTypeInfo(t).name;
        sum += std::fabs(x);
      }
    }
    EXPECT_GT(sum, 0) << format::ggmlTypeInfo(t).name << " is all zero";
  }
  std::vector<uint8_t> norm = whole(GgmlType::F32, {64}, 11, 1, 1);
  for (size_t i = 0; i < 64; ++i) {
    float x;
    std::memcpy(&x, norm.data() + 4 * i, 4);
    EXPECT_GE(x, -1.05f);
    EXPECT_LE(x, -0.95f);
  }
}

// Q4_K and Q5_K sub-blocks are zero-mean, as a quantiser makes of zero-mean
// weights: each sub-block's (sc, m) pair has m == sc and dmin is d times
// the mean quant, so a sub-block's values average out (random quants: the
// mean of 32 values is small against their rms, the mean over all far
// smaller). With independent mins each sub-block sat ~0.65 rms off zero.
TEST(SyntheticWeights, KQuantSubBlocksAreZeroMean) {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K}) {
    const std::vector<uint64_t> dims{256, 64};
    std::vector<uint8_t> w = whole(t, dims, 5, 2, 1);
    const size_t typeSize = format::ggmlTypeInfo(t).typeSize;
    std::vector<float> v(256);
    double sum = 0, sumSq = 0, worstSubMean = 0, subRms = 0;
    for (uint64_t r = 0; r < 64; ++r) {
      const uint8_t *block = w.data() + r * typeSize;
      for (int j = 0; j < 8; ++j) {
        int sc = 0, m = 0;
        strata_scale_min_k4(j, block + 4, &sc, &m);
        EXPECT_EQ(sc, m) << format::ggmlTypeInfo(t).name << " sub-block " << j;
      }
      ASSERT_TRUE(format::dequantizeRow(t, block, v.data(), 256));
      for (int j = 0; j < 8; ++j) {
        double s = 0, q = 0;
        for (int i = 0; i < 32; ++i) {
          s += v[j * 32 + i];
          q += double(v[j * 32 + i]) * v[j * 32 + i];
        }
        worstSubMean = std::max(worstSubMean, std::fabs(s / 32));
        subRms = std::max(subRms, std::sqrt(q / 32));
        sum += s;
        sumSq += q;
      }
    }
    const double n = 256.0 * 64, rms = std::sqrt(sumSq / n);
    EXPECT_GT(rms, 0) << format::ggmlTypeInfo(t).name;
    // Over 16,384 values the mean is ~rms / 128 for zero-mean sub-blocks.
    EXPECT_LT(std::fabs(sum / n), 0.05 * rms) << format::ggmlTypeInfo(t).name;
    // A sub-block's mean of 32 values: within ~3.5 standard errors.
    EXPECT_LT(worstSubMean, 0.7 * subRms) << format::ggmlTypeInfo(t).name;
  }
}
