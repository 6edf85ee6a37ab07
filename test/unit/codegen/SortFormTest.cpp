//===- SortFormTest.cpp - moe_sort's choice of form -----------------------===//
//
// selectSort alone: the block by the experts' counts (the same on both GPU
// targets: the static budget is the smaller target's) and the launch's
// blocks at T = 1, 64, 600 and 16,384 for the full Qwen4-Exp's routing
// (512 experts, top 10).
//
//===----------------------------------------------------------------------===//
#include "codegen/sort/SortForm.h"

#include <gtest/gtest.h>

using namespace strata;

TEST(SortForm, BlockByTheExpertsCounts) {
  // 512 experts: 512 x 18 words fit beside the budget, 512 threads.
  codegen::SortForm f = codegen::selectSort(512);
  EXPECT_TRUE(f.fits);
  EXPECT_EQ(f.threads, 512);
  EXPECT_EQ(f.slice, 2048);
  // 1,024 experts: 256 threads (10 words an expert); 2,048: none fits.
  EXPECT_EQ(codegen::selectSort(1024).threads, 256);
  EXPECT_TRUE(codegen::selectSort(1024).fits);
  EXPECT_FALSE(codegen::selectSort(2048).fits);
}

TEST(SortForm, BlocksByTokens) {
  const codegen::SortForm f = codegen::selectSort(512);
  // T x 10 slots in slices of 2,048, one block more.
  const std::pair<int64_t, int64_t> cases[] = {
      {1, 1}, {64, 1}, {600, 3}, {16384, 81}};
  for (auto [tokens, blocks] : cases)
    EXPECT_EQ(f.blocks(tokens * 10), blocks) << tokens;
}
