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

TEST(SortForm, OneLaunchWhereTheOptionAsksInPlansWithState) {
  codegen::SortProblem p;
  p.experts = 512;
  p.state = true;
  p.oneOption = true;
  p.rowsAreTokens = true;
  codegen::SortForm f = codegen::selectSort(p);
  // 512 x 19 words (the counts beside the two launches' arrays) fit.
  EXPECT_TRUE(f.oneFits);
  EXPECT_TRUE(f.one);
  // Top 10: runs of up to 204 tokens (2,040 slots) in one slice; from 205
  // (2,050) the two launches.
  EXPECT_EQ(f.twoLaunchTokens(10), 205);
  EXPECT_EQ(f.twoLaunchTokens(1), 2048);
  // Off by default, in prefill-only plans, over rows other than T.
  for (int which = 0; which < 3; ++which) {
    codegen::SortProblem q = p;
    (which == 0 ? q.oneOption : which == 1 ? q.state : q.rowsAreTokens) = false;
    EXPECT_FALSE(codegen::selectSort(q).one) << which;
  }
  // 1,024 experts at 256 threads: 11 words an expert fill the budget
  // exactly; 2,048 fit neither form.
  p.experts = 1024;
  EXPECT_TRUE(codegen::selectSort(p).one);
  p.experts = 2048;
  EXPECT_FALSE(codegen::selectSort(p).one);
}
