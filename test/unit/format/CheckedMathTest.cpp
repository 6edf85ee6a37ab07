//===- CheckedMathTest.cpp - overflow-checked size arithmetic -------------===//
#include "runtime/format/CheckedMath.h"
#include "runtime/format/ModelInfo.h"

#include <gtest/gtest.h>

using namespace strata::format;

TEST(CheckedMathTest, AddAndMulReportOverflow) {
  EXPECT_EQ(checkedAdd(1, 2), 3u);
  EXPECT_EQ(checkedAdd(UINT64_MAX - 1, 1), UINT64_MAX);
  EXPECT_EQ(checkedAdd(UINT64_MAX, 1), std::nullopt);
  EXPECT_EQ(checkedMul(0, UINT64_MAX), 0u);
  EXPECT_EQ(checkedMul(uint64_t(1) << 32, (uint64_t(1) << 32) - 1),
            (uint64_t(1) << 32) * ((uint64_t(1) << 32) - 1));
  EXPECT_EQ(checkedMul(uint64_t(1) << 32, uint64_t(1) << 32), std::nullopt);
}

TEST(CheckedMathTest, AlignUp) {
  EXPECT_EQ(checkedAlignUp(0, 32), 0u);
  EXPECT_EQ(checkedAlignUp(1, 32), 32u);
  EXPECT_EQ(checkedAlignUp(64, 32), 64u);
  EXPECT_EQ(checkedAlignUp(UINT64_MAX - 31, 32), UINT64_MAX - 31);
  EXPECT_EQ(checkedAlignUp(UINT64_MAX - 30, 32), std::nullopt);
}

TEST(CheckedMathTest, InBoundsNeverWraps) {
  EXPECT_TRUE(inBounds(0, 10, 10));
  EXPECT_TRUE(inBounds(10, 0, 10));
  EXPECT_FALSE(inBounds(11, 0, 10));
  EXPECT_FALSE(inBounds(5, 6, 10));
  // offset + length wraps to 4 in 64 bits; it is still out of bounds.
  EXPECT_FALSE(inBounds(UINT64_MAX - 1, 6, 10));
  EXPECT_FALSE(inBounds(6, UINT64_MAX - 1, 10));
}

TEST(CheckedMathTest, TensorSizesSaturateInsteadOfWrapping) {
  TensorInfo t;
  t.type = GgmlType::F32;
  t.dims = {uint64_t(1) << 40, uint64_t(1) << 22};
  EXPECT_EQ(t.checkedNumElements(), uint64_t(1) << 62);
  EXPECT_EQ(t.checkedNumBytes(), std::nullopt);
  EXPECT_EQ(t.numBytes(), UINT64_MAX);
  t.dims = {uint64_t(1) << 40, uint64_t(1) << 40, uint64_t(1) << 40};
  EXPECT_EQ(t.checkedNumElements(), std::nullopt);
  EXPECT_EQ(t.numElements(), UINT64_MAX);
  t.dims = {4, 3};
  EXPECT_EQ(t.numBytes(), 48u);
}
